"""The engine's seams: one registry of action kinds drives the schema, the loader and dispatch; --explain
runs the rules before the explained one exactly as apply does (hardening issue, items 9 and 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.rewrite.actions import ACTION_KEYS, ACTION_KINDS, ActionModel
from graphsurgeon.rewrite.loader import load_rule_file
from graphsurgeon.rewrite.rulefile import json_schema
from graphsurgeon.rewrite.yaml_source import RuleFileError

RULES_HEAD = "version: 1\nname: t\ngraphs:\n  main:\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_action_kind_is_one_class_with_its_key_as_a_field_and_its_own_handler() -> None:
    assert len(ACTION_KINDS) == len(set(ACTION_KEYS)) == 14
    for kind in ACTION_KINDS:
        assert kind.key in kind.model_fields, (
            f"{kind.__name__}: its key {kind.key!r} is not one of its fields"
        )
        assert kind.run is not ActionModel.run, f"{kind.__name__} does not implement run"


def test_the_schema_and_the_loader_are_derived_from_the_registry(tmp_path: Path) -> None:
    schema = json.loads(json_schema())
    do_items = json.dumps(schema["$defs"]["Rule"]["properties"]["do"])
    for kind in ACTION_KINDS:
        assert f'"#/$defs/{kind.__name__}"' in do_items, kind.__name__
    bad = write(
        tmp_path,
        "r.yaml",
        RULES_HEAD + "    rules:\n      - name: x\n        match: {type: ReLU}\n        expect: {count: 1}\n"
        "        do: [{frobnicate: 1}]\n",
    )
    with pytest.raises(RuleFileError) as err:
        load_rule_file(str(bad))
    assert f"an action is one of {', '.join(ACTION_KEYS)}" in str(err.value)


def test_each_kind_loads_from_its_key_and_dispatches_to_its_own_run(tmp_path: Path) -> None:
    rules = write(
        tmp_path,
        "r.yaml",
        RULES_HEAD + "    rules:\n      - name: x\n        match: {type: ReLU}\n        expect: {count: 1}\n"
        "        do: [{set: {slope: 0.5}}, {rename: 'r_{name}'}, {unset: [slope]}]\n",
    )
    rf = load_rule_file(str(rules))
    rule = rf.graphs["main"].rules[0]
    assert [type(a).key for a in rule.do] == ["set", "rename", "unset"]  # type: ignore[union-attr]


STRICT_CHAIN = (
    "7767517\n4 4\nInput in 0 1 x 0=8 1=4\nReLU r 1 1 x a\nSoftmax sm 1 1 a b 0=0\nTanH t 1 1 b out\n"
)
STRICT_RULES = (
    RULES_HEAD + "    rules:\n"
    "      - name: softmax-rows\n        match: {type: Softmax}\n        expect: {count: 1}\n"
    "        do: [{set: {axis: 1}}]\n"
    "      - name: later\n        match: {type: TanH}\n        expect: {count: 1}\n"
    "        do: [{rename: t2}]\n"
)


def test_explain_with_strict_stops_where_apply_strict_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = write(tmp_path, "m.param", STRICT_CHAIN)
    rules = write(tmp_path, "r.yaml", STRICT_RULES)
    assert main(["apply", str(rules), str(model), "--explain", "later"]) == 0
    assert "MATCH TanH t" in capsys.readouterr().out
    assert main(["apply", str(rules), str(model), "--explain", "later", "--strict"]) == 1
    err = capsys.readouterr().err
    assert "rule softmax-rows broke an invariant: [softmax-fixbug] layer sm:" in err


def test_explain_checks_the_interface_as_apply_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = write(tmp_path, "m.param", STRICT_CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        RULES_HEAD + "    interface: [x, out]\n    rules:\n"
        "      - name: cut\n        pass: extract\n        inputs: [x]\n        outputs: [b]\n"
        "      - name: later\n        match: {type: ReLU}\n        expect: {count: 1}\n"
        "        do: [{rename: r2}]\n",
    )
    assert main(["apply", str(rules), str(model), "--out", str(tmp_path / "o")]) == 1
    applied = capsys.readouterr().err
    assert "removed interface blob(s) ['out']" in applied
    assert main(["apply", str(rules), str(model), "--explain", "later"]) == 1
    assert capsys.readouterr().err == applied


def test_a_pattern_is_parsed_once_when_the_rule_file_is_validated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation parses a pattern; the driver and --explain use that parse (issue 15, item 3)."""
    from graphsurgeon.formats.param_text import parse_param_text
    from graphsurgeon.rewrite import pattern as pattern_module
    from graphsurgeon.rewrite.driver import apply_graph, candidates

    calls: list[str] = []
    real = pattern_module.compile_pattern

    def counting(text: str, *args: object, **kwargs: object) -> pattern_module.Pattern:
        calls.append(text)
        return real(text, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pattern_module, "compile_pattern", counting)
    rules = write(
        tmp_path,
        "r.yaml",
        RULES_HEAD + "    rules:\n      - name: relu\n        match: {pattern: 'ReLU %r 1 1 * *'}\n"
        "        expect: {count: 2}\n",
    )
    rf = load_rule_file(str(rules))
    assert len(calls) == 1
    graph = parse_param_text("7767517\n3 3\nInput in 0 1 x\nReLU a 1 1 x y\nReLU b 1 1 y z\n")
    rule = rf.graphs["main"].rules[0]
    assert [c.layer_name for c in candidates(graph, rule) if c.matched] == ["a", "b"]  # type: ignore[arg-type]
    assert [o.matches for o in apply_graph(graph, rf.graphs["main"]).outcomes] == [2]
    assert len(calls) == 1
