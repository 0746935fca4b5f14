"""Graph clean-up passes, checked against the ncnn wheel where ncnn's behaviour is the point."""

from __future__ import annotations

from pathlib import Path

import ncnn
import numpy as np
import pytest

from graphsurgeon.errors import GraphError
from graphsurgeon.formats.emit_text import emit_param_text
from graphsurgeon.formats.param_text import parse_param_text
from graphsurgeon.ir.passes import insert_splits, merge_chained_splits, remove_dead_layers, toposort

# observed in the ncnn wheel: x → ReLU (in place) → a; out = x + a without a Split gave [0,0,0,0]
FANOUT = "7767517\n3 3\nInput in 0 1 x\nReLU r 1 1 x a\nBinaryOp add 2 1 x a out 0=0\n"
X = np.array([-1.0, 2.0, -3.0, 4.0], dtype=np.float32)


def run_text(text: str, tmp_path: Path) -> np.ndarray:
    param = tmp_path / "m.param"
    param.write_text(text)
    (tmp_path / "m.bin").write_bytes(b"")
    net = ncnn.Net()
    assert net.load_param(str(param)) == 0
    assert net.load_model(str(tmp_path / "m.bin")) == 0
    with net.create_extractor() as ex:
        ex.input("x", ncnn.Mat(X).clone())
        ret, out = ex.extract("out")
    assert ret == 0
    return np.array(out)


def test_insert_splits_fixes_what_ncnn_computes_wrong_without_them(tmp_path: Path) -> None:
    wrong = run_text(FANOUT, tmp_path)
    expected = X + np.maximum(X, 0)
    assert not np.array_equal(wrong, expected), (
        "the fault must be real in ncnn for this test to mean anything"
    )
    graph = parse_param_text(FANOUT)
    assert insert_splits(graph)
    graph.check_links()
    assert not insert_splits(graph)  # a fixed point
    fixed = emit_param_text(graph)
    assert "Split x_split 1 2 x x_split0 x_split1" in fixed
    np.testing.assert_array_equal(run_text(fixed, tmp_path), expected)


def test_toposort_is_stable_and_repairs_order() -> None:
    graph = parse_param_text("7767517\n3 3\nInput in 0 1 x\nReLU r 1 1 x a\nSigmoid s 1 1 a b\n")
    assert not toposort(graph)
    sig = graph.layer("s")
    graph.layers.remove(sig)
    graph.layers.insert(1, sig)  # consumer before its producer
    assert toposort(graph)
    assert [layer.name for layer in graph.layers] == ["in", "r", "s"]


def test_toposort_names_a_layer_on_a_cycle() -> None:
    graph = parse_param_text("7767517\n3 4\nInput in 0 1 x\nBinaryOp p 2 1 x q a\nReLU q 1 1 a b\n")
    graph.set_input(graph.layer("p"), 1, "b")
    with pytest.raises(GraphError, match="cycle through layer"):
        toposort(graph)


def test_merge_chained_splits_keeps_every_reader() -> None:
    text = (
        "7767517\n6 8\nInput in 0 1 x\nSplit s1 1 2 x x0 x1\nSplit s2 1 2 x1 y0 y1\n"
        "ReLU r0 1 1 x0 a\nReLU r1 1 1 y0 b\nReLU r2 1 1 y1 c\n"
    )
    graph = parse_param_text(text)
    assert merge_chained_splits(graph)
    graph.check_links()
    splits = [layer for layer in graph.layers if layer.type == "Split"]
    assert len(splits) == 1 and [b.name for b in splits[0].outputs] == ["x0", "y0", "y1"]
    assert not merge_chained_splits(graph)


def test_remove_dead_layers_keeps_the_interface() -> None:
    text = "7767517\n4 4\nInput in 0 1 x\nReLU r 1 1 x a\nSigmoid dead 1 1 x b\nTanH out 1 1 a y\n"
    graph = parse_param_text(text)
    # x is read twice (r, dead): fan-out is not this pass's business
    assert remove_dead_layers(graph, keep={"y"})
    assert [layer.name for layer in graph.layers] == ["in", "r", "out"]
    assert not remove_dead_layers(graph, keep={"y"})
    graph.check_links()
