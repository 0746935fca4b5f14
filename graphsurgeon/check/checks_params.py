"""Param checks: ids, literal types against the catalog, layer types ncnn lacks, and the per-layer rules
ncnn itself does not check (or checks only by failing at load time)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from graphsurgeon.check.checks_quant import check_gemm_block_quantize
from graphsurgeon.check.context import LintContext
from graphsurgeon.check.findings import Finding, error, warning
from graphsurgeon.check.shapes import SHAPE_HINTS_ID, dynamic_evidence, hint_records
from graphsurgeon.errors import QUOTE_LIMIT, GsurgError, quoted
from graphsurgeon.ir.graph import Layer
from graphsurgeon.ir.params import Param
from graphsurgeon.schema.catalog import ParamSpec, ValueType

FEATMASK_ID = 31
UNCONVERTED_PREFIXES = ("pnnx.", "aten::", "torch.", "Tensor.", "F.", "nn.", "prim::")


def _at(layer: Layer) -> dict[str, object]:
    return {"layer": layer.name, "line": layer.line or None}


def check_reserved_ids(ctx: LintContext) -> Iterator[Finding]:
    """Ids 30 (shape hints: an int array, one equal record per top) and 31 (featmask: an int)."""
    for layer in ctx.graph.layers:
        if SHAPE_HINTS_ID in layer.params and hint_records(layer) is None:
            yield error(
                "reserved-param",
                f"param 30 is read by ncnn as output shape hints ([dims, w, h, (d,) c] per top, "
                f"{len(layer.outputs)} top(s)); this value is not that",
                **_at(layer),
            )
        mask = layer.params.get(FEATMASK_ID)
        if mask is not None and mask.kind is not ValueType.INT:
            yield error("reserved-param", "param 31 is the featmask and must be an int", **_at(layer))


def _type_finding(layer: Layer, spec: ParamSpec, param: Param) -> Finding | None:
    expected, kind = spec.type, param.kind
    name = f"param {spec.id} ({spec.name})"
    if kind is expected:
        return None
    if expected is ValueType.INT and kind is ValueType.FLOAT:
        return error(
            "literal-type",
            f"{name} is an int but is written as the float {param.value!r}: ncnn 1.0.20261020 then uses the "
            f"default {spec.default!r} (older ncnn reads the float's bits); write an int",
            **_at(layer),
        )
    if expected is ValueType.FLOAT and kind is ValueType.INT:
        return warning(
            "literal-type",
            f"{name} is a float but is written as the int {param.value!r}: ncnn 1.0.20261020 converts it, "
            f"older ncnn reads the int's bits as a tiny float; write {param.value}.0",
            **_at(layer),
        )
    if expected is ValueType.FLOAT_ARRAY and kind is ValueType.INT_ARRAY:
        return warning(
            "literal-type",
            f"{name} is a float array but is written with int elements; write every element with a '.'",
            **_at(layer),
        )
    return error(
        "literal-type",
        f"{name} expects {expected.value.replace('_', ' ')} "
        f"but the literal is {kind.value.replace('_', ' ')}: "
        "ncnn 1.0.20261020 rejects it or uses the default",
        **_at(layer),
    )


def check_literal_types(ctx: LintContext) -> Iterator[Finding]:
    """Every literal's kind against the catalog type of its param; params the layer never reads."""
    for layer in ctx.graph.layers:
        spec = layer.spec
        if spec is None:
            continue
        for pid, param in sorted(layer.params.items()):
            if pid in (SHAPE_HINTS_ID, FEATMASK_ID):
                continue
            pspec = spec.params.get(pid)
            if pspec is None:
                yield warning(
                    "unknown-param", f"{layer.type} reads no param {pid}; ncnn ignores it", **_at(layer)
                )
                continue
            finding = _type_finding(layer, pspec, param)
            if finding is not None:
                yield finding


def check_layer_types(ctx: LintContext) -> Iterator[Finding]:
    """Types ncnn does not have: ops pnnx left unconverted are errors; other unknown types are custom
    layers (warnings) unless declared with --custom."""
    reported: set[str] = set()
    for layer in ctx.graph.layers:
        if layer.spec is not None or layer.type in ctx.options.custom_types:
            continue
        if layer.type.startswith(UNCONVERTED_PREFIXES):
            yield error(
                "unconverted-op",
                f"{layer.type} is an op pnnx left unconverted; "
                f"ncnn fails with 'layer {layer.type} not exists "
                "or registered'",
                **_at(layer),
            )
        elif layer.type not in reported:
            reported.add(layer.type)
            shown = layer.type if len(layer.type) <= QUOTE_LIMIT else quoted(layer.type)
            yield warning(
                "custom-layer",
                f"{shown} is not an ncnn layer: it loads only if the program registers it "
                "(declare it with --custom TYPE[:weights])",
                **_at(layer),
            )


def check_layer_rules(ctx: LintContext) -> Iterator[Finding]:
    """Per-layer rules ncnn leaves to the writer."""
    dynamic = dynamic_evidence(ctx.graph)
    for layer in ctx.graph.layers:
        if layer.spec is None:
            continue
        rule = _RULES.get(layer.type)
        if rule is None:
            continue
        try:
            findings = list(rule(ctx, layer, dynamic))
        except GsurgError as err:
            findings = [
                error("check-failed", f"the {layer.type} rule could not run here: {err}", **_at(layer))
            ]
        yield from findings


def _softmax(ctx: LintContext, layer: Layer, dynamic: str | None) -> Iterator[Finding]:
    if layer.get("axis") != 0 and layer.get("fixbug0") != 1:
        yield error(
            "softmax-fixbug",
            f"Softmax with axis {layer.get('axis')} needs 1=1, otherwise ncnn fails: 'param is too old'",
            **_at(layer),
        )


def _reduction(ctx: LintContext, layer: Layer, dynamic: str | None) -> Iterator[Finding]:
    if layer.get("axes") and layer.get("fixbug0") != 1:
        yield error("reduction-fixbug", "Reduction with axes needs 5=1, otherwise ncnn fails", **_at(layer))


def _reshape(ctx: LintContext, layer: Layer, dynamic: str | None) -> Iterator[Finding]:
    dims = [
        layer.get(n) for n in ("w", "h", "d", "c") if layer.spec and layer.spec.param(n).id in layer.params
    ]
    expr = layer.get("shape_expr") or ""
    inferred = dims.count(-1) + [part.strip() for part in expr.split(",")].count("-1")
    if inferred > 1:
        yield error(
            "reshape-two-minus-one",
            "Reshape infers more than one dim (-1); ncnn cannot resolve it",
            **_at(layer),
        )


def _slice(ctx: LintContext, layer: Layer, dynamic: str | None) -> Iterator[Finding]:
    slices, indices, axis = layer.get("slices"), layer.get("indices"), layer.get("axis")
    if not -4 <= axis <= 3:
        yield error("slice", f"Slice axis {axis} is outside -4..3", **_at(layer))
        return
    if slices and indices:
        yield warning("slice", "Slice has both slices (0=) and indices (2=); ncnn uses indices", **_at(layer))
    if any(v < 0 and v != -233 for v in slices):
        yield error("slice", f"Slice sizes {slices} hold a negative size other than -233", **_at(layer))
        return
    if slices and len(slices) != len(layer.outputs):
        yield error("slice", f"Slice has {len(slices)} sizes but {len(layer.outputs)} tops", **_at(layer))
    shape = ctx.shapes.get(layer.inputs[0].name) if layer.inputs else None
    if shape is None or not slices or indices:
        return
    dim = shape[axis if axis >= 0 else len(shape) + axis] if -len(shape) <= axis < len(shape) else None
    if dim is None:
        yield error("slice", f"Slice axis {axis} is outside the input's rank {len(shape)}", **_at(layer))
        return
    fixed = [v for v in slices if v != -233]
    if sum(fixed) > dim or (len(fixed) == len(slices) and sum(fixed) != dim):
        yield error("slice", f"Slice sizes {slices} do not fit axis {axis} of size {dim}", **_at(layer))


def _gemm(ctx: LintContext, layer: Layer, dynamic: str | None) -> Iterator[Finding]:
    yield from check_gemm_block_quantize(layer)
    if dynamic is None or layer.get("constantA") or not layer.get("constantM"):
        return
    m = layer.get("constantM")
    if dynamic == "kv-cache":
        yield error(
            "gemm-constant-m",
            f"Gemm fixes M={m} (7=) in a graph with a KV cache, which runs prefill at other lengths; "
            "write 7=0",
            **_at(layer),
        )
    else:
        yield warning(
            "gemm-constant-m",
            f"Gemm fixes M={m} (7=) and an Input declares no shape: if the sequence length varies, write 7=0",
            **_at(layer),
        )


def _mha(ctx: LintContext, layer: Layer, dynamic: str | None) -> Iterator[Finding]:
    embed, heads = layer.get("embed_dim"), layer.get("num_heads")
    if heads <= 0 or embed % heads:
        yield error(
            "attention-heads",
            f"MultiHeadAttention embed_dim {embed} is not divisible by {heads} heads",
            **_at(layer),
        )


def _sdpa(ctx: LintContext, layer: Layer, dynamic: str | None) -> Iterator[Finding]:
    if len(layer.inputs) < 2:
        return
    q, k = (ctx.shapes.get(b.name) for b in layer.inputs[:2])
    if q and k and len(q) == 3 and len(k) == 3 and (k[0] == 0 or q[0] % k[0]):
        yield error(
            "attention-heads",
            f"SDPA has {q[0]} query heads and {k[0]} key/value heads: not a multiple (ncnn does not check)",
            **_at(layer),
        )


def _binaryop(ctx: LintContext, layer: Layer, dynamic: str | None) -> Iterator[Finding]:
    if layer.get("with_scalar") or len(layer.inputs) != 2:
        return
    a, b = (ctx.shapes.get(blob.name) for blob in layer.inputs)
    if a is None or b is None or len(a) == len(b):
        return
    high, low = (a, b) if len(a) > len(b) else (b, a)
    if len(low) == 1 and low[0] == high[-1]:
        return  # the one numpy-like case ncnn supports
    shapes = f"{list(a)} and {list(b)}"
    if all(lo in (1, hi) for lo, hi in zip(low, high, strict=False)):
        yield warning(
            "binaryop-rank",
            f"BinaryOp operands {shapes} differ in rank: ncnn aligns the lower-rank one to the outer dims "
            "(per-channel), not to the inner dims as numpy/torch do; reshape it with explicit 1s if that is "
            "not what you mean",
            **_at(layer),
        )
    else:
        yield error(
            "binaryop-rank",
            f"BinaryOp operands {shapes} differ in rank and do not broadcast in ncnn, which aligns the "
            "lower-rank one to the outer dims (numpy aligns inner dims); reshape it to the same rank",
            **_at(layer),
        )


def _rotary(ctx: LintContext, layer: Layer, dynamic: str | None) -> Iterator[Finding]:
    """ncnn 1.0.20261020 applies a full-width cos/sin row's two halves independently in the non-interleaved
    mode (src/layer/rotaryembed.cpp: ``cw = cos_cache.w == embed_dim ? half : 0``), so a 2-D RoPE table with
    differing halves is right there; older ncnn (e.g. a4d2ea1, before PR #6834) reads the first half only.
    The interleaved mode reads one cos/sin entry per pair, i.e. the first half of a full-width row."""
    if len(layer.inputs) < 3:
        return
    x = ctx.shapes.get(layer.inputs[0].name)
    interleaved = bool(layer.get("interleaved"))
    cos_shape, sin_shape = (ctx.shapes.get(b.name) for b in layer.inputs[1:3])
    if cos_shape and sin_shape and cos_shape[-1] != sin_shape[-1]:
        yield error(
            "rotary-width-mismatch",
            f"cos is {cos_shape[-1]} wide and sin {sin_shape[-1]}: ncnn decides full or half width from cos "
            "alone and reads sin the same way, so sin's entries are taken from the wrong places",
            **_at(layer),
        )
    for blob in layer.inputs[1:3]:
        cos = ctx.shapes.get(blob.name)
        if x is None or cos is None or cos[-1] != x[-1]:
            continue
        differ = _constant_halves_differ(blob.producer, cos)
        if interleaved and differ:
            yield error(
                "rotary-full-width",
                "interleaved RotaryEmbed reads one entry per pair (the first half of each "
                f"{blob.name!r} row), "
                "and this table's halves differ: the second half is ignored; lower it explicitly",
                **_at(layer),
            )
        elif differ:
            yield warning(
                "rotary-full-width",
                f"{blob.name!r} is a full-width table with differing halves (2-D RoPE): ncnn 1.0.20261020 "
                "applies each half to its own half of the head, but older ncnn (before PR #6834) reads only "
                "the first half and would silently compute wrong numbers",
                **_at(layer),
            )
        elif interleaved:
            yield warning(
                "rotary-full-width",
                f"interleaved RotaryEmbed reads only the first half of each full-width {blob.name!r} row",
                **_at(layer),
            )


def _constant_halves_differ(producer: Layer | None, shape: tuple[int, ...]) -> bool:
    """For a constant (MemoryData) cos/sin table whose data is loaded: do its row halves differ?"""
    if producer is None or producer.type != "MemoryData" or "data" not in producer.weights:
        return False
    width = shape[-1]
    if width % 2:
        return False
    rows = producer.weights["data"].numpy().reshape(-1, width)
    return not np.array_equal(rows[:, : width // 2], rows[:, width // 2 :])


_RULES = {
    "Softmax": _softmax,
    "Reduction": _reduction,
    "Reshape": _reshape,
    "Slice": _slice,
    "Gemm": _gemm,
    "MultiHeadAttention": _mha,
    "SDPA": _sdpa,
    "BinaryOp": _binaryop,
    "RotaryEmbed": _rotary,
}
