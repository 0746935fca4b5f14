"""Errors of the verification toolkit."""

from __future__ import annotations

from graphsurgeon.errors import GsurgError


class VerifyError(GsurgError):
    """A converted model that ncnn will not load or run as expected: a load failure, a nonzero ncnn return
    code, or a graph that does not follow the convention the runner expects."""


class KVDecoderError(VerifyError):
    """A KV-cache decoder graph that does not follow the convention, or a step that ncnn refused."""
