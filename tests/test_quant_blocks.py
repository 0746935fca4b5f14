"""gsurg's block quantizer (graphsurgeon.quant.blocks) against bit layouts written out by hand from ncnn's
``src/layer/gemm.cpp`` (code k at bit k*bits of its row, least significant bit first, two's complement) and
against the ncnn wheel computing a Gemm with the packed bytes (issue 17, item 1)."""

from __future__ import annotations

from pathlib import Path

import ncnn
import numpy as np
import pytest

from graphsurgeon.quant.blocks import (
    BlockFormat,
    choose_scales,
    dequantize,
    error_in_steps,
    pack,
    quantize,
    unpack,
)


@pytest.mark.parametrize(
    ("bits", "codes", "packed"),
    [
        # 4 bits: code 0 in the low nibble; -2 is 0b1110
        (4, [1, -2], [0xE1]),
        (4, [7, -7, 0], [0x97, 0x00]),
        # 6 bits: 1 = 000001 at bits 0-5, -1 = 111111 at 6-11, 31 = 011111 at 12-17, -31 = 100001 at 18-23
        (6, [1, -1, 31, -31], [0xC1, 0xFF, 0x85]),
        (8, [1, -1, 127, -127], [0x01, 0xFF, 0x7F, 0x81]),
    ],
)
def test_pack_and_unpack_match_the_layout_written_by_hand(
    bits: int, codes: list[int], packed: list[int]
) -> None:
    q = np.array([codes], dtype=np.int8)
    assert pack(q, bits).tolist() == [packed]
    assert unpack(np.array([packed], dtype=np.uint8), bits, len(codes)).tolist() == [codes]


def test_unpack_sign_extends_the_most_negative_code_ncnn_accepts_though_gsurg_never_writes_it() -> None:
    assert unpack(np.array([[0x08]], dtype=np.uint8), 4, 1).tolist() == [[-8]]


@pytest.mark.parametrize(("bits", "block", "term"), [(8, 32, 800), (4, 64, 401), (6, 128, 602)])
def test_quantize_term_is_bits_times_100_plus_the_block_code(bits: int, block: int, term: int) -> None:
    fmt = BlockFormat(bits, block)
    assert fmt.quantize_term == term
    assert BlockFormat.from_quantize_term(term) == fmt
    assert BlockFormat.from_quantize_term(term + 10) is None  # with input scales: another form
    assert BlockFormat.parse_term(term) == (fmt, False)
    assert BlockFormat.parse_term(term + 10) == (fmt, True)
    assert BlockFormat.parse_term(term + 20) is None


def test_minmax_puts_every_value_within_half_a_step_and_saturates_nothing() -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((9, 100)).astype(np.float32)  # K = 100: a short last block
    for bits in (4, 6, 8):
        fmt = BlockFormat(bits, 32)
        q = quantize(w, fmt, "minmax")
        assert q.packed.shape == (9, (100 * bits + 7) // 8) and q.scales.shape == (9, 4)
        # the scale is qmax / |largest| of the block
        assert np.allclose(q.scales[:, 0], fmt.qmax / np.abs(w[:, :32]).max(axis=1), rtol=1e-6)
        steps = error_in_steps(w, q.packed, q.scales, fmt)
        assert steps.bad == 0 and steps.saturated == 0 and steps.max_steps <= 0.5 + 1e-3
        deq = dequantize(q.packed, q.scales, fmt, 100)
        assert np.abs(deq - w).max() <= 0.5 / q.scales.min() * (1 + 1e-5)


def test_clip_never_has_a_larger_squared_error_than_minmax_in_any_block() -> None:
    rng = np.random.default_rng(4)
    w = (rng.standard_t(3, (16, 256)) * 0.02).astype(np.float32)  # heavy tails: clipping pays
    fmt = BlockFormat(4, 64)

    def block_errors(method: str) -> np.ndarray:
        q = quantize(w, fmt, method)  # type: ignore[arg-type]
        d = dequantize(q.packed, q.scales, fmt, 256) - w
        return (d.astype(np.float64) ** 2).reshape(16, 4, 64).sum(axis=2)

    mm, cl = block_errors("minmax"), block_errors("clip")
    assert (cl <= mm * (1 + 1e-6)).all()
    assert cl.sum() < 0.95 * mm.sum()  # and it does clip somewhere
    q = quantize(w, fmt, "clip")
    steps = error_in_steps(w, q.packed, q.scales, fmt)
    assert steps.bad == 0 and steps.saturated > 0


def test_a_block_of_zeros_gets_scale_one_and_zero_codes() -> None:
    w = np.zeros((2, 64), dtype=np.float32)
    w[1, 40] = 0.5
    q = quantize(w, BlockFormat(8, 32), "clip")
    assert q.scales[0].tolist() == [1.0, 1.0] and q.scales[1, 0] == 1.0
    assert not unpack(q.packed, 8, 64)[0].any()
    assert np.isfinite(choose_scales(w, BlockFormat(4, 32), "minmax")).all()


def test_error_in_steps_names_the_first_wrong_code() -> None:
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 64)).astype(np.float32)
    fmt = BlockFormat(4, 32)
    q = quantize(w, fmt, "minmax")
    codes = unpack(q.packed, 4, 64)
    codes[2, 37] = codes[2, 37] - 1 if codes[2, 37] > -7 else codes[2, 37] + 1
    steps = error_in_steps(w, pack(codes, 4), q.scales, fmt)
    assert steps.bad == 1 and steps.first_bad == (2, 37)


def _ncnn_gemm(
    tmp: Path, packed: np.ndarray, scales: np.ndarray, fmt: BlockFormat, a: np.ndarray
) -> np.ndarray:
    n, k = scales.shape[0], a.shape[1]
    (tmp / "q.param").write_text(
        f"7767517\n2 2\nInput in0 0 1 in0\n"
        f"Gemm gemm 1 1 in0 out0 3=1 5=1 8={n} 9={k} 18={fmt.quantize_term}\n"
    )
    body = packed.tobytes()
    body += b"\0" * (-len(body) % 4)
    (tmp / "q.bin").write_bytes(body + scales.astype("<f4").tobytes())
    net = ncnn.Net()
    opt = net.opt
    opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = False
    opt.use_bf16_storage = False
    opt.use_packing_layout = False
    assert net.load_param(str(tmp / "q.param")) == 0
    assert net.load_model(str(tmp / "q.bin")) == 0
    with net.create_extractor() as ex:
        ex.input("in0", ncnn.Mat(np.ascontiguousarray(a)).clone())
        ret, out = ex.extract("out0")
        assert ret == 0
        return np.array(out)


@pytest.mark.parametrize("bits", [4, 6])
def test_the_ncnn_wheel_computes_with_the_dequantized_matrix_at_4_and_6_bits(
    tmp_path: Path, bits: int
) -> None:
    rng = np.random.default_rng(6)
    w = rng.standard_normal((7, 100)).astype(np.float32)
    a = rng.standard_normal((3, 100)).astype(np.float32)
    fmt = BlockFormat(bits, 32)
    q = quantize(w, fmt, "clip")
    got = _ncnn_gemm(tmp_path, q.packed, q.scales, fmt, a)
    expected = a.astype(np.float64) @ dequantize(q.packed, q.scales, fmt, 100).T.astype(np.float64)
    assert np.abs(got - expected).max() < 1e-4


def test_the_ncnn_wheel_runs_8_bits_with_activations_quantized_per_block_too(tmp_path: Path) -> None:
    """At 8 bits R1020 quantizes each activation row per block as well (absmax / 127, round half away),
    multiplies int8 by int8 and rescales: modelled here from src/layer/gemm.cpp's reference kernel."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((5, 64)).astype(np.float32)
    a = rng.standard_normal((2, 64)).astype(np.float32)
    fmt = BlockFormat(8, 32)
    q = quantize(w, fmt, "minmax")
    got = _ncnn_gemm(tmp_path, q.packed, q.scales, fmt, a)
    wq = unpack(q.packed, 8, 64).astype(np.int64).reshape(5, 2, 32)
    ab = a.reshape(2, 2, 32).astype(np.float32)
    amax = np.abs(ab).max(axis=2)
    aq = np.clip(np.sign(ab) * np.floor(np.abs(ab * (127 / amax)[..., None]) + 0.5), -127, 127).astype(
        np.int64
    )
    dots = np.einsum("mgk,ngk->mng", aq, wq).astype(np.float64)
    expected = (dots * (amax / 127)[:, None, :] / q.scales[None, :, :]).sum(axis=2)
    assert np.abs(got - expected).max() < 1e-4
    # and it is further from A @ W^T than the 4-bit-style dequantized product alone would be
    assert np.abs(got - a @ dequantize(q.packed, q.scales, fmt, 64).T).max() > 1e-4


def test_a_value_just_below_half_a_step_rounds_down_as_c_roundf_does() -> None:
    """0.49999997 (the float32 below 0.5) + 0.5 is 1.0 in float32; roundf gives 0."""
    below_half = float(np.nextafter(np.float32(0.5), np.float32(0)))
    w = np.array([[7.0, below_half, -below_half, 0.5, -0.5, 1.5]], dtype=np.float32)
    q = quantize(w, BlockFormat(4, 32), "minmax")  # absmax 7 -> scale exactly 1
    assert q.scales[0, 0] == 1.0
    assert unpack(q.packed, 4, 6).tolist() == [[7, 0, 0, 1, -1, 2]]
