"""``gsurg apply``: run a rule file. The rule file is opened and its models made ready (``prepare``: the
command line's model as input ``model``, pnnx exports of its source); each graph, in order, reads its input
(a model, or a copy of an earlier graph's result), runs its rules (``driver``), must then expose its
declared interface (``interface``) and has its storage policy applied (``storage_policy``); finally every
graph, its provenance sidecar and the side files are written into the output folder together
(``write_outputs``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.model_bin import read_bin
from graphsurgeon.formats.outpaths import ensure_folder
from graphsurgeon.formats.param_any import is_param_bin, read_param
from graphsurgeon.formats.recovery import recover_folder, warn_pending
from graphsurgeon.ir.graph import Graph
from graphsurgeon.pipeline.calibrate import CalibrationError, calibrate_graph, export_inputs
from graphsurgeon.pipeline.calibrated_quant import CalibratedQuant
from graphsurgeon.pipeline.output_guard import OutputGuard, input_identities
from graphsurgeon.pipeline.prepare import Prepared, prepare
from graphsurgeon.pipeline.repeat_layers import repeat_last_layer
from graphsurgeon.pipeline.storage_policy import apply_storage_policy
from graphsurgeon.pipeline.write_outputs import GraphRun, planned_outputs, write_runs
from graphsurgeon.progress import Progress
from graphsurgeon.rewrite.driver import Candidate, apply_graph, candidates
from graphsurgeon.rewrite.interface import check_interface
from graphsurgeon.rewrite.read_scope import TRUST_FLAG
from graphsurgeon.rewrite.rulefile import GraphSpec, Rule
from graphsurgeon.rewrite.sections import Interface, ModelInput
from graphsurgeon.rewrite.yaml_source import RuleFileError


def _load(source: ModelInput) -> Graph:
    assert source.param is not None
    warn_pending(source.param, source.bin)
    graph = read_param(source.param)
    if source.bin is not None:
        read_bin(graph, source.bin)
    return graph


def _source(prepared: Prepared, graph_name: str, input_name: str) -> ModelInput:
    if input_name not in prepared.inputs:
        hint = " (give the model on the command line)" if input_name == "model" else ""
        raise GsurgError(f"graph {graph_name}: input {input_name!r} is not declared{hint}")
    return prepared.inputs[input_name]


def _start(prepared: Prepared, name: str, spec: GraphSpec, done: dict[str, GraphRun]) -> GraphRun:
    """A graph's input and output names, before its rules run."""
    if spec.input in done:  # an earlier graph's result, rewritten further
        if spec.output is None:
            raise GsurgError(
                f"graph {name}: it rewrites graph {spec.input}'s result, so give it output names"
            )
        earlier = done[spec.input]
        graph = earlier.graph.copy()
        run = GraphRun(name, f"graph {spec.input}", graph)
        run.inputs_read = earlier.inputs_read
        run.bytes_before = earlier.bytes_before
    else:
        source = _source(prepared, name, spec.input)
        graph = _load(source)
        if source.repeat is not None:
            repeat_last_layer(graph, source.repeat, prepared.checkpoints, f"graph {name}, input {spec.input}")
        run = GraphRun(name, str(source.param), graph)
        run.inputs_read = tuple(str(p) for p in (source.param, source.bin) if p is not None)
        run.bytes_before = os.path.getsize(source.bin) if source.bin else None
    if spec.output is not None:
        run.param_name, run.bin_name = spec.output.param, spec.output.bin
        run.binary = spec.output.param.endswith(".param.bin")
    else:  # the input's file names and form (a .param.bin stays binary)
        source = prepared.inputs[spec.input]
        assert source.param is not None
        run.param_name = Path(source.param).name
        run.bin_name = Path(source.bin).name if source.bin else None
        run.binary = is_param_bin(source.param)
    return run


def run_apply(
    rule_path: str,
    param: str | None,
    bin_path: str | None,
    sets: dict[str, str],
    out_dir: str | None,
    *,
    strict: bool = False,
    dry_run: bool = False,
    keep_work: bool = False,
    progress: Progress | None = None,
    notice: Callable[[str], None] | None = None,
    trusted: bool = False,
    reads: list[str] | None = None,
) -> list[GraphRun]:
    """Run the rule file and write its results into ``out_dir`` (or the rule file's ``outputs.dir``);
    ``notice`` is told before the rule file's export source (Python code) runs. Unless ``trusted``, what
    the rule file reads is confined and its ``outputs.dir`` must lie under the working folder or a path the
    user gave (``rewrite.read_scope``). ``reads``, when given, receives every file or folder the run reads
    as the rule file named it (``--dry-run`` lists them)."""
    prepared = prepare(
        rule_path,
        param,
        bin_path,
        sets,
        work_parent=out_dir,
        keep_work=keep_work,
        progress=progress,
        notice=notice,
        trusted=trusted,
    )
    try:
        if reads is not None:
            reads += list(dict.fromkeys(prepared.read_paths()))
        return _run(prepared, rule_path, out_dir, strict=strict, dry_run=dry_run, progress=progress)
    finally:
        kept = prepared.close()
        if kept is not None and progress is not None:
            progress(f"kept the work folder {kept}")


def _run(
    prepared: Prepared,
    rule_path: str,
    out_dir: str | None,
    *,
    strict: bool,
    dry_run: bool,
    progress: Progress | None,
) -> list[GraphRun]:
    rf = prepared.rules
    folder = out_dir or rf.outputs.dir
    scope = prepared.read_scope
    if out_dir is None and folder is not None and scope is not None and scope.outside_cwd(folder, Path.cwd()):
        raise RuleFileError(
            f"{prepared.outputs_where}: outputs.dir {folder} lies outside the working folder and every path "
            f"given on the command line: give the output folder with --out, or trust this rule file with "
            f"{TRUST_FLAG}"
        )
    if not dry_run and folder is not None:  # finish interrupted runs first: an input may be kept there
        recover_folder(folder)
    runs, _ = _run_graphs(prepared, strict=strict, progress=progress)
    prepared.release_sources()
    if dry_run:
        return runs
    if folder is None:
        raise GsurgError("no output folder: give --out DIR (or outputs.dir in the rule file)")
    guard = OutputGuard(Path(folder), input_identities(prepared.read_paths()))
    for name in planned_outputs(rf, runs):  # refused before anything is written
        guard.target(name)
    ensure_folder(folder, folder)
    if progress is not None:
        progress(f"writing {len(runs)} graph(s) to {folder}")
    write_runs(rf, rule_path, runs, guard, progress, prepared.pool)
    return runs


@dataclass(frozen=True)
class Explanation:
    """What ``--explain RULE`` found: the graph the rule belongs to, its expected count, and every candidate
    layer's verdict on the graph as the rule would see it."""

    rule: str
    graph: str
    expected: str
    candidates: list[Candidate]


def _run_graphs(
    prepared: Prepared, *, strict: bool, progress: Progress | None, explain: str | None = None
) -> tuple[list[GraphRun], Explanation | None]:
    """Every graph in order, as apply runs it: input, rules, interface, calibration, storage policy. With
    ``explain``, stop in the graph holding that rule just before it runs and explain it there."""
    rf = prepared.rules
    runs: dict[str, GraphRun] = {}
    for name, spec in rf.graphs.items():
        if progress is not None:
            progress(f"graph {name}: {len(spec.rules)} rule(s)")
        run = _start(prepared, name, spec, runs)
        target = next((r for r in spec.rules if isinstance(r, Rule) and r.name == explain), None)
        cal = spec.storage.calibrate if spec.storage is not None else None
        calibrating = cal is not None and cal.when and target is None
        exported = export_inputs(run.graph) if calibrating else {}
        run.report = apply_graph(
            run.graph,
            spec,
            strict=strict,
            checkpoints=prepared.checkpoints,
            variables=dict(rf.vars),
            stop_before=None if target is None else target.name,
        )
        if target is not None:
            found = candidates(run.graph, target)
            return list(runs.values()), Explanation(target.name, name, target.expect.describe(), found)
        if isinstance(spec.interface, Interface):
            run.interface = check_interface(run.graph, spec.interface, f"graph {name}")
        if spec.storage is not None:
            keep: set[int] = set()
            calq = CalibratedQuant.plan(run.graph, spec.storage, run.report.pinned, name)
            if calq is not None and not calibrating:
                raise CalibrationError(
                    f"graph {name}: storage.{calq.keys()} quantizes from the calibration samples, but "
                    "storage.calibrate does not run (its when: is false)"
                )
            if cal is not None and calibrating:
                samples = _calibration_samples(prepared, name, spec, runs)
                if progress is not None:
                    progress(f"graph {name}: calibrating on {len(samples)} sample(s)")
                request = calq.request(prepared.work) if calq is not None else None
                if calq is not None:
                    prepared.cleanups.append(calq.close)
                run.calibration = calibrate_graph(
                    run.graph, cal, exported, samples, label=name, scratch=prepared.work, activations=request
                )
                keep = run.calibration.layer_ids
                if calq is not None:
                    calq.finish()
                    run.quantization = calq.lines()
            run.storage_changes = apply_storage_policy(
                run.graph, spec.storage, run.report.pinned, keep, calibrated=calq
            )
        if run.has_weights and run.bin_name is None:
            raise GsurgError(
                f"graph {name}: the result has weights but no .bin to write them to (give --bin, bin: in "
                "the rule file's inputs, or output.bin)"
            )
        runs[name] = run
    return list(runs.values()), None


def _calibration_samples(
    prepared: Prepared, name: str, spec: GraphSpec, done: dict[str, GraphRun]
) -> list[tuple[np.ndarray, ...]]:
    make = None if spec.input in done else prepared.calibration.get(spec.input)
    if make is None:
        what = f"graph {spec.input}'s result" if spec.input in done else f"input {spec.input!r}"
        raise CalibrationError(
            f"graph {name}: storage.calibrate runs the graph on the export source's calibration samples, "
            f"but it rewrites {what}, which is not an export of the rule file's source"
        )
    return make()


def explain_rule(
    rule_path: str,
    rule_name: str,
    param: str | None,
    bin_path: str | None,
    sets: dict[str, str],
    *,
    strict: bool = False,
    progress: Progress | None = None,
    notice: Callable[[str], None] | None = None,
    trusted: bool = False,
) -> Explanation:
    """Run everything before ``rule_name`` exactly as ``apply`` would (the same loop: earlier graphs whole,
    interface, storage and ``--strict`` checks included), then judge every candidate layer for it."""
    prepared = prepare(
        rule_path, param, bin_path, sets, work_parent=None, progress=progress, notice=notice, trusted=trusted
    )
    try:
        _, found = _run_graphs(prepared, strict=strict, progress=progress, explain=rule_name)
    finally:
        prepared.close()
    if found is None:
        raise GsurgError(f"{rule_path}: no rule named {rule_name!r}")
    return found
