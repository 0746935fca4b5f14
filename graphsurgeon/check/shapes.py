"""Blob shapes lint can know without running the model: shape hints (param 30), Input and MemoryData
dims, carried through Split. Shapes are numpy order in ncnn's batch-free rank: (w,), (h, w), (c, h, w),
(c, d, h, w)."""

from __future__ import annotations

from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.params import Param
from graphsurgeon.schema.catalog import ValueType

Shape = tuple[int, ...]
SHAPE_HINTS_ID = 30  # Net reads it before load_param: one record per top


def from_whdc(w: int, h: int, d: int, c: int) -> Shape | None:
    """The Mat shape ncnn makes from w/h/d/c params (rank = highest nonzero), or None when all are 0."""
    if d:
        return (c, d, h, w)
    if c:
        return (c, h, w)
    if h:
        return (h, w)
    if w:
        return (w,)
    return None


def hint_records(layer: Layer) -> list[Shape] | None:
    """Per-top shapes from a ``30=`` hint (``[dims, w, h, (d,) c]`` per top); None if absent or malformed."""
    param: Param | None = layer.params.get(SHAPE_HINTS_ID)
    n_tops = len(layer.outputs)
    if param is None or param.kind is not ValueType.INT_ARRAY or not n_tops:
        return None
    values = [int(v) for v in param.value]  # type: ignore[union-attr]
    if len(values) % n_tops:
        return None
    size = len(values) // n_tops
    shapes: list[Shape] = []
    for i in range(n_tops):
        rec = values[i * size : (i + 1) * size]
        if size == 4:
            dims, w, h, c, d = rec[0], rec[1], rec[2], rec[3], 1
        elif size == 5:
            dims, w, h, d, c = rec
        else:
            return None
        by_rank: dict[int, Shape] = {1: (w,), 2: (h, w), 3: (c, h, w), 4: (c, d, h, w)}
        full = by_rank.get(dims)
        if full is None or any(v <= 0 for v in full):
            return None
        shapes.append(full)
    return shapes


def known_shapes(graph: Graph) -> dict[str, Shape]:
    """Shapes by blob name, from what the file states (never guessed from computation)."""
    shapes: dict[str, Shape] = {}
    for layer in graph.layers:
        hints = hint_records(layer)
        if hints is not None:
            for blob, shape in zip(layer.outputs, hints, strict=True):
                shapes[blob.name] = shape
            continue
        if layer.type in ("Input", "MemoryData") and layer.spec is not None and len(layer.outputs) == 1:
            env = layer.env()
            stated = from_whdc(env["w"], env["h"], env["d"], env["c"])
            if stated is not None:
                shapes[layer.outputs[0].name] = stated
        elif layer.type == "Split" and layer.inputs and layer.inputs[0].name in shapes:
            for blob in layer.outputs:
                shapes[blob.name] = shapes[layer.inputs[0].name]
    return shapes


def dynamic_evidence(graph: Graph) -> str | None:
    """Why the sequence length may change from run to run: "kv-cache" (an attention layer with a KV cache:
    the graph serves prefill and decode), "unshaped-input" (some Input declares no shape), or None."""
    unshaped = False
    for layer in graph.layers:
        if layer.spec is None:
            continue
        if layer.type in ("SDPA", "MultiHeadAttention") and layer.get("kv_cache"):
            return "kv-cache"
        if layer.type == "Input" and all(layer.get(n) == 0 for n in ("w", "h", "d", "c")):
            unshaped = True
    return "unshaped-input" if unshaped else None
