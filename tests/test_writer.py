"""The .bin writer: changed weights, storages, slot checks, atomic replacement, and the IR's links."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.errors import BinFormatError, GraphError
from graphsurgeon.formats.atomic import atomic_output
from graphsurgeon.formats.model_bin import read_bin, write_bin
from graphsurgeon.formats.param_text import parse_param_text
from graphsurgeon.ir.weights import Storage, Weight

FC = "7767517\n3 3\nInput in 0 1 x 0=4\nInnerProduct fc 1 1 x y 0=3 1=1 2=12\nReLU r 1 1 y z\n"
W = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
B = np.array([0.5, -1.0, 2.0], dtype=np.float32)


def fc_bin(path: Path) -> None:
    """The InnerProduct record layout written by hand (InnerProduct::load_model): tag 0, W, raw bias."""
    path.write_bytes(struct.pack("<I", 0) + W.astype("<f4").tobytes() + B.astype("<f4").tobytes())


def test_new_weights_are_fp32_with_a_zero_tag_where_the_slot_is_tagged(tmp_path: Path) -> None:
    graph = parse_param_text(FC)
    fc = graph.layer("fc")
    fc.weights["weight"] = Weight.from_array(W, load_type=0)
    fc.weights["bias"] = Weight.from_array(B, load_type=1)
    out = tmp_path / "o.bin"
    write_bin(graph, out)
    ref = tmp_path / "ref.bin"
    fc_bin(ref)
    assert out.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize(
    ("storage", "tag", "payload"),
    [
        (Storage.FP16, "476b3001", lambda w: w.astype("<f2").tobytes()),
        (Storage.FP32, "00000000", lambda w: w.astype("<f4").tobytes()),
    ],
)
def test_a_requested_storage_is_written_with_its_tag(
    storage: Storage, tag: str, payload, tmp_path: Path
) -> None:
    graph = parse_param_text(FC)
    fc = graph.layer("fc")
    fc.weights["weight"] = Weight.from_array(W, load_type=0, storage=storage)
    fc.weights["bias"] = Weight.from_array(B, load_type=1)
    out = tmp_path / "o.bin"
    records = write_bin(graph, out)
    data = out.read_bytes()
    assert data[:4] == bytes.fromhex(tag)
    assert data[4 : 4 + len(payload(W.reshape(-1)))] == payload(W.reshape(-1))
    assert [r.offset for r in records] == [0, 4 + len(payload(W.reshape(-1)))]
    back = parse_param_text(FC)
    read_bin(back, out)
    np.testing.assert_array_equal(back.layer("fc").weights["weight"].numpy().reshape(3, 4), W)


def test_odd_fp16_weights_are_padded_to_four_bytes(tmp_path: Path) -> None:
    text = "7767517\n2 2\nInput in 0 1 x\nInnerProduct fc 1 1 x y 0=1 1=0 2=3\n"
    graph = parse_param_text(text)
    graph.layer("fc").weights["weight"] = Weight.from_array(
        np.array([1, 2, 3], np.float32), load_type=0, storage=Storage.FP16
    )
    out = tmp_path / "o.bin"
    write_bin(graph, out)
    assert out.stat().st_size == 4 + 8  # tag + 6 bytes of fp16 + 2 bytes of padding


def test_wrong_element_count_names_layer_and_slot(tmp_path: Path) -> None:
    graph = parse_param_text(FC)
    fc = graph.layer("fc")
    fc.weights["weight"] = Weight.from_array(np.zeros(11, np.float32), load_type=0)
    fc.weights["bias"] = Weight.from_array(B, load_type=1)
    with pytest.raises(BinFormatError, match=r"layer fc, weight weight, offset 0: holds 11 elements"):
        write_bin(graph, tmp_path / "o.bin")
    assert not (tmp_path / "o.bin").exists()


def test_a_weight_the_params_no_longer_load_is_an_error(tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    fc_bin(src)
    graph = parse_param_text(FC)
    read_bin(graph, src)
    graph.layer("fc").set("bias_term", 0)
    with pytest.raises(BinFormatError, match=r"layer fc: holds weight\(s\) \['bias'\]"):
        write_bin(graph, tmp_path / "o.bin")


def test_changing_a_param_and_its_weight_together_reemits(tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    fc_bin(src)
    graph = parse_param_text(FC)
    read_bin(graph, src)
    fc = graph.layer("fc")
    fc.set("bias_term", 0)
    del fc.weights["bias"]
    out = tmp_path / "o.bin"
    write_bin(graph, out)
    assert out.read_bytes() == src.read_bytes()[: 4 + 48]


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "o.bin"
    out.write_bytes(b"old contents")
    graph = parse_param_text(FC)  # no weights attached: the writer must fail
    with pytest.raises(BinFormatError, match="no data for this weight slot"):
        write_bin(graph, out)
    assert out.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["o.bin"]


def test_atomic_output_checks_before_it_replaces(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"old")

    def refuse(tmp: str) -> None:
        assert Path(tmp).read_bytes() == b"new"
        raise BinFormatError("checked and refused")

    with pytest.raises(BinFormatError), atomic_output(out, check=refuse) as fh:
        fh.write(b"new")
    assert out.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["o.txt"]
    with atomic_output(out) as fh:
        fh.write(b"new")
    assert out.read_bytes() == b"new"


def test_graph_links_stay_consistent_through_edits() -> None:
    graph = parse_param_text(FC)
    fc, relu = graph.layer("fc"), graph.layer("r")
    assert graph.blob("y").producer is fc and graph.blob("y").consumers == [relu]
    graph.add_layer("Sigmoid", "s", ["y"], ["w"], index=2)
    assert graph.blob("y").consumers == [relu, graph.layer("s")]
    graph.set_input(relu, 0, "w")
    assert graph.blob("y").consumers == [graph.layer("s")]
    graph.rename_blob("z", "out")
    assert graph.output_blobs()[0].name == "out"
    graph.remove_layer(graph.layer("s"))
    assert "w" in graph.blobs and graph.blob("w").producer is None  # still read by r: kept as dangling
    graph.check_links()
    with pytest.raises(GraphError, match="already produced"):
        graph.add_layer("ReLU", "dup", ["x"], ["y"])
    with pytest.raises(GraphError, match="taken"):
        graph.rename_blob("x", "y")


def test_typed_param_access_by_name() -> None:
    graph = parse_param_text(FC.replace("0=3 1=1", "0=3 1=1.0"))  # a float literal for an int param
    fc = graph.layer("fc")
    assert fc.get("num_output") == 3
    assert fc.get("bias_term") == 0  # R1020: a float literal where an int is expected yields the default
    fc.set("bias_term", 1)
    assert fc.get("bias_term") == 1
    assert fc.get("int8_scale_term") == 0
    fc.unset("bias_term")
    assert 1 not in fc.params and fc.get("bias_term") == 0


def test_param_infer_types_plain_values() -> None:
    from graphsurgeon.ir.params import Param
    from graphsurgeon.schema.catalog import ValueType as V

    assert Param.infer(3) == Param(V.INT, 3)
    assert Param.infer(True) == Param(V.INT, 1)
    assert Param.infer(0.1) == Param(V.FLOAT, float(np.float32(0.1)))
    assert Param.infer([1, 2]) == Param(V.INT_ARRAY, (1, 2))
    assert Param.infer([1, 2.5]) == Param(V.FLOAT_ARRAY, (1.0, 2.5))
    assert Param.infer([]) == Param(V.INT_ARRAY, ())
    assert Param.infer("0w,-1") == Param(V.STRING, "0w,-1")


def test_layers_sharing_a_name_keep_their_own_weights(tmp_path: Path) -> None:
    text = (
        "7767517\n3 3\nInput in 0 1 x 0=4\n"
        "InnerProduct fc 1 1 x y 0=4 1=0 2=16\nInnerProduct fc 1 1 y z 0=4 1=0 2=16\n"
    )
    src = tmp_path / "m.bin"
    first, second = np.arange(16, dtype=np.float32), -np.arange(16, dtype=np.float32)
    src.write_bytes(b"\0" * 4 + first.tobytes() + b"\0" * 4 + second.tobytes())
    graph = parse_param_text(text)
    read_bin(graph, src)
    a, b = graph.layers[1], graph.layers[2]
    np.testing.assert_array_equal(a.weights["weight"].numpy(), first)
    np.testing.assert_array_equal(b.weights["weight"].numpy(), second)
    out = tmp_path / "o.bin"
    write_bin(graph, out)
    assert out.read_bytes() == src.read_bytes()
