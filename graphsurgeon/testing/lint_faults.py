"""Fault injection for lint: every fault class a hand-written patch script can make, injected into a copy of
a real model, with the lint error that must report it and a probe of what the ``ncnn`` wheel does with it.

Used by gsurg's own tests (``tests/test_lint_faults.py``) and benchmark (``benchmarks/bench_lint_faults.py``);
not by the commands. Injection deliberately edits ``.param`` text and ``.bin`` bytes by hand, since most
faults are things the IR refuses to represent; sites are picked from gsurg's own reading of the unmodified
model (``walk_bin`` records, layer lines).
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from graphsurgeon.check.context import LintOptions
from graphsurgeon.check.lint import run_lint
from graphsurgeon.formats.model_bin import WeightRecord, walk_bin
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.weights import TAG_BF16, Storage
from graphsurgeon.schema.catalog import ValueType

FIRST_LAYER_LINE = 3  # magic, counts, then one layer per line


# --- the unmodified model, as gsurg reads it --------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    name: str
    text: str
    data: bytes
    graph: Graph
    records: tuple[WeightRecord, ...]

    @property
    def middle_record(self) -> WeightRecord:
        return self.records[len(self.records) // 2]

    @property
    def middle_tagged(self) -> WeightRecord:
        tagged = [r for r in self.records if r.tag is not None]
        return tagged[len(tagged) // 2]


@cache
def load_model(param: Path, weights: Path) -> Model:
    """The model as gsurg reads it (cached: every fault starts from the same reading)."""
    name = param.stem
    graph = read_param_text(param)
    records = tuple(walk_bin(graph, weights))
    return Model(name, param.read_text(), weights.read_bytes(), graph, records)


# --- editing a copy ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """The error lint must report: its check id and the place it names. A field left None is not compared,
    except that a ``bin-walk`` error expected without a layer (bytes after the last weight) must name none."""

    check: str
    layer: str | None = None
    line: int | None = None
    offset: int | None = None
    blob: str | None = None
    weight: str | None = None


@dataclass(frozen=True)
class Injected:
    text: str
    data: bytes
    expect: Expect
    site: str  # where the fault went, for the report


def _tokens(text: str, line: int) -> list[str]:
    return text.splitlines()[line - 1].split()


def _replace_line(text: str, line: int, tokens: list[str] | None) -> str:
    """Replace (or, with None, delete) 1-based ``line``."""
    lines = text.splitlines()
    if tokens is None:
        del lines[line - 1]
    else:
        lines[line - 1] = " ".join(tokens)
    return "\n".join(lines) + "\n"


def _header(text: str, layers: int | None = None, blobs: int | None = None) -> str:
    lines = text.splitlines()
    n_layers, n_blobs = (int(v) for v in lines[1].split())
    lines[1] = f"{n_layers if layers is None else layers} {n_blobs if blobs is None else blobs}"
    return "\n".join(lines) + "\n"


def _split_layer(tokens: list[str]) -> tuple[list[str], list[str], list[str]]:
    nb, nt = int(tokens[2]), int(tokens[3])
    return tokens[4 : 4 + nb], tokens[4 + nb : 4 + nb + nt], tokens[4 + nb + nt :]


def _join_layer(head: list[str], bottoms: list[str], tops: list[str], params: list[str]) -> list[str]:
    return [head[0], head[1], str(len(bottoms)), str(len(tops)), *bottoms, *tops, *params]


def _middle(layers: list[Layer]) -> Layer:
    assert layers, "no layer fits this fault"
    return layers[len(layers) // 2]


# .bin faults: sites from the walk records.


def nan_in_weight(m: Model) -> Injected:
    rec = m.middle_record
    start = rec.offset + (4 if rec.tag is not None else 0)
    count = math.prod(rec.shape)
    if rec.storage is Storage.FP16:
        pos, nan = start + 2 * (count // 2), struct.pack("<H", 0x7E00)
    else:
        assert rec.storage in (Storage.FP32, Storage.RAW), rec
        pos, nan = start + 4 * (count // 2), struct.pack("<f", float("nan"))
    data = m.data[:pos] + nan + m.data[pos + len(nan) :]
    expect = Expect("weight-nonfinite", layer=rec.layer, offset=rec.offset, weight=rec.slot)
    site = f"{rec.layer}.{rec.slot} ({rec.storage.value}) element {count // 2}"
    return Injected(m.text, data, expect, site)


def truncation(m: Model) -> Injected:
    rec = m.middle_record
    cut = rec.offset + (rec.nbytes // 2 & ~3)
    expect = Expect("bin-walk", layer=rec.layer, offset=rec.offset, weight=rec.slot)
    return Injected(m.text, m.data[:cut], expect, f"cut at {cut} inside {rec.layer}.{rec.slot}")


def shift_plus_4(m: Model) -> Injected:
    """The previous weight written one element too long: 4 extra bytes before a tagged weight."""
    rec = m.middle_tagged
    at = rec.offset
    data = m.data[:at] + m.data[at - 4 : at] + m.data[at:]
    expect = Expect("bin-walk", layer=rec.layer, offset=rec.offset, weight=rec.slot)
    return Injected(m.text, data, expect, f"4 bytes inserted before {rec.layer}.{rec.slot} at {at}")


def shift_minus_4(m: Model) -> Injected:
    """A tagged weight written without its tag: everything after it moves 4 bytes earlier."""
    rec = m.middle_tagged
    data = m.data[: rec.offset] + m.data[rec.offset + 4 :]
    expect = Expect("bin-walk", layer=rec.layer, offset=rec.offset, weight=rec.slot)
    return Injected(m.text, data, expect, f"tag of {rec.layer}.{rec.slot} at {rec.offset} removed")


def unknown_tag(m: Model) -> Injected:
    rec = m.middle_tagged
    data = m.data[: rec.offset] + struct.pack("<I", 0xDEADBEEF) + m.data[rec.offset + 4 :]
    expect = Expect("bin-walk", layer=rec.layer, offset=rec.offset, weight=rec.slot)
    return Injected(m.text, data, expect, f"tag 0xdeadbeef on {rec.layer}.{rec.slot} at {rec.offset}")


def fp16_tagged_bf16(m: Model) -> Injected:
    rec = m.middle_tagged
    assert rec.storage is Storage.FP16, rec
    data = m.data[: rec.offset] + struct.pack("<I", TAG_BF16) + m.data[rec.offset + 4 :]
    expect = Expect("weight-magnitude", layer=rec.layer, offset=rec.offset, weight=rec.slot)
    return Injected(m.text, data, expect, f"bf16 tag on fp16 {rec.layer}.{rec.slot} at {rec.offset}")


def trailing_bytes(m: Model) -> Injected:
    expect = Expect("bin-walk", offset=len(m.data))
    return Injected(m.text, m.data + struct.pack("<2f", 0.5, -0.5), expect, f"8 bytes after {len(m.data)}")


# .param faults: sites from gsurg's reading of the unmodified .param (layer.line is the file line).


def float_literal_for_int(m: Model) -> Injected:
    def fits(layer: Layer) -> bool:
        spec, p = layer.spec, layer.params.get(1)
        return (
            spec is not None
            and 1 in spec.params
            and spec.params[1].type is ValueType.INT
            and (p is not None and p.kind is ValueType.INT)
        )

    layer = _middle([x for x in m.graph.layers if fits(x)])
    tokens = _tokens(m.text, layer.line)
    i = next(i for i, t in enumerate(tokens) if t.startswith("1="))
    tokens[i] = f"{tokens[i]}.0"
    expect = Expect("literal-type", layer=layer.name, line=layer.line)
    return Injected(_replace_line(m.text, layer.line, tokens), m.data, expect, f"{layer.name}: {tokens[i]}")


def missing_split(m: Model) -> Injected:
    split = _middle([x for x in m.graph.layers if x.type == "Split"])
    source = split.inputs[0].name
    tops = {b.name for b in split.outputs}
    readers: list[Layer] = []
    text = _replace_line(m.text, split.line, None)
    for layer in m.graph.layers:
        if any(b.name in tops for b in layer.inputs):
            readers.append(layer)
            line = layer.line - 1  # one line up: the Split's line is gone
            bottoms, outs, params = _split_layer(_tokens(text, line))
            bottoms = [source if b in tops else b for b in bottoms]
            text = _replace_line(text, line, _join_layer(_tokens(text, line), bottoms, outs, params))
    text = _header(text, layers=len(m.graph.layers) - 1, blobs=len(m.graph.blobs) - len(tops))
    second = readers[1]
    expect = Expect("fanout-without-split", layer=second.name, line=second.line - 1, blob=source)
    site = f"Split {split.name} removed; {source} read by {', '.join(r.name for r in readers)}"
    return Injected(text, m.data, expect, site)


def low_blob_count(m: Model) -> Injected:
    text = _header(m.text, blobs=len(m.graph.blobs) - 1)
    return Injected(text, m.data, Expect("header-counts", line=2), f"blob_count {len(m.graph.blobs) - 1}")


def dangling_bottom(m: Model) -> Injected:
    layer = _middle([x for x in m.graph.layers if x.inputs])
    tokens = _tokens(m.text, layer.line)
    bottoms, tops, params = _split_layer(tokens)
    bottoms[0] = "dangling_blob"
    text = _replace_line(m.text, layer.line, _join_layer(tokens, bottoms, tops, params))
    text = _header(text, blobs=len(m.graph.blobs) + 1)
    expect = Expect("undefined-bottom", layer=layer.name, line=layer.line, blob="dangling_blob")
    return Injected(text, m.data, expect, f"{layer.name} reads dangling_blob")


def duplicate_top(m: Model) -> Injected:
    """A layer writes its result under its input's name (as a careless in-place rename does); later readers
    of its result then read the name, which ncnn resolves to the first producer."""
    layer = _middle([x for x in m.graph.layers if len(x.inputs) == 1 and len(x.outputs) == 1])
    old, new = layer.outputs[0].name, layer.inputs[0].name
    text = m.text
    for other in m.graph.layers[m.graph.layers.index(layer) :]:
        tokens = _tokens(text, other.line)
        bottoms, tops, params = _split_layer(tokens)
        bottoms = [new if b == old else b for b in bottoms]
        tops = [new if t == old else t for t in tops]
        text = _replace_line(text, other.line, _join_layer(tokens, bottoms, tops, params))
    expect = Expect("duplicate-top", layer=layer.name, line=layer.line)
    return Injected(text, m.data, expect, f"{layer.name} writes {new!r} instead of {old!r}")


def softmax_without_fixbug(m: Model) -> Injected:
    softmaxes = [x for x in m.graph.layers if x.type == "Softmax"]
    if softmaxes:
        layer = _middle(softmaxes)
        tokens = _tokens(m.text, layer.line)
        bottoms, tops, params = _split_layer(tokens)
        params = [p for p in params if not p.startswith(("0=", "1="))] + ["0=1"]
        text = _replace_line(m.text, layer.line, _join_layer(tokens, bottoms, tops, params))
        expect = Expect("softmax-fixbug", layer=layer.name, line=layer.line)
        return Injected(text, m.data, expect, f"{layer.name}: 0=1, no 1=1")
    leaf = m.graph.output_blobs()[0]  # no Softmax in the model: append one on the first output
    line = FIRST_LAYER_LINE + len(m.graph.layers)
    text = m.text.rstrip("\n") + f"\nSoftmax injected_softmax 1 1 {leaf.name} injected_prob 0=1\n"
    text = _header(text, layers=len(m.graph.layers) + 1, blobs=len(m.graph.blobs) + 1)
    expect = Expect("softmax-fixbug", layer="injected_softmax", line=line)
    return Injected(text, m.data, expect, f"Softmax 0=1 appended on {leaf.name}")


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[Model], Injected]


FAULTS: tuple[Fault, ...] = (
    Fault("NaN in a weight", nan_in_weight),
    Fault("truncated .bin", truncation),
    Fault("4-byte shift (+4: a weight 4 bytes too long)", shift_plus_4),
    Fault("4-byte shift (-4: a tag dropped)", shift_minus_4),
    Fault("unknown tag (0xdeadbeef)", unknown_tag),
    Fault("wrong tag: fp16 data tagged bf16", fp16_tagged_bf16),
    Fault("8 trailing bytes", trailing_bytes),
    Fault("float literal for an int param", float_literal_for_int),
    Fault("fan-out without Split", missing_split),
    Fault("blob_count one too low", low_blob_count),
    Fault("dangling bottom", dangling_bottom),
    Fault("duplicate top", duplicate_top),
    Fault("Softmax axis 1 without 1=1", softmax_without_fixbug),
)


def write_fault(fault: Fault, model: Model, folder: Path) -> tuple[Path, Path, Injected]:
    """Inject ``fault`` into ``model`` and write the faulty copy into ``folder`` (same file names)."""
    injected = fault.inject(model)
    folder.mkdir(parents=True, exist_ok=True)
    param, weights = folder / f"{model.name}.param", folder / f"{model.name}.bin"
    param.write_text(injected.text)
    weights.write_bytes(injected.data)
    return param, weights, injected


# --- lint and the ncnn wheel ------------------------------------------------------------------------------


def lint_json(param: Path, weights: Path) -> tuple[int, dict]:
    """What ``gsurg lint PARAM --bin BIN --format json`` exits with and prints, from ``check.lint`` (the
    command only formats this report), so test support never needs the command line."""
    report = run_lint(str(param), LintOptions(bin_path=str(weights)))
    return report.exit_code, json.loads(report.to_json())


def caught(expect: Expect, findings: list[dict]) -> dict | None:
    """The error finding that matches ``expect`` (check id and every stated place), if any."""
    for f in findings:
        if f["level"] != "error" or f["check"] != expect.check:
            continue
        if expect.layer is not None and f.get("layer") != expect.layer:
            continue
        if expect.check == "bin-walk" and expect.layer is None and f.get("layer") is not None:
            continue
        if any(
            want is not None and f.get(key) != want
            for key, want in (("line", expect.line), ("offset", expect.offset), ("blob", expect.blob))
        ):
            continue
        if expect.weight is not None and f.get("weight") != expect.weight:
            continue
        return f
    return None


_NCNN_PROBE = r"""
import json, sys
import ncnn
net = ncnn.Net()
opt = net.opt
opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = opt.use_bf16_storage = False
opt.use_packing_layout = False
opt.num_threads = 1
p = net.load_param(sys.argv[1])
m = net.load_model(sys.argv[2]) if p == 0 else None
print(json.dumps({"load_param": p, "load_model": m}))
"""


def ncnn_load(param: Path, weights: Path) -> dict:
    """What the ncnn wheel's loader returns, in a child process (a corrupt model may crash it); never
    extracts. ``load_model`` is only attempted when ``load_param`` succeeded."""
    proc = subprocess.run(
        [sys.executable, "-c", _NCNN_PROBE, str(param), str(weights)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        return {"load_param": None, "load_model": None, "crash": proc.returncode}
    return json.loads(proc.stdout.splitlines()[-1])


def ncnn_rejects(result: dict) -> bool:
    return bool(result.get("crash")) or result["load_param"] != 0 or result["load_model"] != 0


# What the ncnn wheel 1.0.20261020 does with each fault (the same for all three models): True = load_param or
# load_model returns nonzero, False = the faulty model loads with return 0.
NCNN_REJECTS = {
    "NaN in a weight": False,
    "truncated .bin": True,  # load_model: "ModelBin read … failed"
    "4-byte shift (+4: a weight 4 bytes too long)": False,  # misread as a quantization table, then garbage
    "4-byte shift (-4: a tag dropped)": False,
    "unknown tag (0xdeadbeef)": False,
    "wrong tag: fp16 data tagged bf16": False,
    "8 trailing bytes": False,
    "float literal for an int param": True,  # at this site (Convolution 1=3.0) kernel_w reads as 0: refused
    "fan-out without Split": False,
    "blob_count one too low": True,  # R1020 validation: "too many blobs"
    "dangling bottom": False,  # only logs find_blob_index_by_name failed
    "duplicate top": False,
    "Softmax axis 1 without 1=1": True,  # load_param: "param is too old, please regenerate"
}
