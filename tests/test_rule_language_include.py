"""The rule language for whole-model conversions (rule-language issue, item 9), include: inherited vars,
inputs and graphs, the includer winning, extended graphs, cycles and errors naming the included file;
and the JSON schema covering the whole language.

Oracles: hand-written expectations.
The shared models and helpers are in ``tests/rule_language_harness.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.rewrite.loader import load_rule_file
from graphsurgeon.rewrite.yaml_source import RuleFileError
from tests.rule_language_harness import CHAIN, write

# ---- 9. include -------------------------------------------------------------------------------------------


def test_include_inherits_vars_inputs_and_graphs_and_the_includer_wins(tmp_path: Path) -> None:
    write(tmp_path / "shared", "m.param", CHAIN)
    write(
        tmp_path / "shared",
        "base.yaml",
        "version: 1\nname: base\nvars: {slope: 0.25}\ninputs:\n  m: {param: m.param}\ngraphs:\n"
        "  a:\n    input: m\n    output: {param: a.param}\n    rules:\n"
        "      - name: leak\n        match: {type: ReLU, name: r0}\n        expect: {count: 1}\n"
        "        do: [{set: {slope: '${slope}'}}]\n"
        "  b: {input: m, output: {param: b.param}}\n",
    )
    rules = write(
        tmp_path,
        "top.yaml",
        "version: 1\nname: top\ninclude: [shared/base.yaml]\nvars: {slope: 0.5}\n"
        "graphs:\n  b: {input: a, output: {param: b2.param}}\n",
    )
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    assert "0=0.5" in (tmp_path / "o" / "a.param").read_text()
    assert "0=0.5" in (tmp_path / "o" / "b2.param").read_text()  # b replaced: it rewrites a
    assert not (tmp_path / "o" / "b.param").exists()
    assert main(["apply", str(rules), "--out", str(tmp_path / "o2"), "--set", "slope=0.125"]) == 0
    assert "0=0.125" in (tmp_path / "o2" / "a.param").read_text()


def test_include_cycles_and_errors_name_the_included_file(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "version: 1\nname: a\ninclude: [b.yaml]\ngraphs: {}\n")
    write(tmp_path, "b.yaml", "version: 1\nname: b\ninclude: [a.yaml]\ngraphs: {}\n")
    with pytest.raises(RuleFileError, match="include cycle"):
        load_rule_file(str(tmp_path / "a.yaml"))
    write(tmp_path, "bad.yaml", "version: 1\nname: bad\ngraphs:\n  g:\n    input: m\n    rulez: []\n")
    write(tmp_path, "top.yaml", "version: 1\nname: top\ninclude: [bad.yaml]\ngraphs: {}\n")
    with pytest.raises(RuleFileError, match=r"bad\.yaml:6: graphs\.g\.rulez: Extra inputs"):
        load_rule_file(str(tmp_path / "top.yaml"))


def test_the_schema_covers_sources_interfaces_storage_side_files_and_transforms() -> None:
    from graphsurgeon.rewrite.rulefile import json_schema

    schema = json.dumps(json.loads(json_schema()))
    for name in ("Source", "Interface", "StoragePolicy", "SideFile", "GraphOutput", "PathVar"):
        assert f'"#/$defs/{name}"' in schema, name
    for transform in ("repeat_interleave", "reshape", "transpose", "slice"):
        assert f'"{transform}"' in schema, transform


def test_an_including_file_extends_an_included_graph(tmp_path: Path) -> None:
    write(tmp_path, "m.param", CHAIN)
    write(
        tmp_path,
        "base.yaml",
        "version: 1\nname: base\ninputs:\n  m: {param: m.param}\ngraphs:\n"
        "  a:\n    input: m\n    output: {param: a.param}\n    interface: {inputs: [x], outputs: [y]}\n"
        "    rules:\n      - name: first\n        match: {type: ReLU, name: r0}\n        expect: {count: 1}\n"
        "        do: [{rename: p}]\n",
    )
    top = write(
        tmp_path,
        "top.yaml",
        "version: 1\nname: top\ninclude: [base.yaml]\ngraphs:\n  a:\n    extend: true\n    rules:\n"
        "      - {name: second, match: {type: ReLU, name: r1}, expect: {count: 1}, do: [{rename: q}]}\n",
    )
    rf = load_rule_file(str(top))
    graph = rf.graphs["a"]
    assert [r.name for r in graph.rules] == ["first", "second"] and graph.output is not None
    assert main(["apply", str(top), "--out", str(tmp_path / "o")]) == 0
    assert [line.split()[1] for line in (tmp_path / "o" / "a.param").read_text().splitlines()[2:]] == [
        "in",
        "p",
        "q",
    ]
