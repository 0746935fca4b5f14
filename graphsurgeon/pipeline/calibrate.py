"""Calibration for a storage policy (``storage.calibrate``): which layers fp16 cannot run.

The graph, after its rules and with its weights as they are (before the storage policy re-stores any), is
written to a scratch folder and run in the ``ncnn`` wheel with exact fp32 options (``verify.ncnn_fp32``) on
every calibration sample of the export it came from. Sample tensor ``i`` feeds the export's input blob
``in{i}`` (pnnx names a module's inputs ``in0, in1, …`` in order), followed through any rule that renamed
it; graph inputs no sample covers (a KV cache a rule added) get an empty Mat, which ncnn reads as "nothing
yet". Every blob is extracted, in graph order, and reduced at once to its largest finite ``|x|`` and its
count of inf/NaN values, so nothing but one blob is held at a time. Integer inputs (token ids) are not
activations and are not measured, and neither are the tops the catalog calls opaque (``opaque_outputs``:
the KV caches an SDPA or MultiHeadAttention returns with ``7=1``). ncnn keeps those in a panel layout of
its own with spare capacity and hands them out unconverted, so read as an array they hold padding that was
never written: their "maximum" depends on what the heap held before (the order of extraction, the samples,
the machine's panel width), and extracting them one after another without a KV-cache allocator can crash
the wheel. Their values are the layer's key/value bottoms, which are measured, and the past caches are
empty here, so no layer's mark depends on them; the sidecar lists them as ``outputs_opaque``.

A watched layer (``calibrate.match``; default every layer but Input, which computes nothing) is **above the
limit** when any blob it reads or writes has ``|x| > limit`` or a non-finite value: ncnn casts a layer's
inputs to fp16 when that layer runs with fp16 storage, and writes its outputs in fp16, so both sides count.
Such a layer gets ``featmask`` OR-ed into its param 31 (ncnn's per-layer feature mask, read by ``Net``
before the layer's own params: bit 0 no fp16 arithmetic, bit 1 no fp16 storage or packing) and keeps fp32
weights (``storage_policy``).

The same run can also sum the input statistics calibrated quantization needs (``activations``: the
Hessian and mean magnitudes of the blobs its weights read, ``activation_stats``); blobs beyond its memory
budget are summed in further runs over the same samples that extract only them.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.emit_text import write_param_text
from graphsurgeon.formats.model_bin import write_bin
from graphsurgeon.ir.graph import Blob, Graph, Layer
from graphsurgeon.ir.params import Param
from graphsurgeon.pipeline.activation_stats import ActivationRequest, ActivationStats, new_stats
from graphsurgeon.rewrite.sections import Calibrate
from graphsurgeon.rewrite.select import find

FEATMASK_ID = 31
_PNNX_INPUT = re.compile(r"in(\d+)\Z")
_SHOWN = 8  # marked layers named in the one-line summary (the sidecar lists all)


class CalibrationError(GsurgError):
    """A calibration that cannot run: no samples for the graph, an input the rules removed, ncnn refusing
    the graph or failing to compute a blob. Names the graph."""


@dataclass(frozen=True)
class Mark:
    """A layer above the limit, and the blob that put it there."""

    layer: str
    blob: str
    side: str  # "input" or "output"
    value: float  # the blob's largest finite |x|
    nonfinite: int  # its inf/NaN count


@dataclass
class CalibrationReport:
    limit: float
    featmask: int
    samples: int
    maxima: dict[str, float] = field(default_factory=dict)  # blob -> largest finite |x|, graph order
    nonfinite: dict[str, int] = field(default_factory=dict)  # blob -> inf/NaN count (only when > 0)
    fed: list[str] = field(default_factory=list)  # graph inputs the samples feed, in sample order
    empty_inputs: list[str] = field(default_factory=list)  # graph inputs fed an empty Mat
    id_inputs: list[str] = field(default_factory=list)  # integer inputs, not measured
    opaque: list[str] = field(default_factory=list)  # tops held in ncnn's own layout, not measured
    marked: list[Mark] = field(default_factory=list)
    layer_ids: set[int] = field(default_factory=set)  # the marked layers, by id (not reported)
    stat_runs: int = 0  # runs over the samples that summed activation statistics (the first is this one)

    def above(self, blob: str) -> bool:
        return self.maxima.get(blob, 0.0) > self.limit or self.nonfinite.get(blob, 0) > 0

    def largest(self) -> tuple[str, float] | None:
        if not self.maxima:
            return None
        name = max(self.maxima, key=lambda b: self.maxima[b])
        return name, self.maxima[name]

    def to_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "featmask": self.featmask,
            "samples": self.samples,
            "inputs_fed": self.fed,
            "inputs_empty": self.empty_inputs,
            "inputs_ids": self.id_inputs,
            "outputs_opaque": self.opaque,
            "marked": {
                m.layer: {"blob": m.blob, "side": m.side, "max_abs": m.value}
                | ({"nonfinite": m.nonfinite} if m.nonfinite else {})
                for m in self.marked
            },
            "blob_max_abs": self.maxima,
            "blob_nonfinite": self.nonfinite,
        }

    def summary(self) -> str:
        top = self.largest()
        largest = "no float blob" if top is None else f"largest |x| {top[1]:.4g} at blob {top[0]}"
        head = f"calibration: {self.samples} sample(s), {len(self.maxima)} blob(s), {largest}; "
        if not self.marked:
            return head + f"no layer above {self.limit:g}"
        names = ", ".join(f"{m.layer} ({m.blob} {_value(m)})" for m in self.marked[:_SHOWN])
        more = f" and {len(self.marked) - _SHOWN} more" if len(self.marked) > _SHOWN else ""
        return (
            head + f"{len(self.marked)} layer(s) above {self.limit:g} keep fp32 weights and get "
            f"31|={self.featmask}: {names}{more}"
        )


def _value(m: Mark) -> str:
    return f"{m.nonfinite} inf/NaN" if m.nonfinite else f"{m.value:.4g}"


def export_inputs(graph: Graph) -> dict[int, Blob]:
    """The export's input blobs by index (pnnx names them ``in0, in1, …``), taken before the rules run so
    they can be followed through renames."""
    out = {}
    for blob in graph.input_blobs():
        m = _PNNX_INPUT.match(blob.name)
        if m:
            out[int(m.group(1))] = blob
    return out


def opaque_tops(graph: Graph) -> list[str]:
    """The tops, in graph order, whose Mat ncnn keeps in a layout of its own (the catalog's
    ``opaque_outputs`` of each layer's type): not activations, never measured."""
    out = []
    for layer in graph.layers:
        spec = graph.catalog.get(layer.type)
        if spec is None or not spec.opaque_outputs:
            continue
        out += [blob.name for i, blob in enumerate(layer.outputs) if spec.is_opaque_output(i)]
    return out


def _feed_names(graph: Graph, inputs: dict[int, Blob], count: int, label: str) -> list[str]:
    names = []
    current_inputs = {b.name for b in graph.input_blobs()}
    for i in range(count):
        blob = inputs.get(i)
        if blob is None:
            raise CalibrationError(
                f"graph {label}: calibration sample tensor {i} has no export input in{i} to feed"
            )
        if graph.blobs.get(blob.name) is blob and blob.name in current_inputs:
            names.append(blob.name)  # followed through a rename
        elif f"in{i}" in current_inputs:
            names.append(f"in{i}")
        else:
            raise CalibrationError(
                f"graph {label}: calibration sample tensor {i} feeds export input in{i}, which the rules "
                "removed (no graph input holds it any more)"
            )
    return names


def calibrate_graph(
    graph: Graph,
    cal: Calibrate,
    inputs: dict[int, Blob],
    samples: Sequence[tuple[np.ndarray, ...]],
    *,
    label: str,
    scratch: Path | None,
    activations: ActivationRequest | None = None,
) -> CalibrationReport:
    """Measure every blob of ``graph`` on ``samples`` and mark the watched layers above the limit (see the
    module docstring). ``graph`` is changed only by the featmasks of the marked layers. With
    ``activations``, the same run also sums the statistics of its first group of blobs, and one more run
    per further group sums theirs (``activation_stats``); each group goes to ``activations.consume`` once
    the marks are made."""
    if not samples:
        raise CalibrationError(f"graph {label}: calibration has no samples")
    report = CalibrationReport(cal.limit, cal.featmask, len(samples))
    report.fed = _feed_names(graph, inputs, len(samples[0]), label)
    report.empty_inputs = [b.name for b in graph.input_blobs() if b.name not in report.fed]
    report.id_inputs = [
        name for name, arr in zip(report.fed, samples[0], strict=True) if arr.dtype.kind in "iu"
    ]
    report.opaque = opaque_tops(graph)
    groups = activations.groups() if activations is not None else []
    with tempfile.TemporaryDirectory(prefix="gsurg-calibrate-", dir=scratch) as tmp:
        param, weights = Path(tmp) / "graph.param", Path(tmp) / "graph.bin"
        write_param_text(graph, param)
        write_bin(graph, weights)
        runner = _Runner(graph, param, weights, samples, report, label)
        try:
            first = new_stats(activations, groups[0]) if activations is not None and groups else {}
            runner.measure(first)
            _mark(graph, cal, report)
            if activations is not None:
                report.stat_runs = len(groups)
                for i, group in enumerate(groups):
                    stats = first if i == 0 else runner.collect(new_stats(activations, group))
                    first = {}
                    activations.consume(stats, report.layer_ids)
                    del stats  # one group held at a time
        finally:
            runner.close()
    return report


class _Runner:
    """The graph loaded once in the ncnn wheel (exact fp32), run over the samples by ``measure`` (every
    blob, and the statistics asked for) and ``collect`` (only the blobs of the statistics asked for)."""

    def __init__(
        self,
        graph: Graph,
        param: Path,
        weights: Path,
        samples: Sequence[tuple[np.ndarray, ...]],
        report: CalibrationReport,
        label: str,
    ) -> None:
        from graphsurgeon.verify.errors import VerifyError
        from graphsurgeon.verify.ncnn_fp32 import fp32_net

        self.graph, self.samples, self.report, self.label = graph, samples, report, label
        try:
            self.net = fp32_net(param, weights)
        except VerifyError as err:
            raise CalibrationError(f"graph {label}: calibration: {err}") from None

    def close(self) -> None:
        self.net.clear()

    def _extractors(self) -> Iterator[tuple[int, Any]]:
        import ncnn

        report, label = self.report, self.label
        for k, sample in enumerate(self.samples):
            if len(sample) != len(report.fed):
                raise CalibrationError(
                    f"graph {label}: calibration sample {k} has {len(sample)} tensors, sample 0 has "
                    f"{len(report.fed)}"
                )
            with self.net.create_extractor() as ex:
                for name, arr in zip(report.fed, sample, strict=True):
                    if ex.input(name, ncnn.Mat(np.ascontiguousarray(arr)).clone()) != 0:
                        raise CalibrationError(f"graph {label}: calibration: ncnn has no input blob {name}")
                for name in report.empty_inputs:
                    ex.input(name, ncnn.Mat())
                yield k, ex

    def _extract(self, ex: Any, k: int, blob: str, layer: str) -> np.ndarray:
        ret, mat = ex.extract(blob)
        if ret != 0:
            raise CalibrationError(
                f"graph {self.label}: calibration sample {k}: ncnn could not compute blob {blob} (layer "
                f"{layer}): extract returned {ret}"
            )
        return np.array(mat, dtype=np.float32, copy=True)

    def measure(self, stats: dict[str, ActivationStats]) -> None:
        report = self.report
        skip = set(report.id_inputs) | set(report.empty_inputs) | set(report.opaque)
        for k, ex in self._extractors():
            for layer in self.graph.layers:
                for blob in layer.outputs:
                    if blob.name in skip:
                        continue
                    values = self._extract(ex, k, blob.name, layer.name)
                    _reduce(report, blob.name, values)
                    if blob.name in stats:
                        stats[blob.name].add(values)
                    del values

    def collect(self, stats: dict[str, ActivationStats]) -> dict[str, ActivationStats]:
        for k, ex in self._extractors():
            for name, st in stats.items():
                producer = self.graph.blobs[name].producer
                st.add(self._extract(ex, k, name, producer.name if producer is not None else "?"))
        return stats


def _reduce(report: CalibrationReport, name: str, arr: np.ndarray) -> None:
    if arr.size == 0:
        return
    finite = np.isfinite(arr)
    bad = int(arr.size - np.count_nonzero(finite))
    if bad:
        report.nonfinite[name] = report.nonfinite.get(name, 0) + bad
        arr = arr[finite]
    peak = float(np.max(np.abs(arr))) if arr.size else 0.0
    report.maxima[name] = max(report.maxima.get(name, 0.0), peak)


def _mark(graph: Graph, cal: Calibrate, report: CalibrationReport) -> None:
    watched = (
        {id(x) for x in find(graph, cal.match)}
        if cal.match is not None
        else {id(x) for x in graph.layers if x.type != "Input"}
    )
    for layer in graph.layers:
        if id(layer) not in watched:
            continue
        worst = _worst(report, layer)
        if worst is None:
            continue
        side, blob = worst
        _or_featmask(graph, layer, cal.featmask)
        report.layer_ids.add(id(layer))
        report.marked.append(
            Mark(layer.name, blob, side, report.maxima.get(blob, 0.0), report.nonfinite.get(blob, 0))
        )


def _worst(report: CalibrationReport, layer: Layer) -> tuple[str, str] | None:
    """The blob that puts ``layer`` above the limit (the largest, non-finite first), or None."""
    found = [
        (side, b.name)
        for side, blobs in (("input", layer.inputs), ("output", layer.outputs))
        for b in blobs
        if report.above(b.name)
    ]
    if not found:
        return None
    return max(found, key=lambda sb: (report.nonfinite.get(sb[1], 0) > 0, report.maxima.get(sb[1], 0.0)))


def _or_featmask(graph: Graph, layer: Layer, bits: int) -> None:
    spec = graph.catalog.reserved[FEATMASK_ID]
    current = layer.params.get(FEATMASK_ID)
    value = int(current.value) if current is not None and isinstance(current.value, int) else 0
    layer.params[FEATMASK_ID] = Param.of(spec.type, value | bits)
