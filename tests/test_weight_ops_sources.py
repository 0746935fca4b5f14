"""The ``weight`` action of ``gsurg apply`` (graphsurgeon.rewrite.weight_ops), where a weight comes from
and how it is stored: checkpoint tensors by capture, named and sharded checkpoints, the current data,
transforms, scale, fp32 / fp16 / bf16 / raw storage; laziness (no tensor is read before the .bin is
written) and ``Checkpoint.array``.

Checkpoints, .param and .bin files are written by hand (the shared fc model, checkpoint and rule-file
writer are in ``tests/weight_ops_harness.py``), and every expected .bin byte is computed with numpy from
the format notes, never by calling gsurg.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import safe_open

import graphsurgeon.formats.safetensors as st
import graphsurgeon.pipeline.write_outputs as apply_mod
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run
from tests.safetensors_files import bf16_bytes, write_safetensors
from tests.weight_ops_harness import (
    B0,
    FC_PARAM,
    TAG_FP32,
    W0,
    W1,
    apply,
    err_line,
    f32,
    fc_checkpoint,
    fc_model,
    rules,
)

TAG_FP16 = bytes([0x47, 0x6B, 0x30, 0x01])
TAG_BF16 = bytes([0x83, 0x8B, 0x34, 0x01])


def bf16_exact(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random float32 values exactly representable in bf16 (low 16 bits zero)."""
    vals = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return ((vals.view("<u4") >> 16) << 16).astype("<u4").view(np.float32)


FROM_CAPTURE = r"""
- name: load-fc
  match: {type: InnerProduct, name: 'fc(?P<i>\d+)'}
  expect: {count: 2}
  do:
    - weight: {slot: weight, from: "model.layers.{i}.weight", transforms: [transpose]}
"""


def test_captures_name_the_tensor_and_transpose_applies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    param, binf = fc_model(tmp_path)
    ckpt = fc_checkpoint(tmp_path)
    out = tmp_path / "out"
    assert apply(rules(tmp_path, FROM_CAPTURE, {"hf": ckpt}), param, binf, out) == 0
    expected = TAG_FP32 + f32(W0) + f32(B0) + TAG_FP32 + f32(W1)
    assert (out / "m.bin").read_bytes() == expected
    assert (out / "m.param").read_text() == FC_PARAM, "params are untouched"
    sidecar = json.loads((out / "m.gsurg.json").read_text())
    assert sidecar["layers"] == {
        "fc0": ["load-fc: weight weight <- model.layers.0.weight | transpose() as fp32"],
        "fc1": ["load-fc: weight weight <- model.layers.1.weight | transpose() as fp32"],
    }
    net = fp32_net(out / "m.param", out / "m.bin")
    x = np.arange(4, dtype=np.float32) - 1.5
    got = run(net, {"x": x}, ["z"])["z"]
    np.testing.assert_allclose(got, W1 @ (W0 @ x + B0), rtol=1e-6, atol=1e-6)


def test_bf16_checkpoint_scale_and_fp16_storage(tmp_path: Path) -> None:
    """bf16 tensor (written by hand) widened, scaled by 0.5, stored fp16 with an odd count: tag 47 6b 30 01,
    then 15 halves and 2 bytes of zero padding."""
    param = tmp_path / "m.param"
    param.write_text("7767517\n2 2\nInput in 0 1 x 0=5\nInnerProduct fc0 1 1 x y 0=3 1=0 2=15\n")
    binf = tmp_path / "m.bin"
    binf.write_bytes(TAG_FP32 + f32(np.zeros(15)))
    w = bf16_exact((3, 5), seed=1)
    ckpt = write_safetensors(tmp_path / "b.safetensors", {"fc.0.w": ("BF16", (3, 5), bf16_bytes(w))})
    with safe_open(str(ckpt), framework="numpy") as fh:  # the package reads the hand-written header
        assert fh.keys() == ["fc.0.w"]
    body = r"""
- name: half
  match: {type: InnerProduct, name: 'fc(?P<i>\d+)'}
  expect: {count: 1}
  do:
    - weight: {slot: weight, from: "fc.{i}.w", scale: 0.5, storage: fp16}
"""
    out = tmp_path / "out"
    assert apply(rules(tmp_path, body, {"only": ckpt}), param, binf, out) == 0
    data = (out / "m.bin").read_bytes()
    assert data[:4] == TAG_FP16 == bytes.fromhex("476b3001")
    assert data[4:] == (w * np.float32(0.5)).astype("<f2").tobytes() + b"\0\0"
    assert len(data) == 4 + 32
    sidecar = json.loads((out / "m.gsurg.json").read_text())
    assert sidecar["layers"]["fc0"] == ["half: weight weight <- fc.0.w | scale 0.5 as fp16"]


def test_fp16_checkpoint_bf16_storage_and_raw_bias(tmp_path: Path) -> None:
    param, binf = fc_model(tmp_path)
    w0 = bf16_exact((3, 4), seed=2)  # exact in bf16, and in fp16 for these magnitudes
    assert np.array_equal(w0.astype(np.float16).astype(np.float32), w0)
    ckpt = write_safetensors(
        tmp_path / "h.safetensors",
        {
            "w0": ("F16", (3, 4), w0.astype("<f2").tobytes()),
            "b0": ("F16", (3,), np.array([0.5, -1.25, 3.0], "<f2").tobytes()),
        },
    )
    body = """
- name: fc0
  match: {type: InnerProduct, name: fc0}
  expect: {count: 1}
  do:
    - weight: {slot: weight, from: w0, storage: bf16}
    - weight: {slot: bias, from: b0, storage: fp32}
"""
    out = tmp_path / "out"
    assert apply(rules(tmp_path, body, {"h": ckpt}), param, binf, out) == 0
    data = (out / "m.bin").read_bytes()
    expected = TAG_BF16 + bf16_bytes(w0) + f32([0.5, -1.25, 3.0]) + TAG_FP32 + f32(np.zeros(6))
    assert data == expected
    sidecar = json.loads((out / "m.gsurg.json").read_text())
    assert sidecar["layers"]["fc0"] == [
        "fc0: weight weight <- w0 as bf16",
        "fc0: weight bias <- b0 as raw",
    ]


def test_sharded_checkpoint_into_gemm_slots(tmp_path: Path) -> None:
    """Gemm B (transB=1: torch [N, K]) and C (broadcast type 4, tagged) from two shards via the index."""
    param = tmp_path / "g.param"
    param.write_text("7767517\n2 2\nInput in 0 1 x\nGemm proj 1 1 x y 2=0 3=1 4=0 5=1 6=1 7=0 8=3 9=4 10=4\n")
    binf = tmp_path / "g.bin"
    binf.write_bytes(TAG_FP32 + f32(np.zeros(12)) + TAG_FP32 + f32(np.zeros(3)))
    w = bf16_exact((3, 4), seed=3)
    b = np.array([0.25, -0.5, 1.0], np.float32)
    write_safetensors(
        tmp_path / "s-00001-of-00002.safetensors", {"proj.weight": ("BF16", (3, 4), bf16_bytes(w))}
    )
    write_safetensors(tmp_path / "s-00002-of-00002.safetensors", {"proj.bias": ("F32", (3,), f32(b))})
    index = tmp_path / "s.safetensors.index.json"
    index.write_text(
        json.dumps(
            {
                "metadata": {},
                "weight_map": {
                    "proj.weight": "s-00001-of-00002.safetensors",
                    "proj.bias": "s-00002-of-00002.safetensors",
                },
            }
        )
    )
    body = r"""
- name: proj
  match: {type: Gemm, name: '(?P<layer>\w+)'}
  expect: {count: 1}
  do:
    - weight: {slot: B, from: "{layer}.weight"}
    - weight: {slot: C_1xN, from: "{layer}.bias", transforms: [{reshape: [1, -1]}]}
"""
    out = tmp_path / "out"
    assert apply(rules(tmp_path, body, {"hf": index}), param, binf, out) == 0
    assert (out / "g.bin").read_bytes() == TAG_FP32 + f32(w) + TAG_FP32 + f32(b)
    x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
    got = run(fp32_net(out / "g.param", out / "g.bin"), {"x": x}, ["y"])["y"]
    np.testing.assert_allclose(got, x @ w.T + b, rtol=1e-6, atol=1e-6)


def test_current_weight_transformed_after_set(tmp_path: Path) -> None:
    """No ``from``: Gemm B stored [K, N] (transB=0) becomes [N, K] under transB=1, scaled; same outputs."""
    param = tmp_path / "g.param"
    param.write_text("7767517\n2 2\nInput in 0 1 x\nGemm g 1 1 x y 2=0 3=0 4=0 5=1 6=0 7=0 8=3 9=4\n")
    b_kn = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    binf = tmp_path / "g.bin"
    binf.write_bytes(TAG_FP16 + b_kn.astype("<f2").tobytes())
    b16 = b_kn.astype(np.float16).astype(np.float32)
    body = """
- name: trans-b
  match: {type: Gemm, params: {transB: 0}}
  expect: {count: 1}
  do:
    - set: {transB: 1}
    - weight: {slot: B, transforms: [transpose], scale: 2.0}
"""
    out = tmp_path / "out"
    assert apply(rules(tmp_path, body), param, binf, out) == 0
    assert (out / "g.bin").read_bytes() == TAG_FP32 + f32((b16 * 2).T)
    sidecar = json.loads((out / "g.gsurg.json").read_text())
    assert (
        sidecar["layers"]["g"][1]
        == "trans-b: weight B <- current fp16 data [4, 3] | transpose() | scale 2 as fp32"
    )
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)
    before = run(fp32_net(param, binf), {"x": x}, ["y"])["y"]
    after = run(fp32_net(out / "g.param", out / "g.bin"), {"x": x}, ["y"])["y"]
    np.testing.assert_allclose(after, 2 * before, rtol=1e-5, atol=1e-5)


def test_named_checkpoint_among_several(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    param, binf = fc_model(tmp_path)
    base = fc_checkpoint(tmp_path)
    other = write_safetensors(
        tmp_path / "o.safetensors", {"model.layers.0.weight": ("F32", (3, 4), f32(W0 * 3))}
    )
    named = """
- name: fc0
  match: {type: InnerProduct, name: fc0}
  expect: {count: 1}
  do:
    - weight: {slot: weight, from: model.layers.0.weight, checkpoint: other}
"""
    out = tmp_path / "out"
    assert apply(rules(tmp_path, named, {"base": base, "other": other}), param, binf, out) == 0
    assert (out / "m.bin").read_bytes()[4:52] == f32(W0 * 3)
    sidecar = json.loads((out / "m.gsurg.json").read_text())
    assert sidecar["layers"]["fc0"] == ["fc0: weight weight <- other:model.layers.0.weight as fp32"]
    unnamed = named.replace(", checkpoint: other", "")
    assert apply(rules(tmp_path, unnamed, {"base": base, "other": other}), param, binf, tmp_path / "o2") == 2
    assert err_line(capsys) == (
        "gsurg: error: layer fc0, weight weight: `from` needs a checkpoint, and the rule file declares "
        "several (base, other): name one"
    )


def counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every checkpoint tensor read (the one function that touches tensor data)."""
    reads: list[str] = []
    original: Callable[[st.TensorInfo], np.ndarray] = st._load_native

    def counted(info: st.TensorInfo) -> np.ndarray:
        reads.append(info.name)
        return original(info)

    monkeypatch.setattr(st, "_load_native", counted)
    return reads


def test_nothing_is_read_before_write_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    param, binf = fc_model(tmp_path)
    ckpt = fc_checkpoint(tmp_path)
    reads = counting_reads(monkeypatch)
    at_write: list[list[str]] = []
    real_write_bin = apply_mod.write_bin

    def spy(*args: Any, **kwargs: Any) -> Any:
        at_write.append(list(reads))
        return real_write_bin(*args, **kwargs)

    monkeypatch.setattr(apply_mod, "write_bin", spy)
    rule = rules(tmp_path, FROM_CAPTURE, {"hf": ckpt})
    assert apply(rule, param, binf, tmp_path / "dry", "--dry-run") == 0
    assert reads == [], "a dry run reads no tensor data"
    assert apply(rule, param, binf, tmp_path / "out", "--strict") == 0
    assert at_write == [[]], "no tensor is read while the rules run (nor by the re-lint of --strict)"
    assert reads == ["model.layers.0.weight", "model.layers.1.weight"], "each once, in write order"


def test_checkpoint_array_widens_each_dtype(tmp_path: Path) -> None:
    """Checkpoint.array: one tensor as float32 in its stored shape, for all three dtypes and via an index."""
    v = bf16_exact((2, 3), seed=9)
    path = write_safetensors(
        tmp_path / "a.safetensors",
        {
            "b": ("BF16", (2, 3), bf16_bytes(v)),
            "h": ("F16", (2, 3), v.astype("<f2").tobytes()),
            "f": ("F32", (2, 3), f32(v)),
        },
    )
    ckpt = st.Checkpoint(str(path))
    for name in "bhf":
        arr = ckpt.array(name)
        assert arr.dtype == np.float32 and arr.shape == (2, 3)
        np.testing.assert_array_equal(arr, v.astype(np.float16).astype(np.float32) if name == "h" else v)
    with pytest.raises(st.CheckpointError, match="no tensor named 'x'"):
        ckpt.array("x")
