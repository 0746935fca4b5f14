"""Output and input failures are one ``gsurg: error:`` line that names the path and the real reason, exit 2,
with the old outputs untouched and nothing left behind.

The disk-full case is real: a 1 MiB tmpfs mounted in a private mount namespace (``unshare -rm``; skipped
where the kernel or container refuses one). ``ulimit -f`` is RLIMIT_FSIZE set in the child with SIGXFSZ
ignored, so the write fails with EFBIG as it does in a shell.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.atomic_harness import MATMUL_RULE, MLP, REPO, SQUEEZENET, run_gsurg, tree


def _one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("gsurg: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def _fmt_bin(out: Path) -> list[str]:
    return ["fmt", f"{SQUEEZENET}.param", "-o", str(out / "x.param"), "--bin", f"{SQUEEZENET}.bin",
            "--out-bin", str(out / "x.bin")]  # fmt: skip


def test_ulimit_f_names_the_output_and_file_too_large(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "x.param").write_bytes(b"old param")
    (out / "x.bin").write_bytes(b"old bin")
    before = tree(out)
    child = run_gsurg(_fmt_bin(out), fsize=256 * 1024)  # the .bin is 2.4 MB
    assert child.code == 2
    assert _one_error_line(child.stderr) == f"gsurg: error: {out / 'x.bin'}: cannot write: File too large"
    assert tree(out) == before


def _namespace_tmpfs_works(mount_point: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k gsurg-probe '{mount_point}'"],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        # too small for the .bin: refused before anything is written, naming the folder and the sizes
        ("1m", r"gsurg: error: .*squeezenet_v1\.1\.param: its weights take 2478984 bytes .* but {out} has "),
        # the .bin fits (the free-space check passes) and the disk fills while the rest is written
        ("2428k", r"gsurg: error: {out}/x\.(param|bin): cannot write: No space left on device$"),
    ],
)
def test_a_full_disk_names_the_output_and_no_space_left(tmp_path: Path, size: str, expected: str) -> None:
    out = tmp_path / "full"
    out.mkdir()
    if not _namespace_tmpfs_works(out):
        pytest.skip("no private mount namespace with tmpfs here (unshare -rm refused)")
    argv = " ".join(f"'{a}'" for a in _fmt_bin(out))
    script = (
        f"mount -t tmpfs -o size={size} gsurg-full '{out}' && printf 'old bin' > '{out}/x.bin' && "
        f"'{sys.executable}' -m graphsurgeon.cli {argv}; echo \"rc=$?\"; ls -A '{out}'; cat '{out}/x.bin'"
    )
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    line = _one_error_line(proc.stderr)
    assert re.match(expected.format(out=re.escape(str(out))), line), line
    rc, *listing, old = proc.stdout.splitlines()
    assert rc == "rc=2"
    assert listing == ["x.bin"]  # no staging file, no lock left on the full disk
    assert old == "old bin"


def _fmt_o(t: str) -> list[str]:
    return ["fmt", f"{MLP}.param", "-o", f"{t}/afile/x.param"]


def _fmt_out_bin(t: str) -> list[str]:
    return [
        "fmt",
        f"{MLP}.param",
        "-o",
        f"{t}/x.param",
        "--bin",
        f"{MLP}.bin",
        "--out-bin",
        f"{t}/afile/sub/x.bin",
    ]


def _synth_o(t: str) -> list[str]:
    return ["synth-bin", f"{MLP}.param", "-o", f"{t}/afile/x.bin"]


def _apply_out(out: str) -> Callable[[str], list[str]]:
    return lambda t: ["apply", str(MATMUL_RULE), f"{MLP}.param", "--bin", f"{MLP}.bin", "--out", f"{t}/{out}"]


@pytest.mark.parametrize(
    ("argv", "named", "reason"),
    [
        (_fmt_o, "{t}/afile/x.param", "{t}/afile is a file"),
        (_fmt_out_bin, "{t}/afile/sub/x.bin", "{t}/afile is a file"),
        (_synth_o, "{t}/afile/x.bin", "{t}/afile is a file"),
        (_apply_out("afile"), "{t}/afile", "{t}/afile is a file"),
        (_apply_out("afile/o"), "{t}/afile/o", "{t}/afile is a file"),
    ],
    ids=["fmt-o", "fmt-out-bin-deeper", "synth-bin-o", "apply-out-is-a-file", "apply-out-under-a-file"],
)
def test_an_output_folder_that_is_a_file(
    argv: Callable[[str], list[str]], named: str, reason: str, tmp_path: Path
) -> None:
    (tmp_path / "afile").write_bytes(b"a file")
    before = tree(tmp_path)
    child = run_gsurg(argv(str(tmp_path)))
    assert child.code == 2
    line = _one_error_line(child.stderr)
    assert f" {named.format(t=tmp_path)}: " in line, line
    assert reason.format(t=tmp_path) in line, line
    assert "File exists" not in line
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    "argv",
    [
        lambda d: ["fmt", f"{MLP}.param", "-o", f"{d}/../x.param", "--bin", d, "--out-bin", f"{d}/../x.bin"],
        lambda d: ["diff-bin", d, d],
        lambda d: ["fmt", d, "-o", f"{d}/../x.param"],
        lambda d: ["lint", d],
        lambda d: ["lint", f"{MLP}.param", "--bin", d],
        lambda d: ["apply", str(MATMUL_RULE), d, "--out", f"{d}/../o"],
        lambda d: ["apply", str(MATMUL_RULE), f"{MLP}.param", "--bin", d, "--out", f"{d}/../o"],
        lambda d: ["synth-bin", f"{MLP}.param", "-o", f"{d}/"],
        lambda d: ["fmt", f"{MLP}.param", "-o", d],
    ],
    ids=["fmt-bin", "diff-bin", "fmt", "lint", "lint-bin", "apply", "apply-bin", "synth-bin-o", "fmt-o"],
)
def test_a_folder_where_a_file_is_expected(argv: Callable[[str], list[str]], tmp_path: Path) -> None:
    folder = tmp_path / "adir"
    folder.mkdir()
    child = run_gsurg(argv(str(folder)))
    assert child.code == 2
    line = _one_error_line(child.stderr)
    assert re.search(rf"{re.escape(str(folder))}/?: ", line), line
    assert re.search(r"is a (directory|folder)", line, re.IGNORECASE), line
    assert sorted(os.listdir(tmp_path)) == ["adir"] and os.listdir(folder) == []


def test_an_output_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    """Outputs are replaced by rename, which would put a regular file where a FIFO (or a device such as
    /dev/full) was; refuse instead."""
    fifo = tmp_path / "pipe.param"
    os.mkfifo(fifo)
    link = tmp_path / "link.param"
    link.symlink_to(fifo)
    for target in (fifo, link):
        child = run_gsurg(["fmt", f"{MLP}.param", "-o", str(target)])
        assert child.code == 2
        line = _one_error_line(child.stderr)
        assert f" {target}: " in line and "not a regular file" in line and "FIFO" in line, line
    assert fifo.is_fifo() and link.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["link.param", "pipe.param"]
