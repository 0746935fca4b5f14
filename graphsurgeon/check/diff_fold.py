"""Folding chunks of a weight pair into its statistics: the float64 arithmetic behind ``diff_stats``.

``Accumulator.add`` takes one chunk (or part of one) of float32 values from each side and updates the sums
(Σa², Σb², Σa·b for the cosine, Σ|a-b| for the mean), the largest |a-b| and where it is, the smallest atol
and rtol that pass, the largest relative difference, and NaN/Inf counts. Sums are exact products added in
float64; maxima are exactly what a full elementwise pass gives, though only the elements that can reach
them are divided (see ``_excess`` and ``_ratios``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Every SAMPLE_STRIDE-th element of a differing chunk gives lower bounds for the ratio maxima, so that
#: only the elements that could beat them are divided; parts shorter than MIN_PRUNE are computed in full.
SAMPLE_STRIDE = 64
MIN_PRUNE = 1 << 12
#: Σb² is derived from Σa², Σa·(a-b) and Σ(a-b)² when it is at least this fraction of (√Σa² + √Σ(a-b)²)²,
#: which bounds the rounding of the derivation to a few ulps relative to Σb²; below, it is computed directly.
WELL_CONDITIONED = 1 / 20


#: Rows of this many elements for ``_dot``: short enough that OpenBLAS runs each dot on the calling thread.
DOT_ROW = 8192
_vecdot = getattr(np, "vecdot", None)  # numpy >= 2.0


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """Σ x·y in float64, on the calling thread.

    Not ``np.dot`` on the whole chunk: OpenBLAS threads a ddot longer than 10,000 elements and its threads
    spin, which starves the worker threads of ``Comparator``. ``vecdot`` over rows of ``DOT_ROW`` elements
    runs single-threaded BLAS dots (about a third faster than einsum's loop, which does the rest)."""
    n = x.size - x.size % DOT_ROW
    if _vecdot is None or n == 0:
        return float(np.einsum("i,i->", x, y))
    rows = float(np.sum(_vecdot(x[:n].reshape(-1, DOT_ROW), y[:n].reshape(-1, DOT_ROW))))
    return rows + float(np.einsum("i,i->", x[n:], y[n:]))


@dataclass(frozen=True, slots=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(slots=True)
class PairStats:
    """The numbers for one pair. Indices are flat C-order element indices of the compared layout."""

    count: int
    identical: bool  # every element bit for bit equal (after decoding to float32)
    cosine: float
    max_abs: float
    max_abs_at: int | None  # first element with the largest |a-b|; None when nothing differs
    max_rel: float
    mean_abs: float
    nan: tuple[int, int]
    inf: tuple[int, int]
    first_diff: tuple[int, int] | None  # absolute byte offset in each file of the first differing byte
    first_diff_at: int | None  # the element holding that byte (None for a tag/table/padding byte)
    min_atol: float  # smallest atol that passes at the given rtol
    min_rtol: float  # smallest rtol that passes at the given atol
    passed: bool


class Scratch:
    """Reused work arrays (one chunk each): four float64, and one float32 for |b|."""

    def __init__(self) -> None:
        self.size = 0
        self.a = self.b = self.d = self.t = np.empty(0)
        self.absb = np.empty(0, dtype=np.float32)

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self.size < n:
            self.size = n
            self.a, self.b, self.d, self.t = (np.empty(n, dtype=np.float64) for _ in range(4))
            self.absb = np.empty(n, dtype=np.float32)
        return self.a[:n], self.b[:n], self.d[:n], self.t[:n], self.absb[:n]


class Accumulator:
    """Statistics folded over chunks in order."""

    def __init__(self, tol: Tolerance, scratch: Scratch) -> None:
        self.tol = tol
        self.s = scratch
        self.identical = True
        self.aa = self.bb = self.ab = 0.0
        self.sum_abs = 0.0
        self.max_abs = -1.0
        self.max_at = 0
        self.max_rel = self.req_atol = self.req_rtol = 0.0
        self.nan = [0, 0]
        self.inf = [0, 0]

    def add(self, start: int, a: np.ndarray, b: np.ndarray, same: bool) -> None:
        """Fold one chunk (float32 ``a`` and ``b``). ``D = a - b`` is exact in float64; the dots are Σa²,
        Σa·D and ΣD², from which Σb² and Σa·b follow without widening ``b``, unless that would cancel
        (Σb² much smaller than its terms: then they are computed directly)."""
        n = a.size
        A, B, D, T, absb = self.s.take(n)
        np.copyto(A, a)
        if same:  # bit-identical chunk: |a-b| is 0 everywhere; only the norms and counts move
            q = float(_dot(A, A))
            if math.isfinite(q):
                self.aa += q
                self.bb += q
                self.ab += q
                return
        else:
            self.identical = False
        with np.errstate(invalid="ignore"):  # inf - inf: sorted out in _nonfinite
            np.subtract(A, b, out=D)  # b is widened exactly: D is a - b exactly
        aa, ad, dd = _dot(A, A), _dot(A, D), _dot(D, D)
        if not (math.isfinite(aa) and math.isfinite(dd)):  # finite squares <=> no NaN or Inf on either side
            np.copyto(B, b)
            np.abs(D, out=D)
            self._nonfinite(a, b, A, B, D)
            self._tail(start, D, B, T, B)
            return
        bb, ab = aa - 2.0 * ad + dd, aa - ad  # b = a - D; rounding errors scale with (√aa + √dd)²
        if bb < WELL_CONDITIONED * (math.sqrt(aa) + math.sqrt(dd)) ** 2:
            np.copyto(B, b)
            bb, ab = _dot(B, B), _dot(A, B)
        self.aa, self.bb, self.ab = self.aa + aa, self.bb + bb, self.ab + ab
        np.abs(D, out=D)
        np.abs(b, out=absb)
        self._tail(start, D, absb, T, B)

    def _nonfinite(self, a: np.ndarray, b: np.ndarray, A: np.ndarray, B: np.ndarray, D: np.ndarray) -> None:
        nan_a, nan_b, inf_a, inf_b = np.isnan(a), np.isnan(b), np.isinf(a), np.isinf(b)
        self.nan[0] += int(nan_a.sum())
        self.nan[1] += int(nan_b.sum())
        self.inf[0] += int(inf_a.sum())
        self.inf[1] += int(inf_b.sum())
        finite_b = ~(nan_b | inf_b)
        both = finite_b & ~(nan_a | inf_a)
        Af, Bf = A[both], B[both]
        self.aa += float(_dot(Af, Af))
        self.bb += float(_dot(Bf, Bf))
        self.ab += float(_dot(Af, Bf))
        D[(A == B) | (nan_a & nan_b)] = 0.0
        D[np.isnan(D)] = np.inf
        np.abs(B, out=B)
        B[~finite_b] = 0.0  # so a mismatch against a non-finite b is inf/0 = inf, a match 0/0 (ignored)

    def _tail(self, start: int, D: np.ndarray, absb: np.ndarray, T: np.ndarray, spare: np.ndarray) -> None:
        """Fold ``D = |a-b|`` (float64) and ``|b|`` (float32 as read, or float64 from ``_nonfinite``) into
        the statistics; ``T`` and ``spare`` are float64 scratch."""
        i = int(np.argmax(D))
        m = float(D[i])
        if m > self.max_abs:
            self.max_abs, self.max_at = m, start + i
        self.sum_abs += float(D.sum())
        if m == 0.0:
            return  # nothing differs: every excess and ratio here is 0 (or 0/0), the floor of each
        if D.size < MIN_PRUNE or math.isinf(m):
            if absb.dtype != np.float64:
                np.copyto(spare, absb)
                absb = spare
            self._excess_full(D, absb, T, m)
            self._ratios_full(D, absb, T)
            return
        self._excess(D, absb, i, m)
        self._ratios(D, absb, m)

    def _excess(self, D: np.ndarray, absb: np.ndarray, i: int, m: float) -> None:
        """``req_atol = max(D - rtol*|b|)`` over the elements that can reach it.

        Element ``i`` holds the largest D, so its excess ``floor = D[i] - rtol*|b[i]|`` is a lower bound. An
        element with ``D[j] < floor`` cannot beat it: its computed excess ``fl(D[j] - fl(rtol*|b[j]|))`` is
        at most ``D[j]`` (rounding is monotone and the subtrahend is not negative). The others (usually a
        handful) get the same elementwise formula a full pass would give them."""
        rtol = self.tol.rtol
        if not rtol:
            self.req_atol = max(self.req_atol, m)
            return
        floor = m - float(absb[i]) * rtol
        idx = np.flatnonzero(np.greater_equal(D, floor))
        self.req_atol = max(self.req_atol, float(np.max(D[idx] - absb[idx].astype(np.float64) * rtol)))

    def _ratios(self, D: np.ndarray, absb: np.ndarray, m: float) -> None:
        """``max_rel = max(D/|b|)`` and ``req_rtol = max((D - atol)/|b|)`` (each at least 0; 0/0 ignored),
        dividing only the elements that can reach them.

        Lower bounds come from every ``SAMPLE_STRIDE``-th element and from the maxima so far. With a bound
        ``L > 0`` for shift ``c`` (0, or atol), an element can reach it only if ``(m - c)/|b[j]| >= L``,
        as ``D[j] <= m``; so only elements with ``|b[j]| <= (m - c)/L`` (a little more, for rounding) are
        divided. A shift with ``m <= c`` has nothing above 0 here; without a positive bound, every element
        that differs is divided."""
        atol = self.tol.atol
        shifts = (0.0, atol) if atol else (0.0,)
        sd, sb = D[::SAMPLE_STRIDE], absb[::SAMPLE_STRIDE]
        seen = (self.max_rel, self.req_rtol)
        bounds = [max(seen[k], _ratio_max(sd, sb, c)) for k, c in enumerate(shifts)]
        limit = 0.0
        for c, bound in zip(shifts, bounds, strict=True):
            if m > c:
                limit = max(limit, (m - c) / bound * (1 + 2**-20) if bound > 0 else math.inf)
        if math.isinf(limit):
            idx = np.flatnonzero(np.greater(D, 0.0))
        else:
            idx = np.flatnonzero(np.less_equal(absb, _not_below(limit, absb.dtype)))
        dc, bc = (D, absb) if idx.size > D.size // 4 else (D[idx], absb[idx])  # pruning paid, or not
        found = [max(bounds[k], _ratio_max(dc, bc, c)) for k, c in enumerate(shifts)]
        self.max_rel = max(self.max_rel, found[0])
        self.req_rtol = max(self.req_rtol, found[-1])

    def _excess_full(self, D: np.ndarray, absb: np.ndarray, T: np.ndarray, m: float) -> None:
        rtol = self.tol.rtol
        if rtol:
            np.multiply(absb, rtol, out=T)
            np.subtract(D, T, out=T)
            self.req_atol = max(self.req_atol, float(T.max()))
        else:
            self.req_atol = max(self.req_atol, m)

    def _ratios_full(self, D: np.ndarray, absb: np.ndarray, T: np.ndarray) -> None:
        atol = self.tol.atol
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(D, absb, out=T)  # 0/0 -> NaN: no difference there; fmax skips it
            rel = float(np.fmax.reduce(T))
            if not math.isnan(rel):
                self.max_rel = max(self.max_rel, rel)
            if atol:  # max((D - atol) / |b|), clipped at 0 below: the same as max(max(D - atol, 0) / |b|)
                np.subtract(D, atol, out=T)
                np.divide(T, absb, out=T)
                rel = float(np.fmax.reduce(T))
            if not math.isnan(rel):
                self.req_rtol = max(self.req_rtol, rel)

    def merge(self, part: Accumulator) -> None:
        """Fold in the statistics of the elements that follow (a later part of the same pair)."""
        self.identical = self.identical and part.identical
        self.aa, self.bb, self.ab = self.aa + part.aa, self.bb + part.bb, self.ab + part.ab
        self.sum_abs += part.sum_abs
        if part.max_abs > self.max_abs:
            self.max_abs, self.max_at = part.max_abs, part.max_at
        self.max_rel = max(self.max_rel, part.max_rel)
        self.req_atol = max(self.req_atol, part.req_atol)
        self.req_rtol = max(self.req_rtol, part.req_rtol)
        for k in (0, 1):
            self.nan[k] += part.nan[k]
            self.inf[k] += part.inf[k]

    def finish(self, count: int, first: tuple[int, int] | None, first_at: int | None) -> PairStats:
        if self.identical or (self.aa == 0.0 and self.bb == 0.0):
            cosine = 1.0
        elif self.aa == 0.0 or self.bb == 0.0:
            cosine = 0.0
        else:
            cosine = max(-1.0, min(1.0, self.ab / (math.sqrt(self.aa) * math.sqrt(self.bb))))
        differs = self.max_abs > 0.0
        return PairStats(
            count=count,
            identical=self.identical,
            cosine=cosine,
            max_abs=self.max_abs if differs else 0.0,
            max_abs_at=self.max_at if differs else None,
            max_rel=self.max_rel,
            mean_abs=self.sum_abs / count if count else 0.0,
            nan=(self.nan[0], self.nan[1]),
            inf=(self.inf[0], self.inf[1]),
            first_diff=first,
            first_diff_at=first_at,
            min_atol=self.req_atol,
            min_rtol=self.req_rtol,
            passed=self.req_atol <= self.tol.atol,
        )


def _not_below(value: float, dtype: np.dtype[Any]) -> np.floating[Any]:
    """``value`` in ``dtype``, rounded up if it is not exact (a limit must not shrink)."""
    rounded = dtype.type(value)
    return rounded if rounded >= value else np.nextafter(rounded, dtype.type(np.inf))


def _ratio_max(d: np.ndarray, absb: np.ndarray, shift: float) -> float:
    """``max((d - shift)/absb)``, ignoring 0/0, and at least 0."""
    if not d.size:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = float(np.fmax.reduce(((d - shift) if shift else d) / absb))
    return rel if rel > 0.0 else 0.0
