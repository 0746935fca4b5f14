"""Rules reuse rules (issue 15, item 7): a top-level ``rules:`` section defines a rule once, a graph's rules
run it with ``use: NAME`` and that use's own ``expect`` (and values for the rule's own ``vars``), in the
same file or in files that include it; the errors name the file and line; and the shipped conversions
share ``linear-on-rows`` and ``native-gqa`` through ``rules/common-rules.yaml``.

Oracles: hand-written expectations (models written here, the lines of the YAML written here), and for the
shipped files the rule as each wrote it inline before it moved to common-rules.yaml (quoted below).
The shared models and helpers are in ``tests/rule_language_harness.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from graphsurgeon.cli import main
from graphsurgeon.rewrite.loader import load_rule_file
from graphsurgeon.rewrite.rulefile import Rule, json_schema
from graphsurgeon.rewrite.yaml_source import RuleFileError
from tests.conftest import REPO
from tests.rule_language_harness import CHAIN, err_line, write

# A library of one rule: set a ReLU's slope; which ReLUs and the slope are the rule's own variables.
LIB = """\
version: 1
name: lib
rules:
  leak:
    vars: {slope: 0.25, which: "r.*"}
    description: a leaky ReLU
    match: {type: ReLU, name: "${which}"}
    do: [{set: {slope: "${slope}"}}]
"""
#: Two graphs over the same model: one uses leak twice (r0 only, then a name nothing has), one once.
GRAPHS = """\
inputs:
  m: {param: m.param}
graphs:
  a:
    input: m
    output: {param: a.param}
    rules:
      - use: leak
        vars: {which: r0, slope: 0.5}
        expect: {count: 1}
      - use: leak
        vars: {which: nothing}
        expect: {count: 0}
  b:
    input: m
    output: {param: b.param}
    rules:
      - use: leak
        expect: {count: 2}
"""


#: graph b's use (lines 26-27 of one.yaml: LIB's 8 lines, then GRAPHS), which the error tests change.
B_USE = "      - use: leak\n        expect: {count: 2}"


def _relu_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("ReLU")]


def _outcomes(path: Path) -> list[tuple[str, int]]:
    return [(r["rule"], r["matches"]) for r in json.loads(path.read_text())["rules"]]


def _one_file(tmp_path: Path, graphs: str = GRAPHS) -> Path:
    write(tmp_path, "m.param", CHAIN)
    body = LIB.replace("name: lib\n", "name: one\n")
    return write(tmp_path, "one.yaml", body + graphs)


def test_a_rule_defined_once_runs_in_two_graphs_each_use_with_its_own_vars(tmp_path: Path) -> None:
    rules = _one_file(tmp_path)
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    assert _relu_lines(tmp_path / "o" / "a.param") == ["ReLU r0 1 1 x a 0=0.5", "ReLU r1 1 1 a y"]
    assert _relu_lines(tmp_path / "o" / "b.param") == ["ReLU r0 1 1 x a 0=0.25", "ReLU r1 1 1 a y 0=0.25"]
    rf = load_rule_file(str(rules))
    assert [r.name for r in rf.graphs["a"].rules] == ["leak", "leak"]
    assert list(rf.rules) == ["leak"] and rf.rules["leak"].vars == {"slope": 0.25, "which": "r.*"}


def test_each_use_is_reported_and_checked_with_its_own_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = _one_file(tmp_path)
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    summary = capsys.readouterr().out
    assert "rule leak: 1 match(es)" in summary and "rule leak: 0 match(es)" in summary
    assert "rule leak: 2 match(es)" in summary
    assert _outcomes(tmp_path / "o" / "a.gsurg.json") == [("leak", 1), ("leak", 0)]
    assert _outcomes(tmp_path / "o" / "b.gsurg.json") == [("leak", 2)]
    # the same rule, expected once where it matches nothing: that use alone fails
    failing = _one_file(
        tmp_path,
        GRAPHS.replace(
            "{which: nothing}\n        expect: {count: 0}", "{which: nothing}\n        expect: {count: 1}"
        ),
    )
    assert main(["apply", str(failing), "--out", str(tmp_path / "o2")]) == 1
    assert "rule leak: matched 0 layer(s), expected exactly 1" in err_line(capsys)


def test_explain_names_a_used_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = _one_file(tmp_path)
    assert main(["apply", str(rules), "--explain", "leak"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "rule leak on graph a (exactly 1 expected):"
    assert [line.split(":")[0].split()[0] for line in out[1:]] == ["no", "MATCH", "no"]


def test_an_included_files_rules_are_used_and_a_file_does_not_see_its_includers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "m.param", CHAIN)
    write(tmp_path / "lib", "leak.yaml", LIB)
    rules = write(tmp_path, "top.yaml", "version: 1\nname: top\ninclude: [lib/leak.yaml]\n" + GRAPHS)
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 0
    assert _relu_lines(tmp_path / "o" / "b.param") == ["ReLU r0 1 1 x a 0=0.25", "ReLU r1 1 1 a y 0=0.25"]
    # two levels: mid includes the library, top includes mid and uses the library's rule
    write(tmp_path, "mid.yaml", "version: 1\nname: mid\ninclude: [lib/leak.yaml]\ngraphs: {}\n")
    top = write(tmp_path, "top2.yaml", "version: 1\nname: top2\ninclude: [mid.yaml]\n" + GRAPHS)
    assert [r.name for r in load_rule_file(str(top)).graphs["b"].rules] == ["leak"]
    # the library's graph uses a rule only its includer defines: refused where the use is
    write(tmp_path, "base.yaml", "version: 1\nname: base\n" + GRAPHS)
    write(tmp_path, "user.yaml", LIB.replace("name: lib\n", "name: user\ninclude: [base.yaml]\n"))
    assert main(["apply", str(tmp_path / "user.yaml"), "--out", str(tmp_path / "o3")]) == 2
    line = err_line(capsys)
    assert f"{tmp_path / 'base.yaml'}:10: use: no rule named 'leak'" in line
    assert f"leak is defined at {tmp_path / 'user.yaml'}:5, which this file does not include" in line


def test_an_unknown_rule_is_named_at_its_line_with_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = _one_file(tmp_path, GRAPHS.replace(B_USE, B_USE.replace("leak", "leek")))
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 2
    line = err_line(capsys)
    assert f"{rules}:26: use: no rule named 'leek'" in line and "(rules: leak)" in line


def test_a_rule_defined_twice_in_the_include_tree_names_both_places(tmp_path: Path) -> None:
    write(tmp_path, "m.param", CHAIN)
    write(tmp_path, "lib.yaml", LIB)
    again = "rules:\n  leak: {match: {type: ReLU}}\n"
    top = write(tmp_path, "top.yaml", "version: 1\nname: top\ninclude: [lib.yaml]\n" + again + GRAPHS)
    with pytest.raises(RuleFileError) as err:
        load_rule_file(str(top))
    assert str(err.value) == f"{top}:5: rule leak is defined twice: here and at {tmp_path / 'lib.yaml'}:4"
    # one file included along two paths defines its rules once
    write(tmp_path, "mid.yaml", "version: 1\nname: mid\ninclude: [lib.yaml]\ngraphs: {}\n")
    both = write(tmp_path, "both.yaml", "version: 1\nname: both\ninclude: [lib.yaml, mid.yaml]\n" + GRAPHS)
    assert list(load_rule_file(str(both)).rules) == ["leak"]


def test_a_use_that_also_gives_a_pattern_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = B_USE.replace("leak\n", "leak\n        match: {pattern: 'ReLU %r 1 1 %a %b'}\n")
    rules = _one_file(tmp_path, GRAPHS.replace(B_USE, pattern))
    assert main(["apply", str(rules), "--out", str(tmp_path / "o")]) == 2
    assert err_line(capsys) == (
        f"gsurg: error: {rules}:27: use: leak: a use runs the rule as rules: defines it and gives only use, "
        "expect, vars, not match"
    )


@pytest.mark.parametrize(
    ("graphs", "at", "message"),
    [
        (GRAPHS.replace(B_USE, "      - use: leak"), 26, "give expect"),
        (GRAPHS.replace("{which: r0, slope: 0.5}", "{whích: r0}"), 17, "the rule has no variable 'whích'"),
        (
            GRAPHS.replace("{which: r0, slope: 0.5}", "{which: [r0]}"),
            17,
            "variable which: a value is a scalar",
        ),
    ],
    ids=["no-expect", "unknown-var", "list-value"],
)
def test_a_use_without_expect_or_with_a_variable_the_rule_lacks_is_refused(
    tmp_path: Path, graphs: str, at: int, message: str
) -> None:
    rules = _one_file(tmp_path, graphs)
    with pytest.raises(RuleFileError, match=rf"^{rules}:{at}: use: leak: {message}"):
        load_rule_file(str(rules))


@pytest.mark.parametrize(
    ("change", "at", "message"),
    [
        (
            ("    do: [", "    expect: {count: 1}\n    do: ["),
            8,
            "rule leak: no expect here: each use gives its own",
        ),
        (("    do: [", "    doo: ["), 8, "rules.leak.doo: Extra inputs are not permitted"),
        (("vars: {slope", "vars: {config: 1, slope"), 5, r"rule leak: config names a fact \(\$\{config"),
        (
            ("vars: {slope", "vars: {m: 1, slope"),
            5,
            "rule leak: its variable m is also a variable of the rule",
        ),
    ],
    ids=["expect", "typo", "fact-name", "file-var-name"],
)
def test_a_broken_definition_is_named_at_its_own_line_used_or_not(
    tmp_path: Path, change: tuple[str, str], at: int, message: str
) -> None:
    write(tmp_path, "lib.yaml", LIB.replace(*change))
    top = write(
        tmp_path, "top.yaml", "version: 1\nname: top\ninclude: [lib.yaml]\nvars: {m: 0}\ngraphs: {}\n"
    )
    with pytest.raises(RuleFileError, match=rf"^{tmp_path / 'lib.yaml'}:{at}: {message}"):
        load_rule_file(str(top))


def test_the_schema_has_the_rules_section_and_the_use_form() -> None:
    schema = json.loads(json_schema())
    assert schema["properties"]["rules"]["patternProperties"] == {
        "^[A-Za-z0-9_.-]+$": {"$ref": "#/$defs/RuleDefinition"}
    }
    items = schema["$defs"]["GraphSpec"]["properties"]["rules"]["items"]["oneOf"]
    assert {"$ref": "#/$defs/RuleUse"} in items
    assert schema["$defs"]["RuleUse"]["required"] == ["use", "expect"]
    assert "expect" not in schema["$defs"]["RuleDefinition"]["properties"]


# ---- the shipped conversions -------------------------------------------------------------------------------

#: linear-on-rows as rules/llm-kv-cache.yaml wrote it inline (lm_head graph) before common-rules.yaml.
LM_HEAD_BEFORE = """\
name: linear-on-rows
match:
  pattern: |
    Split %split 1 2 %x %a %b
    Reshape %flatten 1 1 %a %rows 6="0w,-1"
    Gemm %gemm 1 1 %rows %y 2=%ta 3=%tb 4=%ca 5=%cb 6=%cc 7=%m 8=%n 9=%k 10=%bc
    Reshape %unflatten 2 1 %y %b %out 6="0w,1h,1c"
expect: {count: 1}
do:
  - replace: |
      Gemm lm_head 1 1 %x %out 2=%ta 3=%tb 4=%ca 5=%cb 6=%cc 7=%m 8=%n 9=%k 10=%bc
  - move_weight: {from: "%gemm", to: lm_head}
"""
#: and as rules/penguin_vl.yaml wrote it for vision_embed_patch (vision_projector: the same, count 2).
VISION_BEFORE = LM_HEAD_BEFORE.replace("Gemm lm_head", "Gemm linear{match}").replace(
    "to: lm_head", 'to: "linear{match}"'
)


def _without_description(rule: object) -> dict[str, object]:
    assert isinstance(rule, Rule)
    return rule.model_dump(exclude={"description"})


def test_the_shipped_files_share_one_linear_on_rows_that_is_the_rule_each_had_inline() -> None:
    llm = load_rule_file(str(REPO / "rules" / "llm-kv-cache.yaml"))
    penguin = load_rule_file(str(REPO / "rules" / "penguin_vl.yaml"))
    assert llm.rules == penguin.rules and set(llm.rules) == {"linear-on-rows", "native-gqa"}
    lm_head = Rule.model_validate(yaml.safe_load(LM_HEAD_BEFORE))
    vision = Rule.model_validate(yaml.safe_load(VISION_BEFORE))
    projector = vision.model_copy(update={"expect": vision.expect.model_copy(update={"count": 2})})
    for rf in (llm, penguin):
        assert _without_description(rf.graphs["lm_head"].rules[0]) == _without_description(lm_head)
    assert _without_description(penguin.graphs["vision_embed_patch"].rules[0]) == _without_description(vision)
    assert _without_description(penguin.graphs["vision_projector"].rules[0]) == _without_description(
        projector
    )
    # native-gqa, a check both had inline: Tile, none expected
    for graph in (llm.graphs["decoder"], penguin.graphs["decoder"], penguin.graphs["vision_encoder"]):
        check = next(r for r in graph.rules if r.name == "native-gqa")
        assert isinstance(check, Rule) and check.expect.count == 0 and check.do == []
        assert check.match == penguin.rules["native-gqa"].match


def test_a_file_of_named_rules_only_is_for_include(tmp_path: Path) -> None:
    lib = write(tmp_path, "lib.yaml", LIB)
    with pytest.raises(RuleFileError, match=rf"^{lib}:1: no graphs to run: a file of named rules only"):
        load_rule_file(str(lib))


def test_uses_cannot_multiply_a_file_past_the_value_bound(tmp_path: Path) -> None:
    """A 5,000-action rule used 20 times would be 300,000 values: the bound aliases have (yaml_source)."""
    actions = "".join("      - {set: {slope: 1}}\n" for _ in range(5000))
    uses = "".join("      - {use: big, expect: {min: 0}}\n" for _ in range(20))
    text = f"version: 1\nname: t\nrules:\n  big:\n    match: {{type: ReLU}}\n    do:\n{actions}"
    rules = write(
        tmp_path,
        "t.yaml",
        f"{text}inputs:\n  m: {{param: m.param}}\ngraphs:\n  g:\n    input: m\n    rules:\n{uses}",
    )
    write(tmp_path, "m.param", CHAIN)
    # 15,004 values a use, so the 14th passes 200,000; uses start on line 5,013 (6 + 5,000 + 6 lines above)
    with pytest.raises(
        RuleFileError, match=rf"^{rules}:{5012 + 14}: use: big: the uses of named rules expand"
    ):
        load_rule_file(str(rules))
