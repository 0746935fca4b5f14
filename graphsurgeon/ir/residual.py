"""The residual stream of a pre-norm network, read from its graph: from a blob, each step is the one
two-input ``BinaryOp`` add (op_type 0, no scalar) that reads the current stream blob, looking through Splits
(they share the data); its output is the next stream blob. Two such adds per transformer layer (after
attention, after the MLP), so a layer is found by its place in the stream, never by a name pnnx happened to
write (``pipeline.repeat_layers`` copies the last layer; the verifiers read each layer's output)."""

from __future__ import annotations

from graphsurgeon.ir.graph import Blob, Graph, Layer


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


def residual_stream(graph: Graph, start: str) -> list[str]:
    """The blobs of a residual stream in order, after ``start``: each step is the one two-input add that
    reads the current stream blob; its output is the next. Stops where no such add (or more than one)
    reads the stream. ``start`` must be a blob of the graph."""
    stream = graph.blob(start)
    out: list[str] = []
    while True:
        adds = [x for x in _readers(stream) if _is_add(x)]
        if len(adds) != 1:
            return out
        stream = adds[0].outputs[0]
        out.append(stream.name)
