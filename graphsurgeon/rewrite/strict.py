"""The base of every rule-file model: unknown keys are errors and loaded rules are immutable."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A rule-file mapping: extra keys are refused (a typo is an error, not a silent no-op); frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
