"""What ``gsurg verify`` reports: per stage, how close the converted model's values are to the reference's
(cosine, max |a-b|, NaN/Inf counts), and per case, the tokens side by side with each step's KL divergence.

An exact run (``exact``: fp32 weights at fp32) fails at a stage below the cosine threshold, with any
non-finite value, when the converted model could not compute a stage at all (ncnn returned an error:
``failed``), or when a case's tokens differ. Any other run computes with rounded weights or activations
and is judged over everything at once (``verify.criteria``): every stage computed and finite, every case
run to its end, the mean stage cosine, the teacher-forced agreement over all steps and the mean KL over
all steps within the thresholds; the per-stage and per-case figures are reported for reading."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

MIN_COSINE = 0.99999


@dataclass(frozen=True)
class StageResult:
    stage: str
    cosine: float
    max_abs: float
    scale: float  # max |reference|, for reading max_abs
    nonfinite: int  # NaN or Inf values in the converted model's output
    min_cosine: float = MIN_COSINE
    error: str = ""  # why the converted model produced no value for this stage (then the figures are 0)

    @property
    def passed(self) -> bool:
        return not self.error and self.nonfinite == 0 and self.cosine >= self.min_cosine


@dataclass(frozen=True)
class TokenResult:
    """One case's tokens: the reference's greedy ones, and the converted model's argmax at each step when
    fed the reference's tokens (teacher forcing: in an exact run the same as its own greedy tokens), with
    the KL divergence of its next-token distribution from the reference's at each step (``kl``, nats;
    empty when the verifier has no logits for a step). An ``exact`` case passes with equal tokens; any
    other passes when every step was computed, and the report judges the agreement and KL over all cases."""

    case: str
    ours: list[int]
    reference: list[int]
    text: str = ""  # the reference's decoded text, when the verifier has a tokenizer
    kl: list[float] = field(default_factory=list)
    exact: bool = True

    @property
    def agreeing(self) -> int:
        """Steps at which the converted model's argmax is the reference's token."""
        return sum(a == b for a, b in zip(self.ours, self.reference, strict=False))

    @property
    def agreement(self) -> float:
        """The share of the reference's steps at which the converted model's argmax is its token."""
        if not self.reference:
            return 1.0 if not self.ours else 0.0
        return self.agreeing / len(self.reference)

    @property
    def mean_kl(self) -> float:
        return float(np.mean(self.kl)) if self.kl else 0.0

    @property
    def passed(self) -> bool:
        if self.exact:
            return self.ours == self.reference
        return len(self.ours) == len(self.reference)

    @property
    def first_difference(self) -> int | None:
        for i, (a, b) in enumerate(zip(self.ours, self.reference, strict=False)):
            if a != b:
                return i
        return None if len(self.ours) == len(self.reference) else min(len(self.ours), len(self.reference))


def compare(
    stage: str, ours: npt.ArrayLike, reference: npt.ArrayLike, *, min_cosine: float = MIN_COSINE
) -> StageResult:
    """One stage's figures; the shapes must hold the same number of values (layouts may differ by 1-dims).
    Either side may be anything ``np.asarray`` takes, e.g. a CPU torch tensor without grad."""
    a = np.asarray(ours, dtype=np.float64).reshape(-1)
    b = np.asarray(reference, dtype=np.float64).reshape(-1)
    if a.size != b.size:
        raise ValueError(f"stage {stage}: {a.size} values against the reference's {b.size}")
    bad = int(np.count_nonzero(~np.isfinite(a)))
    finite = np.isfinite(a) & np.isfinite(b)
    a, b = a[finite], b[finite]
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(np.dot(a, b) / norm) if norm > 0 else (1.0 if not a.any() and not b.any() else 0.0)
    max_abs = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return StageResult(stage, cosine, max_abs, scale, bad, min_cosine)


def failed(stage: str, error: str, *, min_cosine: float = MIN_COSINE) -> StageResult:
    """A stage the converted model could not compute (e.g. ncnn returned an error, or an earlier stage it
    needs failed that way): it fails, with ``error`` saying why."""
    return StageResult(stage, 0.0, 0.0, 0.0, 0, min_cosine, error or "no value")


@dataclass
class VerifyReport:
    model: str
    stages: list[StageResult] = field(default_factory=list)
    tokens: list[TokenResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    criteria: str = ""  # what the run was judged by (precision x storage and the thresholds)
    #: approximate runs (``exact`` False): the thresholds on the aggregates over every stage and case
    exact: bool = True
    min_mean_cosine: float = MIN_COSINE
    min_agreement: float = 1.0
    max_mean_kl: float = math.inf

    @property
    def mean_cosine(self) -> float:
        """The mean cosine over the stages the converted model computed."""
        computed = [s.cosine for s in self.stages if not s.error]
        return float(np.mean(computed)) if computed else 1.0

    @property
    def agreement(self) -> float:
        """Agreeing steps over all cases' steps."""
        steps = sum(len(t.reference) for t in self.tokens)
        return sum(t.agreeing for t in self.tokens) / steps if steps else 1.0

    @property
    def mean_kl(self) -> float:
        """The mean KL divergence over every step of every case."""
        kl = [x for t in self.tokens for x in t.kl]
        return float(np.mean(kl)) if kl else 0.0

    @property
    def passed(self) -> bool:
        if self.exact:
            return all(s.passed for s in self.stages) and all(t.passed for t in self.tokens)
        return (
            all(not s.error and s.nonfinite == 0 for s in self.stages)
            and all(t.passed for t in self.tokens)
            and self.mean_cosine >= self.min_mean_cosine
            and self.agreement >= self.min_agreement
            and self.mean_kl <= self.max_mean_kl
        )

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "schema_version": 1,
            "model": self.model,
            "passed": self.passed,
            "stages": [asdict(s) | {"passed": s.passed} for s in self.stages],
            "tokens": [
                asdict(t) | {"passed": t.passed, "agreement": t.agreement, "mean_kl": t.mean_kl}
                for t in self.tokens
            ],
            "criteria": self.criteria,
            "exact": self.exact,
            "summary": {
                "mean_cosine": self.mean_cosine,
                "agreement": self.agreement,
                "mean_kl": self.mean_kl,
                "min_mean_cosine": None if self.exact else self.min_mean_cosine,
                "min_agreement": None if self.exact else self.min_agreement,
                "max_mean_kl": None if self.exact else self.max_mean_kl,
            },
            "notes": self.notes,
        }
        return json.dumps(doc, indent=2)

    def to_text(self) -> str:
        lines = [f"verify {self.model}", ""]
        if self.stages:
            width = max(len(s.stage) for s in self.stages)
            lines.append(
                f"{'stage':<{width}}  {'cosine':>10}  {'max_abs':>10}  {'scale':>10}  nan/inf  result"
            )
            for s in self.stages:
                if s.error:
                    dash = "-"
                    lines.append(
                        f"{s.stage:<{width}}  {dash:>10}  {dash:>10}  {dash:>10}  {dash:>7}  FAIL: {s.error}"
                    )
                    continue
                mark = "ok" if s.passed else "FAIL"
                lines.append(
                    f"{s.stage:<{width}}  {s.cosine:>10.7f}  {s.max_abs:>10.3e}  {s.scale:>10.3e}  "
                    f"{s.nonfinite:>7}  {mark}"
                )
            lines.append("")
        for t in self.tokens:
            if t.exact:
                mark = "equal" if t.ours == t.reference else f"DIFFER at token {t.first_difference}"
            else:
                mark = (
                    f"teacher-forced agreement {t.agreeing}/{len(t.reference)} ({t.agreement:.1%}), "
                    f"mean KL {t.mean_kl:.3g}" + ("" if t.passed else ": INCOMPLETE")
                )
            lines.append(f"{t.case}: {len(t.ours)} tokens, {mark}")
            lines.append(f"  ncnn:    {t.ours}")
            lines.append(f"  pytorch: {t.reference}")
            if t.text:
                lines.append(f"  text:    {t.text!r}")
        if not self.exact:
            lines.append(
                f"over all stages and cases: mean cosine {self.mean_cosine:.6f} (>= {self.min_mean_cosine}), "
                f"teacher-forced agreement {self.agreement:.1%} (>= {self.min_agreement:.0%}), mean KL "
                f"{self.mean_kl:.3g} (<= {self.max_mean_kl})"
            )
        if self.criteria:
            lines.append(f"criteria: {self.criteria}")
        lines.extend(f"note: {n}" for n in self.notes)
        lines.append("PASSED" if self.passed else "FAILED")
        return "\n".join(lines)
