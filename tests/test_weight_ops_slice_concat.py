"""`weight` actions that cut a fused tensor (slice) or join several (from: [...] with concat_axis)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from graphsurgeon.cli import main
from graphsurgeon.transforms import Transform, parse_transform

PARAM = "7767517\n2 2\nInput in 0 1 x 0=4\nInnerProduct fc 1 1 x y 0=3 1=0 2=12\n"
RULE = """\
version: 1
name: t
checkpoints:
  ck: {{path: "{ckpt}"}}
graphs:
  main:
    rules:
      - name: load
        match: {{type: InnerProduct}}
        expect: {{count: 1}}
        do:
          - weight: {weight}
"""


def _run(tmp_path: Path, weight: str, tensors: dict[str, np.ndarray], out_count: int = 3) -> np.ndarray:
    ckpt = tmp_path / "m.safetensors"
    save_file(tensors, str(ckpt))
    param = tmp_path / "m.param"
    param.write_text(PARAM.replace("0=3 1=0 2=12", f"0={out_count} 1=0 2={out_count * 4}"))
    model = tmp_path / "m.bin"
    model.write_bytes(b"\0" * 4 + bytes(4 * 4 * out_count))  # tag 0 + zeros: the rule replaces them
    rules = tmp_path / "r.yaml"
    rules.write_text(RULE.format(ckpt=ckpt, weight=weight))
    assert main(["apply", str(rules), str(param), "--bin", str(model), "--out", str(tmp_path / "o")]) == 0
    data = (tmp_path / "o" / "m.bin").read_bytes()
    assert data[:4] == b"\0" * 4
    return np.frombuffer(data[4:], dtype="<f4").reshape(out_count, 4)


def test_slice_takes_one_part_of_a_fused_weight(tmp_path: Path) -> None:
    fused = np.arange(36, dtype=np.float32).reshape(9, 4)  # q, k, v stacked on axis 0
    got = _run(
        tmp_path,
        "{slot: weight, from: qkv, transforms: [{slice: {axis: 0, start: 3, stop: 6}}]}",
        {"qkv": fused},
    )
    np.testing.assert_array_equal(got, fused[3:6])


def test_several_tensors_are_concatenated_on_the_given_axis(tmp_path: Path) -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = 100 + np.arange(16, dtype=np.float32).reshape(4, 4)
    got = _run(tmp_path, "{slot: weight, from: [a, b], concat_axis: 0}", {"a": a, "b": b}, out_count=6)
    np.testing.assert_array_equal(got, np.concatenate([a, b], axis=0))


def test_slice_transform_shape_apply_and_source_coordinates_agree_with_numpy() -> None:
    t = parse_transform({"slice": {"axis": 1, "start": -3, "stop": None}})
    assert isinstance(t, Transform)
    x = np.arange(30).reshape(5, 6)
    assert t.out_shape(x.shape) == (5, 3)
    np.testing.assert_array_equal(t.apply(x), x[:, -3:])
    assert t.source_coords([2, 1], x.shape) == [2, 4]
