"""The export error: every failure of an export source or of pnnx, as one line naming the sub-model."""

from __future__ import annotations

from graphsurgeon.errors import GsurgError


class ExportError(GsurgError):
    """An export source that cannot be loaded or run, a sub-model that cannot be traced, or pnnx missing,
    failing or leaving ops ncnn does not have (exit 2)."""


TORCHSCRIPT_PREAMBLE = "The following operation failed in the TorchScript interpreter"


def one_line(err: BaseException) -> str:
    """``Type: first non-empty line of the message`` (torch messages span many lines). An error raised
    inside a TorchScript module starts with a preamble and a traceback; its last line holds the reason
    (``RuntimeError: shape '[1, 40]' is invalid ...``) and is returned as it is."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    if lines[0].startswith(TORCHSCRIPT_PREAMBLE):
        return lines[-1]
    return f"{type(err).__name__}: {lines[0]}"
