"""Hostile rule files are one ``gsurg: error`` line naming the file and line (or the option), exit 2,
quickly (issue 14, items 8 and 9): YAML the reader refuses, aliases that expand without bound, recursive
anchors, deep nesting, include graphs (deep chains, every file including every later one, symbolic link
loops, NUL in a path), ``--set`` values YAML cannot read, expressions nested or chained too deeply,
name regexes that backtrack exponentially, and validation errors that name what the place takes.

Oracles: hand-written expectations of the error line; wall-clock bounds far above the fixed code's time
and far below the reported runs (minutes)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.param_any import read_param
from graphsurgeon.rewrite import yaml_source
from graphsurgeon.rewrite.safe_regex import check_name_regex
from graphsurgeon.rewrite.select import Selector, judge
from tests.rule_language_harness import CHAIN, err_line, write

HEAD = "version: 1\nname: t\n"


def _apply(tmp_path: Path, rules: Path | str, *extra: str) -> int:
    model = write(tmp_path, "m.param", CHAIN)
    path = rules if isinstance(rules, Path) else write(tmp_path, "r.yaml", rules)
    return main(["apply", str(path), str(model), "--dry-run", *extra])


LAUGHS = "".join(
    f"{a}: &{a} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
    for p, a in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            HEAD + "graphs: {main: {}}\nx: \x07\n",
            "r.yaml:4: not valid YAML: the control character U+0007 is not allowed",
        ),
        (HEAD + "? [a, b]\n: 1\ngraphs: {main: {}}\n", "r.yaml:3: a mapping key is a plain value"),
        (
            HEAD + "vars: &a {k: *a}\ngraphs: {main: {}}\n",
            "r.yaml:3: an alias refers to a collection that contains it",
        ),
        (HEAD + "vars: {k: " + "[" * 900 + "]" * 900 + "}\n", "r.yaml: not valid YAML: nested too deeply"),
        (
            HEAD + "x:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(150)),
            "nested more than 100 levels",
        ),
        (LAUGHS, "r.yaml:1: the document expands to more than 200000 values"),
        (HEAD + "name2: !!int abc\n", "r.yaml:3: int 'abc' cannot be read"),
        (HEAD + 'name2: "\\U00110000"\n', "r.yaml:3: not valid YAML: chr() arg not in range(0x110000)"),
        (HEAD + "graphs: !!python/object/apply:os.system ['true']\n", "r.yaml:3: the tag"),
        (
            HEAD + "vars: {eos: null}\ngraphs: {main: {}}\n",
            "r.yaml:3: vars.eos: expected a string, an integer",
        ),
        (
            HEAD + "graphs:\n  main:\n    rules:\n      - name: nested\n        match: {name: '(a+)+$'}\n"
            "        expect: {count: 1}\n",
            "r.yaml:7: graphs.main.rules.0.match: rule nested: name '(a+)+$': a quantifier over a group",
        ),
    ],
    ids=[
        "control",
        "complex-key",
        "recursive-anchor",
        "deep-flow",
        "deep-block",
        "laughs",
        "bad-int",
        "escape-beyond-unicode",
        "python-tag",
        "null-var",
        "nested-quantifier",
    ],
)
def test_hostile_yaml_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    start = time.monotonic()
    assert _apply(tmp_path, text) == 2
    assert time.monotonic() - start < 20
    line = err_line(capsys)
    assert expected in line, line


def test_a_file_that_is_not_utf8_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(b"version: 1\nname: caf\xe9\ngraphs: {main: {}}\n")
    assert _apply(tmp_path, path) == 2
    assert "r.yaml:2: not UTF-8 (byte 0xe9 at offset 20)" in err_line(capsys)


@pytest.mark.parametrize("what", ["/dev/zero", "fifo", "loop", "folder"])
def test_a_rule_file_must_be_a_readable_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    if what == "fifo":
        os.mkfifo(tmp_path / "fifo")
        path = tmp_path / "fifo"
    elif what == "loop":
        os.symlink("b.yaml", tmp_path / "a.yaml")
        os.symlink("a.yaml", tmp_path / "b.yaml")
        path = tmp_path / "a.yaml"
    elif what == "folder":  # os.fdopen named the descriptor, and the CLI's last resort then raised
        path = tmp_path / "rules.d"
        path.mkdir()
    else:
        path = Path(what)
    assert _apply(tmp_path, path) == 2
    line = err_line(capsys)
    assert "cannot read" in line, line


def test_includes_are_bounded_and_read_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """16 files each including every later one took 42 s, doubling per file; a 1,500-deep chain crashed."""
    n = 24
    for i in range(n):
        later = ", ".join(f"f{j}.yaml" for j in range(i + 1, n))
        write(
            tmp_path,
            f"f{i}.yaml",
            HEAD + f"include: [{later}]\ngraphs: {{g{i}: {{output: {{param: g{i}.param}}}}}}\n",
        )
    start = time.monotonic()
    assert _apply(tmp_path, tmp_path / "f0.yaml") == 0
    assert time.monotonic() - start < 20
    capsys.readouterr()
    for i in range(1500):
        include = f"include: [c{i + 1}.yaml]\n" if i < 1499 else ""
        write(tmp_path / "chain", f"c{i}.yaml", HEAD + include + "graphs: {}\n")
    assert _apply(tmp_path, tmp_path / "chain" / "c0.yaml") == 2
    assert "c31.yaml: includes nest more than 32 files deep" in err_line(capsys)


@pytest.mark.parametrize(
    ("include", "expected"),
    [
        ("a\\0b.yaml", "r.yaml:3: the path 'a\\x00b.yaml' holds a NUL character"),
        ("loop.yaml", "r.yaml:3: included"),
        ("fifo", "r.yaml:3: included rule file"),
    ],
)
def test_bad_include_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], include: str, expected: str
) -> None:
    os.symlink("loop.yaml", tmp_path / "loop.yaml")
    os.mkfifo(tmp_path / "fifo")
    assert _apply(tmp_path, HEAD + f'include: ["{include}"]\ngraphs: {{main: {{}}}}\n') == 2
    line = err_line(capsys)
    assert expected in line, line
    if include == "fifo":
        assert "is a FIFO (named pipe), not a file" in line, line


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("k=[", "--set k=[: not a value YAML can read"),
        ("k=!!int abc", "--set k=!!int abc: not a value YAML can read (invalid literal"),
        ("k={a: [", "--set k={a: [: not a value YAML can read"),
    ],
)
def test_a_set_value_yaml_cannot_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    assert _apply(tmp_path, HEAD + "vars: {k: 1}\ngraphs: {main: {}}\n", "--set", value) == 2
    line = err_line(capsys)
    assert expected in line, line


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("(" * 1000 + "1" + ")" * 1000, "too many nested parentheses"),
        ("-" * 100_000 + "1", "longer than 10000 characters"),
        ("-" * 500 + "1", "nested more than 100 levels deep"),
    ],
    ids=["parentheses", "unary-100k", "unary-500"],
)
@pytest.mark.parametrize("place", ["vars", "where"])
def test_deep_expressions_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], expr: str, expected: str, place: str
) -> None:
    if place == "vars":
        text = HEAD + f"vars: {{k: '${{{expr}}}'}}\ngraphs:\n  main:\n    output: {{param: '${{k}}.param'}}\n"
    else:
        text = (
            HEAD + "graphs:\n  main:\n    rules:\n      - name: deep\n        match:\n"
            f"          pattern: 'ReLU %n 1 1 %a %b'\n          where: ['{expr}']\n"
            "        expect: {count: 1}\n"
        )
    assert _apply(tmp_path, text) == 2
    line = err_line(capsys)
    assert expected in line and "r.yaml:" in line, line


def test_long_variable_chains_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain = "".join(f"  v{i}: '${{v{i + 1}}}'\n" for i in range(500)) + "  v500: 1\n"
    text = HEAD + "vars:\n" + chain + "graphs:\n  main:\n    output: {param: '${v0}.param'}\n"
    assert _apply(tmp_path, text) == 2
    assert (
        "variables computed from variables nest more than 50 deep (v0 -> v1 -> v2 -> … -> v50)"
        in err_line(capsys)
    )


def test_deep_custom_expressions_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write(tmp_path, "m.param", CHAIN)
    for expr in ("-" * 100_000 + "1", "-" * 500 + "p0", "(" * 1000 + "p0" + ")" * 1000):
        assert main(["lint", str(model), "--custom", f"MyOp:w=raw({expr})"]) == 2
        line = err_line(capsys)
        assert "--custom 'MyOp:w=raw(" in line, line


@pytest.mark.parametrize(
    "pattern",
    ["(a+)+$", "(a*)*", "(a|ab)+", r"(\.\d+)*", r"(\w)\1", r"(?P<x>a)(?P=x)", "(a)?(?(1)b|c)", ".*.*.*.*x"],
)
def test_name_regexes_that_backtrack_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match=r"quantifier|backreference"):
        check_name_regex(pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        ".*",
        r".*?(?P<i>\d+)",
        r"model\.layers\.(\d+)\.self_attn\.(q|k|v)_proj",
        r"(?:x\d{1,3})?y",
        "a{1,100}b+c*",
    ],
)
def test_the_shipped_kinds_of_name_regex_are_accepted(pattern: str) -> None:
    assert check_name_regex(pattern).pattern == pattern


def test_a_layer_name_longer_than_ncnn_allows_is_refused_not_matched(tmp_path: Path) -> None:
    """The .param reader refuses such names; a graph built otherwise (a rule's rename) is refused here."""
    graph = read_param(str(write(tmp_path, "m.param", CHAIN)))
    layer = graph.layers[1]
    layer.name = "a" * 300
    with pytest.raises(GsurgError, match="a name of 300 characters; ncnn reads at most 255"):
        judge(layer, Selector(name="a.*b"))


def test_the_value_bound_holds_for_the_rule_file_and_its_includes_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight includes of 190,000 values each were each under the per-document bound; their sum is bounded
    now (here at 1,000 values: three files of ~400)."""
    monkeypatch.setattr(yaml_source, "MAX_VALUES", 1000)
    for i in range(3):
        write(tmp_path, f"i{i}.yaml", HEAD + "vars:\n" + "".join(f"  v{i}_{k}: {k}\n" for k in range(400)))
    main_file = write(tmp_path, "r.yaml", HEAD + "include: [i0.yaml, i1.yaml, i2.yaml]\ngraphs: {main: {}}\n")
    assert _apply(tmp_path, main_file) == 2
    line = err_line(capsys)
    assert "i2.yaml:" in line and "hold more than 1000 values together" in line, line


def test_a_large_rule_file_is_refused_while_it_is_composed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3.9 MB file of small values was composed whole by PyYAML (69 s, 885 MB) before the bound was
    checked. Composition now stops at the bound: the syntax error at the end of this file is never reached."""
    monkeypatch.setattr(yaml_source, "MAX_VALUES", 1000)
    values = "".join(f"  - {k}\n" for k in range(5000))  # a list: one node per value
    rules = write(tmp_path, "r.yaml", HEAD + "vars:\n  x:\n" + values + "graphs: {main: [}\n")
    assert _apply(tmp_path, rules) == 2
    line = err_line(capsys)
    assert "the document expands to more than 1000 values" in line and "not valid YAML" not in line, line
    assert int(line.split("r.yaml:")[1].split(":")[0]) < 2100  # a key and a value per entry, at most
