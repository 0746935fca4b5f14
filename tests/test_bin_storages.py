"""Every weight storage ncnn's ModelBin decodes is walked and decoded the same way by gsurg.

Each case writes one InnerProduct weight in a given storage by hand (byte layouts written from ncnn's
src/modelbin.cpp: a uint32 tag, then the payload padded to 4 bytes), runs the model in the ncnn wheel (fp32
options), and checks ncnn's output against numpy using the weights gsurg decoded. The oracle is ncnn's own
decoder; gsurg's decoder must agree with it.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.formats.model_bin import read_bin
from graphsurgeon.formats.param_text import parse_param_text
from graphsurgeon.ir.weights import Storage
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run

N, K = 3, 5  # odd element count: exercises the padding of 2- and 1-byte storages
PARAM = f"7767517\n2 2\nInput in 0 1 x 0={K}\nInnerProduct fc 1 1 x y 0={N} 1=1 2={N * K}\n"
RNG = np.random.default_rng(5)
W = RNG.uniform(-1, 1, size=(N, K)).astype(np.float32)
BIAS = np.array([0.25, -0.5, 1.0], dtype=np.float32)


def pad4(raw: bytes) -> bytes:
    return raw + b"\0" * (-len(raw) % 4)


def bf16_bytes(w: np.ndarray) -> bytes:
    return (w.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()  # truncation is a valid bf16


def quant_table(w: np.ndarray) -> bytes:
    table = np.linspace(-1, 1, 256, dtype=np.float32)
    idx = np.abs(w.reshape(-1, 1) - table.reshape(1, -1)).argmin(axis=1).astype(np.uint8)
    return table.astype("<f4").tobytes() + pad4(idx.tobytes())


CASES = {
    Storage.FP32: (b"\0\0\0\0", lambda w: w.astype("<f4").tobytes()),
    Storage.FP16: (bytes.fromhex("476b3001"), lambda w: pad4(w.astype("<f2").tobytes())),
    Storage.BF16: (bytes.fromhex("838b3401"), lambda w: pad4(bf16_bytes(w))),
    Storage.FP32_SCALED: (bytes.fromhex("56c00200"), lambda w: w.astype("<f4").tobytes()),
    Storage.QUANT_TABLE: (bytes.fromhex("01000000"), quant_table),
}


@pytest.mark.parametrize("storage", list(CASES), ids=lambda s: s.value)
def test_storage_decodes_like_ncnn(storage: Storage, tmp_path: Path) -> None:
    tag, encode = CASES[storage]
    param, model = tmp_path / "m.param", tmp_path / "m.bin"
    param.write_text(PARAM)
    model.write_bytes(tag + encode(W.reshape(-1)) + BIAS.astype("<f4").tobytes())
    graph = parse_param_text(PARAM)
    records = read_bin(graph, model)
    assert [r.storage for r in records] == [storage, Storage.RAW]
    decoded = graph.layer("fc").weights["weight"].numpy().reshape(N, K)
    x = RNG.uniform(-1, 1, size=K).astype(np.float32)
    y = run(fp32_net(param, model), {"x": x}, ["y"])["y"]
    np.testing.assert_allclose(y, decoded @ x + BIAS, rtol=1e-5, atol=1e-6)
    if storage in (Storage.FP32, Storage.FP32_SCALED):
        np.testing.assert_array_equal(decoded, W)
    assert np.max(np.abs(decoded - W)) < 0.01


def test_int8_weights_are_decoded_as_signed_bytes(tmp_path: Path) -> None:
    values = np.array([-128, -1, 0, 1, 127, 5, -7, 9, 10, 11, 12, 13, 14, 15, 16], dtype=np.int8)
    model = tmp_path / "m.bin"
    model.write_bytes(bytes.fromhex("384b0d00") + pad4(values.tobytes()) + BIAS.astype("<f4").tobytes())
    graph = parse_param_text(PARAM)
    (rec, _) = read_bin(graph, model)
    assert (rec.storage, rec.offset, rec.nbytes) == (Storage.INT8, 0, 4 + 16)
    np.testing.assert_array_equal(graph.layer("fc").weights["weight"].numpy(), values)


def test_block_quantized_gemm_bytes_are_walked_untagged(tmp_path: Path) -> None:
    """Gemm quantize_term 411 (4-bit, with input scale, block 64): B is K*4/8 bytes per row, untagged."""
    text = "7767517\n2 2\nInput in 0 1 x\nGemm g 1 1 x y 4=0 5=1 6=0 3=1 7=0 8=2 9=64 18=411\n"
    graph = parse_param_text(text)
    packed = bytes(range(64))  # 2 rows × 32 bytes
    scales = struct.pack("<2f", 0.5, 0.25)  # block_count 1 × N 2
    input_scales = struct.pack("<64f", *([1.0] * 64))
    model = tmp_path / "m.bin"
    model.write_bytes(packed + scales + input_scales)
    records = read_bin(graph, model)
    assert [(r.slot, r.storage, r.offset, r.nbytes) for r in records] == [
        ("B", Storage.BYTES, 0, 64),
        (records[1].slot, Storage.RAW, 64, 8),
        (records[2].slot, Storage.RAW, 72, 256),
    ]
    param = tmp_path / "m.param"
    param.write_text(text)
    assert fp32_net(param, model) is not None  # ncnn reads exactly these bytes
