"""AWQ-style input scales (graphsurgeon.quant.awq, issue 38 item 4) in ncnn's block format with per-input
scales (quantize_term format digit 1): the ncnn wheel computes ``(x * is) @ deq(W')^T`` from such a record
(src/layer/gemm.cpp, ``forward_weight_block_quantize``), the scaled matrix stands for the original one,
and the search never does worse than plain rounding on its own objective."""

from __future__ import annotations

from pathlib import Path

import ncnn
import numpy as np
import pytest

from graphsurgeon.quant.awq import awq_search, candidates, effective_weight, scaled_weight
from graphsurgeon.quant.blocks import BlockFormat, dequantize, quantize
from graphsurgeon.quant.gptq import output_error


def _ncnn_gemm_with_input_scales(
    tmp: Path,
    packed: np.ndarray,
    scales: np.ndarray,
    input_scales: np.ndarray,
    fmt: BlockFormat,
    a: np.ndarray,
) -> np.ndarray:
    """One Gemm of term ``bits*100 + 10 + block code``: codes, then block scales, then K input scales, as
    the release's load_model reads them (raw float32, no tag)."""
    n, k = scales.shape[0], a.shape[1]
    term = fmt.quantize_term + 10
    (tmp / "q.param").write_text(
        f"7767517\n2 2\nInput in0 0 1 in0\nGemm gemm 1 1 in0 out0 3=1 5=1 8={n} 9={k} 18={term}\n"
    )
    body = packed.tobytes()
    body += b"\0" * (-len(body) % 4)
    body += scales.astype("<f4").tobytes() + input_scales.astype("<f4").tobytes()
    (tmp / "q.bin").write_bytes(body)
    net = ncnn.Net()
    opt = net.opt
    opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = False
    opt.use_bf16_storage = False
    opt.use_packing_layout = False
    assert net.load_param(str(tmp / "q.param")) == 0
    assert net.load_model(str(tmp / "q.bin")) == 0
    try:
        with net.create_extractor() as ex:
            ex.input("in0", ncnn.Mat(np.ascontiguousarray(a)).clone())
            ret, out = ex.extract("out0")
            assert ret == 0
            return np.array(out)
    finally:
        net.clear()


def _outlier_inputs(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    """Inputs with a few channels far larger than the rest, as LLM activations have."""
    x = rng.standard_normal((rows, k))
    x[:, :: k // 4] *= 30.0
    return x.astype(np.float32)


@pytest.mark.parametrize("bits", [4, 6])
def test_the_ncnn_wheel_multiplies_each_input_by_its_scale_before_the_codes(
    tmp_path: Path, bits: int
) -> None:
    rng = np.random.default_rng(21)
    k = 96
    x = _outlier_inputs(rng, 5, k)
    w = (rng.standard_normal((6, k)) * 0.05).astype(np.float32)
    fmt = BlockFormat(bits, 32)
    choice, q = awq_search(w, x.astype(np.float64).T @ x, np.abs(x).mean(axis=0), fmt, "clip")
    assert choice.scaled
    got = _ncnn_gemm_with_input_scales(tmp_path, q.packed, q.scales, choice.input_scales, fmt, x)
    scaled_x = (x * choice.input_scales[None, :]).astype(np.float64)
    expected = scaled_x @ dequantize(q.packed, q.scales, fmt, k).T.astype(np.float64)
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()
    # and that is x times the effective weight, which stands for w
    eff = effective_weight(q, fmt, choice.input_scales, k).astype(np.float64)
    assert np.abs(got - x.astype(np.float64) @ eff.T).max() < 1e-4 * np.abs(expected).max()


def test_scaling_alone_leaves_the_product_unchanged_in_the_ncnn_wheel(tmp_path: Path) -> None:
    """Before quantization the scaling is exact: at 8 bits with one block per row the codes of ``W / is``
    with input scales ``is`` give ncnn's output of the unscaled layer within int8 activation rounding, the
    same as the unscaled codes do."""
    rng = np.random.default_rng(22)
    k = 64
    x = _outlier_inputs(rng, 4, k)
    w = (rng.standard_normal((5, k)) * 0.05).astype(np.float32)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    _, scales = next((a, s) for a, s in candidates(np.abs(x).mean(axis=0), 4) if a == 0.5)
    assert np.allclose(scaled_weight(w, scales) * scales, w, rtol=1e-6)
    fmt = BlockFormat(8, 64)
    q = quantize(scaled_weight(w, scales), fmt, "minmax")
    got = _ncnn_gemm_with_input_scales(tmp_path, q.packed, q.scales, scales, fmt, x)
    assert np.abs(got - ref).max() < 0.02 * np.abs(ref).max()


def test_the_search_includes_plain_rounding_and_never_does_worse_on_its_objective() -> None:
    rng = np.random.default_rng(23)
    x = rng.standard_normal((300, 128)).astype(np.float32)
    w = (rng.standard_normal((16, 128)) * 0.05).astype(np.float32)
    h = x.astype(np.float64).T @ x
    fmt = BlockFormat(4, 64)
    first = next(candidates(np.abs(x).mean(axis=0)))
    assert first[0] == 0.0 and (first[1] == 1.0).all()
    choice, _ = awq_search(w, h, np.abs(x).mean(axis=0), fmt, "clip")
    plain = quantize(w, fmt, "clip")
    rounded = dequantize(plain.packed, plain.scales, fmt, 128)
    assert choice.plain_error == pytest.approx(output_error(w, rounded, h))
    assert choice.error <= choice.plain_error


def test_outlier_channels_get_scaled_and_the_output_error_drops() -> None:
    rng = np.random.default_rng(24)
    x = _outlier_inputs(rng, 400, 128)
    w = (rng.standard_normal((32, 128)) * 0.05).astype(np.float32)
    h = x.astype(np.float64).T @ x
    choice, q = awq_search(w, h, np.abs(x).mean(axis=0), BlockFormat(4, 64), "clip")
    assert choice.alpha > 0 and choice.error < 0.8 * choice.plain_error
    big = np.abs(x).mean(axis=0) > 10
    assert choice.input_scales[big].max() < choice.input_scales[~big].min()  # large inputs scaled down
    direct = x.astype(np.float64) @ (effective_weight(q, BlockFormat(4, 64), choice.input_scales, 128) - w).T
    assert float((direct**2).sum()) == pytest.approx(choice.error, rel=1e-6)


def test_silent_channels_do_not_make_the_input_scales_overflow() -> None:
    mean_abs = np.array([0.0, 1e-30, 1.0, 3.0])
    for _, scales in candidates(mean_abs, 4):
        assert np.isfinite(scales).all() and (scales > 0).all()
