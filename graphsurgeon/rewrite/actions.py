"""What a rule does to each layer it matched, by name: ``set``/``unset`` params (typed by the catalog),
``remove`` a pass-through layer, ``rename`` a layer. Interface blobs are never removed or renamed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.weights import Storage, Weight
from graphsurgeon.layout import TorchLayout, torch_dim_to_ncnn_axis
from graphsurgeon.rewrite import snippets
from graphsurgeon.rewrite.rulefile import (
    Action,
    AxisAction,
    InsertAction,
    MoveWeight,
    MoveWeightAction,
    RemoveAction,
    RenameAction,
    RenameBlobAction,
    ReplaceAction,
    RewireAction,
    SetAction,
    UnsetAction,
    WeightAction,
)


class ActionError(GsurgError):
    """An action that cannot be applied to a matched layer; names the rule and the layer."""


@dataclass
class ActionContext:
    """What actions may need beyond the layer: the protected blobs, the match's captures, checkpoints."""

    interface: set[str]
    captures: dict[str, str] = field(default_factory=dict)
    checkpoints: dict[str, Any] = field(default_factory=dict)  # name -> formats.safetensors.Checkpoint
    matched: list[Layer] = field(default_factory=list)  # every layer of the match (pattern rules)
    layers: dict[str, Layer] = field(default_factory=dict)  # layer captures, and layers a snippet made
    values: dict[str, Any] = field(default_factory=dict)  # captured values as they are (ints stay ints)


def apply_action(graph: Graph, layer: Layer, action: Action, ctx: ActionContext) -> str:
    """Apply one action; returns a one-line description for the provenance record."""
    interface = ctx.interface
    if isinstance(action, SetAction):
        for name, value in action.set.items():
            layer.set(name, value)
        return "set " + ", ".join(f"{k}={v!r}" for k, v in action.set.items())
    if isinstance(action, UnsetAction):
        for name in action.unset:
            layer.unset(name)
        return "unset " + ", ".join(action.unset)
    if isinstance(action, RenameAction):
        new = action.rename.replace("{name}", layer.name)
        old, layer.name = layer.name, new
        return f"renamed from {old}"
    if isinstance(action, RemoveAction):
        return _remove_passthrough(graph, layer, interface)
    if isinstance(action, AxisAction):
        spec = action.axis_from_torch
        axis = torch_dim_to_ncnn_axis(spec.dim, TorchLayout(spec.rank, spec.batch))
        layer.set(spec.param, axis)
        return f"{spec.param}={axis} from torch dim {spec.dim} (rank {spec.rank}, batch {spec.batch})"
    if isinstance(action, RewireAction):
        return _rewire(graph, layer, action.rewire, ctx)
    if isinstance(action, RenameBlobAction):
        return _rename_blobs(graph, action.rename_blob, ctx)
    if isinstance(action, ReplaceAction):
        return _replace(graph, action.replace, ctx)
    if isinstance(action, InsertAction):
        made, written = snippets.build(
            graph, action.insert, ctx.values, graph.layers.index(layer), f"insert before {layer.name}"
        )
        ctx.layers.update(written)
        return "inserted " + ", ".join(x.name for x in made) + " before it"
    if isinstance(action, MoveWeightAction):
        return _move_weight(action.move_weight, ctx)
    if isinstance(action, WeightAction):
        from graphsurgeon.rewrite.weight_ops import apply_weight_op  # weights are the heavier dependency

        return apply_weight_op(graph, layer, action.weight, ctx.captures, ctx.checkpoints)
    raise ActionError(f"unknown action {action!r}")


def _remove_passthrough(graph: Graph, layer: Layer, interface: set[str]) -> str:
    if len(layer.inputs) != 1 or len(layer.outputs) != 1:
        raise ActionError(
            f"layer {layer.name}: remove needs one input and one output "
            f"(it has {len(layer.inputs)} and {len(layer.outputs)})"
        )
    source, out = layer.inputs[0], layer.outputs[0]
    if out.name in interface:
        raise ActionError(f"layer {layer.name}: removing it would remove interface blob {out.name!r}")
    for reader in list(dict.fromkeys(out.consumers)):
        for pos, blob in enumerate(reader.inputs):
            if blob is out:
                graph.set_input(reader, pos, source.name)
    graph.remove_layer(layer)
    return f"removed; {out.name} now reads {source.name}"


def _blob_name(token: str, ctx: ActionContext) -> str:
    if token.startswith("%"):
        if token[1:] not in ctx.captures:
            raise ActionError(f"{token} is not a capture of the match")
        return ctx.captures[token[1:]]
    return token


def _rewire(graph: Graph, layer: Layer, roles: dict[str, str], ctx: ActionContext) -> str:
    spec = layer.spec
    names = [r.rstrip("?*") for r in (spec.inputs or ())] if spec else []
    done = []
    for role, target in roles.items():
        if role not in names:
            raise ActionError(f"layer {layer.name}: {layer.type} has no input role {role!r} (roles: {names})")
        pos = names.index(role)
        if pos >= len(layer.inputs):
            raise ActionError(f"layer {layer.name}: input {role} is not connected")
        graph.set_input(layer, pos, _blob_name(target, ctx))
        done.append(f"{role} <- {layer.inputs[pos].name}")
    return "rewired " + ", ".join(done)


def _rename_blobs(graph: Graph, renames: dict[str, str], ctx: ActionContext) -> str:
    done = []
    for old_token, new in renames.items():
        old = _blob_name(old_token, ctx)
        if old in ctx.interface:
            raise ActionError(f"blob {old!r} is an interface blob and cannot be renamed")
        graph.rename_blob(old, new)
        done.append(f"{old} -> {new}")
    return "renamed blob " + ", ".join(done)


def _replace(graph: Graph, text: str, ctx: ActionContext) -> str:
    """Swap the matched layers for the snippet; blobs read outside the match must be produced again."""
    matched = ctx.matched
    at = min(graph.layers.index(x) for x in matched)
    inside = {id(x) for x in matched}
    needed = sorted(
        {
            b.name
            for x in matched
            for b in x.outputs
            if b.name in ctx.interface or any(id(c) not in inside for c in b.consumers)
        }
    )
    for x in matched:
        graph.remove_layer(x)
    made, written = snippets.build(graph, text, ctx.values, at, "replace")
    ctx.layers.update(written)
    produced = {b.name for x in made for b in x.outputs}
    lost = [name for name in needed if name not in produced]
    if lost:
        raise ActionError(f"the replacement does not produce {lost}, which other layers still read")
    return f"replaced {', '.join(x.name for x in matched)} with {', '.join(x.name for x in made)}"


def _move_weight(move: MoveWeight, ctx: ActionContext) -> str:
    def split(ref: str) -> tuple[Layer, str]:
        name, _, slot = ref.lstrip("%").rpartition(".")
        if name not in ctx.layers:
            raise ActionError(f"move_weight: {ref!r} does not name a matched or inserted layer")
        return ctx.layers[name], slot

    src, src_slot = split(move.from_)
    dst, dst_slot = split(move.to)
    weight = src.weights.get(src_slot)
    if weight is None:
        raise ActionError(f"move_weight: layer {src.name} has no weight {src_slot!r} (was the .bin given?)")
    spec = dst.spec
    active = {a.name: a for a in spec.active_weights(dst.env())} if spec else {}
    if dst_slot not in active:
        raise ActionError(f"move_weight: layer {dst.name} loads no weight {dst_slot!r} with its params")
    target = active[dst_slot]
    if target.count != weight.count:
        raise ActionError(
            f"move_weight: {src.name}.{src_slot} has {weight.count} elements, "
            f"{dst.name}.{dst_slot} loads {target.count}"
        )
    if target.load_type == weight.load_type and move.storage is None:
        dst.weights[dst_slot] = weight
    else:
        storage = Storage(move.storage) if move.storage else None
        values = weight.numpy
        dst.weights[dst_slot] = Weight.lazy(
            lambda: values().astype("float32").reshape(-1),
            shape=target.shape,
            load_type=target.load_type,
            storage=storage or (Storage.FP32 if target.load_type == 0 else Storage.RAW),
        )
    return f"weight {dst_slot} <- {src.name}.{src_slot}"
