"""Stages read from a converted graph itself, for the verifiers of pre-norm transformers: the residual
stream followed from a hidden input through the ``BinaryOp`` adds that read it (two per pre-norm layer:
after attention, after the MLP), so a layer's output is found by its place in the stream, never by a layer
name pnnx happened to write."""

from __future__ import annotations

from graphsurgeon.ir.graph import Blob, Graph, Layer
from graphsurgeon.verify.errors import VerifyError


def _readers(blob: Blob) -> list[Layer]:
    """The layers that read ``blob``, looking through Splits (they share the data)."""
    out: list[Layer] = []
    for layer in blob.consumers:
        if layer.type == "Split":
            for copy in layer.outputs:
                out.extend(_readers(copy))
        else:
            out.append(layer)
    return out


def _is_add(layer: Layer) -> bool:
    """A two-input elementwise add (BinaryOp op_type 0 without a scalar)."""
    return (
        layer.type == "BinaryOp"
        and layer.get("op_type") == 0
        and not layer.get("with_scalar")
        and len(layer.inputs) == 2
    )


def residual_stream(graph: Graph, hidden: str) -> list[str]:
    """The blobs of a residual stream in order: starting at ``hidden``, each step is the one two-input
    ``BinaryOp`` add (op_type 0) that reads the current stream blob; its output is the next stream blob.
    Stops where no such add (or more than one) reads the stream."""
    if hidden not in graph.blobs:
        raise VerifyError(f"{graph.source}: no blob {hidden!r}")
    stream = graph.blob(hidden)
    out: list[str] = []
    while True:
        adds = [x for x in _readers(stream) if _is_add(x)]
        if len(adds) != 1:
            return out
        stream = adds[0].outputs[0]
        out.append(stream.name)
