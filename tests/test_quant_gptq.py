"""GPTQ-style error compensation (graphsurgeon.quant.gptq, issue 38 item 4): its output error on the
calibration inputs against rounding to nearest, its codes in ncnn's standard block format (unpacked by
blocks' reader and run by the ncnn wheel's Gemm), and its edge cases. Oracles: numpy's matmul of the
inputs with the dequantized matrix, and a case whose best answer is known by construction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.quant.blocks import BlockFormat, dequantize, quantize, unpack
from graphsurgeon.quant.gptq import HessianError, gptq_quantize, inverse_cholesky, output_error
from tests.test_quant_blocks import _ncnn_gemm


def _correlated(rng: np.random.Generator, rows: int, k: int, rank: int = 12) -> np.ndarray:
    """Rows of ``k`` values driven by ``rank`` shared factors plus a little noise, channels of unequal
    magnitude: what a layer's inputs look like, and where compensation pays."""
    factors = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, k))
    x = factors + 0.2 * rng.standard_normal((rows, k))
    return (x * np.exp(0.5 * rng.standard_normal(k))).astype(np.float32)


def _errors(w: np.ndarray, x: np.ndarray, fmt: BlockFormat, method: str) -> tuple[float, float]:
    """The summed squared output error over ``x``'s rows, rounding against GPTQ, computed from the
    outputs themselves (not through the Hessian)."""
    h = x.astype(np.float64).T @ x
    k = w.shape[1]
    rtn = quantize(w, fmt, method)  # type: ignore[arg-type]
    gq = gptq_quantize(w, h, fmt, method)  # type: ignore[arg-type]
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    out = []
    for q in (rtn, gq):
        y = x.astype(np.float64) @ dequantize(q.packed, q.scales, fmt, k).T.astype(np.float64)
        out.append(float(((y - ref) ** 2).sum()))
    return out[0], out[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("bits", "block"), [(4, 64), (4, 32), (6, 128), (8, 64)])
def test_gptq_has_a_smaller_output_error_than_rounding_on_correlated_inputs(
    seed: int, bits: int, block: int
) -> None:
    rng = np.random.default_rng(seed)
    x = _correlated(rng, 600, 192)
    w = (rng.standard_normal((40, 192)) * 0.05).astype(np.float32)
    rtn, gq = _errors(w, x, BlockFormat(bits, block), "clip")
    assert gq <= rtn
    assert gq < 0.5 * rtn  # low-rank inputs: most of rounding's output error can be cancelled


def test_a_duplicated_input_channel_takes_the_whole_rounding_error_of_its_twin() -> None:
    """Inputs where channel 1 always equals channel 0: whatever column 0's rounding loses, column 1 can
    absorb, so the output error is that of column 1's rounding alone (a fraction of rounding both)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((400, 32)).astype(np.float32)
    x[:, 1] = x[:, 0]
    w = (rng.standard_normal((16, 32)) * 0.1).astype(np.float32)
    fmt = BlockFormat(4, 32)
    rtn, gq = _errors(w, x, fmt, "minmax")
    assert gq < rtn
    h = x.astype(np.float64).T @ x
    q = gptq_quantize(w, h, fmt, "minmax", damp=1e-6)
    deq = dequantize(q.packed, q.scales, fmt, 32).astype(np.float64)
    # the sum of the two columns is what the output sees: it is within half a step of the true sum
    pair_err = np.abs((deq[:, 0] + deq[:, 1]) - (w[:, 0] + w[:, 1]).astype(np.float64))
    assert (pair_err <= 0.5 / q.scales[:, 0] * (1 + 1e-4)).all()


@pytest.mark.parametrize("method", ["minmax", "clip"])
@pytest.mark.parametrize("bits", [4, 6, 8])
def test_with_an_identity_hessian_gptq_is_rounding_byte_for_byte(method: str, bits: int) -> None:
    rng = np.random.default_rng(9)
    w = (rng.standard_t(4, (24, 200)) * 0.03).astype(np.float32)  # K = 200: a short last block
    fmt = BlockFormat(bits, 64)
    a = quantize(w, fmt, method)  # type: ignore[arg-type]
    b = gptq_quantize(w, np.eye(200) * 7.0, fmt, method)  # type: ignore[arg-type]
    assert np.array_equal(a.packed, b.packed) and np.array_equal(a.scales, b.scales)


@pytest.mark.parametrize("bits", [4, 6])
def test_gptq_codes_run_in_the_ncnn_wheel_as_numpy_dequantizes_them(tmp_path: Path, bits: int) -> None:
    rng = np.random.default_rng(11)
    x = _correlated(rng, 300, 100)
    w = (rng.standard_normal((7, 100)) * 0.05).astype(np.float32)
    fmt = BlockFormat(bits, 32)
    q = gptq_quantize(w, x.astype(np.float64).T @ x, fmt, "clip")
    codes = unpack(q.packed, bits, 100)
    assert np.abs(codes).max() <= fmt.qmax  # the symmetric grid: the most negative code never written
    assert q.packed.shape == (7, fmt.packed_row_bytes(100)) and q.scales.shape == (7, 4)
    a = x[:3]
    got = _ncnn_gemm(tmp_path, q.packed, q.scales, fmt, a)
    expected = a.astype(np.float64) @ dequantize(q.packed, q.scales, fmt, 100).T.astype(np.float64)
    assert np.abs(got - expected).max() < 1e-4 * max(1.0, np.abs(expected).max())


def test_the_lazy_update_width_does_not_change_the_result() -> None:
    rng = np.random.default_rng(12)
    x = np.cumsum(rng.standard_normal((300, 256)), axis=1).astype(np.float32)
    w = rng.standard_normal((10, 256)).astype(np.float32)
    h = x.astype(np.float64).T @ x
    fmt = BlockFormat(4, 32)
    a, b = gptq_quantize(w, h, fmt, "clip", lazy=32), gptq_quantize(w, h, fmt, "clip", lazy=128)
    assert np.array_equal(a.packed, b.packed) and np.array_equal(a.scales, b.scales)


def test_fewer_tokens_than_channels_and_a_silent_channel_still_factor() -> None:
    rng = np.random.default_rng(13)
    x = rng.standard_normal((20, 96)).astype(np.float32)  # rank 20 < 96
    x[:, 5] = 0.0
    h = x.astype(np.float64).T @ x
    u = inverse_cholesky(h)
    assert np.allclose(np.tril(u, -1), 0.0)
    damped = h.copy()
    damped[5, 5] = 1.0
    damped[np.diag_indices(96)] += 0.01 * np.diag(damped).mean()
    assert np.allclose(u.T @ u @ damped, np.eye(96), atol=1e-6)
    w = rng.standard_normal((8, 96)).astype(np.float32)
    q = gptq_quantize(w, h, BlockFormat(4, 32), "minmax")
    assert np.isfinite(q.scales).all()


def test_a_hessian_with_nan_is_refused() -> None:
    h = np.eye(4)
    h[1, 2] = np.nan
    with pytest.raises(HessianError, match="NaN or inf"):
        inverse_cholesky(h)


def test_output_error_is_the_squared_output_difference() -> None:
    rng = np.random.default_rng(14)
    x = rng.standard_normal((50, 16))
    w, w2 = rng.standard_normal((3, 16)), rng.standard_normal((3, 16))
    direct = float(((x @ w.T - x @ w2.T) ** 2).sum())
    assert output_error(w, w2, x.T @ x) == pytest.approx(direct, rel=1e-10)
