"""The statistics calibrated quantization reads from the calibration run: per blob that feeds a weight to be
quantized, the Hessian ``H = sum x^T x`` of its rows (``K x K`` float64, over every calibration token) for
GPTQ and mixed precision, and the mean ``|x|`` per channel for AWQ.

A blob's rows are its values as ``[-1, K]`` (a Gemm multiplies each row of ``K`` values by its weight);
a blob whose values do not end in ``K`` cannot be read so, and its consumers are quantized without
statistics (``ActivationStats.problem`` says why). A Split's outputs are its input: a blob is followed up
through Splits to the one they copy (``source_blob``), so the q, k and v projections of one input share
one Hessian.

Memory: one Hessian is ``8 K^2`` bytes (K = 2048: 32 MiB; K = 6144: 288 MiB). The blobs are cut into
groups of at most ``HESSIAN_BUDGET`` bytes of Hessians, in graph order (a blob above it alone); the first
group is collected in calibration's own run and each later one in a run of its own over the same samples,
which extracts only that group's blobs. After each run its group is handed to the quantizer and dropped,
so at most one group is held at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass, field

import numpy as np

from graphsurgeon.ir.graph import Blob

#: The bytes of Hessians collected in one run over the samples.
HESSIAN_BUDGET = 1 << 30


def source_blob(blob: Blob) -> Blob:
    """``blob``, or the blob the Splits it comes out of copy."""
    while blob.producer is not None and blob.producer.type == "Split" and blob.producer.inputs:
        blob = blob.producer.inputs[0]
    return blob


@dataclass
class ActivationStats:
    """One blob's rows of ``k`` values summed over the calibration samples."""

    blob: str
    k: int
    hessian: np.ndarray = field(init=False)
    abs_sum: np.ndarray = field(init=False)
    rows: int = 0
    problem: str | None = None  # why the blob's values are no rows of k (then nothing is summed)

    def __post_init__(self) -> None:
        self.hessian = np.zeros((self.k, self.k), dtype=np.float64)
        self.abs_sum = np.zeros(self.k, dtype=np.float64)

    def add(self, values: np.ndarray) -> None:
        """Add one sample's values of the blob."""
        if self.problem is not None or values.size == 0:
            return
        if values.shape[-1] != self.k:
            self.problem = f"its values have shape {list(values.shape)}, not rows of {self.k}"
            return
        if not np.isfinite(values).all():
            self.problem = "it holds inf or NaN on the calibration samples"
            return
        x = values.reshape(-1, self.k).astype(np.float64)
        self.hessian += x.T @ x
        self.abs_sum += np.abs(x).sum(axis=0)
        self.rows += x.shape[0]

    @property
    def mean_abs(self) -> np.ndarray:
        return self.abs_sum / max(self.rows, 1)

    @property
    def usable(self) -> bool:
        return self.problem is None and self.rows > 0


@dataclass
class ActivationRequest:
    """What calibration collects for a quantizer: the blobs (graph order) and the row width each is read
    with, and ``consume``, called with each group's statistics and the ids of the layers calibration keeps
    fp32 (final by then) before the next group is collected."""

    blobs: dict[str, int]
    consume: Callable[[dict[str, ActivationStats], Set[int]], None]
    budget: int = HESSIAN_BUDGET

    def groups(self) -> list[list[str]]:
        """The blobs cut into runs of at most ``budget`` bytes of Hessians, in order."""
        out: list[list[str]] = []
        held = 0
        for name, k in self.blobs.items():
            size = 8 * k * k
            if not out or held + size > self.budget:
                out.append([])
                held = 0
            out[-1].append(name)
            held += size
        return out


def new_stats(request: ActivationRequest, names: Iterable[str]) -> dict[str, ActivationStats]:
    return {name: ActivationStats(name, request.blobs[name]) for name in names}
