"""Absurd weight sizes are refused before anything is written, with one line naming the .param and the weight.

Each command runs in a child process whose file-size limit (RLIMIT_FSIZE) is 64 MiB, with SIGXFSZ ignored, and
whose address space is limited to 4 GiB: a writer that started writing anyway fails there with EFBIG, and one
that allocates the whole weight fails with MemoryError, instead of filling the disk or the machine's memory.
Oracles: the OS (``os.statvfs`` of the output's folder) and, for ncnn's element-count limit, the ncnn wheel.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

FSIZE_LIMIT = 64 << 20
AS_LIMIT = 4 << 30
RMSNORM_MAX = 2**31 - 1  # the largest int param: 2147483647 fp32 gammas, 8 GiB, loaded raw (no tag)


def limited() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def gsurg(*argv: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from graphsurgeon.cli import main; sys.exit(main())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
        env=env,
        check=False,
    )


def free_bytes(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def test_a_bin_larger_than_the_free_space_is_refused_before_writing(tmp_path: Path) -> None:
    record = 4 * RMSNORM_MAX
    layers = (2 * free_bytes(tmp_path) + (16 << 30)) // record + 1  # twice the free space, and then some
    lines = [f"RMSNorm rms{i} 1 1 x{i} x{i + 1} 0={RMSNORM_MAX}" for i in range(layers)]
    param = tmp_path / "huge.param"
    param.write_text(f"7767517\n{layers + 1} {layers + 1}\nInput in 0 1 x0\n" + "\n".join(lines) + "\n")
    out = tmp_path / "out" / "huge.bin"
    done = gsurg("synth-bin", str(param), "-o", str(out))
    total = layers * record
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"gsurg: error: {param}: its weights take {total} bytes (")
    assert f"but {out.parent} has " in line and " free; " in line
    assert line.endswith(
        f"the largest is layer rms0, weight gamma: {record} bytes (raw, shape [{RMSNORM_MAX}])"
    )
    assert os.listdir(out.parent) == []  # not even a temporary file


def test_a_weight_ncnn_cannot_count_is_refused_naming_layer_and_weight(tmp_path: Path) -> None:
    ncnn = pytest.importorskip("ncnn")
    w, h = 65536, 65537  # 4295032832 elements: ncnn multiplies the dims in an int, which wraps to 65536
    param = tmp_path / "md.param"
    param.write_text(f"7767517\n1 1\nMemoryData md 0 1 out 0={w} 1={h}\n")
    wrapped = tmp_path / "wrapped.bin"
    wrapped.write_bytes(bytes(4 * ((w * h) % 2**32)))  # 256 KiB
    net = ncnn.Net()  # why refuse: ncnn loads these params from the wrapped size and reports success
    assert net.load_param(str(param)) == 0
    assert net.load_model(str(wrapped)) == 0

    synth = ["synth-bin", str(param), "-o", str(tmp_path / "o.bin")]
    fmt = [
        "fmt",
        str(param),
        "-o",
        str(tmp_path / "o.param"),
        "--bin",
        str(wrapped),
        "--out-bin",
        str(tmp_path / "o.bin"),
    ]
    for argv in (synth, fmt):
        done = gsurg(*argv)
        assert done.returncode == 2, done
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"gsurg: error: {param}, layer md, weight data: params give this weight ")
        assert f"{w * h} elements (shape [{w * h}]), more than the 2147483647 ncnn can count" in line, line
    assert sorted(os.listdir(tmp_path)) == ["md.param", "wrapped.bin"]


def test_a_write_that_fails_midway_names_the_output_and_leaves_nothing(tmp_path: Path) -> None:
    param = tmp_path / "m.param"  # 100 MB of weights: past the child's 64 MiB file-size limit
    param.write_text("7767517\n2 2\nInput in 0 1 x\nRMSNorm rms 1 1 x y 0=25000000\n")
    out = tmp_path / "out" / "m.bin"
    done = gsurg("synth-bin", str(param), "-o", str(out))
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [f"gsurg: error: {out}: cannot write: File too large"]
    assert os.listdir(out.parent) == []
