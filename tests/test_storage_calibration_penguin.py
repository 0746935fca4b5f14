"""``gsurg apply rules/penguin_vl.yaml --set storage=fp16`` (issue 9, item 4) calibrates every sub-model on a
corpus image and a prompt, and marks exactly the layers whose activations exceed the limit.

The tiny checkpoint's real activations are small (the largest float activation is ~20; the real model's
vision residual stream reaches ~4.9e6, penguin-vl.md §10), so at fp16's limit only the layers reading the
decoder's additive mask (-1e38, which fp16 would turn into -inf) are marked. The mechanism is therefore
proven with the limit lowered (``--set fp16_limit=L``, L the median of all measured maxima), so that a
known, mixed set of layers in every sub-model is marked.

Oracles: the test measures every blob itself in the ncnn wheel (exact fp32 options, a fresh extractor per
blob, the samples fed by hand to pnnx's ``in0, in1, …``), checks the graph outputs' maxima against the
PyTorch reference, derives the expected marked layers from those maxima by hand, and reads the storages
back with the .bin walker. ``31=`` is checked structurally: on this x86 wheel fp16 options do not put
activations in fp16 (penguin-vl.md §10)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ncnn
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pnnx")

from graphsurgeon.cli import main  # noqa: E402
from graphsurgeon.formats.model_bin import walk_bin  # noqa: E402
from graphsurgeon.formats.param_text import read_param_text  # noqa: E402
from graphsurgeon.ir.graph import Graph  # noqa: E402
from graphsurgeon.ir.weights import Storage  # noqa: E402
from graphsurgeon.models.penguin_vl.export import build  # noqa: E402
from graphsurgeon.verify.ncnn_fp32 import fp32_net  # noqa: E402
from tests.conftest import CORPUS, REPO  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_exports")]

RULES = REPO / "rules" / "penguin_vl.yaml"
CHECKPOINT = REPO / "graphsurgeon" / "models" / "penguin_vl" / "tiny"
IMAGE = CORPUS / "images" / "desert.jpg"
GRAPHS = ("vision_embed_patch", "vision_encoder", "vision_projector", "embed", "decoder", "lm_head")


def _samples() -> dict[str, list[tuple[np.ndarray, ...]]]:
    """The source's calibration samples, converted by hand: batch dim dropped, ids as int32."""
    variables = {"rope": "fused", "export_length": 8, "calibration_image": str(IMAGE)}
    out = {}
    for spec in build(variables, CHECKPOINT):
        assert spec.calibration is not None, spec.name  # the source gives every graph samples
        out[spec.name] = [
            tuple(
                x[0].numpy().astype(np.float32 if x.is_floating_point() else np.int32, copy=True)
                for x in sample
            )
            for sample in spec.calibration
        ]
    return out


def _feed(ex: Any, graph: Graph, sample: tuple[np.ndarray, ...]) -> None:
    for i, arr in enumerate(sample):
        assert ex.input(f"in{i}", ncnn.Mat(np.ascontiguousarray(arr)).clone()) == 0
    for blob in graph.input_blobs():
        if not blob.name.startswith("in"):
            assert ex.input(blob.name, ncnn.Mat()) == 0  # a KV cache: empty, past length 0


def _kv_cache_tops(graph: Graph) -> list[str]:
    """Tops 1 and 2 of every attention layer with ``7=1``: ncnn keeps them in its own packed layout
    (R1020 ``Extractor::extract``, "preserve kv cache storage layout"), so they hold no activation values."""
    return [
        blob.name
        for layer in graph.layers
        if layer.type in ("SDPA", "MultiHeadAttention") and layer.params.get(7) is not None
        if layer.params[7].value == 1
        for blob in layer.outputs[1:3]
    ]


def _measure(folder: Path, name: str, samples: list[tuple[np.ndarray, ...]]) -> dict[str, float]:
    """Largest finite |x| of every float blob (inf when a blob holds inf/NaN), each from its own run; the
    KV-cache tops are left out (reading them returns unwritten padding)."""
    graph = read_param_text(folder / f"{name}.ncnn.param")
    ids = {f"in{i}" for i, arr in enumerate(samples[0]) if arr.dtype.kind == "i"}
    ids |= set(_kv_cache_tops(graph))
    net = fp32_net(folder / f"{name}.ncnn.param", folder / f"{name}.ncnn.bin")
    peaks: dict[str, float] = {}
    try:
        for blob in graph.blobs.values():
            if blob.name in ids or (
                blob.producer is not None and blob.producer.type == "Input" and not blob.name.startswith("in")
            ):
                continue
            for sample in samples:
                with net.create_extractor() as ex:
                    _feed(ex, graph, sample)
                    ret, mat = ex.extract(blob.name)
                    assert ret == 0, (name, blob.name)
                    arr = np.array(mat, dtype=np.float32)
                peak = float(np.abs(arr[np.isfinite(arr)]).max()) if arr.size else 0.0
                if not np.isfinite(arr).all():
                    peak = float("inf")
                peaks[blob.name] = max(peaks.get(blob.name, 0.0), peak)
    finally:
        net.clear()
    return peaks


@pytest.fixture(scope="module")
def penguin(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("penguin-calibration")
    # the fp32 conversion traces everything too (at fp32 the shipped file traces a short stack and grows it
    # back, whose copies have other layer names): the three conversions name their layers alike
    assert main(["apply", str(RULES), "--out", str(root / "fp32"), "--set", "export_short=false"]) == 0
    samples = _samples()
    peaks = {name: _measure(root / "fp32", name, samples[name]) for name in GRAPHS}
    finite = sorted(v for p in peaks.values() for v in p.values() if v < 1e30)
    limit = float(np.median(finite))
    argv = ["--set", "storage=fp16", "--set", f"calibration_image={IMAGE}"]
    assert main(["apply", str(RULES), "--out", str(root / "fp16"), *argv]) == 0
    assert main(["apply", str(RULES), "--out", str(root / "low"), *argv, "--set", f"fp16_limit={limit}"]) == 0
    return {"root": root, "samples": samples, "peaks": peaks, "limit": limit}


def _marked(folder: Path, name: str) -> set[str]:
    lines = (folder / f"{name}.ncnn.param").read_text().splitlines()[2:]
    out = set()
    for line in lines:
        tokens = line.split()
        feat = [t for t in tokens if t.startswith("31=")]
        if feat:
            assert feat == ["31=3"], line
            out.add(tokens[1])
    return out


def _expected(folder: Path, name: str, peaks: dict[str, float], limit: float) -> set[str]:
    graph = read_param_text(folder / f"{name}.ncnn.param")
    return {
        layer.name
        for layer in graph.layers
        if layer.type != "Input"
        and any(peaks.get(b.name, 0.0) > limit for b in (*layer.inputs, *layer.outputs))
    }


def test_the_measured_outputs_are_the_reference_activations(penguin: dict[str, Any]) -> None:
    """Each graph's output maximum, measured in ncnn, is the maximum of the PyTorch activation the next
    stage's samples hold (the source chains them through the reference)."""
    s, peaks = penguin["samples"], penguin["peaks"]
    chained = {
        "vision_embed_patch": max(np.abs(x[0]).max() for x in s["vision_encoder"]),  # the patch embedding
        "vision_encoder": max(np.abs(x[0]).max() for x in s["vision_projector"]),  # the encoder output
        "decoder": max(np.abs(x[0]).max() for x in s["lm_head"]),  # the decoder output
    }
    for name, want in chained.items():
        assert peaks[name]["out0"] == pytest.approx(want, rel=1e-4), name
    text_rows = s["decoder"][1][0]  # the text-only prompt's decoder input is its embedding
    assert peaks["embed"]["out0"] >= np.abs(text_rows).max() * (1 - 1e-6)


def test_at_fp16s_limit_only_the_layers_reading_the_mask_are_marked(penguin: dict[str, Any]) -> None:
    folder = penguin["root"] / "fp16"
    for name in GRAPHS:
        expected = _expected(folder, name, penguin["peaks"][name], 65504.0)
        assert _marked(folder, name) == expected, name
    graph = read_param_text(folder / "decoder.ncnn.param")
    mask_readers = {c.name for c in graph.blob("in1").consumers}
    split = graph.layer(next(iter(mask_readers)))
    assert _marked(folder, "decoder") == mask_readers | {c.name for b in split.outputs for c in b.consumers}
    assert all(not _marked(folder, name) for name in GRAPHS if name != "decoder")


def test_a_lowered_limit_marks_exactly_the_layers_whose_blobs_exceed_it(penguin: dict[str, Any]) -> None:
    folder, limit = penguin["root"] / "low", penguin["limit"]
    with_weights_marked = with_weights_unmarked = 0
    for name in GRAPHS:
        expected = _expected(folder, name, penguin["peaks"][name], limit)
        assert _marked(folder, name) == expected, name
        graph = read_param_text(folder / f"{name}.ncnn.param")
        for rec in walk_bin(graph, folder / f"{name}.ncnn.bin"):
            if rec.tag is None:
                assert rec.storage is Storage.RAW
                continue
            want = Storage.FP32 if rec.layer in expected else Storage.FP16
            assert rec.storage is want, (name, rec.layer, rec.slot)
            with_weights_marked += rec.layer in expected
            with_weights_unmarked += rec.layer not in expected
    assert with_weights_marked >= 5 and with_weights_unmarked >= 5  # a mixed set, not all or nothing


def test_the_sidecar_holds_what_calibration_measured(penguin: dict[str, Any]) -> None:
    folder, limit = penguin["root"] / "low", penguin["limit"]
    for name in GRAPHS:
        cal = json.loads((folder / f"{name}.ncnn.gsurg.json").read_text())["calibration"]
        assert cal["limit"] == pytest.approx(limit) and cal["samples"] == len(penguin["samples"][name])
        assert set(cal["marked"]) == _marked(folder, name)
        measured = {b: v for b, v in penguin["peaks"][name].items() if b not in cal["inputs_empty"]}
        assert cal["blob_max_abs"].keys() == measured.keys(), name
        for blob, value in measured.items():
            assert cal["blob_max_abs"][blob] == pytest.approx(value, rel=1e-6), (name, blob)
        assert cal["outputs_opaque"] == _kv_cache_tops(read_param_text(folder / f"{name}.ncnn.param"))
    decoder = json.loads((folder / "decoder.ncnn.gsurg.json").read_text())["calibration"]
    assert decoder["inputs_fed"] == ["in0", "in1", "in2", "in3"]
    assert decoder["inputs_empty"] == ["cache_k0", "cache_v0", "cache_k1", "cache_v1"]
    assert decoder["outputs_opaque"] == ["out_cache_k0", "out_cache_v0", "out_cache_k1", "out_cache_v1"]


def test_the_fp16_conversion_computes_what_the_fp32_one_does(penguin: dict[str, Any]) -> None:
    """Weights rounded to fp16 (relative error <= 2^-11 each) move each sub-model's output, on the
    calibration samples, by a small fraction of its scale: a few 2^-11 through one or two Gemms (measured
    ~1.1 * 2^-11 at most), more through the attention stacks, whose q/k norms at ~4 make attention sharp
    in the tiny checkpoint (measured 1.2% of the scale, 1 - cosine 6e-6, for the encoder)."""
    root, samples = penguin["root"], penguin["samples"]
    bounds = {"vision_embed_patch": 4 * 2.0**-11, "vision_projector": 4 * 2.0**-11, "lm_head": 4 * 2.0**-11}
    bounds |= {"embed": 2.0**-11, "vision_encoder": 3e-2, "decoder": 3e-2}
    for name, bound in bounds.items():
        outs = []
        for conv in ("fp32", "fp16"):
            param = root / conv / f"{name}.ncnn.param"
            net = fp32_net(param, root / conv / f"{name}.ncnn.bin")
            with net.create_extractor() as ex:
                _feed(ex, read_param_text(param), samples[name][0])
                ret, mat = ex.extract("out0")
                assert ret == 0
                outs.append(np.array(mat, dtype=np.float32))
            net.clear()
        a, b = outs
        scale = float(np.abs(a).max())
        cosine = float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))
        assert 0 < np.abs(a - b).max() <= bound * scale, (name, np.abs(a - b).max() / scale)
        assert cosine > 0.9999, (name, cosine)
