"""The rule language for whole-model conversions (rule-language issue, items 7-8), the written weights
and files: the storage policy and move_weight, and side files (templates that see variables,
interfaces and weight offsets; copies).

Oracles: hand-written expectations and the bytes of the written files.
The shared models and helpers are in ``tests/rule_language_harness.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.cli import main
from graphsurgeon.formats.model_bin import walk_bin
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.ir.weights import TAG_FP16
from tests.rule_language_harness import err_line, gemm_model, write

# ---- 7. storage policy and move_weight --------------------------------------------------------------------


def test_storage_policy_stores_selected_slots_and_keeps_pinned_ones(tmp_path: Path) -> None:
    gemm_model(tmp_path)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: g.param, bin: g.bin}\ngraphs:\n  g:\n    input: m\n"
        "    storage: {default: fp16}\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    graph = read_param_text(tmp_path / "o" / "g.param")
    (rec,) = walk_bin(graph, tmp_path / "o" / "g.bin")
    assert rec.tag == TAG_FP16
    raw = (tmp_path / "o" / "g.bin").read_bytes()[4:]
    np.testing.assert_array_equal(np.frombuffer(raw, "<f2"), np.arange(12, dtype=np.float16) / 8)
    pinned = rules.read_text() + (
        "    rules:\n      - name: keep\n        match: {type: Gemm}\n        expect: {count: 1}\n"
        "        do: [{weight: {slot: B, storage: fp32}}]\n"
    )
    rules.write_text(pinned)
    assert main(["apply", str(rules), "--out", str(tmp_path / "o2")]) == 0
    (rec,) = walk_bin(read_param_text(tmp_path / "o2" / "g.param"), tmp_path / "o2" / "g.bin")
    assert rec.tag == 0


def test_storage_policy_overflow_names_the_weight(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gemm_model(tmp_path, np.full((4, 3), 1e5, np.float32))
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: g.param, bin: g.bin}\ngraphs:\n  g:\n    input: m\n"
        "    storage: {default: fp32, rules: [{match: {type: Gemm}, slots: [B], storage: fp16}]}\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 2
    assert "layer g, weight B, offset 0: 12 value(s) overflow fp16" in err_line(capsys)


def test_move_weight_converts_exactly_or_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "7767517\n3 3\nInput in 0 1 x 0=3 1=2\nMemoryData c 0 1 w 0=4 1=3\nMatMul mm 2 1 x w y 0=0\n"
    write(tmp_path, "m.param", text)
    w = (np.arange(12, dtype=np.float32) - 5) / 4
    (tmp_path / "m.bin").write_bytes(w.astype("<f4").tobytes())  # MemoryData data is raw fp32 (type 1)
    shipped = Path(__file__).resolve().parents[1] / "rules" / "matmul-weight-slots.yaml"
    argv = ["apply", str(shipped), str(tmp_path / "m.param"), "--bin", str(tmp_path / "m.bin")]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0  # raw fp32 -> tagged fp32: exact, allowed
    (rec,) = walk_bin(read_param_text(tmp_path / "o" / "m.param"), tmp_path / "o" / "m.bin")
    assert rec.tag == 0 and (tmp_path / "o" / "m.bin").read_bytes()[4:] == w.astype("<f4").tobytes()
    lossy = write(
        tmp_path, "fp16.yaml", shipped.read_text().replace('to: "%mm.B"}', 'to: "%mm.B", storage: fp16}')
    )
    assert main(["apply", str(lossy), *argv[2:], "--out", str(tmp_path / "o2")]) == 0
    (rec,) = walk_bin(read_param_text(tmp_path / "o2" / "m.param"), tmp_path / "o2" / "m.bin")
    assert rec.tag == TAG_FP16  # converted as declared


# ---- 8. side files ----------------------------------------------------------------------------------------


def test_side_files_see_variables_interfaces_and_weight_offsets(tmp_path: Path) -> None:
    gemm_model(tmp_path)
    write(
        tmp_path,
        "t.json.j2",
        '{"name": {{ vars.label | json }}, "in": {{ graphs.g.inputs | json }},'
        ' "w": {{ graphs.g.weights.g.B | json }}, "extra": {{ data.k | json }}}\n',
    )
    write(tmp_path, "notes.txt", "copied as is\n")
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\nvars: {label: demo}\ninputs:\n  m: {param: g.param, bin: g.bin}\n"
        "graphs:\n  g:\n    input: m\n    interface: {inputs: [x], outputs: [y]}\n"
        "side_files:\n  - {template: t.json.j2, output: meta/model.json, data: {k: [1, 2]}}\n"
        "  - {copy: notes.txt, output: notes.txt}\n  - {copy: nope.txt, output: skip.txt, when: false}\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    doc = json.loads((tmp_path / "o" / "meta" / "model.json").read_text())
    assert doc["name"] == "demo" and doc["in"] == ["x"] and doc["extra"] == [1, 2]
    w = doc["w"]
    assert (w["offset"], w["data_offset"], w["tag"], w["storage"], w["shape"]) == (0, 4, 0, "fp32", [4, 3])
    raw = (tmp_path / "o" / "g.bin").read_bytes()
    got = np.frombuffer(raw, "<f4", count=12, offset=w["data_offset"]).reshape(w["shape"])
    np.testing.assert_array_equal(got, np.arange(12, dtype=np.float32).reshape(4, 3) / 8)
    assert (tmp_path / "o" / "notes.txt").read_text() == "copied as is\n"
    assert not (tmp_path / "o" / "skip.txt").exists()


def test_a_failing_side_file_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gemm_model(tmp_path)
    write(tmp_path, "t.j2", "{{ vars.nope }}\n")
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: g.param, bin: g.bin}\ngraphs:\n  g: {input: m}\n"
        "side_files:\n  - {template: t.j2, output: x.txt}\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 2
    assert "side file x.txt: template" in err_line(capsys)
    assert not any(p.is_file() and not p.name.startswith(".") for p in (tmp_path / "o").rglob("*"))
