"""gsurg: a declarative graph-surgery compiler for ncnn models.

The package is layered: ``schema`` (the layer catalog), ``ir`` (Graph, Layer, Blob, typed params, lazy
weights), ``formats`` (the .param text/binary and .bin readers and writers) and ``cli``.
"""

from __future__ import annotations

__version__ = "0.1.0"
