"""What a rule does to each layer it matched, by name: ``set``/``unset`` params (typed by the catalog),
``remove`` a pass-through layer, ``rename`` a layer. Interface blobs are never removed or renamed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.layout import TorchLayout, torch_dim_to_ncnn_axis
from graphsurgeon.rewrite.rulefile import (
    Action,
    AxisAction,
    RemoveAction,
    RenameAction,
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
