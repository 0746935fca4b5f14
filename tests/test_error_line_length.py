"""Error lines of any size (hardening, round three, item 4): a .param holding a 2 MB token gave a 2,000,077-
byte stderr line. Quoted input is cut to ``QUOTE_LIMIT`` characters with its size stated, and every line the
CLI prints (an error, a lint finding) is cut at ``LINE_LIMIT`` whatever a message quoted."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.errors import LINE_LIMIT, clipped, quoted

BIG = 2_000_000
HEAD = "7767517\n2 2\nInput in 0 1 x\n"


def test_quoted_and_clipped_state_what_they_cut() -> None:
    assert quoted("abc") == "'abc'"
    assert quoted("a" * 100, 10) == "'aaaaaaaaaa'... (100 characters)"
    assert clipped("x" * 10, 10) == "x" * 10
    assert clipped("x" * 25, 10) == "x" * 10 + "... (15 more characters)"


@pytest.mark.parametrize(
    ("body", "command", "expected"),
    [
        # the grammar stops at the token: its first characters and its size
        (f"ReLU r 1 1 x y 0=1,{'a' * BIG}\n", "fmt", f"'{'a' * 60}'... ({BIG} characters)"),
        # a layer type nobody registers: the lint finding quotes it cut
        (f"{'R' * BIG} r 1 1 x y\n", "lint", f"'{'R' * 60}'... ({BIG} characters) is not an ncnn layer"),
    ],
    ids=["parse-error", "lint-finding"],
)
def test_a_two_megabyte_token_gives_short_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, command: str, expected: str
) -> None:
    param = tmp_path / "big.param"
    param.write_text(HEAD + body)
    argv = [command, str(param)] + (["-o", str(tmp_path / "out.param")] if command == "fmt" else [])
    code = main(argv)
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert code == (2 if command == "fmt" else 1)
    assert any(expected in line for line in lines), [line[:200] for line in lines]
    assert max(len(line) for line in lines) <= LINE_LIMIT + 40
    assert not (tmp_path / "out.param").exists()
