"""What a rule does to each layer it matched, by name: ``set``/``unset`` params (typed by the catalog),
``remove`` a pass-through layer, ``rename`` a layer. Interface blobs are never removed or renamed."""

from __future__ import annotations

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.rewrite.rulefile import Action, RemoveAction, RenameAction, SetAction, UnsetAction


class ActionError(GsurgError):
    """An action that cannot be applied to a matched layer; names the rule and the layer."""


def apply_action(graph: Graph, layer: Layer, action: Action, interface: set[str]) -> str:
    """Apply one action; returns a one-line description for the provenance record."""
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
