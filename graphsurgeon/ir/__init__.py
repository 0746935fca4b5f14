"""The graph IR: Graph, Layer and Blob with links kept in sync, typed params, lazy weights."""

from __future__ import annotations

from graphsurgeon.ir.graph import Blob, Graph, Layer
from graphsurgeon.ir.params import Param
from graphsurgeon.ir.weights import Storage, Weight

__all__ = ["Blob", "Graph", "Layer", "Param", "Storage", "Weight"]
