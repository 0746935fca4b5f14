"""Stages read from a converted graph itself, for the verifiers of pre-norm transformers: the residual
stream followed from a hidden input through the ``BinaryOp`` adds that read it (two per pre-norm layer:
after attention, after the MLP), so a layer's output is found by its place in the stream, never by a layer
name pnnx happened to write."""

from __future__ import annotations

from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.residual import residual_stream as stream_after
from graphsurgeon.verify.errors import VerifyError


def residual_stream(graph: Graph, hidden: str) -> list[str]:
    """The blobs of a residual stream in order after ``hidden`` (``ir.residual``); ``VerifyError`` naming
    the graph's file when it has no such blob."""
    if hidden not in graph.blobs:
        raise VerifyError(f"{graph.source}: no blob {hidden!r}")
    return stream_after(graph, hidden)
