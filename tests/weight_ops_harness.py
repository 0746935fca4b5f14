"""What test_weight_ops_sources.py and test_weight_ops_errors.py share: a two-InnerProduct model
(.param and placeholder .bin) and a safetensors checkpoint of its weights, written by hand; a rule-file
writer, the ``gsurg apply`` call and the one error line it prints."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphsurgeon.cli import main
from tests.safetensors_files import write_safetensors

TAG_FP32 = b"\x00\x00\x00\x00"

# fc0: 4 -> 3 with bias; fc1: 3 -> 2 without
FC_PARAM = (
    "7767517\n3 3\nInput in 0 1 x 0=4\n"
    "InnerProduct fc0 1 1 x y 0=3 1=1 2=12\n"
    "InnerProduct fc1 1 1 y z 0=2 1=0 2=6\n"
)
RNG = np.random.default_rng(7)
W0 = RNG.standard_normal((3, 4)).astype(np.float32)  # torch Linear layout [out, in]
B0 = RNG.standard_normal(3).astype(np.float32)
W1 = RNG.standard_normal((2, 3)).astype(np.float32)


def f32(values: Any) -> bytes:
    return np.ascontiguousarray(values, dtype="<f4").tobytes()


def fc_model(tmp: Path) -> tuple[Path, Path]:
    param = tmp / "m.param"
    param.write_text(FC_PARAM)
    binf = tmp / "m.bin"
    # placeholders the rules replace: zeros of the right sizes
    binf.write_bytes(TAG_FP32 + f32(np.zeros(12)) + f32(B0) + TAG_FP32 + f32(np.zeros(6)))
    return param, binf


def fc_checkpoint(tmp: Path) -> Path:
    """Both weights stored transposed ([in, out]) in fp32, plus a bias and an unrelated tensor."""
    return write_safetensors(
        tmp / "model.safetensors",
        {
            "model.layers.0.weight": ("F32", (4, 3), f32(W0.T)),
            "model.layers.1.weight": ("F32", (3, 2), f32(W1.T)),
            "model.layers.0.bias": ("F32", (3,), f32(B0 * 2)),
            "model.norm.weight": ("F32", (4,), f32(np.ones(4))),
        },
    )


def rules(tmp: Path, body: str, checkpoints: dict[str, Path] | None = None, name: str = "r.yaml") -> Path:
    ck = "".join(f"  {k}: {{path: '{v}'}}\n" for k, v in (checkpoints or {}).items())
    text = "version: 1\nname: t\n" + (f"checkpoints:\n{ck}" if ck else "") + "graphs:\n  main:\n    rules:\n"
    text += "".join(f"      {line}\n" for line in body.strip("\n").splitlines())
    path = tmp / name
    path.write_text(text)
    return path


def apply(rule: Path, param: Path, binf: Path | None, out: Path, *extra: str) -> int:
    argv = ["apply", str(rule), str(param)] + (["--bin", str(binf)] if binf else []) + ["--out", str(out)]
    return main([*argv, *extra])


def err_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line, with the rule name every action error starts with checked and removed."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    named = re.match(r"gsurg: error: rule [\w.-]+: (layer .*)", err[0])
    return f"gsurg: error: {named.group(1)}" if named else err[0]
