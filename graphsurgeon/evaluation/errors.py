"""The error ``gsurg eval`` raises for anything a user can cause (exit code 2)."""

from __future__ import annotations

from graphsurgeon.errors import GsurgError


class EvalError(GsurgError):
    """A folder, set or option ``gsurg eval`` cannot use."""
