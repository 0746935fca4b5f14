"""What test_diff_bin_stats.py, test_diff_bin_pairing.py and test_diff_bin_checkpoint.py share: a
one-InnerProduct model whose .param and .bin are written by hand from the format notes (tag, fp32
weights, raw bias), and thin wrappers around ``diff_bins`` and its report."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphsurgeon.check.diff_bin import diff_bins
from graphsurgeon.check.diff_report import DiffReport, PairResult

TAG_FP32 = b"\x00\x00\x00\x00"

FC_PARAM = "7767517\n3 3\nInput in 0 1 x 0=4\nInnerProduct fc 1 1 x y 0=3 1=1 2=12\nReLU r 1 1 y z\n"
W = np.array([0.5, -1.25, 2.0, 3.0, -0.75, 0.125, 1.0, 1.0, 4.0, -2.5, 0.25, 8.0], dtype=np.float32)
BIAS = np.array([0.1, -0.2, 0.3], dtype=np.float32)


def f32(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype="<f4").tobytes()


def fc_bin(weight: np.ndarray = W, bias: np.ndarray = BIAS) -> bytes:
    """InnerProduct 0=3 1=1 2=12: tag 0 + 12 fp32 weights, then the raw fp32 bias (no tag)."""
    return TAG_FP32 + f32(weight) + f32(bias)


def model(tmp: Path, stem: str, param: str, data: bytes) -> Path:
    (tmp / f"{stem}.param").write_text(param)
    path = tmp / f"{stem}.bin"
    path.write_bytes(data)
    return path


def diff(a: Path, b: Path, **kw: object) -> DiffReport:
    return diff_bins(str(a), str(b), **kw)  # type: ignore[arg-type]


def pair(report: DiffReport, name: str) -> PairResult:
    return next(p for p in report.pairs if p.a.name == name)
