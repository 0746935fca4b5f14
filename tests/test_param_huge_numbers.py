"""Integers of any length in a text .param (hardening issue 14, item 9): Python refuses to convert a string
of more than 4,300 digits, so such a token in a value, a header count, a param id, an array or a layer's
blob count used to escape as a ValueError traceback. Each is now what ncnn makes of it: a number outside
every range it accepts, refused at its line and column by ``gsurg fmt`` (strict, exit 2, one line) and
reported as a finding there by ``gsurg lint`` (lenient; exit 2 with one line only where ncnn cannot read
the line at all).

Lines and columns are counted by hand from the texts below (line 1 the magic, line 2 the counts, line 3
the ``Input`` layer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.formats.param_literals import int_token, shown_int

HUGE = "9" * 5000  # past Python's 4,300-digit limit for int(str)
M = "7767517\n"

#: (text, line, column of the offending token, lint exit code, lint check that reports it). The 15, 31 and
#: 127 character limits are ncnn 1.0.20261020's for a param id, a count and a value.
CASES = {
    # "Input in 0 1 x 0=" is 17 characters: the value starts at column 18
    "value": (f"{M}1 1\nInput in 0 1 x 0={HUGE}\n", 3, 18, 1, "literal-range"),
    "negative-value": (f"{M}1 1\nInput in 0 1 x 0=-{HUGE}\n", 3, 18, 1, "literal-range"),
    "layer-count": (f"{M}{HUGE} 1\nInput in 0 1 x\n", 2, 1, 1, "header-counts"),
    "blob-count": (f"{M}1 {HUGE}\nInput in 0 1 x\n", 2, 3, 1, "header-counts"),
    # the key starts after "Input in 0 1 x " (15 characters)
    "param-id": (f"{M}1 1\nInput in 0 1 x {HUGE}=1\n", 3, 16, 1, "param-id"),
    "negative-param-id": (f"{M}1 1\nInput in 0 1 x -{HUGE}=1\n", 3, 16, 1, "param-id"),
    "array-element": (f"{M}1 1\nInput in 0 1 x 0=1,{HUGE}\n", 3, 18, 1, "literal-range"),
    # "-23300=" is 7 characters after the 15: the array starts at column 23
    "old-array-length": (f"{M}1 1\nInput in 0 1 x -23300={HUGE},1\n", 3, 23, 1, "literal-range"),
    # a layer line's blob counts (columns 10 and 12): ncnn reads them as %31s, so the length is refused
    # first; the lenient reader then cannot match the names to the counts, which is fatal in both modes
    "bottom-count": (f"{M}1 1\nInput in {HUGE} 1 x\n", 3, 10, 2, None),
    "top-count": (f"{M}1 1\nInput in 0 {HUGE} x\n", 3, 12, 2, None),
    # small numbers spelled longer than ncnn 1.0.20261020 reads them (checked with its wheel: a param id
    # of 16 characters, a count of 32, with leading zeros, fail load_param_mem)
    "param-id-16-characters": (f"{M}1 1\nInput in 0 1 x {'0' * 15}1=1\n", 3, 16, 1, "name-length"),
    "top-count-32-characters": (f"{M}1 1\nInput in 0 {'0' * 31}1 x\n", 3, 12, 1, "name-length"),
    "blob-count-32-characters": (f"{M}1 {'0' * 31}1\nInput in 0 1 x\n", 2, 3, 1, "name-length"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fmt_refuses_a_huge_integer_at_its_place(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, line, column, _, _ = CASES[name]
    path = tmp_path / "big.param"
    path.write_text(text)
    code = main(["fmt", str(path), "-o", str(tmp_path / "out.param")])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"gsurg: error: {path}:{line}:{column}: ")
    assert len(err) < 300  # the 5000 digits are not echoed
    assert not (tmp_path / "out.param").exists()


@pytest.mark.parametrize("name", list(CASES))
def test_lint_reports_a_huge_integer_at_its_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, line, _, want_code, check = CASES[name]
    path = tmp_path / "big.param"
    path.write_text(text)
    code = main(["lint", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == want_code, err
    if code == 2:  # where the line stops making sense (its name), not where the count starts
        assert len(err.splitlines()) == 1 and err.startswith(f"gsurg: error: {path}:{line}:"), err
        return
    findings = json.loads(out)["findings"]
    assert any(f["level"] == "error" and f["check"] == check and f["line"] == line for f in findings)
    assert all(len(f["message"]) < 300 for f in findings)


def test_int_token_is_exact_up_to_19_digits_and_saturates_beyond() -> None:
    assert int_token("9223372036854775807") == 2**63 - 1  # 19 digits: exact
    assert int_token("-000000000000000000000000042") == -42  # leading zeros are not significant
    assert int_token("1" + "0" * 19) == 10**19
    assert int_token("-" + HUGE) == -(10**19)
    assert shown_int(int_token(HUGE)) == "10^19 or more"
    assert shown_int(-123) == "-123"
