"""``gsurg lint``, layer by layer: literal types against the catalog, unconverted pnnx ops and custom
layers (``--custom``, including a custom weight spec), the per-layer rules (Softmax, Reshape, Slice,
BinaryOp, attention heads, RotaryEmbed, Gemm) and each layer's weights in the ``--bin`` walk.

One tiny hand-written .param (and, where weights matter, a .bin built byte by byte from the format notes)
per check, with the expected check ids, layer names and line numbers written out exactly. Where a check
claims ncnn rejects something, the ``ncnn`` wheel is asked too, so the expectation does not rest on gsurg
alone; the shared builders are in ``tests/lint_harness.py``.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CORPUS
from tests.lint_harness import TAG_FP16, TAG_FP32, cli, f32, lint, ncnn_load_param, param, rows, write

YOLOV5S = CORPUS / "ncnn-assets" / "yolov5s.param"


# --- literal types and layer types ------------------------------------------------------------------------


def test_float_literal_for_an_int_param_is_an_error(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "InnerProduct fc 1 1 x y 0=2 1=1.0 2=8")
    report = lint(write(tmp_path, text))
    assert rows(report) == [("error", "literal-type", "fc", 4)]
    assert "bias_term" in report.findings[0].message
    assert ncnn_load_param(text) == 0  # ncnn loads it silently (and uses bias_term = 0)


def test_wrong_literal_kinds_for_arrays_and_strings(tmp_path: Path) -> None:
    text = param(
        "Input in0 0 1 x",
        "Slice s 1 2 x a b -23300=2,1.0,1.0",  # line 4: float array for an int array
        "BinaryOp add 1 1 a c 0=0 1=1 2=inf",  # line 5: inf is read as a string
        "Concat cat 2 1 b c d 0=1.5",  # line 6: float for an int
    )
    assert rows(lint(write(tmp_path, text))) == [
        ("error", "literal-type", "s", 4),
        ("error", "literal-type", "add", 5),
        ("error", "literal-type", "cat", 6),
    ]
    slice_only = param("Input in0 0 1 x", "Slice s 1 2 x a b -23300=2,1.0,1.0")
    assert ncnn_load_param(slice_only) != 0


def test_shape_hints_must_hold_one_record_per_top(tmp_path: Path) -> None:
    bad = param("Input in0 0 1 x", "ReLU r 1 1 x y -23330=8,2,8,4,1,2,8,4,1")
    assert rows(lint(write(tmp_path, bad))) == [("error", "reserved-param", "r", 4)]
    good = param("Input in0 0 1 x", "Split s 1 2 x a b -23330=8,2,8,4,1,2,8,4,1")
    assert rows(lint(write(tmp_path, good))) == []


def test_duplicate_layer_names_are_a_warning(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "ReLU r 1 1 x y", "ReLU r 1 1 y z")
    assert rows(lint(write(tmp_path, text))) == [("warning", "duplicate-layer-name", "r", 5)]


def test_int_literal_for_a_float_param_is_a_warning(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "BinaryOp add 1 1 x y 0=0 1=1 2=2")
    assert rows(lint(write(tmp_path, text))) == [("warning", "literal-type", "add", 4)]
    fixed = param("Input in0 0 1 x", "BinaryOp add 1 1 x y 0=0 1=1 2=2.0")
    assert rows(lint(write(tmp_path, fixed))) == []


@pytest.mark.parametrize(
    "op_type", ["pnnx.Expression", "F.scaled_dot_product_attention", "aten::add", "torch.cat", "Tensor.view"]
)
def test_unconverted_pnnx_ops_are_errors(tmp_path: Path, op_type: str) -> None:
    text = param("Input in0 0 2 x y", f"{op_type} op 2 1 x y z", "ReLU r 1 1 z w")
    report = lint(write(tmp_path, text))
    assert rows(report) == [("error", "unconverted-op", "op", 4)]
    assert op_type in report.findings[0].message
    assert ncnn_load_param(text) != 0  # the wheel: "layer … not exists or registered"


def test_custom_layer_in_corpus_yolov5s_is_a_warning_silenced_by_custom(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = lint(YOLOV5S)
    assert rows(report) == [("warning", "custom-layer", "focus", 4)]
    assert "YoloV5Focus" in report.findings[0].message
    assert lint(YOLOV5S, custom=["YoloV5Focus"]).findings == []
    code, out, _ = cli(capsys, str(YOLOV5S), "--custom", "YoloV5Focus")
    assert code == 0 and out.splitlines() == ["192 layers, 216 blobs: 0 error(s), 0 warning(s)", "PASSED"]


def test_undeclared_custom_types_give_one_warning_per_type(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "Foo f1 1 1 x a", "Bar b1 1 1 a b", "Foo f2 1 1 b c", "Bar b2 1 1 c d")
    report = lint(write(tmp_path, text))
    assert rows(report) == [("warning", "custom-layer", "f1", 4), ("warning", "custom-layer", "b1", 5)]
    assert ["Foo" in report.findings[0].message, "Bar" in report.findings[1].message] == [True, True]
    assert rows(lint(write(tmp_path, text), custom=["Foo"])) == [("warning", "custom-layer", "b1", 5)]


def test_custom_weights_spec_drives_the_bin_walk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, param("Input in0 0 1 x", "MyL my 1 1 x y 0=2 1=3"))
    good, short = tmp_path / "good.bin", tmp_path / "short.bin"
    good.write_bytes(TAG_FP32 + f32(1, 2, 3, 4, 5, 6))  # tag + p0*p1 floats
    short.write_bytes(good.read_bytes()[:-4])
    spec = "MyL:w=tagged(p0*p1)"
    report = lint(p, bin_path=good, custom=[spec])
    assert rows(report) == [] and report.weights == 1
    code, out, _ = cli(capsys, str(p), "--bin", str(good), "--custom", spec)
    assert code == 0
    assert out.splitlines() == ["2 layers, 2 blobs, 1 weights: 0 error(s), 0 warning(s)", "PASSED"]

    report = lint(p, bin_path=short, custom=[spec])
    assert rows(report) == [("error", "bin-walk", "my", None)]
    (f,) = report.findings
    assert (f.weight, f.offset) == ("w", 0)
    assert "fp32 weight of 6 elements needs 28 bytes but the file ends 24 bytes later" in f.message

    undeclared = lint(p, bin_path=good)  # without --custom MyL reads nothing: every byte is left over
    assert [(r[0], r[1]) for r in rows(undeclared)] == [("warning", "custom-layer"), ("error", "bin-walk")]
    assert undeclared.findings[1].offset == 0


def test_bad_custom_declaration_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, param("Input in0 0 1 x", "MyL my 1 1 x y 0=2"))
    code, out, err = cli(capsys, str(p), "--custom", "MyL:w=blob(p0)")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("gsurg: error: ")
    code, _, err = cli(capsys, str(p), "--custom", "ReLU")
    assert code == 2 and "built-in" in err


# --- per-layer rules --------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [1, -1, 2])
def test_softmax_axis_needs_fixbug_and_ncnn_agrees(tmp_path: Path, axis: int) -> None:
    bad = param("Input in0 0 1 x 0=8 1=4 2=2", f"Softmax sm 1 1 x y 0={axis}")
    good = param("Input in0 0 1 x 0=8 1=4 2=2", f"Softmax sm 1 1 x y 0={axis} 1=1")
    axis0 = param("Input in0 0 1 x 0=8 1=4 2=2", "Softmax sm 1 1 x y 0=0")
    assert rows(lint(write(tmp_path, bad))) == [("error", "softmax-fixbug", "sm", 4)]
    assert rows(lint(write(tmp_path, good))) == []
    assert rows(lint(write(tmp_path, axis0))) == []
    assert ncnn_load_param(bad) != 0  # "param is too old, please regenerate"
    assert ncnn_load_param(good) == 0
    assert ncnn_load_param(axis0) == 0


def test_one_layer_rule_failure_does_not_hide_the_others(tmp_path: Path) -> None:
    text = param(
        "Input in0 0 1 x",
        "Softmax sm 1 1 x y 0=-1",
        "MultiHeadAttention mha 3 1 y y y z 0=10 1=0 2=100",
    )
    found = rows(lint(write(tmp_path, text)))
    assert ("error", "softmax-fixbug", "sm", 4) in found
    assert ("error", "attention-heads", "mha", 5) in found


def test_reshape_with_two_minus_ones(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "Reshape rs 1 1 x y 0=-1 1=-1")
    assert rows(lint(write(tmp_path, text))) == [("error", "reshape-two-minus-one", "rs", 4)]
    expr = param("Input in0 0 1 x", 'Reshape rs 1 1 x y 6="-1,-1"')
    assert rows(lint(write(tmp_path, expr))) == [("error", "reshape-two-minus-one", "rs", 4)]
    one = param("Input in0 0 1 x", "Reshape rs 1 1 x y 0=4 1=-1")
    assert rows(lint(write(tmp_path, one))) == []


def test_slice_sizes_against_a_known_input_shape(tmp_path: Path) -> None:
    text = param(
        "Input in0 0 1 x 0=8 1=4",  # shape (4, 8)
        "Split sp 1 4 x x0 x1 x2 x3",
        "Slice too_big 1 2 x0 a b -23300=2,3,3 1=0",  # line 5: 6 rows of 4
        "Slice rows 1 2 x1 c d -23300=2,1,3 1=0",  # line 6: fits
        "Slice cols 1 2 x2 e f -23300=2,4,-233 1=-1",  # line 7: fits (the rest of 8)
        "Slice no_axis 1 2 x3 g h -23300=2,1,1 1=2",  # line 8: rank 2 has no axis 2
    )
    found = rows(lint(write(tmp_path, text)))
    assert found == [("error", "slice", "too_big", 5), ("error", "slice", "no_axis", 8)]


def test_slice_sizes_vs_top_count(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "Slice s 1 2 x a b -23300=3,1,1,1")
    assert rows(lint(write(tmp_path, text))) == [("error", "slice", "s", 4)]


def test_binaryop_operands_of_different_rank(tmp_path: Path) -> None:
    # shape hints (30= / -23330=): records [dims, w, h, c]: a (2,4,8), b (3,8), c (2,4), d (8,)
    hints = "-23330=16,3,8,4,2,2,8,3,1,2,4,2,1,1,8,1,1"
    text = param(
        f"Input in0 0 4 a b c d {hints}",
        "Split sa 1 3 a a0 a1 a2",
        "BinaryOp bad 2 1 a0 b y1 0=0",  # line 5: (2,4,8) vs (3,8): no broadcast in ncnn
        "BinaryOp outer 2 1 a1 c y2 0=0",  # line 6: (2,4) aligns to the outer dims: a hazard
        "BinaryOp inner 2 1 a2 d y3 0=0",  # line 7: 1D of the innermost width: fine
    )
    found = rows(lint(write(tmp_path, text)))
    assert found == [("error", "binaryop-rank", "bad", 5), ("warning", "binaryop-rank", "outer", 6)]


def test_sdpa_query_heads_must_be_a_multiple_of_kv_heads(tmp_path: Path) -> None:
    # q (5,6,16), k and v (2,6,16)
    bad = param("Input in0 0 3 q k v -23330=12,3,16,6,5,3,16,6,2,3,16,6,2", "SDPA attn 3 1 q k v o")
    assert rows(lint(write(tmp_path, bad))) == [("error", "attention-heads", "attn", 4)]
    good = param("Input in0 0 3 q k v -23330=12,3,16,6,4,3,16,6,2,3,16,6,2", "SDPA attn 3 1 q k v o")
    assert rows(lint(write(tmp_path, good))) == []
    unknown = param("Input in0 0 3 q k v", "SDPA attn 3 1 q k v o")
    assert rows(lint(write(tmp_path, unknown))) == []


def test_multiheadattention_embed_dim_divisible_by_heads(tmp_path: Path) -> None:
    bad = param("Input in0 0 1 x", "MultiHeadAttention mha 3 1 x x x y 0=10 1=3 2=100")
    assert rows(lint(write(tmp_path, bad))) == [("error", "attention-heads", "mha", 4)]
    good = param("Input in0 0 1 x", "MultiHeadAttention mha 3 1 x x x y 0=12 1=3 2=144")
    assert rows(lint(write(tmp_path, good))) == []


ROPE = param(
    "Input in0 0 1 x 0=8 1=4 2=2",  # (heads 2, seq 4, head_dim 8)
    "MemoryData cos_table 0 1 cos 0=8 1=4",  # (4, 8): full width
    "MemoryData sin_table 0 1 sin 0=4 1=4",  # (4, 4): half width, as ncnn expects
    "RotaryEmbed rope 3 1 x cos sin y",
)


def _rope_bin(path: Path, cos: np.ndarray) -> Path:
    sin = np.linspace(-1, 1, 16, dtype=np.float32)
    path.write_bytes(cos.astype("<f4").tobytes() + sin.astype("<f4").tobytes())  # raw MemoryData loads
    return path


def test_rotaryembed_full_width_cos_with_different_halves(tmp_path: Path) -> None:
    """ncnn 1.0.20261020 applies a full-width row's halves independently in the default mode (checked below
    against numpy in the wheel): a portability warning. The interleaved mode reads one entry per pair, so
    differing halves there are an error."""
    p = write(tmp_path, ROPE)
    cos = np.arange(32, dtype=np.float32).reshape(4, 8) / 32  # halves differ (a 2D RoPE)
    bin_path = _rope_bin(tmp_path / "diff.bin", cos)
    report = lint(p, bin_path=bin_path)
    assert [r for r in rows(report) if r[1] == "rotary-full-width"] == [
        ("warning", "rotary-full-width", "rope", 6)
    ]
    found = next(f for f in report.findings if f.check == "rotary-full-width")
    assert "'cos'" in found.message and "older ncnn" in found.message
    interleaved = write(
        tmp_path, ROPE.replace("RotaryEmbed rope 3 1 x cos sin y", "RotaryEmbed rope 3 1 x cos sin y 0=1")
    )
    assert ("error", "rotary-full-width", "rope", 6) in rows(lint(interleaved, bin_path=bin_path))
    # the oracle for the warning level: with full-width cos and sin, the wheel rotates each half of the
    # head with its own half of the rows (2-D RoPE):
    #   y[i] = x[i] cos_a - x[i+4] sin_a,  y[i+4] = x[i+4] cos_b + x[i] sin_b
    from graphsurgeon.verify.ncnn_fp32 import fp32_net, run

    full = write(tmp_path, ROPE.replace("sin 0=4 1=4", "sin 0=8 1=4"))
    sin = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    both = tmp_path / "both.bin"
    both.write_bytes(cos.astype("<f4").tobytes() + sin.astype("<f4").tobytes())
    assert rows(lint(full, bin_path=both)) == [("warning", "rotary-full-width", "rope", 6)] * 2
    x = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    y = run(fp32_net(full, both), {"x": x}, ["y"])["y"]
    x0, x1 = x[..., :4], x[..., 4:]
    expected = np.concatenate([x0 * cos[:, :4] - x1 * sin[:, :4], x1 * cos[:, 4:] + x0 * sin[:, 4:]], axis=-1)
    np.testing.assert_allclose(y, expected, atol=1e-6)


def test_rotaryembed_cos_and_sin_of_different_widths_is_an_error(tmp_path: Path) -> None:
    """ncnn takes the full-width decision from cos alone and offsets sin the same way."""
    report = lint(write(tmp_path, ROPE))
    assert [r for r in rows(report) if r[0] == "error"] == [("error", "rotary-width-mismatch", "rope", 6)]


def test_rotaryembed_full_width_cos_with_equal_halves_is_clean(tmp_path: Path) -> None:
    p = write(tmp_path, ROPE)
    half = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    p = write(tmp_path, ROPE.replace("sin 0=4 1=4", "sin 0=8 1=4"))
    same = np.concatenate([half, half], axis=1)
    both = tmp_path / "same.bin"
    both.write_bytes(same.astype("<f4").tobytes() + same.astype("<f4").tobytes())
    assert rows(lint(p, bin_path=both)) == []
    assert rows(lint(p)) == []  # data unknown without --bin: nothing to say


def test_gemm_constant_m_in_a_dynamic_graph(tmp_path: Path) -> None:
    kv = param("Input in0 0 4 q k v w", "SDPA attn 3 1 q k v o 7=1", "Gemm proj 2 1 o w y 7=5")
    assert rows(lint(write(tmp_path, kv))) == [("error", "gemm-constant-m", "proj", 5)]
    dynamic_m = param("Input in0 0 4 q k v w", "SDPA attn 3 1 q k v o 7=1", "Gemm proj 2 1 o w y 7=0")
    assert rows(lint(write(tmp_path, dynamic_m))) == []
    unshaped = param("Input in0 0 2 a b", "Gemm proj 2 1 a b y 7=5")
    assert rows(lint(write(tmp_path, unshaped))) == [("warning", "gemm-constant-m", "proj", 4)]
    shaped = param("Input in0 0 1 a 0=4 1=5", "Input in1 0 1 b 0=3 1=4", "Gemm proj 2 1 a b y 7=5")
    assert rows(lint(write(tmp_path, shaped))) == []


# --- weights (--bin) --------------------------------------------------------------------------------------

FC = param("Input in0 0 1 x", "InnerProduct fc 1 1 x y 0=2 1=1 2=4")


def test_fp16_weight_holding_inf_is_an_fp16_overflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = write(tmp_path, FC)
    b = tmp_path / "m.bin"
    halves = struct.pack("<4H", 0x3C00, 0x7C00, 0xBC00, 0x3800)  # 1.0, +inf, -1.0, 0.5
    b.write_bytes(TAG_FP16 + halves + f32(0.1, 0.2))
    report = lint(p, bin_path=b)
    assert rows(report) == [("error", "fp16-overflow", "fc", None)]
    assert (report.findings[0].weight, report.findings[0].offset) == ("weight", 0)
    code, out, _ = cli(capsys, str(p), "--bin", str(b))
    assert code == 1 and "error: [fp16-overflow] layer fc, weight weight, offset 0: 1 of 4" in out


def test_all_zero_weight_is_a_warning(tmp_path: Path) -> None:
    p = write(tmp_path, FC)
    b = tmp_path / "m.bin"
    b.write_bytes(TAG_FP32 + f32(0, 0, 0, 0) + f32(0.1, 0.2))
    report = lint(p, bin_path=b)
    assert rows(report) == [("warning", "weight-all-zero", "fc", None)]
    assert (report.findings[0].weight, report.findings[0].offset) == ("weight", 0)
    assert report.exit_code == 0


def test_nan_in_raw_bias_is_weight_nonfinite(tmp_path: Path) -> None:
    p = write(tmp_path, FC)
    b = tmp_path / "m.bin"
    b.write_bytes(TAG_FP32 + f32(1, 2, 3, 4) + f32(0.1, float("nan")))
    report = lint(p, bin_path=b)
    assert rows(report) == [("error", "weight-nonfinite", "fc", None)]
    assert (report.findings[0].weight, report.findings[0].offset) == ("bias", 20)


@pytest.mark.parametrize(
    ("data", "offset", "needle"),
    [
        (TAG_FP32 + f32(1, 2, 3, 4) + f32(0.1), 20, "truncated"),  # 4 bytes short: the bias
        (TAG_FP32 + f32(1, 2, 3, 4) + f32(0.1, 0.2) + bytes(8), 28, "8 more bytes"),  # trailing bytes
        (struct.pack("<I", 0x12345678) + f32(1, 2, 3, 4) + f32(0.1, 0.2), 0, "unknown weight tag"),
    ],
    ids=["truncated", "trailing", "unknown-tag"],
)
def test_bin_walk_errors_name_the_offset(tmp_path: Path, data: bytes, offset: int, needle: str) -> None:
    p = write(tmp_path, FC)
    b = tmp_path / "m.bin"
    b.write_bytes(data)
    report = lint(p, bin_path=b)
    assert [(r[0], r[1]) for r in rows(report)] == [("error", "bin-walk")]
    assert report.findings[0].offset == offset
    assert needle in report.findings[0].message
