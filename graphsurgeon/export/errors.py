"""The export error: every failure of an export source or of pnnx, as one line naming the sub-model."""

from __future__ import annotations

from graphsurgeon.errors import GsurgError, one_line

__all__ = ["ExportError", "one_line"]


class ExportError(GsurgError):
    """An export source that cannot be loaded or run, a sub-model that cannot be traced, or pnnx missing,
    failing or leaving ops ncnn does not have (exit 2)."""
