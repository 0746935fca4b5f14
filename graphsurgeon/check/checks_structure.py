"""Structural checks: what the reader recorded, SSA blobs, fan-out, names, the declared interface."""

from __future__ import annotations

from collections.abc import Iterator

from graphsurgeon.check.context import LintContext
from graphsurgeon.check.findings import Finding, error, warning

#: ParseIssue code → lint check id. Every issue the lenient reader records is an error: ncnn either
#: rejects the file or reads something other than what it says.
ISSUE_CHECKS = {
    "magic": "magic",
    "header-count": "header-counts",
    "layer-count": "header-counts",
    "blob-count": "header-counts",
    "extra-layers": "header-counts",
    "spare-blobs": "header-counts",
    "duplicate-top": "duplicate-top",
    "use-before-def": "undefined-bottom",
    "param-id": "param-id",
    "mixed-array": "mixed-array",
    "array-length": "array-length",
    "array-syntax": "array-length",
    "int-overflow": "literal-range",
    "float-overflow": "literal-range",
}


def check_reader_issues(ctx: LintContext) -> Iterator[Finding]:
    """Problems the lenient reader recorded (header, arrays, lengths, SSA tops) and its warnings."""
    for issue in ctx.graph.issues:
        check = ISSUE_CHECKS.get(issue.code, "name-length" if issue.code.endswith("-length") else issue.code)
        make = warning if issue.warning else error
        yield make(check, issue.message, layer=issue.layer, line=issue.line or None, offset=issue.offset)
    for note in ctx.graph.notes:  # notes of a strictly read graph (a .param.bin)
        yield warning("header-counts", note)


def check_bottoms(ctx: LintContext) -> Iterator[Finding]:
    """Every bottom is produced by an earlier layer (Input tops included)."""
    graph = ctx.graph
    for blob in graph.blobs.values():
        if blob.producer is not None or f"{blob.name}#2" in graph.blobs:
            continue  # produced, or already reported as read-before-produced
        for layer in dict.fromkeys(blob.consumers):
            yield error(
                "undefined-bottom",
                f"reads blob {blob.name!r}, which no layer produces; ncnn logs "
                "'find_blob_index_by_name failed' and feeds it an empty blob",
                layer=layer.name,
                line=layer.line or None,
                blob=blob.name,
            )


def check_fanout(ctx: LintContext) -> Iterator[Finding]:
    """A blob read by more than one layer must go through Split: ncnn frees or overwrites it in place after
    its first consumer (blob.consumer is a single index)."""
    for blob in ctx.graph.blobs.values():
        readers = list(dict.fromkeys(blob.consumers))
        if len(readers) > 1:
            names = ", ".join(r.name for r in readers)
            yield error(
                "fanout-without-split",
                f"blob {blob.name!r} is read by {len(readers)} layers ({names}) without a Split; "
                "with lightmode "
                "the first reader may free or modify it in place",
                layer=readers[1].name,
                line=readers[1].line or None,
                blob=blob.name,
            )


def check_names(ctx: LintContext) -> Iterator[Finding]:
    """Names ncnn can read back (no whitespace; lengths are checked as the file is read), unique layer
    names."""
    seen: dict[str, int] = {}
    for layer in ctx.graph.layers:
        for what, name in (("layer name", layer.name), ("layer type", layer.type)):
            if any(ch.isspace() for ch in name) or not name:
                yield error("name", f"{what} {name!r} is empty or holds whitespace", layer=layer.name)
        for blob in (*layer.inputs, *layer.outputs):
            if any(ch.isspace() for ch in blob.name):
                yield error("name", f"blob name {blob.name!r} holds whitespace", layer=layer.name)
        if layer.name in seen:
            yield warning(
                "duplicate-layer-name",
                f"layer name {layer.name!r} is also used on line {seen[layer.name]}; "
                "ncnn requires unique names",
                layer=layer.name,
                line=layer.line or None,
            )
        seen.setdefault(layer.name, layer.line)


def _reachable(ctx: LintContext, sources: set[str]) -> set[str]:
    """Blobs computed from ``sources`` (Input tops) or from constants (MemoryData and other layers without
    bottoms, except Input layers, which count only through ``sources``)."""
    reached = set(sources)
    for layer in ctx.graph.layers:  # file order is topological
        constant = not layer.inputs and layer.type != "Input"
        if constant or any(b.name in reached for b in layer.inputs):
            reached.update(b.name for b in layer.outputs)
    return reached


def check_interface(ctx: LintContext) -> Iterator[Finding]:
    """Declared inputs are Input tops; declared outputs exist, are produced and reachable; other leaf blobs
    (candidates for outputs: ncnn has no output list) are reported when outputs were declared."""
    graph, opts = ctx.graph, ctx.options
    input_tops = {b.name for b in graph.input_blobs()}
    for name in opts.inputs or []:
        if name not in graph.blobs:
            yield error("interface", f"declared input {name!r} is not a blob of this graph", blob=name)
        elif name not in input_tops:
            yield error("interface", f"declared input {name!r} is not produced by an Input layer", blob=name)
    sources = set(opts.inputs) if opts.inputs else input_tops
    reached = _reachable(ctx, sources & set(graph.blobs))
    for name in opts.outputs or []:
        blob = graph.blobs.get(name)
        if blob is None or blob.producer is None:
            yield error("interface", f"declared output {name!r} is not produced by any layer", blob=name)
        elif name not in reached:
            yield error("interface", f"declared output {name!r} is not reachable from the inputs", blob=name)
    if opts.outputs is not None:
        for blob in graph.output_blobs():
            if blob.name not in opts.outputs:
                yield warning(
                    "undeclared-output",
                    f"leaf blob {blob.name!r} is produced and never read, but not declared as an output",
                    layer=blob.producer.name if blob.producer else None,
                    line=(blob.producer.line or None) if blob.producer else None,
                    blob=blob.name,
                )
