"""Written files get the mode a plain ``open()`` would give under the user's umask (0666 & ~umask), and an
overwritten file keeps its mode. The expected modes are computed here by hand from the umask; the
modes are read back from the OS."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.atomic_harness import MATMUL_RULE, MLP, SQUEEZENET, mode, run_gsurg

UMASKS = [0o022, 0o077, 0o002, 0o027, 0o000]


@pytest.mark.parametrize("umask", UMASKS, ids=lambda u: f"umask{u:03o}")
def test_new_files_get_0666_minus_the_umask(umask: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    runs = [
        ["fmt", f"{SQUEEZENET}.param", "-o", str(out / "x.param"), "--bin", f"{SQUEEZENET}.bin",
         "--out-bin", str(out / "x.bin"), "-q"],
        ["synth-bin", f"{MLP}.param", "-o", str(out / "s.bin"), "-q"],
        ["apply", str(MATMUL_RULE), f"{MLP}.param", "--bin", f"{MLP}.bin", "--out", str(out / "applied")],
    ]  # fmt: skip
    for argv in runs:
        child = run_gsurg(argv, umask=umask)
        assert child.code == 0, child.stderr
    written = ["x.param", "x.bin", "s.bin", "applied/mlp.param", "applied/mlp.bin", "applied/mlp.gsurg.json"]
    want = 0o666 & ~umask
    assert {name: oct(mode(out / name)) for name in written} == {name: oct(want) for name in written}


@pytest.mark.parametrize("old_mode", [0o644, 0o640, 0o604, 0o444], ids=lambda m: f"mode{m:03o}")
def test_an_overwritten_file_keeps_its_mode(old_mode: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("x.param", "x.bin", "s.bin"):
        (out / name).write_bytes(b"old")
        os.chmod(out / name, old_mode)
    argv = ["fmt", f"{SQUEEZENET}.param", "-o", str(out / "x.param"), "--bin", f"{SQUEEZENET}.bin",
            "--out-bin", str(out / "x.bin"), "-q"]  # fmt: skip
    assert run_gsurg(argv, umask=0o077).code == 0
    assert run_gsurg(["synth-bin", f"{MLP}.param", "-o", str(out / "s.bin"), "-q"], umask=0o077).code == 0
    for name in ("x.param", "x.bin", "s.bin"):
        assert (out / name).read_bytes() != b"old"
        assert oct(mode(out / name)) == oct(old_mode), name
