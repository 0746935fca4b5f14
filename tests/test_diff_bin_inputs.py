"""``gsurg diff-bin`` refuses files that are not weight files (issue 7 item 8): one ``gsurg: error:`` line
naming the file and what it is, exit 2, nothing on stdout. The files are written by hand here: a text
.param, a .param.bin (int32 magic 7767517, then the counts and one Input layer, as ncnn-format §2 lays it
out), YAML text, a folder, an odd-sized binary file."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.cli import main

PARAM = "7767517\n2 2\nInput in 0 1 x 0=4\nReLU r 1 1 x y\n"
PARAM_BIN = struct.pack("<8i", 7767517, 1, 1, 16, 0, 1, 0, -233)  # Input (type 16), 0 bottoms, top blob 0


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main(["diff-bin", *(str(a) for a in argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def refused(capsys: pytest.CaptureFixture[str], path: Path, *argv: str | Path) -> str:
    """Run diff-bin; it must exit 2 with one error line that names ``path``; returns the reason after it."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, ""), err
    (line,) = err.splitlines()
    prefix = f"gsurg: error: {path}: "
    assert line.startswith(prefix), line
    return line[len(prefix) :]


def test_a_text_param_compared_with_itself_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: two text files compared as flat float32 said PASSED."""
    p = tmp_path / "A.param"
    p.write_text(PARAM)
    reason = refused(capsys, p, p, p)
    assert "text .param" in reason and "not a .bin weight file" in reason


def test_a_param_given_as_the_weight_side_of_a_walk_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "A.param"
    p.write_text(PARAM)
    reason = refused(capsys, p, p, p, "--param-a", p, "--param-b", p)
    assert "text .param" in reason


def test_other_utf8_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Non-ASCII UTF-8 text too (a 4-byte multiple, so it would read as float32 words)."""
    y = tmp_path / "map.yaml"
    y.write_text("fc.weight: modèle.wts.\n", encoding="utf-8")
    assert y.stat().st_size % 4 == 0
    reason = refused(capsys, y, y, y)
    assert "UTF-8 text" in reason


def test_a_param_bin_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pb = tmp_path / "A.param.bin"
    pb.write_bytes(PARAM_BIN)
    reason = refused(capsys, pb, pb, pb)
    assert ".param.bin" in reason and "7767517" in reason


def test_a_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "weights"
    d.mkdir()
    reason = refused(capsys, d, d, d)
    assert "folder" in reason


def test_flat_float32_needs_whole_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ten bytes of binary data, with no .param beside them: not float32 words. The size is named."""
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(bytes(range(200, 210)))
    b.write_bytes(bytes(range(200, 210)))
    reason = refused(capsys, a, a, b)
    assert "10 bytes" in reason and "multiple of 4" in reason


def test_binary_weights_without_a_param_are_still_compared_flat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusals leave real data alone: float32 words (here even ones whose bytes are mostly ASCII
    letters, apart from the tag's NULs) compare as before."""
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    words = np.frombuffer(b"\0\0\0\0" + b"ABCDEFGH" * 8, dtype="<f4")
    a.write_bytes(words.tobytes())
    changed = words.copy()
    changed[5] = 1.0
    b.write_bytes(changed.tobytes())
    code, out, err = run(capsys, a, b)
    assert code == 0 and "flat float32" in err
    assert out.rstrip().splitlines()[-1] == "FAILED"  # element 5 differs far beyond the default tolerance
