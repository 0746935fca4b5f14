"""The text of ``gsurg apply``: ``--set`` parsing, the summary of each graph's rules, the table of the
sub-models written, and the ``--explain`` listing. The pipeline returns data (``GraphRun``, ``Explanation``);
how it reads on a terminal is decided here."""

from __future__ import annotations

import json
from typing import Any

from graphsurgeon.cli.common import UsageError
from graphsurgeon.pipeline.apply import Explanation
from graphsurgeon.pipeline.write_outputs import GraphRun


def parse_sets(values: list[str]) -> dict[str, str]:
    """``--set key=value`` options as a mapping (a later one for the same key wins); typing the values
    against the rule file's variables is the rule language's business (``rewrite.rule_tree``)."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: write key=value")
        out[key] = value
    return out


def explanation_text(found: Explanation) -> str:
    """``--explain``'s listing: a head line, then one line per candidate layer, matches marked."""
    lines = [f"rule {found.rule} on graph {found.graph} ({found.expected} expected):"]
    for c in found.candidates:
        mark = "MATCH" if c.matched else "no   "
        lines.append(f"  {mark} {c.layer_type} {c.layer_name}: {c.reason}")
    return "\n".join(lines)


def explanation_json(found: Explanation) -> str:
    """``--explain`` with ``--format json``."""
    return json.dumps(
        {
            "rule": found.rule,
            "graph": found.graph,
            "expected": found.expected,
            "candidates": [
                {"type": c.layer_type, "name": c.layer_name, "matched": c.matched, "reason": c.reason}
                for c in found.candidates
            ],
        },
        indent=2,
    )


def table(runs: list[GraphRun]) -> str:
    """The sub-models written: layers, weights, bytes and how the weights are stored."""
    rows = [("graph", "file", "layers", "weights", "bytes", "storage")]
    for run in runs:
        storages = sorted({r.storage_name for r in run.records})
        size = run.bytes_after if run.bytes_after is not None else 0
        rows.append(
            (
                run.name,
                run.param_name,
                str(len(run.graph.layers)),
                str(len(run.records)),
                f"{size:,}",
                "+".join(storages) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {2, 3, 4}
    return "\n".join(
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    )


def summary(runs: list[GraphRun]) -> str:
    """Per graph: each rule's matches, the layer types whose counts changed, calibration, storage and
    weight-map notes, and the .bin size before and after."""
    lines = []
    for run in runs:
        lines.append(f"graph {run.name} ({run.source}):")
        for o in run.report.outcomes:
            if o.skipped:
                lines.append(f"  rule {o.rule}: skipped (its `when` is false)")
            else:
                lines.append(f"  rule {o.rule}: {o.matches} match(es) in {o.iterations} iteration(s)")
        before, after = run.report.types_before, run.report.types_after
        for t in sorted(set(before) | set(after)):
            if before[t] != after[t]:
                lines.append(f"  {t}: {before[t]} -> {after[t]} layers")
        if run.calibration is not None:
            lines.append(f"  {run.calibration.summary()}")
        lines += [f"  {line}" for line in run.quantization]
        if run.storage_changes:
            lines.append(f"  storage policy re-stored {len(run.storage_changes)} weight(s)")
        lines.extend(f"  {m.summary()}" for m in run.weight_maps)
        if run.bytes_before is not None or run.bytes_after is not None:
            before_text = "none" if run.bytes_before is None else f"{run.bytes_before}"
            after_text = "not written" if run.bytes_after is None else f"{run.bytes_after}"
            lines.append(f"  .bin bytes: {before_text} -> {after_text}")
    return "\n".join(lines)


def runs_json(
    runs: list[GraphRun],
    folder: str | None,
    *,
    dry_run: bool,
    notes: list[str],
    reads: list[str] | None = None,
) -> str:
    """``--format json``: what the summary and the table say, as one JSON object."""
    graphs: list[dict[str, Any]] = []
    for run in runs:
        before, after = run.report.types_before, run.report.types_after
        graphs.append(
            {
                "graph": run.name,
                "source": run.source,
                "rules": [
                    {"rule": o.rule, "matches": o.matches, "iterations": o.iterations, "skipped": o.skipped}
                    for o in run.report.outcomes
                ],
                "layer_types_changed": {
                    t: [before[t], after[t]]
                    for t in sorted(set(before) | set(after))
                    if before[t] != after[t]
                },
                "param": None if dry_run else run.param_name,
                "bin": None if dry_run else run.bin_name,
                "layers": len(run.graph.layers),
                "weights": len(run.records),
                "storage": sorted({r.storage_name for r in run.records}),
                "storage_changes": len(run.storage_changes),
                "calibration": None if run.calibration is None else run.calibration.summary(),
                "quantization": run.quantization,
                "weight_maps": [m.output for m in run.weight_maps],
                "bin_bytes": [run.bytes_before, run.bytes_after],
            }
        )
    doc = {"graphs": graphs, "folder": None if dry_run else folder, "dry_run": dry_run, "notes": notes}
    if dry_run:
        doc["reads"] = reads or []
    return json.dumps(doc, indent=2)
