"""Patterns as ncnn param snippets: captures, wildcards, where, non-overlap, and the gqa-native rule's
structural effect on the corpus LLM decoders."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.errors import ParamSyntaxError
from graphsurgeon.formats.param_text import parse_param_text, read_param_text
from graphsurgeon.rewrite.pattern import best_partial, compile_pattern, find_pattern
from tests.conftest import CORPUS, REPO

QWEN = CORPUS / "llm" / "qwen3_0.6b_decoder.ncnn.param"
LLAMA = CORPUS / "llm" / "llama3.2_1b_decoder.ncnn.param"
GRAPH = (
    "7767517\n6 7\nInput in 0 1 x 0=8\nSplit sp 1 2 x a b\nReLU r1 1 1 a c 0=0.5\nReLU r2 1 1 b d\n"
    "BinaryOp add 2 1 c d e 0=0\nSoftmax sm 1 1 e out 0=0 1=1\n"
)


def test_captures_bind_blobs_layers_and_values() -> None:
    graph = parse_param_text(GRAPH)
    pattern = compile_pattern("ReLU %r 1 1 %i %o 0=%slope\nBinaryOp %add 2 1 %o * %sum 0=0\n")
    (match,) = find_pattern(graph, pattern)
    assert [layer.name for layer in match.layers] == ["r1", "add"]
    assert match.captures == {"r": "r1", "i": "a", "o": "c", "slope": 0.5, "add": "add", "sum": "e"}


def test_a_mentioned_param_compares_with_the_default_when_absent() -> None:
    graph = parse_param_text(GRAPH)
    relu_zero = compile_pattern("ReLU %r 1 1 * * 0=0.0\n")
    assert [m.layers[0].name for m in find_pattern(graph, relu_zero)] == ["r2"]  # r2 has no 0=: default 0.0
    present = compile_pattern("ReLU %r 1 1 * * 0=*\n")
    assert [m.layers[0].name for m in find_pattern(graph, present)] == ["r1"]  # * needs the param written


def test_where_constraints_and_repeated_captures_must_agree() -> None:
    graph = parse_param_text(GRAPH)
    same_input = compile_pattern("ReLU %a 1 1 %x * \nReLU %b 1 1 %x *\n")
    assert find_pattern(graph, same_input) == []  # r1 and r2 read different blobs (a, b)
    slope = compile_pattern("ReLU %r 1 1 * * 0=%s\n", where=["s > 0.25"])
    assert [m.layers[0].name for m in find_pattern(graph, slope)] == ["r1"]


def test_matches_do_not_overlap_and_misses_say_how_far_they_got() -> None:
    graph = parse_param_text(GRAPH)
    any_relu = compile_pattern("ReLU * 1 1 * *\n")
    assert len(find_pattern(graph, any_relu)) == 2
    miss = compile_pattern("ReLU %r 1 1 * %o\nSigmoid %s 1 1 %o *\n")
    assert best_partial(graph, miss) == "layers r1 matched lines 1-1; no layer fits line 2 (Sigmoid %s)"


def test_captures_are_refused_outside_patterns() -> None:
    with pytest.raises(ParamSyntaxError, match="rule-pattern capture"):
        parse_param_text("7767517\n2 2\nInput in 0 1 x\nReLU r 1 1 x y 0=%s\n")


def test_array_elements_can_be_captured() -> None:
    graph = read_param_text(QWEN)
    tile = compile_pattern("Tile %t 1 1 * * -23302=4,1,%rep,1,1\n")
    matches = find_pattern(graph, tile)
    assert len(matches) == 56 and {m.captures["rep"] for m in matches} == {2}


@pytest.mark.parametrize(("param", "chains", "heads"), [(QWEN, 56, 28), (LLAMA, 32, 16)])
def test_gqa_native_removes_every_kv_repeat_and_feeds_sdpa_the_grouped_heads(
    param: Path, chains: int, heads: int, tmp_path: Path
) -> None:
    rules = REPO / "rules" / "gqa-native.yaml"
    out = tmp_path / "out"
    argv = ["apply", str(rules), str(param), "--out", str(out), "--set", f"kv_chains={chains}", "--strict"]
    assert main(argv) == 0
    before, after = read_param_text(param), read_param_text(out / param.name)
    count = lambda g, t: sum(layer.type == t for layer in g.layers)  # noqa: E731
    assert (count(before, "Tile"), count(after, "Tile")) == (chains, 0)
    assert (count(before, "ExpandDims"), count(after, "ExpandDims")) == (chains, 0)
    assert count(before, "Reshape") - count(after, "Reshape") == chains
    assert len(before.layers) - len(after.layers) == 3 * chains
    sdpas = [layer for layer in after.layers if layer.type == "SDPA"]
    assert len(sdpas) == heads
    for sdpa in sdpas:  # key and value now come straight from the grouped projections
        key, value = sdpa.inputs[1].producer, sdpa.inputs[2].producer
        assert key is not None and key.type == "RotaryEmbed"
        assert value is not None and value.type == "Permute"
    assert main(["lint", str(out / param.name)]) == 0


def test_explain_says_what_happened_from_every_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.param"
    model.write_text(
        "7767517\n6 6\nInput in 0 1 x\nExpandDims e0 1 1 x a -23303=1,0\nExpandDims e1 1 1 x b -23303=1,1\n"
        "Tile t 1 1 b c -23302=4,1,2,1,1\nReLU r 1 1 c y\nReLU r2 1 1 a z\n"
    )
    rules = REPO / "rules" / "gqa-native.yaml"
    assert main(["apply", str(rules), str(model), "--explain", "drop-kv-repeat"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "  no    ExpandDims e0: line 1: param 3 is (0,)",
        "  no    ExpandDims e1: lines 1-2 fit; no layer fits line 3 (Reshape %merge)",
    ]
