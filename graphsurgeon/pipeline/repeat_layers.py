"""Grow a short exported stack of pre-norm layers to its full depth, so that exporting a model never needs
more than a few of its layers in memory: the export source traces ``k`` layers at the real width (their
weights the checkpoint's first ``k`` layers), and ``repeat`` appends ``times`` copies of the last one, each
copy's weights read from the checkpoint tensors of its own layer when the ``.bin`` is written (lazy ``weight``
actions: one tensor in memory at a time).

**The layer.** A residual stream is followed from the blob ``stream`` through the two-input ``BinaryOp``
adds that read it (looking through Splits); the last ``adds`` adds are the last layer (two for a pre-norm
transformer layer: after attention, after the MLP). The layer is every layer on a path from the stream
blob before it to its last add's output: its norms, projections, attention and adds. Blobs the layer reads
from outside (RoPE tables, the mask, Splits of them) are read by every copy too; Splits for the new
readers are added and merged into the existing ones; a Split branch the template leaves unread (a graph
output: a tap) is not copied. Copies are chained (each reads the one before) and
placed after the last layer, in order; whatever read the last layer's output reads the last copy's (and
when nothing read it, a graph output, the last copy's output takes its name). So the
graph, and the order of the weights in its ``.bin``, is what exporting every layer gives.

**The weights.** Every weight of the template layer must be a checkpoint tensor, whole or one row range of
a fused tensor (``weight_pairing``), whose name holds the layer's number where the regex ``index`` (one
group) finds it, the same number for every weight of the layer. Copy ``c`` reads the tensor whose name has
that number plus ``c``, with the same row range, stored as the template weight is. A weight that no tensor
holds (an export's constant, a scaled copy) is refused, naming it: copying it would give every layer the
template's values.

Errors are ``RepeatError`` (one line, exit 2) naming the stream, the layer or the weight.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.safetensors import Checkpoint
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.names import fresh_name
from graphsurgeon.ir.passes import insert_splits, merge_chained_splits
from graphsurgeon.ir.residual import residual_stream
from graphsurgeon.ir.weights import Storage
from graphsurgeon.pipeline.weight_pairing import WeightMatcher
from graphsurgeon.rewrite.sections import RepeatSpec
from graphsurgeon.rewrite.weight_ops import WeightOp, WeightOpError, apply_weight_op

#: How a copy stores a weight, by the template's storage (a raw slot takes no storage: fp32 only).
_STORAGE_NAMES: dict[Storage, str | None] = {
    Storage.FP32: "fp32",
    Storage.RAW: None,
    Storage.FP16: "fp16",
    Storage.BF16: "bf16",
}


class RepeatError(GsurgError):
    """A short stack ``repeat`` cannot grow: no such stream, too few layers, a weight without a tensor."""


def _closure(seeds: list[Layer], step: str) -> set[int]:
    """Ids of the layers reached from ``seeds`` following outputs' consumers (``down``) or inputs'
    producers (``up``)."""
    seen: set[int] = set()
    todo = list(seeds)
    while todo:
        layer = todo.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if step == "down":
            todo += [c for b in layer.outputs for c in b.consumers]
        else:
            todo += [b.producer for b in layer.inputs if b.producer is not None]
    return seen


def last_layer(graph: Graph, spec: RepeatSpec, where: str) -> tuple[list[Layer], str, str]:
    """The last layer's layers in graph order, the stream blob it reads and the blob it ends with."""
    if spec.stream not in graph.blobs:
        raise RepeatError(f"{where}: repeat: no blob {spec.stream!r} (the residual stream's start)")
    stream = residual_stream(graph, spec.stream)
    if len(stream) < spec.adds:
        raise RepeatError(
            f"{where}: repeat: the residual stream from {spec.stream!r} has {len(stream)} adds, fewer than "
            f"the {spec.adds} of one layer"
        )
    start = stream[-spec.adds - 1] if len(stream) > spec.adds else spec.stream
    end = stream[-1]
    down = _closure(list(graph.blob(start).consumers), "down")
    producer = graph.blob(end).producer
    assert producer is not None  # an add's output
    up = _closure([producer], "up")
    block = [x for x in graph.layers if id(x) in down and id(x) in up]
    inside = {id(x) for x in block}
    for layer in block:
        for blob in layer.outputs:
            outside = [c.name for c in blob.consumers if id(c) not in inside]
            if outside and blob.name != end:
                raise RepeatError(
                    f"{where}: repeat: blob {blob.name!r} of the last layer (made by {layer.name}) is also "
                    f"read by {', '.join(outside)}, outside it: the layer is not self-contained"
                )
    return block, start, end


def _sources(
    block: list[Layer], matcher: WeightMatcher, index: re.Pattern[str], where: str
) -> tuple[dict[tuple[str, str], tuple[str, re.Match[str], tuple[int, int] | None]], int]:
    """Each template weight's tensor, its index match and row range, and the template's layer number."""
    found: dict[tuple[str, str], tuple[str, re.Match[str], tuple[int, int] | None]] = {}
    numbers: dict[int, str] = {}
    for layer in block:
        for slot, weight in layer.weights.items():
            what = f"{where}: repeat: layer {layer.name}, weight {slot}"
            if weight.storage not in _STORAGE_NAMES:
                raise RepeatError(
                    f"{what}: stored as {weight.storage.value}; only float weights are repeated"
                )
            whole, part = matcher.holders(weight)
            tensor, rows = (whole[0], None) if whole else part if part is not None else (None, None)
            if tensor is None:
                raise RepeatError(
                    f"{what}: no tensor of {matcher.path} holds its values (copied, it would give every "
                    "layer the template's values)"
                )
            m = index.search(tensor)
            if m is None:
                raise RepeatError(
                    f"{what}: its tensor {tensor!r} has no layer number where {index.pattern!r} looks"
                )
            numbers.setdefault(int(m.group(1)), f"{layer.name}.{slot} ({tensor})")
            found[(layer.name, slot)] = (tensor, m, rows)
    if len(numbers) > 1:
        listed = "; ".join(f"{n}: {w}" for n, w in sorted(numbers.items()))
        raise RepeatError(f"{where}: repeat: the last layer's weights come from several layers ({listed})")
    if not numbers:
        raise RepeatError(f"{where}: repeat: the last layer has no weights to find its layer number by")
    return found, next(iter(numbers))


def repeat_last_layer(
    graph: Graph, spec: RepeatSpec, checkpoints: Mapping[str, Checkpoint], where: str
) -> str:
    """Append ``spec.times`` copies of the graph's last layer (module docstring); returns a summary line."""
    if spec.times == 0:
        return f"{where}: repeat: no copies asked for"
    block, start, end = last_layer(graph, spec, where)
    label, ckpt = _checkpoint(spec.checkpoint, checkpoints, where)
    index = re.compile(spec.index)
    if index.groups != 1:
        raise RepeatError(
            f"{where}: repeat: index {spec.index!r} must have exactly one group (the layer number)"
        )
    sources, number = _sources(block, WeightMatcher(ckpt), index, where)
    readers = [c for c in graph.blob(end).consumers if c not in block]
    output = None if readers else end  # a graph output: the last copy's end takes its name
    if output is not None:
        end = fresh_name(f"{output}_r0", graph.blobs)
        graph.rename_blob(output, end)
    inside = {b.name for x in block for b in x.outputs}
    at = graph.layers.index(block[-1]) + 1
    taken_layers = {x.name for x in graph.layers}
    previous = end
    for c in range(1, spec.times + 1):
        renamed = {start: previous}
        for name in sorted(inside):
            renamed[name] = fresh_name(f"{name}_r{c}", graph.blobs, renamed.values())
        if c == spec.times and output is not None:
            renamed[end] = output
        for layer in block:
            name = fresh_name(f"{layer.name}_r{c}", taken_layers)
            taken_layers.add(name)
            ins = [renamed.get(b.name, b.name) for b in layer.inputs]
            kept = [b for b in layer.outputs if b.consumers or b.name == end or layer.type != "Split"]
            outs = [renamed[b.name] for b in kept]  # a Split's graph-output branch is not copied
            made = graph.add_layer(layer.type, name, ins, outs, dict(layer.params), index=at)
            at += 1
            for slot, weight in layer.weights.items():
                tensor, m, rows = sources[(layer.name, slot)]
                wanted = f"{tensor[: m.start(1)]}{number + c}{tensor[m.end(1) :]}"
                transforms = (
                    [] if rows is None else [{"slice": {"axis": 0, "start": rows[0], "stop": rows[1]}}]
                )
                fields = {"slot": slot, "from": wanted, "checkpoint": label, "transforms": transforms}
                storage = _STORAGE_NAMES[weight.storage]
                op = WeightOp.model_validate(fields if storage is None else {**fields, "storage": storage})
                try:
                    apply_weight_op(graph, made, op, lambda text, _where: text, checkpoints)
                except WeightOpError as err:
                    raise RepeatError(f"{where}: repeat, layer {number + c}: {err}") from None
        previous = renamed[end]
    for reader in readers:
        for pos, blob in enumerate(reader.inputs):
            if blob.name == end:
                graph.set_input(reader, pos, previous)
    insert_splits(graph)
    merge_chained_splits(graph)
    return f"{where}: repeat: layer {number} ({len(block)} layers) copied {spec.times} times from {label}"


def _checkpoint(
    wanted: str | None, checkpoints: Mapping[str, Checkpoint], where: str
) -> tuple[str, Checkpoint]:
    if wanted is not None:
        if wanted not in checkpoints:
            declared = ", ".join(sorted(checkpoints)) or "none"
            raise RepeatError(
                f"{where}: repeat: checkpoint {wanted!r} is not declared in checkpoints ({declared})"
            )
        return wanted, checkpoints[wanted]
    if len(checkpoints) != 1:
        why = "declares none" if not checkpoints else "declares several: name one"
        raise RepeatError(
            f"{where}: repeat reads the copies' weights from a checkpoint, and the rule file {why}"
        )
    ((label, ckpt),) = checkpoints.items()
    return label, ckpt
