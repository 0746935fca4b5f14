"""``gsurg lint``: every check ncnn skips, collected in one run.

The .param is read leniently (every problem recorded, none raised) unless it cannot be read at all; the
.bin, when given, is walked at exact offsets and every weight's values are scanned. Each check is
independent: one that cannot run on this model reports that and the others go on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from graphsurgeon.check import checks_params as params
from graphsurgeon.check import checks_structure as structure
from graphsurgeon.check.checks_weights import check_weight_values
from graphsurgeon.check.context import LintContext, LintOptions
from graphsurgeon.check.findings import Finding, LintReport, error
from graphsurgeon.check.shapes import known_shapes
from graphsurgeon.errors import BinFormatError, GsurgError
from graphsurgeon.formats.model_bin import WeightRecord, read_bin
from graphsurgeon.formats.param_any import read_param
from graphsurgeon.input_files import check_input
from graphsurgeon.ir.graph import Graph
from graphsurgeon.schema.catalog import load_catalog
from graphsurgeon.schema.custom import with_custom

Check = Callable[[LintContext], Iterable[Finding]]

#: The checks, in report order.
CHECKS: tuple[tuple[str, Check], ...] = (
    ("reader", structure.check_reader_issues),
    ("layer-types", params.check_layer_types),
    ("bottoms", structure.check_bottoms),
    ("fanout", structure.check_fanout),
    ("names", structure.check_names),
    ("reserved-params", params.check_reserved_ids),
    ("literal-types", params.check_literal_types),
    ("layer-rules", params.check_layer_rules),
    ("interface", structure.check_interface),
)


def read_for_lint(path: str, custom: list[str]) -> Graph:
    """Read a .param (text or binary) leniently: every problem recorded, none raised unless unreadable."""
    catalog = with_custom(load_catalog(), custom) if custom else load_catalog()
    return read_param(path, catalog=catalog, strict=False)


def run_lint(path: str, options: LintOptions, custom: list[str] | None = None) -> LintReport:
    """Lint one model. Raises GsurgError only when the .param cannot be read at all (exit 2)."""
    graph = read_for_lint(path, custom or [])
    options.custom_types |= {c.partition(":")[0] for c in custom or []}
    report = LintReport(
        path=path, bin_path=options.bin_path, layers=len(graph.layers), blobs=len(graph.blobs)
    )
    records: list[WeightRecord] | None = None
    walk_finding: Finding | None = None
    if options.bin_path is not None:
        check_input(options.bin_path)  # unreadable, or not a regular file: exit 2, not a finding
        try:
            records = read_bin(graph, options.bin_path)
            report.weights = len(records)
        except BinFormatError as err:
            located = err.layer is not None or err.offset is not None  # the finding carries the place
            reason = err.reason if located else str(err)
            walk_finding = error("bin-walk", reason, layer=err.layer, weight=err.slot, offset=err.offset)
    report.findings.extend(lint_graph(graph, options))
    report.checks_run.extend(name for name, _ in CHECKS)
    if options.bin_path is not None:
        report.checks_run.append("bin")
        if walk_finding is not None:
            report.findings.append(walk_finding)
        elif records is not None:
            ctx = LintContext(graph, options, {})
            report.findings.extend(_safely("weights", lambda c: check_weight_values(c, records), ctx))
    return report


def lint_graph(graph: Graph, options: LintOptions | None = None) -> list[Finding]:
    """The graph checks (no .bin) on a graph in memory: what ``apply --strict`` runs after every rule."""
    ctx = LintContext(graph, options or LintOptions(), known_shapes(graph))
    return [finding for name, check in CHECKS for finding in _safely(name, check, ctx)]


def _safely(name: str, check: Check, ctx: LintContext) -> list[Finding]:
    try:
        return list(check(ctx))
    except GsurgError as err:
        return [error("check-failed", f"check {name} could not run on this model: {err}")]
