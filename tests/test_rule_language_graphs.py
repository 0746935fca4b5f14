"""The rule language for whole-model conversions (rule-language issue, items 2-6), the graphs: paths,
several outputs, per-match names and arithmetic, facts, signature edits and interfaces; and a
replacement that reads a later capture.

Oracles: the ncnn wheel (the written models load and compute) and hand-written expectations.
The shared models and helpers are in ``tests/rule_language_harness.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.cli import main
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.rewrite.loader import load_rule_file
from graphsurgeon.rewrite.yaml_source import RuleFileError
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run
from tests.rule_language_harness import CHAIN, err_line, write

# ---- 2. paths ---------------------------------------------------------------------------------------------


def test_paths_in_a_rule_file_are_relative_to_it_and_set_values_to_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "rules" / "models", "m.param", CHAIN)
    rules = write(
        tmp_path / "rules",
        "r.yaml",
        "version: 1\nname: t\nvars:\n  model: {path: models/m.param}\n"
        "inputs:\n  m: {param: '${model}'}\n  n: {param: ./sub/../models/m.param}\n"
        "graphs:\n  g: {input: m}\n  h: {input: n, output: {param: h.param}}\n",
    )
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["apply", str(rules), "--out", "o"]) == 0
    assert (elsewhere / "o" / "m.param").read_text() == (elsewhere / "o" / "h.param").read_text()
    write(elsewhere, "local/m2.param", CHAIN.replace("r1", "rr"))
    assert main(["apply", str(rules), "--out", "o2", "--set", "model=local/m2.param"]) == 0
    assert " rr " in (elsewhere / "o2" / "m2.param").read_text()


# ---- 3. several outputs -----------------------------------------------------------------------------------


def test_one_model_feeds_two_graphs_and_a_graph_rewrites_another_result(tmp_path: Path) -> None:
    write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: m.param}\ngraphs:\n"
        "  a:\n    input: m\n    output: {param: a.param}\n    rules:\n"
        "      - {name: leak, match: {type: ReLU, name: r0}, expect: {count: 1}, do: [{set: {slope: 0.5}}]}\n"
        "  b:\n    input: m\n    output: {param: b.param}\n    rules: []\n"
        "  c:\n    input: a\n    output: {param: c.param}\n    rules:\n"
        "      - {name: tanh, match: {type: ReLU, name: r1}, expect: {count: 1}, do: [{rename: t1}]}\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    a, b, c = ((tmp_path / "o" / f"{n}.param").read_text() for n in "abc")
    assert "0=0.5" in a and " r1 " in a
    assert "0=5" not in b
    assert "0=0.5" in c and " t1 " in c and " r1 " not in c  # c started from a's result


def test_two_outputs_with_the_same_path_are_refused_at_load(tmp_path: Path) -> None:
    write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: m.param}\ngraphs:\n"
        "  a: {input: m, output: {param: x.param}}\n  b: {input: m, output: {param: x.param}}\n",
    )
    with pytest.raises(RuleFileError, match=r"graphs a and b both write x\.param"):
        load_rule_file(str(rules))


# ---- 4. per-match names, arithmetic, facts ----------------------------------------------------------------


def test_variables_compute_from_others_and_from_config_facts(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"num_attention_heads": 16, "text": {"kv": 8}}))
    write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\nvars:\n  ckpt: {path: ckpt}\n  heads: '${config.num_attention_heads}'\n"
        "  kv: '${config.text.kv}'\n  group: '${heads // kv}'\n  twice: '${group * 2} layers'\n"
        "source: {export: x.py:build, checkpoint: '${ckpt}'}\n"
        "inputs:\n  m: {param: m.param}\ngraphs:\n  g: {input: m}\n",
    )
    rf = load_rule_file(str(rules))
    assert (rf.vars["heads"], rf.vars["kv"], rf.vars["group"], rf.vars["twice"]) == (16, 8, 2, "4 layers")
    cyclic = write(tmp_path, "c.yaml", rules.read_text().replace("'${heads // kv}'", "'${twice}'"))
    with pytest.raises(RuleFileError, match=r"depends on itself \(group -> twice -> group\)"):
        load_rule_file(str(cyclic))
    typo = write(tmp_path, "t.yaml", rules.read_text().replace("config.text.kv", "config.text.kvv"))
    with pytest.raises(RuleFileError, match=r"t\.yaml:\d+: expression 'config.text.kvv': no field 'kvv'"):
        load_rule_file(str(typo))


def test_expected_counts_come_from_facts_about_the_input_model(tmp_path: Path) -> None:
    write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: m.param}\ngraphs:\n  g:\n    input: m\n    rules:\n"
        "      - name: all-relu\n        match: {type: ReLU}\n"
        "        expect: {count: '${inputs.m.count.ReLU}'}\n        do: [{rename: 'act{match}'}]\n"
        "      - name: none\n        match: {type: Tile}\n        expect: {count: '${inputs.m.count.Tile}'}\n"
        "        do: [{remove: true}]\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    names = [line.split()[1] for line in (tmp_path / "o" / "m.param").read_text().splitlines()[2:]]
    assert names == ["in", "act0", "act1"]


def test_per_match_templates_fill_captures_ordinals_and_variables(tmp_path: Path) -> None:
    write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\nvars: {base: 10}\ninputs:\n  m: {param: m.param}\ngraphs:\n  g:\n    input: m\n"
        "    rules:\n      - name: n\n        match:\n          pattern: 'ReLU %r 1 1 %a %b'\n"
        "        expect: {count: 2}\n        do:\n"
        "          - rename_blob: {'%b': 'h{match + base}_{{x}}'}\n          - rename: '{name}_{match}'\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "m.param").read_text()
    assert "ReLU r0_0 1 1 x h10_{x}" in text and "ReLU r1_1 1 1 h10_{x} h11_{x}" in text


# ---- 5. signature edits -----------------------------------------------------------------------------------


def test_add_bottoms_tops_and_a_multi_top_input_recount_the_header(tmp_path: Path) -> None:
    text = "7767517\n3 4\nInput in 0 1 x 0=4\nSplit s 1 2 x a b\nConcat c 2 1 a b y 0=0\n"
    write(tmp_path, "m.param", text)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: m.param}\ngraphs:\n  g:\n    input: m\n"
        "    interface: {inputs: [x, 'extra*'], outputs: [y, 'copy*']}\n    rules:\n"
        "      - name: more-copies\n        match: {type: Split}\n        expect: {count: 1}\n"
        "        do: [{add_tops: ['copy{match}']}]\n"
        "      - name: widen\n        match: {type: Concat}\n        expect: {count: 1}\n        do:\n"
        "          - add_input: {name: extras, tops: ['extra{match}', 'extra{match + 1}']}\n"
        "          - add_bottoms: ['extra{match}', 'extra{match + 1}']\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    out = tmp_path / "o" / "m.param"
    lines = [" ".join(line.split()) for line in out.read_text().splitlines()]
    assert lines[1] == "4 7"  # recounted: one more layer, three more blobs
    assert lines[3] == "Input extras 0 2 extra0 extra1"  # after the graph's own Input
    assert "Split s 1 3 x a b copy0" in lines and "Concat c 4 1 a b extra0 extra1 y 0=0" in lines
    (tmp_path / "empty.bin").write_bytes(b"")
    net = fp32_net(out, tmp_path / "empty.bin")
    feeds = {
        "x": np.ones(4, np.float32),
        "extra0": np.full(2, 2.0, np.float32),
        "extra1": np.zeros(3, np.float32),
    }
    got = run(net, feeds, ["y", "copy0"])
    np.testing.assert_array_equal(got["y"], [1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 0, 0, 0])
    np.testing.assert_array_equal(got["copy0"], np.ones(4))


# ---- 6. interface -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interface", "problem"),
    [
        ("{inputs: [x], outputs: [out]}", "declared output 'out' names no graph output"),
        ("{inputs: [x], outputs: []}", "undeclared output(s): y"),
        ("{inputs: [x, a], outputs: [y]}", "declared input 'a' names no graph input (a exist but are not"),
    ],
)
def test_the_declared_interface_is_checked_on_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], interface: str, problem: str
) -> None:
    write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        f"version: 1\nname: t\ninputs:\n  m: {{param: m.param}}\ngraphs:\n  g:\n    input: m\n"
        f"    interface: {interface}\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 1
    line = err_line(capsys)
    assert "graph g: the result breaks its interface" in line and problem in line
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_rules_reach_the_interface_by_renames(tmp_path: Path) -> None:
    write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: m.param}\ngraphs:\n  g:\n    input: m\n"
        "    interface: {inputs: [in0], outputs: [out0]}\n    rules:\n"
        "      - name: io\n        match: {type: Input}\n        expect: {count: 1}\n"
        "        do: [{rename_blob: {x: in0, y: out0}}]\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    assert "ReLU r1 1 1 a out0" in " ".join((tmp_path / "o" / "m.param").read_text().split())


def test_a_replacement_that_reads_a_later_capture_keeps_the_graph_in_order(tmp_path: Path) -> None:
    write(
        tmp_path,
        "m.param",
        "7767517\n5 6\nInput in 0 1 x 0=4\nSplit s 1 2 x x1 x2\nReLU a 1 1 x1 p\nTanH b 1 1 x2 q\n"
        "BinaryOp add 2 1 p q y 0=0\n",
    )
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: m.param}\ngraphs:\n  g:\n    input: m\n    rules:\n"
        "      - name: fold\n        match:\n          pattern: |\n"
        "            ReLU %a 1 1 %i %p\n            BinaryOp %add 2 1 %p %q %y 0=0\n"
        "        expect: {count: 1}\n"
        "        do:\n          - replace: 'BinaryOp %add 2 1 %i %q %y 0=2'\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    out = read_param_text(tmp_path / "o" / "m.param")  # it reads back: producers come first
    assert [layer.name for layer in out.layers] == ["in", "s", "b", "add"]


# ---- a graph written only when its `when:` holds ---------------------------------------------------------


def _when_rules(tmp_path: Path, when: str) -> Path:
    write(tmp_path, "m.param", CHAIN)
    write(tmp_path, "nets.j2", "{{ graphs | list | json }}\n")
    return write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\nvars: {small: true}\ninputs:\n  m: {param: m.param}\ngraphs:\n"
        f"  a: {{input: m, output: {{param: a.param}}, when: '{when}'}}\n"
        "  b: {input: m, output: {param: b.param}}\n"
        "side_files:\n  - {template: nets.j2, output: nets.json}\n",
    )


def test_a_graph_whose_when_is_false_is_not_run_written_or_seen_by_side_files(
    tmp_path: Path,
) -> None:
    rules = _when_rules(tmp_path, "${not small}")
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if not p.name.startswith(".")) == [
        "b.gsurg.json",
        "b.param",
        "nets.json",
    ]
    assert json.loads((tmp_path / "o" / "nets.json").read_text()) == ["b"]
    assert main(["apply", str(rules), "--out", str(tmp_path / "o2"), "--set", "small=false"]) == 0
    assert json.loads((tmp_path / "o2" / "nets.json").read_text()) == ["a", "b"]
    assert (tmp_path / "o2" / "a.param").read_text() == (tmp_path / "o2" / "b.param").read_text()


def test_a_graph_may_not_read_a_graph_that_is_left_out(tmp_path: Path) -> None:
    write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: m.param}\ngraphs:\n"
        "  a: {input: m, output: {param: a.param}, when: false}\n  c: {input: a, output: {param: c.param}}\n",
    )
    with pytest.raises(RuleFileError, match=r"graph c: takes graph 'a', whose when: is false"):
        load_rule_file(str(rules))


def test_a_side_file_may_not_name_a_graph_that_is_left_out(tmp_path: Path) -> None:
    write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ninputs:\n  m: {param: m.param, bin: m.bin}\ngraphs:\n"
        "  a: {input: m, output: {param: a.param}, when: false}\n"
        "side_files:\n  - {weight_map: m.safetensors, graphs: [a], output: '{graph}.weights.yaml'}\n",
    )
    with pytest.raises(RuleFileError, match=r"side file \{graph\}\.weights\.yaml: graph a has when: false"):
        load_rule_file(str(rules))


def test_an_export_only_left_out_graphs_read_is_not_made(tmp_path: Path) -> None:
    from graphsurgeon.rewrite.loader import open_rule_file

    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\nvars: {big: false}\nsource: {export: src.py:build}\n"
        "inputs:\n  e: {export: e}\n  f: {export: f}\n  g: {export: g}\n  h: {export: h}\n"
        "graphs:\n  a: {input: e, when: '${big}'}\n  b: {input: f}\n  c: {input: g, when: false}\n"
        "  d: {input: g}\n",
    )
    assert open_rule_file(str(rules), {}).unread_inputs() == {"e"}  # h is read by no graph: kept
    assert open_rule_file(str(rules), {"big": "true"}).unread_inputs() == set()
