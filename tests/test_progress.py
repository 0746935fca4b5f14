"""Progress goes to a terminal only (or plain lines with --verbose); apply ends with a table of the
sub-models it wrote (Penguin-VL issue, item 7)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.progress import Progress

CHAIN = "7767517\n3 3\nInput in 0 1 x 0=4\nReLU r0 1 1 x a\nReLU r1 1 1 a y\n"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_messages_and_bars_and_a_log_gets_nothing() -> None:
    term, log, verbose = Terminal(), io.StringIO(), io.StringIO()
    for stream, flag in ((term, False), (log, False), (verbose, True)):
        progress = Progress(stream=stream, verbose=flag)
        progress("graph decoder: 3 rule(s)")
        with progress.bar("writing weights", 100) as advance:
            advance(60)
            advance(40)
    assert "gsurg: graph decoder: 3 rule(s)" in term.getvalue() and "writing weights" in term.getvalue()
    assert log.getvalue() == ""
    assert verbose.getvalue().splitlines() == [
        "gsurg: graph decoder: 3 rule(s)",
        "gsurg: writing weights (100 B)",
    ]


def test_apply_ends_with_a_table_of_what_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.param").write_text(CHAIN)
    rules = tmp_path / "r.yaml"
    rules.write_text("version: 1\nname: t\ninputs:\n  m: {param: m.param}\ngraphs:\n  g: {input: m}\n")
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # not a terminal: quiet
    header = next(line for line in captured.out.splitlines() if line.split()[:2] == ["graph", "file"])
    assert header.split() == ["graph", "file", "layers", "weights", "bytes", "storage"]
    row = captured.out.splitlines()[captured.out.splitlines().index(header) + 1].split()
    assert row == ["g", "m.param", "3", "0", "0", "-"]
