"""What the rule-language tests (test_rule_language_graphs.py, test_rule_language_weights.py,
test_rule_language_include.py) share: two tiny models (a ReLU chain, and a Gemm whose .bin is written
by hand), a file writer and the one ``gsurg: error`` line of a run."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

# Two layers, each "attention-like" with one bottom and one top; weights in a Gemm.
CHAIN = "7767517\n3 3\nInput in 0 1 x 0=4\nReLU r0 1 1 x a\nReLU r1 1 1 a y\n"
GEMM = "7767517\n2 2\nInput in 0 1 x 0=3 1=2\nGemm g 1 1 x y 2=0 3=1 4=0 5=1 6=0 7=2 8=4 9=3 10=-1\n"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def err_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [x for x in capsys.readouterr().err.strip().splitlines() if x.startswith("gsurg: error")]
    assert len(lines) == 1, lines
    return lines[0]


def gemm_model(folder: Path, weights: np.ndarray | None = None) -> tuple[Path, Path]:
    """GEMM with B [4,3] (transB=1) written by hand: tag 0 then 12 fp32 values."""
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 8 if weights is None else weights
    param = write(folder, "g.param", GEMM)
    binf = folder / "g.bin"
    binf.write_bytes(struct.pack("<I", 0) + w.astype("<f4").tobytes())
    return param, binf
