"""The ``weight`` action of ``gsurg apply`` (graphsurgeon.rewrite.weight_ops), its errors: one line
naming the layer and weight, exit 2 and nothing written, for wrong counts, missing captures, unknown
tensors, slots and checkpoints, transforms that do not fit, no source at all and fp16 overflow.

Checkpoints, .param and .bin files are written by hand (the shared fc model, checkpoint and rule-file
writer are in ``tests/weight_ops_harness.py``), and every expected .bin byte is computed with numpy from
the format notes, never by calling gsurg.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.safetensors_files import write_safetensors
from tests.weight_ops_harness import apply, err_line, f32, fc_checkpoint, fc_model, rules

ERROR_CASES = [
    pytest.param(
        "{slot: weight, from: model.norm.weight}",
        "layer fc0, weight weight: model.norm.weight [4], 4 elements, but the params load 12 elements [12]",
        id="wrong-count",
    ),
    pytest.param(
        "{slot: weight, from: 'model.layers.{i}.weight', transforms: [{repeat_interleave: {axis: 0, n: 2}}]}",
        "layer fc0, weight weight: model.layers.0.weight [4, 3] gives [8, 3] after its transforms, "
        "24 elements, but the params load 12 elements [12]",
        id="wrong-count-after-transforms",
    ),
    pytest.param(
        "{slot: weight, from: 'model.layers.{j}.weight'}",
        "layer fc0, weight weight: tensor template 'model.layers.{j}.weight': expression 'j': unknown name "
        "'j' (the match has: i, match, name)",
        id="missing-capture",
    ),
    pytest.param(
        "{slot: weight, from: 'model.layer.{i}.weight'}",
        "has no tensor 'model.layer.0.weight' (from template 'model.layer.{i}.weight'); "
        "closest: 'model.layers.0.weight'",
        id="unknown-tensor",
    ),
    pytest.param(
        "{slot: bias, from: 'model.layers.{i}.bias', storage: fp16}",
        "layer fc0, weight bias: the slot is loaded raw (type 1), which is fp32 only; storage fp16 needs a "
        "tagged slot",
        id="raw-slot-fp16",
    ),
    pytest.param(
        "{slot: weight_scales, from: 'model.layers.{i}.bias'}",
        "layer fc0, weight weight_scales: its params do not load it (slots loaded: weight, bias)",
        id="slot-not-loaded",
    ),
    pytest.param(
        "{slot: kernel, from: 'model.layers.{i}.bias'}",
        "layer fc0, weight kernel: InnerProduct has no such slot (slots loaded: weight, bias)",
        id="no-such-slot",
    ),
    pytest.param(
        "{slot: weight, from: 'model.layers.{i}.weight', transforms: [{reshape: [5, -1]}]}",
        "layer fc0, weight weight: transform 1 (reshape([5, -1])) on [4, 3]: reshape([5, -1]) cannot hold "
        "the 12 elements of [4, 3]",
        id="transform-does-not-fit",
    ),
    pytest.param(
        "{slot: weight, from: 'model.layers.{i}.weight', checkpoint: nope}",
        "layer fc0, weight weight: checkpoint 'nope' is not declared in the rule file's checkpoints "
        "(declared: hf)",
        id="undeclared-checkpoint",
    ),
]


@pytest.mark.parametrize(("op", "message"), ERROR_CASES)
def test_errors_are_one_line_exit_2_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], op: str, message: str
) -> None:
    param, binf = fc_model(tmp_path)
    ckpt = fc_checkpoint(tmp_path)
    body = rf"""
- name: bad
  match: {{type: InnerProduct, name: 'fc(?P<i>0)'}}
  expect: {{count: 1}}
  do:
    - weight: {op}
"""
    out = tmp_path / "out"
    assert apply(rules(tmp_path, body, {"hf": ckpt}), param, binf, out) == 2
    line = err_line(capsys)
    assert line.startswith("gsurg: error: layer fc0, weight "), line
    assert message in line, line
    assert not out.exists() or not any(out.iterdir()), "nothing is written"


def test_an_unknown_transform_is_refused_when_the_rule_file_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    param, binf = fc_model(tmp_path)
    ckpt = fc_checkpoint(tmp_path)
    body = """
- name: bad
  match: {type: InnerProduct}
  expect: {count: 1}
  do:
    - weight: {slot: weight, from: model.layers.0.weight, transforms: [transpose, {flip: 0}]}
"""
    assert apply(rules(tmp_path, body, {"hf": ckpt}), param, binf, tmp_path / "out") == 2
    line = err_line(capsys)
    assert ".yaml:12: " in line, line
    assert "do.0.weight.transforms.1: rule bad: a transform is one of transpose" in line, line


def test_errors_without_a_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    param, _ = fc_model(tmp_path)
    body = """
- name: bad
  match: {type: InnerProduct, name: fc0}
  expect: {count: 1}
  do:
    - weight: {slot: weight, transforms: [transpose]}
"""
    assert apply(rules(tmp_path, body), param, None, tmp_path / "out") == 2
    assert err_line(capsys) == (
        "gsurg: error: layer fc0, weight weight: no current data to transform (name a checkpoint tensor "
        "with `from`, or give the model's .bin with --bin)"
    )
    with_from = body.replace("transforms: [transpose]", "from: x")
    assert apply(rules(tmp_path, with_from), param, None, tmp_path / "out") == 2
    assert err_line(capsys) == (
        "gsurg: error: layer fc0, weight weight: `from` needs a checkpoint, and the rule file declares none"
    )


def test_current_data_of_the_wrong_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    param, binf = fc_model(tmp_path)
    body = """
- name: bad
  match: {type: InnerProduct, name: fc1}
  expect: {count: 1}
  do:
    - weight: {slot: weight, transforms: [{reshape: [2, 3]}, {repeat_interleave: {axis: 0, n: 2}}]}
"""
    assert apply(rules(tmp_path, body), param, binf, tmp_path / "out") == 2
    assert err_line(capsys) == (
        "gsurg: error: layer fc1, weight weight: current fp32 data [6] gives [4, 3] after its transforms, "
        "12 elements, but the params load 6 elements [6]"
    )


def test_fp16_overflow_is_reported_at_write_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The one value-dependent check: it can only run when the weight is encoded."""
    param, binf = fc_model(tmp_path)
    ckpt = write_safetensors(tmp_path / "big.safetensors", {"w": ("F32", (3, 4), f32(np.full((3, 4), 1e6)))})
    body = """
- name: big
  match: {type: InnerProduct, name: fc0}
  expect: {count: 1}
  do:
    - weight: {slot: weight, from: w, storage: fp16}
"""
    out = tmp_path / "out"
    assert apply(rules(tmp_path, body, {"c": ckpt}), param, binf, out) == 2
    line = err_line(capsys)
    assert "layer fc0, weight weight, offset 0: 12 value(s) overflow fp16" in line, line
    assert not any(out.iterdir())
