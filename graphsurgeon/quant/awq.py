"""Activation-aware scaling (AWQ-style) into ncnn's block format with per-input scales (``quantize_term``
format digit 1): the weight's columns are scaled up where the inputs are large, so the channels that matter
most to the output get the finer steps, and the input is scaled down by as much when the Gemm runs.

ncnn 1.0.20261020's Gemm reads, after the per-(row, block) scales of a term ``bits*100 + 10 + block
code``, ``K`` float32 *input scales* ``is[k]`` and computes ``sum_k (x[k] * is[k]) * (q[n, k] / scale)``
(``forward_weight_block_quantize``; at 8 bits the scaled row is what it quantizes per block). So codes of
``W' = W / is`` with input scales ``is`` compute ``x W^T`` again, up to the rounding of ``W'``: nothing
outside the layer changes, and no other layer has to absorb the scaling. ncnn's own ``ncnnllm2table``
``method=awq`` writes the same form (its ``make_input_scaled_weight`` divides the weight by the input scale).

The search (Lin et al., 2023, "AWQ: Activation-aware Weight Quantization for LLM Compression and
Acceleration"): with ``a[k]`` the mean ``|x[k]|`` over the calibration tokens, ``s = a^alpha`` divided by
its geometric mean (channels below ``FLOOR`` of the largest mean count as ``FLOOR`` of it, so a silent
channel cannot make ``1 / s`` overflow), for ``alpha`` in ``0, 1/grid, …, 1``; each candidate quantizes
``W diag(s)`` by the policy's ``method`` and is scored by its output error on the calibration inputs,
``tr((W - W_hat) H (W - W_hat)^T)`` with ``W_hat = deq(W diag(s)) diag(1/s)`` (``gptq.output_error``); the
least wins. ``alpha = 0`` is ``s = 1``, plain rounding, so the chosen error is never larger than it — but
then the input scales are all 1 and cost ``4 K`` bytes for nothing, so that candidate is written in the
plain format instead (``AwqChoice.scaled`` is False).

Each candidate costs one quantization of ``W`` and ``N K^2`` for its error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from graphsurgeon.quant.blocks import BlockFormat, Quantized, QuantMethod, dequantize, quantize
from graphsurgeon.quant.gptq import output_error

#: alpha steps between 0 and 1 (21 candidates), as AWQ's and ncnnllm2table's searches take.
GRID = 20
#: The smallest mean |x| a channel counts with, as a fraction of the largest.
FLOOR = 1e-4


@dataclass(frozen=True, slots=True)
class AwqChoice:
    """The search's answer: ``input_scales[K]`` (float32, what ncnn multiplies each input by), the
    ``alpha`` it came from, and the output errors of the choice and of plain rounding (``alpha = 0``)."""

    input_scales: np.ndarray
    alpha: float
    error: float
    plain_error: float

    @property
    def scaled(self) -> bool:
        """Whether the choice scales anything (``alpha > 0``): else the plain format holds it."""
        return self.alpha > 0


def candidates(mean_abs: np.ndarray, grid: int = GRID) -> Iterator[tuple[float, np.ndarray]]:
    """``(alpha, input_scales)`` for ``alpha = 0, 1/grid, …, 1``: ``input_scales = 1 / s`` in float32."""
    a = np.asarray(mean_abs, dtype=np.float64)
    top = float(a.max()) if a.size else 0.0
    if not np.isfinite(a).all() or top <= 0:
        yield 0.0, np.ones(a.shape, dtype=np.float32)
        return
    log_a = np.log(np.maximum(a, FLOOR * top))
    for i in range(grid + 1):
        alpha = i / grid
        log_s = alpha * log_a
        log_s -= log_s.mean()
        yield alpha, np.exp(-log_s).astype(np.float32)


def scaled_weight(w: np.ndarray, input_scales: np.ndarray) -> np.ndarray:
    """``W' = W / is`` (float32): the matrix whose codes are stored with input scales ``is``."""
    return (np.asarray(w, dtype=np.float32) / np.asarray(input_scales, dtype=np.float32)[None, :]).astype(
        np.float32
    )


def effective_weight(q: Quantized, fmt: BlockFormat, input_scales: np.ndarray, k: int) -> np.ndarray:
    """What the stored codes and both scales multiply an input row by: ``deq(q) * is`` (float32)."""
    deq = dequantize(q.packed, q.scales, fmt, k)
    return (deq * np.asarray(input_scales, dtype=np.float32)[None, :]).astype(np.float32)


def awq_search(
    w: np.ndarray,
    h: np.ndarray,
    mean_abs: np.ndarray,
    fmt: BlockFormat,
    method: QuantMethod,
    *,
    grid: int = GRID,
) -> tuple[AwqChoice, Quantized]:
    """Search the input scales of ``w[N, K]`` (module docstring) and return the choice with its rounded
    codes and scales (of ``scaled_weight(w, choice.input_scales)``)."""
    w = np.asarray(w, dtype=np.float32)
    k = w.shape[1]
    if h.shape != (k, k) or mean_abs.shape != (k,):
        raise ValueError(
            f"a [{w.shape[0]}, {k}] weight needs a [{k}, {k}] Hessian and {k} mean magnitudes, not "
            f"{list(h.shape)} and {list(mean_abs.shape)}"
        )
    best: tuple[float, float, np.ndarray, Quantized] | None = None
    plain = 0.0
    for alpha, scales in candidates(mean_abs, grid):
        q = quantize(scaled_weight(w, scales), fmt, method)
        err = output_error(w, effective_weight(q, fmt, scales, k), h)
        if alpha == 0.0:
            plain = err
        if best is None or err < best[0]:
            best = (err, alpha, scales, q)
    assert best is not None
    err, alpha, scales, q = best
    return AwqChoice(scales, alpha, err, plain), q
