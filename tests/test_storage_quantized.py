"""The storage policy's block-quantized targets (issue 17, item 1) on the tiny exported model of
``test_storage_calibration``: LayerNorm -> fc1 -> ReLU -> fc2 -> fc3, whose fc2 output exceeds fp16's range,
so calibration keeps fc2 and fc3 fp32.

Oracles: torch (the model's own weights and outputs), the .bin walked by hand from the layer shapes and
ncnn's record format (a byte record of ceil(K*bits/8) per row padded to 4, then the raw fp32 scales), codes
unpacked by a reader written here from src/layer/gemm.cpp's layout, and the ncnn wheel running the result.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pnnx")

from graphsurgeon.cli import main  # noqa: E402
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run  # noqa: E402
from tests.test_storage_calibration import SOURCE, _layer_lines, _load_source  # noqa: E402

TAG_FP16 = 0x01306B47

pytestmark = pytest.mark.usefixtures("shared_exports")  # the runs differing in vars the source ignores

RULES = """
version: 1
name: tinyq
vars: {storage: int4, block: 32, method: clip, pin: int4}
source: {export: source.py:build}
inputs: {tiny: {export: tiny}}
graphs:
  tiny:
    input: tiny
    output: {param: tiny.param, bin: tiny.bin}
    storage:
      default: ${storage}
      block: ${block}
      method: ${method}
      unquantized: fp16
      calibrate: {when: "${storage != 'fp32'}"}
      rules:
        - {match: {type: Gemm, name: gemm_0}, slots: [B], storage: "${pin}"}
side_files:
  - {weight_map: ckpt.safetensors, output: "{graph}.weights.yaml"}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from safetensors.numpy import save_file

    root = tmp_path_factory.mktemp("quantized")
    (root / "source.py").write_text(SOURCE)
    (root / "rules.yaml").write_text(RULES)
    module = _load_source(root)
    model = module.Tiny().eval()
    save_file(
        {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}, root / "ckpt.safetensors"
    )
    runs = {
        "int4": [],
        "int6": ["--set", "storage=int6", "--set", "pin=int6", "--set", "method=minmax"],
        "int8": ["--set", "storage=int8", "--set", "pin=int8", "--set", "block=64"],
        "pinned": ["--set", "pin=fp32"],
    }
    for name, argv in runs.items():
        assert main(["apply", str(root / "rules.yaml"), "--out", str(root / name), *argv]) == 0
    return {"root": root, "model": model, "module": module}


def _unpack(row: bytes, bits: int, k: int) -> list[int]:
    """Code ``i`` of a packed row: bits ``i*bits ..`` least significant first, two's complement."""
    value = int.from_bytes(row, "little")
    codes = []
    for i in range(k):
        c = (value >> (i * bits)) & ((1 << bits) - 1)
        codes.append(c - (1 << bits) if c >= 1 << (bits - 1) else c)
    return codes


def _fc1_records(data: bytes, bits: int, block: int) -> tuple[np.ndarray, int, np.ndarray, int]:
    """Walk the .bin by hand up to fc1's scales: LayerNorm gamma, beta (raw 8 each), fc1's B (16 rows of
    8 codes), its bias C (tagged, 16), its scales (raw, 16 x blocks). Returns codes, the bias tag, the
    scales and where fc2's records start."""
    pos = 2 * 8 * 4
    row = (8 * bits + 7) // 8
    packed = data[pos : pos + 16 * row]
    codes = np.array([_unpack(packed[r * row : (r + 1) * row], bits, 8) for r in range(16)], dtype=np.float64)
    pos += (16 * row + 3) // 4 * 4
    tag = struct.unpack_from("<I", data, pos)[0]
    pos += 4 + (2 * 16 if tag == TAG_FP16 else 4 * 16)
    blocks = (8 + block - 1) // block
    scales = np.frombuffer(data, "<f4", 16 * blocks, pos).reshape(16, blocks).astype(np.float64)
    return codes, tag, scales, pos + 4 * 16 * blocks


@pytest.mark.parametrize(("run", "bits", "term"), [("int4", 4, 400), ("int6", 6, 600), ("int8", 8, 801)])
def test_fc1_is_block_quantized_and_the_calibrated_layers_stay_fp32(
    tiny: dict[str, Any], run: str, bits: int, term: int
) -> None:
    lines = _layer_lines(tiny["root"] / run / "tiny.param")
    gemms = [t for t in lines if t[0] == "Gemm"]
    assert [t[1] for t in gemms] == ["gemm_0", "gemm_1", "gemm_2"]
    assert f"18={term}" in gemms[0] and "31=3" not in " ".join(gemms[0])
    for t in gemms[1:]:  # fc2 overflows fp16: calibration keeps it and fc3 fp32, unquantized
        assert "31=3" in t and not any(tok.startswith("18=") for tok in t)
    data = (tiny["root"] / run / "tiny.bin").read_bytes()
    block = 64 if run == "int8" else 32
    codes, tag, scales, rest = _fc1_records(data, bits, block)
    assert tag == TAG_FP16  # the policy's unquantized storage for the bias
    w = tiny["model"].fc1.weight.detach().numpy().astype(np.float64)
    err = np.abs(w * scales[:, :1] - codes)  # in steps; K = 8 lies in one block
    qmax = (1 << (bits - 1)) - 1
    saturated = (np.abs(w * scales[:, :1]) > qmax + 0.5) & (np.abs(codes) == qmax)
    assert (err[~saturated] <= 0.5 + 1e-3).all()
    if run == "int6":  # minmax: the largest magnitude of every row is a full qmax code
        assert not saturated.any()
        assert (np.abs(codes).max(axis=1) == qmax).all()
    # the rest of the file: fc2 and fc3 as fp32 (tag 0), each weight then bias
    fc2, fc3 = tiny["model"].fc2, tiny["model"].fc3
    expected_rest = b""
    for fc in (fc2, fc3):
        for t in (fc.weight, fc.bias):
            expected_rest += b"\0\0\0\0" + t.detach().numpy().astype("<f4").tobytes()
    assert data[rest:] == expected_rest


def test_the_ncnn_wheel_computes_the_model_with_fc1s_dequantized_weights(tiny: dict[str, Any]) -> None:
    model = tiny["model"]
    data = (tiny["root"] / "int4" / "tiny.bin").read_bytes()
    codes, _, scales, _ = _fc1_records(data, 4, 32)
    bias = model.fc1.bias.detach().numpy().astype(np.float16).astype(np.float32)
    with torch.no_grad():
        model.fc1.weight.copy_(torch.from_numpy((codes / scales[:, :1]).astype(np.float32)))
        model.fc1.bias.copy_(torch.from_numpy(bias))
        x = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(9))
        expected = model(x)[0].numpy()
    net = fp32_net(tiny["root"] / "int4" / "tiny.param", tiny["root"] / "int4" / "tiny.bin")
    try:
        got = run(net, {"in0": x[0].numpy()}, ["out0"])["out0"]
    finally:
        net.clear()
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()


def test_a_storage_rule_pins_a_layer_out_of_quantization(tiny: dict[str, Any]) -> None:
    lines = _layer_lines(tiny["root"] / "pinned" / "tiny.param")
    assert not any(tok.startswith("18=") for t in lines for tok in t)
    data = (tiny["root"] / "pinned" / "tiny.bin").read_bytes()
    assert struct.unpack_from("<I", data, 64)[0] == 0  # fc1's B: an fp32 record, its tag right after LN


def test_the_weight_map_names_the_quantized_weights_tensor_and_not_its_scales(tiny: dict[str, Any]) -> None:
    text = (tiny["root"] / "int4" / "tiny.weights.yaml").read_text()
    assert "gemm_0.B: fc1.weight" in text
    assert "B_quantize_scales" not in text
    assert "block-quantized codes" in text


@pytest.mark.parametrize("run", ["int4", "int8"])
def test_fmt_writes_a_quantized_model_back_byte_for_byte(
    tiny: dict[str, Any], tmp_path: Path, run: str
) -> None:
    src = tiny["root"] / run
    argv = ["fmt", str(src / "tiny.param"), "-o", str(tmp_path / "t.param")]
    assert main([*argv, "--bin", str(src / "tiny.bin"), "--out-bin", str(tmp_path / "t.bin")]) == 0
    assert (tmp_path / "t.bin").read_bytes() == (src / "tiny.bin").read_bytes()
    assert (tmp_path / "t.param").read_text() == (src / "tiny.param").read_text()
