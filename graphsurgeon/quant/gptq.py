"""GPTQ-style error compensation into ncnn's block format (``blocks``): the same codes and scales records,
chosen so the layer's *output* on the calibration inputs moves least, not each weight.

A Gemm computes ``y = x W^T`` for input rows ``x`` of ``K`` values. Given the calibration inputs' Hessian
``H = sum x^T x`` (``K x K``, float64), the output error of a quantized ``W_hat`` is
``tr((W - W_hat) H (W - W_hat)^T)`` (``output_error``). Rounding each weight to its nearest level ignores
``H``; GPTQ (Frantar et al., 2022, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
Transformers") quantizes the columns ``k = 0 .. K-1`` in order and, after each one, moves the columns not
yet quantized to cancel the output error it made, through the upper Cholesky factor ``U`` of ``H^-1``:
``w[:, j] -= (w[:, k] - q[:, k]) / U[k, k] * U[k, j]`` for ``j > k``. Here:

* ``H`` is damped first, ``H + damp * mean(diag H) * I`` (``damp`` 0.01, the paper's), which keeps it
  invertible when the calibration tokens are fewer than ``K`` or a channel never moves; a channel whose
  ``H[k, k]`` is 0 gets 1 there before damping (its weights are then rounded with no compensation);
* the updates are applied lazily, ``LAZY_COLUMNS`` columns at a time (the paper's block-wise update: the
  columns after the current group are updated once per group, by one matrix product);
* the grid is ncnn's: per (row, block) a float32 ``scale``, ``|q| <= 2^(bits-1) - 1``, value ``q / scale``.
  A block's scales are chosen when the block is reached, from its weights *as compensated so far*, by the
  policy's ``method`` (``blocks.choose_scales``: minmax, or clip's squared-error search), and a code is the
  compensated weight times its scale rounded half away from zero (C's ``roundf``, as ``blocks`` writes them);
  the error fed forward is against ``q * (1 / scale)`` in float32, the value ncnn's kernel computes with.

The columns are taken in their stored order (no "act order"): ncnn's blocks are runs of ``block_size``
consecutive columns, each with one scale, and the order keeps every block's scale chosen once, from the
values it will hold. With ``H`` a multiple of the identity nothing is fed forward and the result is
``blocks.quantize``'s, byte for byte.

Memory: ``H``'s factorization holds about three ``K x K`` float64 arrays (K = 6144: 0.9 GB) and the work
matrix one ``N x K`` float64; time ``K^3`` for the factor plus ``N K^2`` for the updates.
"""

from __future__ import annotations

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.quant.blocks import BlockFormat, Quantized, QuantMethod, choose_scales, pack

#: The damping the paper uses: a hundredth of the mean diagonal.
DAMP = 0.01
#: Columns updated at once before the rest of the matrix is (a multiple of every block size).
LAZY_COLUMNS = 128
_DAMP_RETRIES = 6  # each one ten times the damping before giving up on a matrix that is not positive


class HessianError(GsurgError, ValueError):
    """A Hessian no damping up to ``DAMP * 10**5`` makes positive definite (NaN or inf in the statistics)."""


def inverse_cholesky(h: np.ndarray, damp: float = DAMP) -> np.ndarray:
    """The upper triangular ``U`` with ``U^T U = (H + damp * mean(diag H) * I)^-1`` (float64 ``K x K``).

    Computed without forming the inverse first: with ``J`` the reversal, ``J H J = M M^T`` (Cholesky, ``M``
    lower) gives ``H = R R^T`` with ``R = J M J`` upper, so ``H^-1 = R^-T R^-1`` and ``U = R^-1``."""
    h = np.array(h, dtype=np.float64)  # a copy: damped in place
    if h.ndim != 2 or h.shape[0] != h.shape[1]:
        raise ValueError(f"a Hessian is a square matrix, not shape {list(h.shape)}")
    if not np.isfinite(h).all():
        raise HessianError("the Hessian holds NaN or inf (a calibration activation was not finite)")
    diag = np.einsum("ii->i", h)  # a view
    diag[diag <= 0] = 1.0
    mean = float(diag.mean())
    added = 0.0
    for attempt in range(_DAMP_RETRIES):
        step = damp * mean * 10.0**attempt - added
        diag += step
        added += step
        try:
            m = np.linalg.cholesky(h[::-1, ::-1])
        except np.linalg.LinAlgError:
            continue
        r = np.ascontiguousarray(m[::-1, ::-1])
        del m
        return np.triu(np.linalg.inv(r))
    raise HessianError(f"the Hessian is not positive definite even damped by {added / mean:.3g} x its mean")


def gptq_quantize(
    w: np.ndarray,
    h: np.ndarray,
    fmt: BlockFormat,
    method: QuantMethod,
    *,
    damp: float = DAMP,
    lazy: int = LAZY_COLUMNS,
) -> Quantized:
    """Quantize ``w[N, K]`` to ``fmt`` with GPTQ's compensation under the Hessian ``h[K, K]`` of its input
    (see the module docstring); ``method`` chooses each block's scales."""
    w = np.asarray(w)
    if w.ndim != 2 or w.shape[1] == 0:
        raise ValueError(f"block quantization needs a [N, K] matrix with K > 0, not shape {list(w.shape)}")
    n, k = w.shape
    if h.shape != (k, k):
        raise ValueError(f"the Hessian of a [{n}, {k}] weight's input is [{k}, {k}], not {list(h.shape)}")
    if lazy % fmt.block_size:
        raise ValueError(f"lazy update width {lazy} is no multiple of the block size {fmt.block_size}")
    u = inverse_cholesky(h, damp)
    work = np.array(w, dtype=np.float64)
    codes = np.zeros((n, k), dtype=np.int8)
    scales = np.ones((n, fmt.block_count(k)), dtype=np.float32)
    inverse = np.ones_like(scales)  # float32 1 / scale, what ncnn multiplies a code by
    qmax = float(fmt.qmax)
    bs = fmt.block_size
    for c0 in range(0, k, lazy):
        c1 = min(k, c0 + lazy)
        part = work[:, c0:c1]  # a view, compensated in place
        err = np.empty((n, c1 - c0), dtype=np.float64)
        for j in range(c0, c1):
            g, col = j // bs, j - c0
            if j % bs == 0:
                current = part[:, col : min(col + bs, c1 - c0)].astype(np.float32)
                scales[:, g] = choose_scales(current, fmt, method)[:, 0]
                inverse[:, g] = np.float32(1.0) / scales[:, g]
            x = part[:, col]
            y = (x.astype(np.float32) * scales[:, g]).astype(np.float64)  # as blocks.codes: float32 product
            q = np.clip(np.sign(y) * np.floor(np.abs(y) + 0.5), -qmax, qmax)
            codes[:, j] = q
            e = (x - q * inverse[:, g].astype(np.float64)) / u[j, j]
            err[:, col] = e
            if col + 1 < c1 - c0:
                part[:, col + 1 :] -= np.outer(e, u[j, j + 1 : c1])
        if c1 < k:
            work[:, c1:] -= err @ u[c0:c1, c1:]
    return Quantized(pack(codes, fmt.bits), scales)


def output_error(w: np.ndarray, w_hat: np.ndarray, h: np.ndarray) -> float:
    """``tr((w - w_hat) H (w - w_hat)^T)``: the summed squared output error, over the calibration inputs
    ``H`` was made from, of computing with ``w_hat[N, K]`` instead of ``w``."""
    d = np.asarray(w, dtype=np.float64) - np.asarray(w_hat, dtype=np.float64)
    return float(np.einsum("nk,nk->", d @ h, d))


def output_energy(w: np.ndarray, h: np.ndarray) -> float:
    """``tr(W H W^T)``: the summed squared output of ``w`` over the same inputs (for relative errors)."""
    w64 = np.asarray(w, dtype=np.float64)
    return float(np.einsum("nk,nk->", w64 @ h, w64))
