"""The rule-file language, selectors, actions and the apply driver (rewrite-engine issue, items 1-3, 6, 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.rewrite.loader import load_rule_file
from graphsurgeon.rewrite.yaml_source import RuleFileError
from tests.conftest import CORPUS, REPO

PROJ = CORPUS / "llm" / "qwen3_0.6b_proj_out.ncnn.param"
CHAIN = (
    "7767517\n5 5\nInput in 0 1 x 0=8\nReLU a 1 1 x y\nNoop n 1 1 y z\nSigmoid s 1 1 z w\nTanH t 1 1 w out\n"
)

GEMM_RULES = """\
version: 1
name: dynamic-gemm-m
vars:
  width: 1024
graphs:
  main:
    interface: [in0, out0]
    rules:
      - name: free-gemm-m
        match: {type: Gemm, params: {constantA: 0, constantM: {ne: 0}, constantK: "${width}"}}
        expect: {count: 1}
        do:
          - set: {constantM: 0}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def err_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_apply_sets_a_param_and_records_provenance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = write(tmp_path, "r.yaml", GEMM_RULES)
    out = tmp_path / "out"
    assert main(["apply", str(rules), str(PROJ), "--out", str(out)]) == 0
    text = (out / PROJ.name).read_text()
    assert "Gemm gemm_0 1 1 in0 out0 2=0 3=1 4=0 5=1 6=1 7=0 8=151936 9=1024 10=-1" in text
    sidecar = json.loads((out / "qwen3_0.6b_proj_out.ncnn.gsurg.json").read_text())
    assert sidecar["layers"] == {"gemm_0": ["free-gemm-m: set constantM=0"]}
    assert sidecar["rules"] == [{"rule": "free-gemm-m", "matches": 1, "iterations": 1}]
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["apply", str(rules), str(PROJ), "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first, "applying twice is byte-identical"
    assert PROJ.read_text().count("7=1") == 1, "the input is untouched"


def test_variables_are_typed_and_overridable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path, "r.yaml", GEMM_RULES)
    assert main(["apply", str(rules), str(PROJ), "--out", str(tmp_path / "o"), "--set", "width=2048"]) == 1
    line = err_line(capsys)
    assert line == (
        "gsurg: error: rule free-gemm-m: matched 0 layer(s), expected exactly 1; "
        "closest miss: layer gemm_0 (param constantK is 1024, wanted 2048)"
    )
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
    assert main(["apply", str(rules), str(PROJ), "--out", str(tmp_path / "o"), "--set", "nope=1"]) == 2
    assert "declares no such variable" in err_line(capsys)


def test_explain_lists_every_candidate_and_why(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rules = write(tmp_path, "r.yaml", GEMM_RULES.replace("constantM: {ne: 0}", "constantM: {ne: 1}"))
    assert main(["apply", str(rules), str(PROJ), "--explain", "free-gemm-m"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "rule free-gemm-m on graph main (exactly 1 expected):",
        "  no    Input in0: type Input is not Gemm",
        "  no    Gemm gemm_0: param constantM is 1, wanted ne 1",
    ]


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (
            GEMM_RULES.replace("expect: {count: 1}", "expect: {cuont: 1}"),
            ":11:",
            "Extra inputs are not permitted",
        ),
        (GEMM_RULES.replace("version: 1", "version: 2"), ":1:", "version"),
        (GEMM_RULES.replace('"${width}"', '"${wdth}"'), ":10:", "unknown variable ${wdth}"),
        (GEMM_RULES.replace("{count: 1}", "{count: 1, min: 1}"), ":11:", "give count, or min and/or max"),
        (GEMM_RULES.replace("- set: {constantM: 0}", "- sett: {constantM: 0}"), ":13:", "do.0"),
        (GEMM_RULES.replace("name: free-gemm-m", "name: free gemm"), ":9:", "String should match pattern"),
        (GEMM_RULES + "  bad: [\n", ":", "not valid YAML"),
        (GEMM_RULES.replace("constantM: {ne: 0}", "constantM: {ne: 0, eq: 1}"), ":10:", "exactly one of"),
    ],
)
def test_rule_file_errors_name_file_line_and_expectation(
    text: str, where: str, what: str, tmp_path: Path
) -> None:
    path = write(tmp_path, "r.yaml", text)
    with pytest.raises(RuleFileError) as info:
        load_rule_file(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}{where}"), message
    assert what in message


def test_schema_command_prints_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "rules"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "gsurg rule file"
    assert {"version", "name", "graphs", "vars", "inputs"} <= set(schema["properties"])
    assert "Rule" in schema["$defs"] and "Selector" in schema["$defs"]


def test_remove_rewires_readers_and_interface_blobs_are_protected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ngraphs:\n  main:\n    interface: [x, out]\n    rules:\n"
        "      - name: drop-noop\n        match: {type: Noop}\n        expect: {count: 1}\n"
        "        do: [{remove: true}]\n",
    )
    out = tmp_path / "out"
    assert main(["apply", str(rules), str(model), "--out", str(out)]) == 0
    assert "Sigmoid s 1 1 y w" in (out / "m.param").read_text()
    protected = rules.read_text().replace("interface: [x, out]", "interface: [x, z, out]")
    write(tmp_path, "r2.yaml", protected)
    assert main(["apply", str(tmp_path / "r2.yaml"), str(model), "--out", str(tmp_path / "o2")]) == 2
    assert "would remove interface blob 'z'" in err_line(capsys)


def test_a_rule_touches_each_layer_once_and_counts_distinct_layers(tmp_path: Path) -> None:
    model = write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ngraphs:\n  main:\n    rules:\n"
        "      - name: rename-all\n        match: {name: '[a-z]'}\n        expect: {count: 4}\n"
        "        do: [{rename: 'x_{name}'}]\n",
    )
    assert main(["apply", str(rules), str(model), "--out", str(tmp_path / "o")]) == 0
    names = [line.split()[1] for line in (tmp_path / "o" / "m.param").read_text().splitlines()[2:]]
    assert names == ["in", "x_a", "x_n", "x_s", "x_t"]  # "in" has two letters: /[a-z]/ needs a full match


def test_strict_stops_at_the_first_rule_that_breaks_an_invariant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "7767517\n3 3\nInput in 0 1 x 0=8 1=4\nReLU r 1 1 x a\nSoftmax sm 1 1 a out 0=0\n"
    model = write(tmp_path, "m.param", text)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ngraphs:\n  main:\n    rules:\n"
        "      - name: leaky\n        match: {type: ReLU}\n        expect: {count: 1}\n"
        "        do: [{set: {slope: 0.5}}]\n"
        "      - name: softmax-rows\n        match: {type: Softmax}\n        expect: {count: 1}\n"
        "        do: [{set: {axis: 1}}]\n",
    )
    assert main(["apply", str(rules), str(model), "--out", str(tmp_path / "o")]) == 0  # not strict: written
    assert main(["apply", str(rules), str(model), "--out", str(tmp_path / "o2"), "--strict"]) == 1
    line = err_line(capsys)
    assert line.startswith("gsurg: error: rule softmax-rows broke an invariant: [softmax-fixbug] layer sm:")
    assert not (tmp_path / "o2").exists() or not any((tmp_path / "o2").iterdir())


def test_dry_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path, "r.yaml", GEMM_RULES)
    assert main(["apply", str(rules), str(PROJ), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "rule free-gemm-m: 1 match(es)" in out and "dry run: nothing written" in out
    assert not (tmp_path / "o").exists()


def test_unchanged_weights_pass_through_apply_byte_for_byte(tmp_path: Path) -> None:
    param = CORPUS / "ncnn-assets" / "squeezenet_v1.1.param"
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ngraphs:\n  main:\n    interface: [data, prob]\n    rules:\n"
        "      - name: tag\n        match: {type: Softmax}\n        expect: {count: 1}\n"
        "        do: [{rename: '{name}_out'}]\n",
    )
    out = tmp_path / "o"
    argv = ["apply", str(rules), str(param), "--bin", str(param.with_suffix(".bin")), "--out", str(out)]
    assert main(argv) == 0
    assert (out / "squeezenet_v1.1.bin").read_bytes() == param.with_suffix(".bin").read_bytes()
    assert "Softmax prob_out " in (out / "squeezenet_v1.1.param").read_text()


def _apply(tmp_path: Path, rules_text: str, model_text: str) -> tuple[int, str]:
    rules = write(tmp_path, "r.yaml", rules_text)
    model = write(tmp_path, "m.param", model_text)
    out = tmp_path / "out"
    code = main(["apply", str(rules), str(model), "--out", str(out)])
    return code, (out / "m.param").read_text() if code == 0 else ""


HEAD = "version: 1\nname: t\ngraphs:\n  main:\n    rules:\n"


def test_rewire_by_role_and_rename_blob(tmp_path: Path) -> None:
    model = (
        "7767517\n4 5\nInput in 0 2 a b\nReLU r 1 1 a c\nBinaryOp add 2 1 c b out 0=0\nSigmoid s 1 1 b d\n"
    )
    rules = HEAD + (
        "      - name: swap\n        match: {type: BinaryOp}\n        expect: {count: 1}\n"
        "        do: [{rewire: {b: a}}, {rename_blob: {c: relu_out}}]\n"
    )
    code, text = _apply(tmp_path, rules, model)
    assert code == 0
    assert "ReLU r 1 1 a relu_out" in text and "BinaryOp add 2 1 relu_out a out 0=0" in text


def test_replace_with_captures_and_insert(tmp_path: Path) -> None:
    model = "7767517\n3 3\nInput in 0 1 x\nReLU r 1 1 x y 0=0.25\nSigmoid s 1 1 y out\n"
    rules = HEAD + (
        "      - name: relu-sig\n        match:\n          pattern: |\n"
        "            ReLU %r 1 1 %x %y 0=%slope\n            Sigmoid %s 1 1 %y %out\n"
        "        expect: {count: 1}\n        do:\n          - replace: |\n"
        "              ReLU %r 1 1 %x mid 0=%slope\n              Swish fused 1 1 mid %out\n"
        "          - insert: |\n              Noop guard 1 1 %x x2\n            layer: '%r'\n"
    )
    code, text = _apply(tmp_path, rules, model)
    assert code == 0, text
    lines = text.splitlines()[2:]
    assert lines == [
        "Input in 0 1 x",
        "Noop guard 1 1 x x2",
        "ReLU r 1 1 x mid 0=0.25",
        "Swish fused 1 1 mid out",
    ]


def test_replace_must_keep_blobs_other_layers_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = "7767517\n4 5\nInput in 0 1 x\nReLU r 1 1 x y\nSplit sp 1 2 y y0 y1\nBinaryOp add 2 1 y0 y1 out\n"
    rules = HEAD + (
        "      - name: bad\n        match:\n          pattern: |\n            ReLU %r 1 1 %x %y\n"
        "        expect: {count: 1}\n        do:\n          - replace: |\n"
        "              Sigmoid %r 1 1 %x other\n"
    )
    code, _ = _apply(tmp_path, rules, model)
    assert code == 2
    assert "does not produce ['y'], which other layers still read" in err_line(capsys)


def test_pass_steps_split_fanout_and_extract(tmp_path: Path) -> None:
    fanout = "7767517\n4 4\nInput in 0 1 x\nReLU r 1 1 x a\nBinaryOp add 2 1 x a y 0=0\nSigmoid s 1 1 y out\n"
    rules = HEAD + "      - {name: splits, pass: insert_splits}\n      - {name: sort, pass: toposort}\n"
    code, text = _apply(tmp_path, rules, fanout)
    assert code == 0 and "Split x_split 1 2 x x_split0 x_split1" in text
    (tmp_path / "e").mkdir()
    extract = HEAD + "      - {name: cut, pass: extract, inputs: [a], outputs: [y]}\n"
    code, text = _apply(tmp_path / "e", extract, fanout)
    assert code == 0
    # a becomes an input; ReLU (which made a) and Sigmoid (after y) are gone
    assert text.splitlines()[2:] == ["Input input_a 0 1 a", "Input in 0 1 x", "BinaryOp add 2 1 x a y 0=0"]


def test_action_errors_name_the_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = HEAD + (
        "      - name: no-such-role\n        match: {type: ReLU}\n        expect: {count: 1}\n"
        "        do: [{rewire: {weight: x}}]\n"
    )
    code, _ = _apply(tmp_path, rules, CHAIN)
    assert code == 2
    assert err_line(capsys).startswith(
        "gsurg: error: rule no-such-role: layer a: ReLU has no input role 'weight'"
    )


def test_weights_set_without_a_bin_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = "7767517\n3 3\nInput in 0 1 x 0=4 1=3\nMemoryData w 0 1 wb 0=5 1=4\nMatMul mm 2 1 x wb y 0=0\n"
    code, _ = _apply(tmp_path, (REPO / "rules" / "matmul-weight-slots.yaml").read_text(), model)
    assert code == 2
    assert "has no weight 'data' (was the .bin given?)" in err_line(capsys)


def test_a_param_bin_input_is_written_back_binary(tmp_path: Path) -> None:
    pbin = tmp_path / "m.param.bin"
    assert main(["fmt", str(write(tmp_path, "m.param", CHAIN)), "-o", str(pbin), "-q"]) == 0
    rules = HEAD + "      - name: leaky\n        match: {type: ReLU}\n        expect: {count: 1}\n"
    rules += "        do: [{set: {slope: 0.5}}]\n"
    out = tmp_path / "out"
    assert main(["apply", str(write(tmp_path, "r.yaml", rules)), str(pbin), "--out", str(out)]) == 0
    written = (out / "m.param.bin").read_bytes()
    assert written[:4] == (7767517).to_bytes(4, "little")
    assert (out / "m.gsurg.json").exists()
    back = tmp_path / "back.param"
    assert main(["fmt", str(out / "m.param.bin"), "-o", str(back), "-q"]) == 0
    assert "ReLU ReLU_1 1 1 0 1 0=0.5" in back.read_text()


@pytest.mark.parametrize(
    ("rule", "where", "what"),
    [
        (
            "match: {type: ReLU, name: '('}\n        expect: {min: 0}\n        do: [{remove: true}]",
            ":7:",
            "regular",
        ),
        (
            "match: {pattern: 'ReLU %r 1 1 %x'}\n        expect: {min: 0}\n        do: [{remove: true}]",
            ":7:",
            "blob",
        ),
        (
            "match: {pattern: 'ReLU %r 1 1 * *', where: ['r +']}\n        expect: {min: 0}\n"
            "        do: [{remove: true}]",
            ":7:",
            "expression 'r +'",
        ),
        (
            "match: {type: ReLU}\n        expect: {min: 0}\n        do: [{sett: {slope: 1}}]",
            ":9:",
            "an action is one of",
        ),
    ],
)
def test_bad_rules_are_reported_at_load_with_their_line(
    rule: str, where: str, what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = HEAD + "      - name: r\n        " + rule + "\n"
    code, _ = _apply(tmp_path, text, CHAIN)
    assert code == 2
    line = err_line(capsys)
    assert f"r.yaml{where}" in line and what in line, line


def test_a_wrongly_typed_set_value_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = HEAD + "      - name: r\n        match: {type: ReLU}\n        expect: {min: 1}\n"
    text += "        do: [{set: {slope: abc}}]\n"
    code, _ = _apply(tmp_path, text, CHAIN)
    assert code == 2
    assert err_line(capsys) == "gsurg: error: rule r: layer a: 'abc' is not a valid float for ReLU.slope"


def test_a_rule_file_can_name_its_own_inputs(tmp_path: Path) -> None:
    write(tmp_path, "dec.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\nvars: {dir: nowhere}\ninputs:\n  dec: {param: '${dir}/dec.param'}\n"
        "graphs:\n  g:\n    input: dec\n    interface: [x, out]\n    rules:\n"
        "      - name: drop\n        match: {type: Noop}\n        expect: {count: 1}\n"
        "        do: [{remove: true}]\n"
        "outputs: {dir: '${dir}/out'}\n",
    )
    assert main(["apply", str(rules), "--set", f"dir={tmp_path}"]) == 0  # no model on the command line
    assert "Noop" not in (tmp_path / "out" / "dec.param").read_text()
    assert (tmp_path / "out" / "dec.gsurg.json").exists()
