"""Calibration never reads the KV-cache tops of an attention layer (issue 14, item 2).

ncnn 1.0.20261020 keeps the caches an SDPA / MultiHeadAttention returns with ``7=1`` in a panel layout of
its own with spare capacity (``src/layer/x86/sdpa_kvcache.h``) and ``Extractor::extract`` hands them out
unconverted (``src/net.cpp``: "preserve kv cache storage layout"). Read as an array, such a top holds
padding that was never written, so its "maximum" was whatever the heap held: calibration's sidecar and a
fresh extraction disagreed on a decoder's ``out_cache_v0`` (11.13 against 3.82 or 12.84) on a machine
whose panel width does not divide the prompt's length.

Oracle: numpy computes the attention of the hand-written graph below; which tops are caches follows from
ncnn's SDPA contract (tops 1 and 2 with ``7=1``), not from the code under test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.pipeline.calibrate import calibrate_graph, export_inputs
from graphsurgeon.rewrite.sections import Calibrate

# q [2 heads, 3 rows, 8], k/v [2, 3, 8]: three rows fill no 4-, 8- or 16-wide panel, so padding exists.
PARAM = """7767517
6 9
Input in0 0 1 in0
Input in1 0 1 in1
Input in2 0 1 in2
Input past 0 2 cache_k cache_v
SDPA attn 5 3 in0 in1 in2 cache_k cache_v att out_k out_v 7=1
BinaryOp scale 1 1 att out 0=2 1=1 2=2.0
"""


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    logits = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v


def test_the_cache_tops_are_listed_as_opaque_and_never_measured(tmp_path: Path) -> None:
    param = tmp_path / "attn.param"
    param.write_text(PARAM)
    graph = read_param_text(param)
    rng = np.random.default_rng(7)
    samples = [
        tuple(rng.standard_normal((2, rows, 8)).astype(np.float32) * scale for _ in range(3))
        for rows, scale in ((3, 1.0), (5, 3.0))
    ]
    report = calibrate_graph(
        graph, Calibrate(limit=1e30), export_inputs(graph), samples, label="attn", scratch=tmp_path
    )
    assert report.opaque == ["out_k", "out_v"]
    assert report.to_json()["outputs_opaque"] == ["out_k", "out_v"]
    assert report.empty_inputs == ["cache_k", "cache_v"]
    assert set(report.maxima) == {"in0", "in1", "in2", "att", "out"}
    for i in range(3):
        assert report.maxima[f"in{i}"] == max(float(np.abs(s[i]).max()) for s in samples)
    want = max(float(np.abs(_attention(*s)).max()) for s in samples)
    assert report.maxima["att"] == pytest.approx(want, rel=1e-5)
    assert report.maxima["out"] == pytest.approx(2 * want, rel=1e-5)
    assert not report.marked


def test_a_layer_reading_large_keys_is_still_marked(tmp_path: Path) -> None:
    """The cache tops carry the key/value bottoms' values, so the bottoms alone decide the mark."""
    param = tmp_path / "attn.param"
    param.write_text(PARAM)
    graph = read_param_text(param)
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((2, 3, 8)).astype(np.float32) for _ in range(3))
    v[1, 2, 5] = 1e5  # above fp16's 65504
    report = calibrate_graph(
        graph, Calibrate(), export_inputs(graph), [(q, k, v)], label="attn", scratch=tmp_path
    )
    marked = {m.layer: (m.blob, m.side) for m in report.marked}
    assert marked["attn"] == ("in2", "input")
    assert "out_k" not in report.maxima and "out_v" not in report.maxima
