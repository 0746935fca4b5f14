"""What a conversion must reach to pass ``gsurg verify``, per runtime precision and weight storage.

Exact fp32 (fp32 weights run with fp32 options) must match the reference to ``cosine >= 0.99999`` at every
stage and give the same tokens. Anything else computes with rounded weights or activations, so it is
judged by how close it stays, not by equality:

* every stage computed and finite, and the **mean** stage cosine against the fp32 reference at least
  ``min_cosine`` (each stage's cosine is reported; one stage of a random-weight model's logits can swing far
  on a rounding, so the mean is what is judged);
* **teacher-forced next-token agreement**: the converted model is fed the reference's own tokens, and at
  every step its argmax is compared with the reference's (free-running greedy text of a random-weight
  model diverges for good at the first near-tie, so it says little); at least ``min_agreement`` of all the
  cases' steps must agree;
* the mean **KL divergence** ``KL(reference || ours)`` of the next-token distributions over all those
  steps, in nats, at most ``max_mean_kl``.

The thresholds come from the **trained** fixtures (a model that answers its task, whose logits are peaked as a
real model's are), measured with ``benchmarks/accuracy_matrix.py --trained`` and set with a stated margin
(``_APPROXIMATE``); ``tests/test_verify_precision.py`` converts the trained LLM fixture at every storage and
holds it to these, and ``tests/test_trained_vlms.py`` holds the trained VLM fixtures' int8 and int4
conversions to the same, asked about their own task (``graphsurgeon.evaluation.vqa_cases``: on photographs and
generic prompts, out of their distribution, their near-flat logits miss them). The random-weight tiny models
keep their role at exact fp32; at rounded storages their near-flat logits flip on every near-tie, so they are
held only to their own measured figures as regression bounds (docs/precision.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from graphsurgeon.verify.report import MIN_COSINE

if TYPE_CHECKING:
    from graphsurgeon.verify.lossless_storage import Lossless


@dataclass(frozen=True)
class Criteria:
    """The thresholds for one precision x storage; ``exact`` demands equal tokens."""

    precision: str
    storage: str
    min_cosine: float
    min_agreement: float
    max_mean_kl: float
    basis: str = ""  # why these criteria, when the storage alone does not say (lossless_storage's reason)

    @property
    def exact(self) -> bool:
        return self.min_agreement >= 1.0 and self.max_mean_kl == math.inf

    def describe(self) -> str:
        basis = f"; {self.basis}" if self.basis else ""
        if self.exact:
            head = f"{self.precision} x {self.storage}: exact"
            return f"{head} (cosine >= {self.min_cosine}, equal tokens{basis})"
        return (
            f"{self.precision} x {self.storage}: mean stage cosine >= {self.min_cosine}, teacher-forced "
            f"agreement >= {self.min_agreement:.0%}, mean KL <= {self.max_mean_kl} (over all cases{basis})"
        )


EXACT = Criteria("fp32", "fp32", MIN_COSINE, 1.0, math.inf)

#: (mean stage cosine, teacher-forced agreement, mean KL) per weight storage, for runs that are not exact.
#: Measured on the trained decoder-only LLM fixture (``benchmarks/accuracy_matrix.py --trained``; verify's
#: three default cases x 32 steps; 2026-12-07, the same at fp32, fp16 and auto precision on this x86 CPU):
#:
#: ====================  ===========  ==========  ========
#: storage               mean cosine  agreement   mean KL
#: ====================  ===========  ==========  ========
#: fp32 at fp16 / auto   1.000000     100 %       3.6e-13
#: fp16                  1.000000     100 %       2.6e-07
#: bf16                  0.999997     100 %       8.7e-06
#: int8                  0.999809     100 %       1.4e-04
#: int6                  0.999705     100 %       1.1e-03
#: int4                  0.996469     96.9 %      1.3e-02
#: ====================  ===========  ==========  ========
#:
#: The margin: a cosine's distance from 1 and the KL may grow tenfold (at least to 1e-4 and 1e-3: a CPU
#: with ncnn's fp16 arithmetic, which this one lacks, rounds more at fp16 precision), rounded up to one
#: significant digit; agreement may drop five points, at most to 95 %, rounded down to a multiple of 5.
_APPROXIMATE = {
    "fp32": (0.9999, 0.95, 0.001),  # fp32 weights at fp16 / auto precision
    "fp16": (0.9999, 0.95, 0.001),
    "bf16": (0.9999, 0.95, 0.001),
    "int8": (0.998, 0.95, 0.002),
    "int6": (0.997, 0.95, 0.02),
    "int4": (0.96, 0.9, 0.2),
}


def criteria_for(precision: str, storage: str, lossless: Lossless | None = None) -> Criteria:
    """The thresholds a conversion stored as ``storage`` must reach when run at ``precision``. fp16/bf16
    weights that ``lossless`` shows are the checkpoint's own values run at fp32 exactly as fp32 weights
    would, so they are held to the exact criteria; its reason is stated either way."""
    if precision == "fp32" and storage == "fp32":
        return EXACT
    basis = ""
    if lossless is not None and storage in ("fp16", "bf16"):
        if lossless.holds and precision == "fp32":
            return replace(EXACT, storage=storage, basis=f"lossless: {lossless.reason}")
        if not lossless.holds:
            basis = f"rounded: {lossless.reason}"
    if storage not in _APPROXIMATE:
        raise ValueError(f"no verify criteria for weight storage {storage!r}")
    cos, agree, kl = _APPROXIMATE[storage]
    return Criteria(precision, storage, cos, agree, kl, basis)


def kl_divergence(reference: npt.ArrayLike, ours: npt.ArrayLike) -> float:
    """``KL(softmax(reference) || softmax(ours))`` in nats, for two logit vectors of one step."""
    p_log = _log_softmax(np.asarray(reference, dtype=np.float64).reshape(-1))
    q_log = _log_softmax(np.asarray(ours, dtype=np.float64).reshape(-1))
    if p_log.shape != q_log.shape:
        raise ValueError(f"logits of {p_log.size} and {q_log.size} values")
    return float(max(0.0, np.sum(np.exp(p_log) * (p_log - q_log))))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - np.max(x)
    return shifted - np.log(np.sum(np.exp(shifted)))
