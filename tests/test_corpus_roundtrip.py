"""Round trips over the real models in ../shared/corpus (parse, emit, weights, and the ncnn wheel)."""

from __future__ import annotations

import hashlib
import itertools
import os
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.cli import main
from graphsurgeon.formats.emit_text import emit_param_text
from graphsurgeon.formats.model_bin import read_bin, walk_bin
from graphsurgeon.formats.param_bin import emit_param_bin, parse_param_bin
from graphsurgeon.formats.param_text import parse_param_text, read_param_text
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run
from tests.conftest import CORPUS_PARAMS, MODELS_WITH_BIN, corpus_id

LARGE = {"llama3.2_1b_decoder.ncnn.param", "qwen3_0.6b_decoder.ncnn.param"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("param", CORPUS_PARAMS, ids=corpus_id)
def test_emit_is_a_fixed_point_and_graphs_survive(param: Path) -> None:
    graph = read_param_text(param)
    graph.check_links()
    once = emit_param_text(graph)
    again = parse_param_text(once)
    again.check_links()
    assert again.signature() == graph.signature()
    assert emit_param_text(again) == once
    assert len(graph.layers) > 0 and len(graph.blobs) > 0


@pytest.mark.parametrize("param", CORPUS_PARAMS, ids=corpus_id)
def test_param_bin_round_trip_keeps_types_links_and_values(param: Path) -> None:
    graph = read_param_text(param)
    if any(layer.spec is None for layer in graph.layers):
        pytest.skip("custom layer types have no .param.bin type index")
    back = parse_param_bin(emit_param_bin(graph))
    assert [layer.type for layer in back.layers] == [layer.type for layer in graph.layers]
    for a, b in zip(graph.layers, back.layers, strict=True):
        assert a.params.keys() == b.params.keys()
        # binary params are untyped: what must survive is the value the layer sees, not the literal's kind
        assert b.env() == a.env(), a.name
    order = {name: i for i, name in enumerate(graph.blobs)}
    # blob names become indices; the link structure must be the same
    for a, b in zip(graph.layers, back.layers, strict=True):
        assert [len(x.consumers) for x in a.inputs] == [len(x.consumers) for x in b.inputs]
        assert [order[x.name] for x in a.outputs] == [order[x.name] for x in a.outputs]
        assert len(a.outputs) == len(b.outputs)
    assert emit_param_bin(back) == emit_param_bin(graph)


@pytest.mark.parametrize("param", MODELS_WITH_BIN, ids=corpus_id)
def test_real_bins_walk_to_eof_and_reemit_byte_identical(param: Path, tmp_path: Path) -> None:
    model = param.with_suffix(".bin")
    before = sha256(model), sha256(param)
    records = walk_bin(read_param_text(param), model)
    assert records[-1].offset + records[-1].nbytes == model.stat().st_size
    assert records[0].offset == 0
    assert all(b.offset == a.offset + a.nbytes for a, b in itertools.pairwise(records))
    out_param, out_bin = tmp_path / "m.param", tmp_path / "m.bin"
    assert (
        main(["fmt", str(param), "--bin", str(model), "-o", str(out_param), "--out-bin", str(out_bin)]) == 0
    )
    assert sha256(out_bin) == before[0]
    assert (sha256(model), sha256(param)) == before, "inputs must never change"


@pytest.mark.parametrize("param", MODELS_WITH_BIN, ids=corpus_id)
def test_reemitted_model_gives_bit_identical_outputs_in_ncnn(param: Path, tmp_path: Path) -> None:
    model = param.with_suffix(".bin")
    out_param, out_bin = tmp_path / "m.param", tmp_path / "m.bin"
    assert (
        main(["fmt", str(param), "--bin", str(model), "-o", str(out_param), "--out-bin", str(out_bin)]) == 0
    )
    graph = read_param_text(param)
    (inp,) = graph.input_blobs()
    outputs = [b.name for b in graph.output_blobs()]
    rng = np.random.default_rng(1234)
    x = rng.uniform(0.0, 1.0, size=(3, 96, 96)).astype(np.float32)
    original = run(fp32_net(param, model), {inp.name: x}, outputs)
    emitted = run(fp32_net(out_param, out_bin), {inp.name: x}, outputs)
    for name in outputs:
        assert original[name].size > 0
        assert np.isfinite(original[name]).all()
        np.testing.assert_array_equal(emitted[name], original[name], err_msg=name)
        assert original[name].tobytes() == emitted[name].tobytes()


@pytest.mark.parametrize(
    "param",
    [pytest.param(p, marks=pytest.mark.slow) if p.name in LARGE else p for p in CORPUS_PARAMS],
    ids=corpus_id,
)
def test_synth_bin_loads_in_ncnn_and_four_bytes_less_does_not(param: Path, tmp_path: Path) -> None:
    graph = read_param_text(param)
    custom = tuple(sorted({layer.type for layer in graph.layers if layer.spec is None}))
    out = tmp_path / "synth.bin"
    storage = ["--storage", "fp16"] if param.name in LARGE else []
    assert main(["synth-bin", str(param), "-o", str(out), "--seed", "7", *storage]) == 0
    if custom:  # the param's own custom layers (YoloV5Focus) read no weights; register them as such
        assert custom == ("YoloV5Focus",)
    assert fp32_net(param, out, custom) is not None
    size = out.stat().st_size
    os.truncate(out, size - 4)
    with pytest.raises(VerifyError, match="rejected"):
        fp32_net(param, out, custom)
    out.unlink()  # the LLM decoders' weights are gigabytes; pytest keeps its last temp folders


def test_synth_bin_is_deterministic(tmp_path: Path, corpus: Path) -> None:
    param = corpus / "ncnn-assets" / "squeezenet_v1.1.param"
    a, b, c = tmp_path / "a.bin", tmp_path / "b.bin", tmp_path / "c.bin"
    assert main(["synth-bin", str(param), "-o", str(a), "--seed", "3", "-q"]) == 0
    assert main(["synth-bin", str(param), "-o", str(b), "--seed", "3", "-q"]) == 0
    assert main(["synth-bin", str(param), "-o", str(c), "--seed", "4", "-q"]) == 0
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    # synth writes fp32: tagged loads are 4 + 4n bytes, raw loads 4n (the shipped bin stores fp16)
    shipped = walk_bin(read_param_text(param), param.with_suffix(".bin"))
    assert a.stat().st_size == sum((4 if r.tag is not None else 0) + 4 * r.shape[0] for r in shipped)


def test_lazy_weights_decode_the_shipped_fp16(corpus: Path) -> None:
    param = corpus / "ncnn-assets" / "squeezenet_v1.1.param"
    graph = read_param_text(param)
    read_bin(graph, param.with_suffix(".bin"))
    conv1 = graph.layer("conv1")
    w = conv1.weights["weight"].numpy()
    raw = param.with_suffix(".bin").read_bytes()
    assert raw[:4] == bytes.fromhex("476b3001")
    expected = np.frombuffer(raw, dtype="<f2", count=w.size, offset=4).astype(np.float32)
    np.testing.assert_array_equal(w.reshape(-1), expected)
    assert conv1.weights["bias"].storage.value == "raw"
