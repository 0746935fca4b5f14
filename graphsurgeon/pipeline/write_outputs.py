"""Writing a rule run's results: every graph's ``.param`` (text, or binary for a ``.param.bin`` name) and
``.bin``, a ``*.gsurg.json`` provenance sidecar per graph, and the rule file's side files — all into one
atomic output group, so they appear together or not at all."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from graphsurgeon.formats.atomic import AtomicGroup, atomic_write_bytes
from graphsurgeon.formats.emit_text import write_param_text
from graphsurgeon.formats.model_bin import WeightRecord, write_bin
from graphsurgeon.formats.param_bin import write_param_bin
from graphsurgeon.ir.graph import Graph
from graphsurgeon.pipeline.calibrate import CalibrationReport
from graphsurgeon.pipeline.checkpoint_pool import CheckpointPool
from graphsurgeon.pipeline.output_guard import OutputGuard
from graphsurgeon.pipeline.side_files import GraphResult, write_side_files
from graphsurgeon.pipeline.weight_map_side import WeightMap, WrittenGraph
from graphsurgeon.progress import Progress
from graphsurgeon.rewrite.driver import ApplyReport
from graphsurgeon.rewrite.rulefile import RuleFile


@dataclass
class GraphRun:
    """One graph of a rule run: where it came from, its result, and the files it goes to."""

    name: str
    source: str  # the input's .param, or "graph NAME" for a graph that rewrites another's result
    graph: Graph
    param_name: str = ""  # file names inside the output folder
    bin_name: str | None = None
    binary: bool = False  # write the .param in binary form
    report: ApplyReport = field(default_factory=ApplyReport)
    inputs_read: tuple[str, ...] = ()  # files of the input (never overwritten)
    bytes_before: int | None = None
    bytes_after: int | None = None
    interface: tuple[list[str], list[str]] | None = None  # declared (inputs, outputs), once checked
    storage_changes: list[str] = field(default_factory=list)
    calibration: CalibrationReport | None = None  # what storage.calibrate measured and marked
    quantization: list[str] = field(default_factory=list)  # what calibrated quantization did (log lines)
    records: list[WeightRecord] = field(default_factory=list)
    folder: str | None = None  # where it was written
    weight_maps: list[WeightMap] = field(default_factory=list)  # diff-bin maps written for it

    @property
    def has_weights(self) -> bool:
        return any(layer.weights for layer in self.graph.layers)


def sidecar_name(param_name: str) -> str:
    """The provenance sidecar's name beside a graph's ``.param`` (``x.param`` -> ``x.gsurg.json``)."""
    path = PurePosixPath(param_name)
    stem = path.name.removesuffix(".bin").removesuffix(".param")
    return str(path.with_name(stem + ".gsurg.json"))


def planned_outputs(rf: RuleFile, runs: list[GraphRun]) -> list[str]:
    """Every path (inside the output folder) the run may write, for checking before anything is written."""
    names: list[str] = []
    for run in runs:
        names += [run.param_name, sidecar_name(run.param_name)]
        names += [run.bin_name] if run.bin_name is not None else []
    for side in rf.side_files:
        if side.when:
            names += side.outputs_for([run.name for run in runs])
    return names


def write_runs(
    rf: RuleFile,
    rule_path: str,
    runs: list[GraphRun],
    guard: OutputGuard,
    progress: Progress | None = None,
    pool: CheckpointPool | None = None,
) -> list[str]:
    """Write every graph, its sidecar and the side files into ``guard``'s folder (each target checked by
    it first); returns the side files written."""
    folder = guard.folder
    total = sum(
        w.nbytes for run in runs if run.bin_name for layer in run.graph.layers for w in layer.weights.values()
    )
    with AtomicGroup() as group, (progress or Progress()).bar("writing weights", total) as advance:
        results: dict[str, dict[str, Any]] = {}
        for run in runs:
            run.folder = str(folder)
            base = guard.target(run.param_name)
            bin_target = guard.target(run.bin_name) if run.bin_name is not None else None
            sidecar = guard.target(sidecar_name(run.param_name))
            base.parent.mkdir(parents=True, exist_ok=True)
            if run.binary:
                write_param_bin(run.graph, base, group)
            else:
                write_param_text(run.graph, base, group)
            if bin_target is not None:
                bin_target.parent.mkdir(parents=True, exist_ok=True)
                run.records = write_bin(run.graph, bin_target, group, on_written=advance)
                run.bytes_after = run.records[-1].offset + run.records[-1].nbytes if run.records else 0
            atomic_write_bytes(sidecar, _provenance(rf, rule_path, run).encode("utf-8"), group)
            inputs, outputs = run.interface or (
                [b.name for b in run.graph.input_blobs()],
                [b.name for b in run.graph.output_blobs()],
            )
            results[run.name] = GraphResult(
                run.param_name, run.bin_name, inputs, outputs, GraphResult.weight_table(run.records)
            ).as_dict()
        context = {"vars": dict(rf.vars), "graphs": results, "rule_set": rf.name}
        written = [WrittenGraph(run.name, run.graph, run.bin_name, run.records) for run in runs]
        outputs, maps = write_side_files(rf.side_files, guard, context, group, written, pool)
        by_name = {run.name: run for run in runs}
        for m in maps:
            by_name[m.graph].weight_maps.append(m)
        return outputs


def _provenance(rf: RuleFile, rule_path: str, run: GraphRun) -> str:
    doc: dict[str, Any] = {
        "rule_file": rule_path,
        "rule_set": rf.name,
        "graph": run.name,
        "rules": [
            {"rule": o.rule, "matches": o.matches, "iterations": o.iterations}
            | ({"skipped": True} if o.skipped else {})
            for o in run.report.outcomes
        ],
        "layers": {name: run.report.provenance[name] for name in sorted(run.report.provenance)},
    }
    if run.storage_changes:
        doc["storage"] = run.storage_changes
    if run.calibration is not None:
        doc["calibration"] = run.calibration.to_json()
    if run.quantization:
        doc["quantization"] = run.quantization
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
