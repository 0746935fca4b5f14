"""The export job as typed data: what ``apply`` asks of the export worker, and what the worker answers.

Both cross the process boundary as JSON files in the work folder, written by ``model_dump_json`` and read
back by ``model_validate_json`` on the other side, so neither side reads an untyped dict: a field missing
or misspelt is a validation error, not a ``KeyError`` in the middle of an export.

One job does everything the source's models are needed for, in one build of them: trace the ``names``,
make the calibration samples of the sub-models in ``calibrate`` (a subset of ``names``), free the models,
then convert each trace with pnnx.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

#: A variable an export source sees: plain data only (``prepare`` drops anything else).
PlainValue = str | int | float | bool | None


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExportJob(_Message):
    """What the worker is asked to do (see the module docstring)."""

    source: str = Field(
        description="the export source reference, file.py:callable or package.module:callable"
    )
    base: str = Field(description="the rule file's folder: a relative file.py is found from here")
    checkpoint: str | None = None
    variables: dict[str, PlainValue] = Field(default_factory=dict)
    names: list[str] = Field(description="the sub-models to export")
    calibrate: list[str] = Field(default_factory=list, description="the sub-models whose samples to save")
    work: str = Field(description="the work folder: traces, pnnx outputs and sample files go here")
    result: str = Field(description="the file the worker writes its WorkerReply to")

    @model_validator(mode="after")
    def _calibrate_exported(self) -> ExportJob:
        extra = sorted(set(self.calibrate) - set(self.names))
        if extra:
            raise ValueError(f"calibrate names sub-models that are not exported: {extra}")
        return self


class ExportedFiles(_Message):
    """One sub-model's ncnn files, as pnnx wrote them."""

    param: str
    bin: str


class SampleFile(_Message):
    """One sub-model's calibration samples, saved as ``.npz``: ``samples`` tuples of ``inputs`` arrays."""

    path: str
    samples: int = Field(ge=1)
    inputs: int = Field(ge=1)

    def load(self) -> list[tuple[np.ndarray, ...]]:
        """The samples, each a tuple of arrays without the batch dim."""
        with np.load(self.path) as data:
            return [tuple(data[f"s{k}_{i}"] for i in range(self.inputs)) for k in range(self.samples)]

    @staticmethod
    def save(path: Path, samples: Sequence[Sequence[np.ndarray]]) -> SampleFile:
        arrays = {f"s{k}_{i}": a for k, sample in enumerate(samples) for i, a in enumerate(sample)}
        np.savez(path, **arrays)  # type: ignore[arg-type]
        return SampleFile(path=str(path), samples=len(samples), inputs=len(samples[0]))


class ExportResult(_Message):
    """What one job made: every exported sub-model's files, and the samples it was asked for."""

    models: dict[str, ExportedFiles]
    calibration: dict[str, SampleFile] = Field(default_factory=dict)


class WorkerReply(_Message):
    """The worker's answer: a result, or the one-line error it stopped at."""

    result: ExportResult | None = None
    error: str | None = None
