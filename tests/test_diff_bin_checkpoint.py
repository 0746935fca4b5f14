"""``gsurg diff-bin`` of a .bin against a safetensors checkpoint through a ``--map``: transforms
(transpose, repeat_interleave), sharded checkpoints, fp16 / bf16 tensors, missing tensors and bad maps.

Params, bins and checkpoints are built by hand from the format notes (the shared fc model is in
``tests/diff_bin_harness.py``); every expected number is computed here with plain numpy (or by hand),
never by gsurg.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from graphsurgeon.cli import main as gsurg
from tests.diff_bin_harness import BIAS, FC_PARAM, TAG_FP32, W, diff, f32, fc_bin, model, pair
from tests.safetensors_files import bf16_bytes, write_safetensors

# ---- a .bin against a safetensors checkpoint ----------------------------------------------------------

GQA_PARAM = (
    "7767517\n3 3\nInput in 0 1 x 0=2\n"
    "InnerProduct fc 1 1 x y 0=3 1=1 2=12\n"
    "InnerProduct attn.k 1 1 y z 0=4 1=0 2=8\n"
)
K = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)  # 2 kv heads of dim 2 (rows)


def gqa_bin(k_weight: np.ndarray) -> bytes:
    return fc_bin() + TAG_FP32 + f32(k_weight)


def gqa_checkpoint(tmp: Path) -> Path:
    """fc.weight stored transposed ([4, 3], fp32), fc.bias as bf16, k_proj as bf16 [2, 2], plus an extra."""
    ckpt = tmp / "model.safetensors"
    write_safetensors(
        ckpt,
        {
            "fc_t": ("F32", (4, 3), f32(W.reshape(3, 4).T)),
            "fc_b": ("BF16", (3,), bf16_bytes(np.array([0.125, -0.25, 0.375], np.float32))),
            "k_proj": ("BF16", (2, 2), bf16_bytes(K)),
            "unused": ("F32", (2,), f32(np.zeros(2, np.float32))),
        },
    )
    with safe_open(str(ckpt), framework="numpy") as fh:  # the package agrees with the hand-written file
        assert sorted(fh.keys()) == ["fc_b", "fc_t", "k_proj", "unused"]
        np.testing.assert_array_equal(fh.get_tensor("fc_t"), W.reshape(3, 4).T)
    return ckpt


GQA_MAP = """\
fc.weight: {tensor: fc_t, transforms: [transpose]}
fc.bias: fc_b
attn.k.weight: {tensor: k_proj, transforms: [{repeat_interleave: {axis: 0, n: 2}}]}
"""
BF16_BIAS = np.array([0.125, -0.25, 0.375], np.float32)


def test_checkpoint_with_transpose_and_repeat_interleave(tmp_path: Path) -> None:
    ckpt = gqa_checkpoint(tmp_path)
    (tmp_path / "map.yaml").write_text(GQA_MAP)
    interleaved = np.repeat(K, 2, axis=0)  # rows 0,0,1,1 — torch.repeat_interleave(dim=0)
    b = model(tmp_path, "m", GQA_PARAM, fc_bin(W, BF16_BIAS) + TAG_FP32 + f32(interleaved))
    report = diff(b, ckpt, map_path=str(tmp_path / "map.yaml"), atol=0, rtol=0)
    assert report.mode == "checkpoint" and report.passed, report.to_json()
    assert [(p.a.name, p.b.name, p.how) for p in report.pairs] == [
        ("fc.weight", "fc_t", "map"),
        ("fc.bias", "fc_b", "map"),
        ("attn.k.weight", "k_proj", "map"),
    ]
    k = pair(report, "attn.k.weight")
    assert k.b.storage == "bf16" and k.b.shape == (4, 2) and k.a.shape == (4, 2)
    assert k.stats is not None and k.stats.identical and k.stats.cosine == 1.0
    assert report.unmapped_tensors == 1  # "unused": listed, not a failure


def test_tile_order_does_not_pass_repeat_interleave(tmp_path: Path) -> None:
    ckpt = gqa_checkpoint(tmp_path)
    (tmp_path / "map.yaml").write_text(GQA_MAP)
    tiled = np.tile(K, (2, 1))  # rows 0,1,0,1: what a plain repeat/tile would give
    b = model(tmp_path, "m", GQA_PARAM, fc_bin(W, BF16_BIAS) + TAG_FP32 + f32(tiled))
    report = diff(b, ckpt, map_path=str(tmp_path / "map.yaml"), atol=0, rtol=0)
    k = pair(report, "attn.k.weight")
    interleaved = np.repeat(K, 2, axis=0)
    s = k.stats
    assert s is not None and not s.passed and not report.passed
    d = np.abs(tiled.astype(np.float64) - interleaved).reshape(-1)
    assert s.max_abs == float(d.max()) == 2.0 and s.max_abs_at == int(np.argmax(d))
    first = int(np.flatnonzero(d)[0])  # element 2: row 1, column 0
    record = 64  # after fc.weight (4 + 48) and fc.bias (12)
    header = struct.unpack("<Q", ckpt.read_bytes()[:8])[0]
    k_data = 8 + header + 48 + 6  # after fc_t (48 bytes) and fc_b (6 bytes)
    # interleaved row 1 is checkpoint row 0: element (1, 0) comes from k_proj[0, 0]
    assert s.first_diff == (record + 4 + 4 * first, k_data + 0) and s.first_diff_at == first == 2


def test_checkpoint_without_transform_fails_and_sizes_are_checked(tmp_path: Path) -> None:
    ckpt = gqa_checkpoint(tmp_path)
    (tmp_path / "map.yaml").write_text(
        "fc.weight: fc_t\n"  # no transpose: same count, wrong order
        "fc.bias: {tensor: k_proj, transforms: [{reshape: [-1]}]}\n"  # 4 elements for a 3-element bias
        "attn.k.weight: missing_tensor\n"
        "ghost.weight: unused\n"
    )
    b = model(tmp_path, "m", GQA_PARAM, fc_bin(W, BF16_BIAS) + TAG_FP32 + f32(np.repeat(K, 2, axis=0)))
    report = diff(b, ckpt, map_path=str(tmp_path / "map.yaml"))
    w = pair(report, "fc.weight")
    assert w.status == "fail" and w.stats is not None
    assert w.stats.max_abs == float(np.abs(W.astype(np.float64) - W.reshape(3, 4).T.reshape(-1)).max())
    bias = pair(report, "fc.bias")
    assert bias.status == "shape-mismatch" and "3 in a, 4 in b" in (bias.message or "")
    assert [(e.name, e.note) for e in report.unpaired_a] == [
        ("attn.k.weight", f"map entry 'attn.k.weight': tensor 'missing_tensor' is not in {ckpt}")
    ]
    assert [e.name for e in report.unpaired_b] == ["unused"] and "ghost.weight" in (
        report.unpaired_b[0].note or ""
    )
    assert not report.passed


def test_sharded_checkpoint_and_checkpoint_as_a(tmp_path: Path) -> None:
    save_file({"fc_t": W.reshape(3, 4).T.copy()}, str(tmp_path / "s-00001-of-00002.safetensors"))
    write_safetensors(
        tmp_path / "s-00002-of-00002.safetensors",
        {"fc_b": ("BF16", (3,), bf16_bytes(BF16_BIAS)), "k_proj": ("BF16", (2, 2), bf16_bytes(K))},
    )
    index = tmp_path / "s.safetensors.index.json"
    index.write_text(
        json.dumps(
            {
                "metadata": {"total_size": 66},
                "weight_map": {
                    "fc_t": "s-00001-of-00002.safetensors",
                    "fc_b": "s-00002-of-00002.safetensors",
                    "k_proj": "s-00002-of-00002.safetensors",
                },
            }
        )
    )
    (tmp_path / "map.yaml").write_text(GQA_MAP)
    b = model(tmp_path, "m", GQA_PARAM, fc_bin(W, BF16_BIAS) + TAG_FP32 + f32(np.repeat(K, 2, axis=0)))
    report = diff(index, b, map_path=str(tmp_path / "map.yaml"), atol=0, rtol=0)
    assert report.passed and len(report.pairs) == 3 and report.unmapped_tensors == 0
    assert [(p.a.name, p.b.name) for p in report.pairs] == [
        ("fc_t", "fc.weight"),
        ("fc_b", "fc.bias"),
        ("k_proj", "attn.k.weight"),
    ]
    assert pair(report, "fc_t").a.file == str(tmp_path / "s-00001-of-00002.safetensors")


def test_fp16_checkpoint_tensor_through_the_package(tmp_path: Path) -> None:
    halves = W.reshape(3, 4).T.astype(np.float16)  # all of W is exact in fp16
    save_file({"fc_t": np.ascontiguousarray(halves), "fc_b": BIAS}, str(tmp_path / "h.safetensors"))
    (tmp_path / "map.yaml").write_text(
        "fc.weight: {tensor: fc_t, transforms: [{transpose: [1, 0]}]}\nfc.bias: fc_b\n"
    )
    b = model(tmp_path, "m", FC_PARAM, fc_bin())
    report = diff(b, tmp_path / "h.safetensors", map_path=str(tmp_path / "map.yaml"), atol=0, rtol=0)
    assert report.passed and [p.b.storage for p in report.pairs] == ["fp16", "fp32"]
    assert pair(report, "fc.weight").b.shape == (3, 4)


def test_bad_map_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = gqa_checkpoint(tmp_path)
    b = model(tmp_path, "m", GQA_PARAM, fc_bin() + TAG_FP32 + f32(np.zeros(8, np.float32)))
    for text, needle in (
        ("fc.weight: {tensor: fc_t, transforms: [{rotate: 1}]}\n", "unknown transform 'rotate'"),
        ("fc.weight: fc_t\nfc.weight: fc_b\n", "duplicate key"),
        ("weight: fc_t\n", "layer.slot"),
        ("? [fc, weight]\n: fc_t\n", "a key must be a name, not a list or mapping"),
        ("fc.weight: {tensor: fc_t, 1: 2, x: 3}\n", "unknown field(s) ['1', 'x']"),
        ("fc.weight: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested too deeply"),
        (
            "fc.weight: {tensor: fc_t, transforms: [{repeat_interleave: {axis: 0, n: true}}]}\n",
            "n an int >= 1",
        ),
        ("fc.weight: {tensor: fc_t, transforms: [{slice: {axis: false, stop: 2}}]}\n", "must be ints"),
        (b"fc.weight: fc_t\n\xff\n", "bad.yaml:2: not UTF-8 text"),
        # plain ValueErrors, not YAML errors, inside PyYAML: the scanner's chr() and Python's int digit limit
        ('fc.weight: fc_t\nfc.bias: "\\U00110000"\n', "bad.yaml:2: not valid YAML: chr() arg not in range"),
        ("fc.weight: fc_t\nfc.bias: " + "9" * 5000 + "\n", "bad.yaml:2: not valid YAML: an integer of 5000"),
    ):
        (tmp_path / "bad.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
        assert gsurg(["diff-bin", str(b), str(ckpt), "--map", str(tmp_path / "bad.yaml")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gsurg: error: ") and needle in err and "bad.yaml" in err
        assert len(err.splitlines()) == 1, err
