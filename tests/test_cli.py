"""The gsurg command line: help, the README's small start, .param.bin, and input protection (the README
quick start's Penguin-VL conversion runs in test_example_readmes.py, from the Penguin-VL guide's steps)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ncnn
import numpy as np
import pytest

from graphsurgeon.cli import main
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run
from tests.conftest import REPO

QUICK = REPO / "examples" / "quickstart"


def test_help_lists_the_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "graphsurgeon.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert all(cmd in out for cmd in ("fmt", "synth-bin", "lint", "diff-bin"))


def test_readme_small_start_command_runs_and_the_model_still_computes(tmp_path: Path) -> None:
    readme = " ".join((REPO / "README.md").read_text().split())
    command = (
        "gsurg apply rules/matmul-weight-slots.yaml examples/quickstart/mlp.param "
        "--bin examples/quickstart/mlp.bin --out out"
    )
    assert command in readme
    out = tmp_path / "out"
    argv = command.split()[1:]
    argv = [str(REPO / a) if a.startswith(("rules/", "examples/")) else a for a in argv]
    assert main([*argv[:-1], str(out)]) == 0
    assert "Gemm mm 1 1 1 2 2=0 3=0 4=0 5=1 6=0 7=0 8=10 9=32 10=-1" in (out / "mlp.param").read_text()
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    ref = run(fp32_net(QUICK / "mlp.param", QUICK / "mlp.bin"), {"in0": x}, ["out0"])["out0"]
    got = run(fp32_net(out / "mlp.param", out / "mlp.bin"), {"in0": x}, ["out0"])["out0"]
    assert ref.shape == (4, 10) and np.allclose(ref.sum(axis=1), 1.0, atol=1e-5)
    assert got.tobytes() == ref.tobytes()


def test_param_bin_output_runs_in_ncnn_like_the_text_form(tmp_path: Path) -> None:
    pbin = tmp_path / "mlp.param.bin"
    assert main(["fmt", str(QUICK / "mlp.param"), "-o", str(pbin), "-q"]) == 0
    net = fp32_net(pbin, QUICK / "mlp.bin", binary_param=True)
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)
    text_ref = run(fp32_net(QUICK / "mlp.param", QUICK / "mlp.bin"), {"in0": x}, ["out0"])["out0"]
    with net.create_extractor() as ex:  # no names in the binary form: blobs by index (out0 is the 5th)
        ex.input(0, ncnn.Mat(x).clone())
        ret, mat = ex.extract(4)
    assert ret == 0
    assert np.array(mat).tobytes() == text_ref.tobytes()
    back = tmp_path / "back.param"
    assert main(["fmt", str(pbin), "-o", str(back), "-q"]) == 0
    assert "InnerProduct InnerProduct_1 1 1 0 1 0=32 1=1 2=512 9=1" in back.read_text()
    assert "MatMul MatMul_3 2 1 1 2 3 0=0" in back.read_text()


def test_inputs_are_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    param = tmp_path / "m.param"
    param.write_bytes((QUICK / "mlp.param").read_bytes())
    before = param.read_bytes()
    assert main(["fmt", str(param), "-o", str(param)]) == 2
    assert "refusing to overwrite an input" in capsys.readouterr().err
    assert param.read_bytes() == before


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["fmt", str(QUICK / "mlp.param"), "-o", "x.param", "--bin", "only.bin"]) == 2
    assert "--bin and --out-bin go together" in capsys.readouterr().err


def test_json_report_lists_every_weight_with_its_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    argv = ["fmt", str(QUICK / "mlp.param"), "--bin", str(QUICK / "mlp.bin"), "-o", str(tmp_path / "m.param")]
    assert main([*argv, "--out-bin", str(tmp_path / "m.bin"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    weights = report["weights"]
    # by hand: fc1 W 32x16 fp16 = 4 + 1024; bias 32 raw = 128; MemoryData 32x10 raw (untagged) = 1280
    assert [(w["layer"], w["slot"], w["offset"]) for w in weights] == [
        ("fc1", "weight", 0),
        ("fc1", "bias", 1028),
        ("proj", "data", 1156),
    ]
    assert weights[0]["view"] == [32, 16] and weights[0]["storage"] == "fp16"
    assert weights[-1]["offset"] + weights[-1]["nbytes"] == (QUICK / "mlp.bin").stat().st_size
