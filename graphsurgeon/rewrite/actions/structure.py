"""Actions that change the graph's structure: ``remove`` a pass-through layer, ``rename`` a layer,
``rewire`` an input by its catalog role, ``rename_blob``, ``replace`` the matched layers with param lines,
``insert`` param lines before a layer, ``add_bottoms``/``add_tops`` on a layer and ``add_input`` (an Input
layer with several tops). New names are per-match templates (``rewrite.match_template``). Protected
interface blobs are never removed or renamed."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from graphsurgeon.errors import GraphError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.passes import toposort
from graphsurgeon.rewrite import snippets
from graphsurgeon.rewrite.actions.base import ActionContext, ActionError, ActionModel, LayerAction
from graphsurgeon.rewrite.strict import StrictModel


class RemoveAction(LayerAction):
    key: ClassVar[str] = "remove"
    remove: Literal[True] = Field(
        description="remove the layer, wiring its output to its input (1 in, 1 out)"
    )

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        if len(target.inputs) != 1 or len(target.outputs) != 1:
            raise ActionError(
                f"layer {target.name}: remove needs one input and one output "
                f"(it has {len(target.inputs)} and {len(target.outputs)})"
            )
        source, out = target.inputs[0], target.outputs[0]
        if out.name in ctx.interface:
            raise ActionError(f"layer {target.name}: removing it would remove interface blob {out.name!r}")
        for reader in list(dict.fromkeys(out.consumers)):
            for pos, blob in enumerate(reader.inputs):
                if blob is out:
                    graph.set_input(reader, pos, source.name)
        graph.remove_layer(target)
        return f"removed; {out.name} now reads {source.name}"


class RenameAction(LayerAction):
    key: ClassVar[str] = "rename"
    rename: str = Field(description="new layer name, a per-match template: {name} is the old one")

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        new = ctx.render(self.rename, f"rename {target.name}", target)
        old, target.name = target.name, new
        return f"renamed from {old}"


class RewireAction(LayerAction):
    """Make the input with role ``role`` (the catalog's name for that bottom, e.g. MatMul ``B``) read ``to``
    (a blob name or a %capture)."""

    key: ClassVar[str] = "rewire"
    rewire: dict[str, str] = Field(description="role: blob")

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        spec = target.spec
        names = [r.rstrip("?*") for r in (spec.inputs or ())] if spec else []
        done = []
        for role, blob in self.rewire.items():
            if role not in names:
                raise ActionError(
                    f"layer {target.name}: {target.type} has no input role {role!r} (roles: {names})"
                )
            pos = names.index(role)
            if pos >= len(target.inputs):
                raise ActionError(f"layer {target.name}: input {role} is not connected")
            graph.set_input(target, pos, ctx.blob_name(blob))
            done.append(f"{role} <- {target.inputs[pos].name}")
        return "rewired " + ", ".join(done)


class RenameBlobAction(ActionModel):
    key: ClassVar[str] = "rename_blob"
    rename_blob: dict[str, str] = Field(
        description="old blob (name or %capture): new name; both per-match templates"
    )

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        done = []
        for old_token, template in self.rename_blob.items():
            old = ctx.blob_name(ctx.render(old_token, "rename_blob"))
            new = ctx.render(template, f"rename_blob {old}")
            if old in ctx.interface:
                raise ActionError(f"blob {old!r} is an interface blob and cannot be renamed")
            graph.rename_blob(old, new)
            done.append(f"{old} -> {new}")
        return "renamed blob " + ", ".join(done)


class ReplaceAction(ActionModel):
    """Replace the whole matched subgraph with layer lines (captures substituted; other blob names in the
    snippet are new and made unique). Weights of the new layers come from ``move_weight`` or ``weight``."""

    key: ClassVar[str] = "replace"
    replace: str

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
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
        text = ctx.render(self.replace, "replace")
        made, written = snippets.build(graph, text, ctx.values, at, "replace")
        ctx.layers.update(written)
        produced = {b.name for x in made for b in x.outputs}
        lost = [name for name in needed if name not in produced]
        if lost:
            raise ActionError(f"the replacement does not produce {lost}, which other layers still read")
        if not _ordered(graph):  # the new lines sit where the first matched layer was; a capture may be later
            toposort(graph)
        return f"replaced {', '.join(x.name for x in matched)} with {', '.join(x.name for x in made)}"


def _ordered(graph: Graph) -> bool:
    seen: set[int] = set()
    for layer in graph.layers:
        if any(b.producer is not None and id(b.producer) not in seen for b in layer.inputs):
            return False
        seen.add(id(layer))
    return True


class InsertAction(LayerAction):
    """Insert layer lines before the target layer (captures substituted, new blob names made unique)."""

    key: ClassVar[str] = "insert"
    insert: str

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        where = f"insert before {target.name}"
        text = ctx.render(self.insert, where, target)
        made, written = snippets.build(graph, text, ctx.values, graph.layers.index(target), where)
        ctx.layers.update(written)
        return "inserted " + ", ".join(x.name for x in made) + " before it"


class AddBottomsAction(LayerAction):
    """Append bottoms to the target layer, reading the named blobs (per-match templates). A name no layer
    produces yet must be produced later (e.g. by ``add_input``) or the result's interface check fails."""

    key: ClassVar[str] = "add_bottoms"
    add_bottoms: list[str] = Field(min_length=1)

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        names = [
            ctx.blob_name(ctx.render(t, f"add_bottoms on {target.name}", target)) for t in self.add_bottoms
        ]
        for name in names:
            graph.append_input(target, name)
        return "added bottom(s) " + ", ".join(names)


class AddTopsAction(LayerAction):
    """Append tops to the target layer: new blobs (per-match templates) that no other layer produces."""

    key: ClassVar[str] = "add_tops"
    add_tops: list[str] = Field(min_length=1)

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        names = [ctx.render(t, f"add_tops on {target.name}", target) for t in self.add_tops]
        for name in names:
            try:
                graph.append_output(target, name)
            except GraphError as err:
                raise ActionError(str(err)) from None
        return "added top(s) " + ", ".join(names)


class InputTops(StrictModel):
    name: str = Field(description="the Input layer's name (a per-match template)")
    tops: list[str] = Field(min_length=1, description="blobs it produces (per-match templates)")


class AddInputAction(ActionModel):
    """Give the graph an Input layer ``name`` producing ``tops``: made (after the graph's other Inputs) if
    the graph has no layer of that name, otherwise its tops are appended to. Several matches can each add
    their tops to one multi-top Input (ncnn's KV-cache convention: one ``Input kv_cache`` with every cache
    blob)."""

    key: ClassVar[str] = "add_input"
    add_input: InputTops

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        spec = self.add_input
        name = ctx.render(spec.name, "add_input")
        tops = [ctx.render(t, f"add_input {name}") for t in spec.tops]
        layer = next((x for x in graph.layers if x.name == name), None)
        if layer is None:  # after the graph's other Inputs
            at = max((i + 1 for i, x in enumerate(graph.layers) if x.type == "Input"), default=0)
            layer = graph.add_layer("Input", name, [], [], index=at)
        elif layer.type != "Input":
            raise ActionError(f"add_input: layer {name} exists and is a {layer.type}, not an Input")
        for top in tops:
            try:
                graph.append_output(layer, top)
            except GraphError as err:
                raise ActionError(str(err)) from None
        ctx.layers[name] = layer
        return f"Input {name} produces " + ", ".join(tops)
