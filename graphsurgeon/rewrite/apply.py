"""``gsurg apply``: load a rule file, read the models it names (or the one given on the command line as
``model``), run each graph's rules, and write the results — same file names, inside the output folder —
with a ``*.gsurg.json`` provenance sidecar. Every output of the run appears together or not at all."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.atomic import AtomicGroup, atomic_write_bytes
from graphsurgeon.formats.emit_text import write_param_text
from graphsurgeon.formats.model_bin import read_bin, write_bin
from graphsurgeon.formats.outpaths import ensure_folder
from graphsurgeon.formats.param_any import is_param_bin, read_param
from graphsurgeon.formats.param_bin import write_param_bin
from graphsurgeon.formats.recovery import recover_folder, warn_pending
from graphsurgeon.formats.safetensors import Checkpoint
from graphsurgeon.ir.graph import Graph
from graphsurgeon.rewrite.driver import ApplyReport, apply_graph, run_pass, run_rule
from graphsurgeon.rewrite.loader import load_rule_file
from graphsurgeon.rewrite.pattern import compile_pattern, explain_pattern
from graphsurgeon.rewrite.rulefile import ModelInput, PassStep, PatternSpec, Rule, RuleFile
from graphsurgeon.rewrite.select import explain


@dataclass
class GraphRun:
    name: str
    source: ModelInput
    graph: Graph
    report: ApplyReport
    bytes_before: int | None
    bytes_after: int | None


def parse_sets(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise GsurgError(f"--set {item!r}: write key=value")
        out[key] = value
    return out


def _inputs(rf: RuleFile, param: str | None, bin_path: str | None) -> dict[str, ModelInput]:
    inputs = dict(rf.inputs)
    if param is not None:
        inputs["model"] = ModelInput(param=param, bin=bin_path)
    elif bin_path is not None:
        raise GsurgError("--bin needs an input .param on the command line")
    return inputs


def _load(source: ModelInput) -> Graph:
    warn_pending(source.param, source.bin)
    graph = read_param(source.param)
    if source.bin is not None:
        read_bin(graph, source.bin)
    return graph


def explain_rule(
    rule_path: str, rule_name: str, param: str | None, bin_path: str | None, sets: dict[str, str]
) -> str:
    """Run the rules before ``rule_name`` and list every candidate layer's verdict for it."""
    rf = load_rule_file(rule_path, sets)
    inputs = _inputs(rf, param, bin_path)
    checkpoints = {name: Checkpoint(c.path) for name, c in rf.checkpoints.items()}
    for gname, spec in rf.graphs.items():
        names = [r.name for r in spec.rules if isinstance(r, Rule)]
        if rule_name not in names:
            continue
        graph = _load(_source(inputs, gname, spec.input))
        report = ApplyReport()
        for rule in spec.rules:
            if isinstance(rule, PassStep):
                run_pass(graph, rule, set(spec.interface))
                continue
            if rule.name == rule_name:
                lines = [f"rule {rule_name} on graph {gname} ({rule.expect.describe()} expected):"]
                if isinstance(rule.match, PatternSpec):
                    pattern = compile_pattern(rule.match.pattern, rule.match.where, path=f"rule {rule_name}")
                    for layer, verdict in explain_pattern(graph, pattern):
                        mark = "MATCH" if verdict.startswith("matched") else "no   "
                        lines.append(f"  {mark} {layer.type} {layer.name}: {verdict}")
                    return "\n".join(lines)
                for v in explain(graph, rule.match):
                    mark = "MATCH" if v.matched else "no   "
                    lines.append(f"  {mark} {v.layer.type} {v.layer.name}: {v.reason}")
                return "\n".join(lines)
            run_rule(graph, rule, set(spec.interface), report, checkpoints)
    raise GsurgError(f"{rule_path}: no rule named {rule_name!r}")


def _source(inputs: dict[str, ModelInput], graph_name: str, input_name: str) -> ModelInput:
    if input_name not in inputs:
        hint = " (give the model on the command line)" if input_name == "model" else ""
        raise GsurgError(f"graph {graph_name}: input {input_name!r} is not declared{hint}")
    return inputs[input_name]


def run_apply(
    rule_path: str,
    param: str | None,
    bin_path: str | None,
    sets: dict[str, str],
    out_dir: str | None,
    *,
    strict: bool = False,
    dry_run: bool = False,
) -> list[GraphRun]:
    rf = load_rule_file(rule_path, sets)
    inputs = _inputs(rf, param, bin_path)
    folder = out_dir or rf.outputs.dir
    if not dry_run and folder is not None:  # finish interrupted runs first: an input may be kept there
        recover_folder(folder)
    checkpoints = {name: Checkpoint(c.path) for name, c in rf.checkpoints.items()}
    runs = []
    for gname, spec in rf.graphs.items():
        source = _source(inputs, gname, spec.input)
        graph = _load(source)
        report = apply_graph(graph, spec, strict=strict, checkpoints=checkpoints)
        before = os.path.getsize(source.bin) if source.bin else None
        runs.append(GraphRun(gname, source, graph, report, before, None))
    for run in runs:
        if run.source.bin is None and any(layer.weights for layer in run.graph.layers):
            raise GsurgError(
                f"graph {run.name}: rules set weights but the model has no .bin to write them with "
                "(give --bin, or bin: in the rule file's inputs)"
            )
    if dry_run:
        return runs
    if folder is None:
        raise GsurgError("no output folder: give --out DIR (or outputs.dir in the rule file)")
    ensure_folder(folder, folder)
    _refuse_overwriting_inputs(runs, folder)
    with AtomicGroup() as group:
        for run in runs:
            base = Path(folder) / Path(run.source.param).name
            if is_param_bin(run.source.param):  # keep the input's form: a .param.bin stays binary
                write_param_bin(run.graph, base, group)
            else:
                write_param_text(run.graph, base, group)
            if run.source.bin is not None:
                records = write_bin(run.graph, Path(folder) / Path(run.source.bin).name, group)
                run.bytes_after = records[-1].offset + records[-1].nbytes if records else 0
            stem = base.name.removesuffix(".bin").removesuffix(".param")
            sidecar = base.with_name(stem + ".gsurg.json")
            atomic_write_bytes(sidecar, _provenance(rf, rule_path, run).encode("utf-8"), group)
    return runs


def _refuse_overwriting_inputs(runs: list[GraphRun], folder: str) -> None:
    for run in runs:
        for path in (run.source.param, run.source.bin):
            if path is None:
                continue
            target = Path(folder) / Path(path).name
            if target.exists() and os.path.samefile(target, path):
                raise GsurgError(f"{target}: refusing to overwrite an input; choose another --out")


def _provenance(rf: RuleFile, rule_path: str, run: GraphRun) -> str:
    doc: dict[str, Any] = {
        "rule_file": rule_path,
        "rule_set": rf.name,
        "graph": run.name,
        "rules": [
            {"rule": o.rule, "matches": o.matches, "iterations": o.iterations} for o in run.report.outcomes
        ],
        "layers": {name: run.report.provenance[name] for name in sorted(run.report.provenance)},
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def summary(runs: list[GraphRun]) -> str:
    lines = []
    for run in runs:
        lines.append(f"graph {run.name} ({run.source.param}):")
        for o in run.report.outcomes:
            lines.append(f"  rule {o.rule}: {o.matches} match(es) in {o.iterations} iteration(s)")
        before, after = run.report.types_before, run.report.types_after
        for t in sorted(set(before) | set(after)):
            if before[t] != after[t]:
                lines.append(f"  {t}: {before[t]} -> {after[t]} layers")
        if run.bytes_before is not None:
            after_text = "not written" if run.bytes_after is None else f"{run.bytes_after}"
            lines.append(f"  .bin bytes: {run.bytes_before} -> {after_text}")
    return "\n".join(lines)
