"""gsurg: a declarative graph-surgery compiler for ncnn models.

The package is layered: ``schema`` (the layer catalog), ``ir`` (Graph, Layer, Blob, typed params, lazy
weights), ``formats`` (the .param text/binary and .bin readers and writers), ``check`` (lint, diff-bin),
``rewrite`` (rule files and the engine behind ``apply``), ``verify`` (running models in the ncnn wheel) and
``cli``. Lower layers never import higher ones.
"""

from __future__ import annotations

__version__ = "0.1.0"
