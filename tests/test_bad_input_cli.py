"""Bad inputs outside the case table, through the real CLI entry: a missing .bin, a failure after the
inputs were read (no output .bin left behind), a quote inside an unquoted string (it must round trip),
and a missing input in a real ``python -m graphsurgeon.cli`` process: exit 2, one ``gsurg: error:``
line, no traceback, no stray files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from tests.bad_input_harness import FC_PARAM, GOOD_BIN, two_layers


def test_missing_bin_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.param").write_text(FC_PARAM)
    code = main(
        [
            "fmt",
            str(tmp_path / "m.param"),
            "-o",
            str(tmp_path / "o.param"),
            "--bin",
            str(tmp_path / "nope.bin"),
            "--out-bin",
            str(tmp_path / "o.bin"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("gsurg: error: ")
    assert str(tmp_path / "nope.bin") in err and "cannot read" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.param"]


def test_a_late_failure_leaves_no_output_bin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.param").write_text(FC_PARAM)
    (tmp_path / "m.bin").write_bytes(GOOD_BIN)
    (tmp_path / "out.param").mkdir()
    code = main(
        [
            "fmt",
            str(tmp_path / "m.param"),
            "-o",
            str(tmp_path / "out.param"),
            "--bin",
            str(tmp_path / "m.bin"),
            "--out-bin",
            str(tmp_path / "out.bin"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("gsurg: error: ") and "Traceback" not in err
    assert not (tmp_path / "out.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.bin", "m.param", "out.param"]


def test_unquoted_string_with_a_quote_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = two_layers('Reshape r 1 1 x y 6=a"b')
    (tmp_path / "q.param").write_text(text)
    assert main(["fmt", str(tmp_path / "q.param"), "-o", str(tmp_path / "o.param")]) == 0
    assert (tmp_path / "o.param").read_text() == text


def test_cli_subprocess_missing_input(tmp_path: Path) -> None:
    missing = tmp_path / "does-not-exist.param"
    proc = subprocess.run(
        [sys.executable, "-m", "graphsurgeon.cli", "fmt", str(missing), "-o", "x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gsurg: error: ")
    assert str(missing) in lines[0]
    assert proc.stdout == ""
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["fmt", "IN", "-o", "OUT", "--bin", "", "--out-bin", ""],
        ["lint", "IN", "--bin", ""],
        ["fmt", "", "-o", "OUT"],
        ["diff-bin", "A", "B", "--map", ""],
        ["apply", "RULES", "--out", ""],
    ],
    ids=["fmt-bin", "lint-bin", "fmt-input", "diff-map", "apply-out"],
)
def test_an_empty_path_is_an_error_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """``gsurg fmt --bin ''`` once read as "no --bin" and exited 0 without reading or writing the weights."""
    param = tmp_path / "m.param"
    param.write_text("7767517\n2 2\nInput in 0 1 x\nReLU r 1 1 x y\n")
    names = {"IN": str(param), "OUT": str(tmp_path / "o.param"), "A": str(param), "B": str(param)}
    names["RULES"] = str(tmp_path / "r.yaml")
    assert main([names.get(a, a) for a in argv]) == 2
    assert "an empty path names no file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.param"]


@pytest.mark.parametrize(
    "name", [".gsurg-0123456789abcdef.lock", ".gsurg-0123456789abcdef.journal", ".gsurg-x"]
)
def test_an_output_named_like_gsurgs_own_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """A later run's recovery would read such a file as a lock or journal of its own, or remove it."""
    param = tmp_path / "m.param"
    param.write_text("7767517\n2 2\nInput in 0 1 x\nReLU r 1 1 x y\n")
    assert main(["fmt", str(param), "-o", str(tmp_path / name)]) == 2
    assert "are gsurg's own" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.param"]
