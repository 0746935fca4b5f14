"""Whole-graph clean-ups every rewrite needs: topological order, Splits for fan-out, dead layers, chained
Splits. Each pass edits the graph in place through the Graph API (links stay consistent) and returns
whether it changed anything, so a driver can run passes to a fixed point."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from graphsurgeon.errors import GraphError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.names import fresh_name


def toposort(graph: Graph) -> bool:
    """Order layers so every producer comes before its consumers, keeping the current order wherever it is
    already valid (a stable Kahn sort). Raises GraphError naming a layer on a cycle."""
    index = {id(layer): i for i, layer in enumerate(graph.layers)}
    waiting: dict[int, int] = {}
    readers: dict[int, list[Layer]] = {}
    for layer in graph.layers:
        producers = {id(b.producer) for b in layer.inputs if b.producer is not None}
        waiting[id(layer)] = len(producers)
        for pid in producers:
            readers.setdefault(pid, []).append(layer)
    ready = [(index[id(layer)], layer) for layer in graph.layers if waiting[id(layer)] == 0]
    heapq.heapify(ready)
    order: list[Layer] = []
    while ready:
        _, layer = heapq.heappop(ready)
        order.append(layer)
        for reader in readers.get(id(layer), ()):
            waiting[id(reader)] -= 1
            if waiting[id(reader)] == 0:
                heapq.heappush(ready, (index[id(reader)], reader))
    if len(order) != len(graph.layers):
        stuck = next(layer for layer in graph.layers if waiting[id(layer)] > 0)
        raise GraphError(f"the graph has a cycle through layer {stuck.name}")
    changed = order != graph.layers
    graph.layers[:] = order
    return changed


def insert_splits(graph: Graph) -> bool:
    """Give every blob read by more than one layer a Split, one output per reading layer (ncnn frees or
    overwrites a blob in place after its first consumer). The Split goes right after the producer."""
    changed = False
    layer_names = {layer.name for layer in graph.layers}
    for blob in list(graph.blobs.values()):
        readers = list(dict.fromkeys(blob.consumers))
        if len(readers) < 2:
            continue
        taken: set[str] = set()
        outs = []
        for i in range(len(readers)):
            outs.append(fresh_name(f"{blob.name}_split{i}", graph.blobs, taken))
            taken.add(outs[-1])
        split_name = fresh_name(f"{blob.name}_split", layer_names)
        at = graph.layers.index(blob.producer) + 1 if blob.producer is not None else 0
        for reader, out in zip(readers, outs, strict=True):
            for pos, inp in enumerate(reader.inputs):
                if inp is blob:
                    graph.set_input(reader, pos, out)
        graph.add_layer("Split", split_name, [blob.name], outs, index=at)
        layer_names.add(split_name)
        changed = True
    return changed


def merge_chained_splits(graph: Graph) -> bool:
    """A Split that reads another Split's output is folded into it: one Split per value."""
    changed = False
    for layer in list(graph.layers):
        if layer.type != "Split" or len(layer.inputs) != 1:
            continue
        parent = layer.inputs[0].producer
        if parent is None or parent.type != "Split" or parent is layer:
            continue
        feeding = layer.inputs[0].name
        outputs = [b.name for b in parent.outputs if b.name != feeding] + [b.name for b in layer.outputs]
        source = parent.inputs[0].name
        at = graph.layers.index(parent)
        name = parent.name
        graph.remove_layer(layer)
        graph.remove_layer(parent)
        graph.add_layer("Split", name, [source], outputs, index=at)
        changed = True
    return changed


def remove_dead_layers(graph: Graph, keep: Iterable[str]) -> bool:
    """Remove layers none of whose outputs is read or kept (``keep``: the interface blob names), repeatedly.
    Input layers stay: they are the graph's interface even when unused."""
    kept = set(keep)
    changed = False
    while True:
        dead = [
            layer
            for layer in graph.layers
            if layer.type != "Input"
            and layer.outputs
            and all(not b.consumers and b.name not in kept for b in layer.outputs)
        ]
        if not dead:
            return changed
        for layer in dead:
            graph.remove_layer(layer)
        changed = True


def extract_subgraph(graph: Graph, inputs: Iterable[str], outputs: Iterable[str]) -> bool:
    """Keep only the layers needed to compute ``outputs`` from ``inputs``; each input blob becomes the top of
    a new Input layer (its producer and everything only it needed are dropped). Raises GraphError when an
    output cannot be computed from the inputs and the graph's own sources."""
    wanted_in, wanted_out = list(inputs), list(outputs)
    for name in (*wanted_in, *wanted_out):
        if name not in graph.blobs:
            raise GraphError(f"extract: no blob named {name!r}")
    stop = set(wanted_in)
    needed: set[int] = set()
    frontier = [graph.blob(n) for n in wanted_out if n not in stop]
    while frontier:
        blob = frontier.pop()
        producer = blob.producer
        if producer is None:
            raise GraphError(f"extract: blob {blob.name!r} has no producer and is not an input")
        if id(producer) in needed:
            continue
        needed.add(id(producer))
        frontier.extend(b for b in producer.inputs if b.name not in stop)
    before = len(graph.layers)
    for layer in [x for x in graph.layers if id(x) not in needed]:
        graph.remove_layer(layer)
    for i, name in enumerate(wanted_in):
        if name in graph.blobs and graph.blob(name).producer is None:
            graph.add_layer("Input", f"input_{name}", [], [name], index=i)
    return len(graph.layers) != before
