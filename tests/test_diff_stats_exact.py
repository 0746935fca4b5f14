"""diff-bin's statistics equal a plain numpy computation over every element, exactly, whatever the data.

``diff_stats`` divides and subtracts only the elements that can reach a maximum (the rest are pruned by
bounds); these cases are built so that the pruning has work to do: every element differs, differences tie,
|b| repeats or is 0, only a few elements differ, and each tolerance is 0 or not. The oracle is numpy in
float64 over whole arrays, with the same elementwise formulas, so maxima must match to the last bit
(sums, for the mean and the cosine, to 1e-12).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.check.diff_bin import diff_bins
from graphsurgeon.check.diff_stats import MAX_JOBS, Comparator, Tolerance, idle_cores

N = 3 * (1 << 16) + 5  # several chunks, and a ragged end


def _cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    a = rng.standard_normal(N).astype(np.float32)
    independent = rng.standard_normal(N).astype(np.float32)
    close = (a + rng.standard_normal(N).astype(np.float32) * np.float32(1e-3)).astype(np.float32)
    close[::997] = 0.0  # |b| = 0 where a is not: infinite ratios
    halves = (rng.integers(-40, 40, N) * 0.5).astype(np.float32)  # every difference exactly 0.25: ties
    sparse = a.copy()
    sparse[[7, 70_000, N - 1]] += np.float32(0.5)
    tiny_b = rng.standard_normal(N).astype(np.float32) * np.float32(1e-30)  # every ratio huge
    scaled = (a * np.float32(1e-4) + rng.standard_normal(N).astype(np.float32) * np.float32(1e-7)).astype(
        np.float32
    )  # Σb² is 1e-8 of Σa²: deriving it from Σa², Σa(a-b), Σ(a-b)² would cancel
    return {
        "b-much-smaller": (a, scaled),
        "b-is-minus-a": (a, -a),
        "tight-ratio": _tight(excess=False),
        "tight-excess": _tight(excess=True),
        "independent": (a, independent),
        "close-with-zeros": (a, close),
        "all-tied": (halves, (halves + np.float32(0.25)).astype(np.float32)),
        "three-differ": (a, sparse),
        "tiny-reference": (a, tiny_b),
    }


def _tight(excess: bool) -> tuple[np.ndarray, np.ndarray]:
    """Built so each bound is nearly reached: b = 2, a = 2.5 (ratio 0.25) everywhere, except every 64th
    element (the ones sampled for bounds): b = 1, a = 2 (D = 1, the largest D; ratio 1). Then either
    element 1000 has D = 1 too and b = 0.75 (ratio 4/3: only just inside the pruning limit 1), or element
    2000 has D = 0.875 (less than the largest) and b = 0 (excess 0.875 beats the 0.5 of a largest-D element
    at rtol 0.5)."""
    b = np.full(N, 2.0, dtype=np.float32)
    b[::64] = 1.0
    a = b + np.where(b == 1.0, np.float32(1.0), np.float32(0.5)).astype(np.float32)
    if excess:
        a[2000], b[2000] = 0.875, 0.0
    else:
        a[1000], b[1000] = 1.75, 0.75
    return a, b


CASES = _cases()


def expected(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> dict[str, float]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    d = np.abs(a64 - b64)
    absb = np.abs(b.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.nanmax(d / absb) if np.any(~np.isnan(d / absb)) else 0.0
        shifted = np.nanmax((d - atol) / absb) if atol else rel
    return {
        "max_abs": float(d.max()),
        "max_abs_at": int(np.argmax(d)),
        "min_atol": max(0.0, float(np.max(d - absb * rtol))) if rtol else float(d.max()),
        "max_rel": max(0.0, float(rel)),
        "min_rtol": max(0.0, float(shifted)),
        "mean_abs": float(d.mean()),
        "cosine": float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64))),
    }


@pytest.mark.parametrize(("atol", "rtol"), [(1e-5, 1e-5), (0.0, 1e-3), (1e-3, 0.0), (0.0, 0.0), (0.3, 0.5)])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize(("chunk", "jobs"), [(1 << 16, 1), (1 << 18, 2)])
def test_statistics_equal_numpy_over_all_elements(
    tmp_path: Path, name: str, atol: float, rtol: float, chunk: int, jobs: int
) -> None:
    a, b = CASES[name]
    (tmp_path / "a.bin").write_bytes(a.tobytes())
    (tmp_path / "b.bin").write_bytes(b.tobytes())
    report = diff_bins(
        str(tmp_path / "a.bin"), str(tmp_path / "b.bin"), atol=atol, rtol=rtol, chunk=chunk, jobs=jobs
    )
    s = report.pairs[0].stats
    assert s is not None
    want = expected(a, b, atol, rtol)
    got = {k: getattr(s, k) for k in want}
    # sums: the order of additions differs; a cosine near 0 (independent data) is accurate in absolute terms
    assert got.pop("mean_abs") == pytest.approx(want.pop("mean_abs"), rel=1e-12)
    assert got.pop("cosine") == pytest.approx(want.pop("cosine"), rel=1e-12, abs=1e-14)
    assert got == want
    assert s.passed == (want["min_atol"] <= atol)
    if name == "close-with-zeros":
        assert math.isinf(s.max_rel) and math.isinf(s.min_rtol)


@pytest.mark.parametrize(
    ("cores", "load", "threads"), [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 3.9, 1), (8, 2.0, 6)]
)
def test_default_threads_are_the_idle_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int, load: float, threads: int
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert idle_cores() == threads
    assert Comparator(Tolerance(0.0, 0.0)).jobs == min(threads, MAX_JOBS)
