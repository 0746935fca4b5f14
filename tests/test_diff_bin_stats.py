"""``gsurg diff-bin`` on two .bin files, the statistics: identical files, one changed float, the
minimum atol / rtol that would pass, chunked and threaded computation, fp16 / bf16 records against
fp32, and NaN / inf counts.

Params, bins and checkpoints are built by hand from the format notes (the shared fc model is in
``tests/diff_bin_harness.py``); every expected number is computed here with plain numpy (or by hand),
never by gsurg.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.cli import main as gsurg
from tests.diff_bin_harness import BIAS, FC_PARAM, TAG_FP32, W, diff, f32, fc_bin, model, pair

TAG_FP16 = b"\x47\x6b\x30\x01"  # 0x01306B47, ncnn's fp16 weight tag
TAG_BF16 = b"\x83\x8b\x34\x01"  # 0x01348B83


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


# ---- two .bin files -----------------------------------------------------------------------------------


def test_identical_bins_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    b = model(tmp_path, "b", FC_PARAM, fc_bin())
    report = diff(a, b)
    assert report.mode == "param" and report.passed
    assert [(p.a.name, p.b.name, p.how) for p in report.pairs] == [
        ("fc.weight", "fc.weight", "name"),
        ("fc.bias", "fc.bias", "name"),
    ]
    w = pair(report, "fc.weight")
    assert w.a.shape == (3, 4) and w.a.storage == "fp32" and w.a.offset == 0
    assert pair(report, "fc.bias").a.offset == 52 and pair(report, "fc.bias").a.storage == "raw"
    for p in report.pairs:
        s = p.stats
        assert s is not None and s.identical
        assert s.cosine == 1.0 and s.max_abs == 0.0 and s.max_abs_at is None and s.first_diff is None
        assert s.max_rel == s.mean_abs == s.min_atol == s.min_rtol == 0.0
    assert gsurg(["diff-bin", str(a), str(b), "--fail-on-diff"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == "PASSED"


def test_one_changed_float(tmp_path: Path) -> None:
    wb = W.copy()
    wb[7] = 1.5  # 1.0 = 00 00 80 3f, 1.5 = 00 00 c0 3f: byte 2 of element 7 differs
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    b = model(tmp_path, "b", FC_PARAM, fc_bin(wb))
    report = diff(a, b, atol=1e-5, rtol=1e-5)
    s = pair(report, "fc.weight").stats
    assert s is not None and not s.passed and not s.identical
    assert s.max_abs == 0.5 and s.max_abs_at == 7
    assert report.to_json()["pairs"][0]["max_abs_index"] == [1, 3]  # row 1, column 3 of [3, 4]
    assert s.first_diff == (4 + 7 * 4 + 2, 4 + 7 * 4 + 2) == (34, 34) and s.first_diff_at == 7
    assert s.max_rel == pytest.approx(0.5 / 1.5, rel=1e-15)
    assert s.mean_abs == pytest.approx(0.5 / 12, rel=1e-15)
    assert s.cosine == pytest.approx(cosine(W, wb), rel=1e-12)
    assert s.min_atol == pytest.approx(0.5 - 1e-5 * 1.5, rel=1e-15)
    assert s.min_rtol == pytest.approx((0.5 - 1e-5) / 1.5, rel=1e-15)
    assert pair(report, "fc.bias").stats.passed  # type: ignore[union-attr]
    # exactly at the threshold passes, just under fails
    assert diff(a, b, atol=0.5, rtol=0.0).passed
    assert not diff(a, b, atol=0.4999, rtol=0.0).passed
    assert diff(a, b, atol=0.0, rtol=0.5 / 1.5 + 1e-12).passed
    assert not diff(a, b, atol=0.0, rtol=0.33).passed


def test_min_tolerances_match_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    wa = rng.standard_normal(12).astype(np.float32)
    wb = (wa + rng.standard_normal(12).astype(np.float32) * 1e-3).astype(np.float32)
    wb[4] = 0.0  # |b| = 0 with a != 0: only atol can cover it
    a = model(tmp_path, "a", FC_PARAM, fc_bin(wa))
    b = model(tmp_path, "b", FC_PARAM, fc_bin(wb))
    atol, rtol = 2e-4, 1e-3
    s = pair(diff(a, b, atol=atol, rtol=rtol), "fc.weight").stats
    assert s is not None
    d = np.abs(wa.astype(np.float64) - wb.astype(np.float64))
    absb = np.abs(wb.astype(np.float64))
    want_atol = max(0.0, float(np.max(d - rtol * absb)))
    with np.errstate(divide="ignore", invalid="ignore"):
        want_rtol = float(np.nanmax(np.maximum(d - atol, 0) / absb))
        want_rel = float(np.nanmax(d / absb))
    assert want_rtol == math.inf and want_rel == math.inf  # element 4: |b| = 0 and |a-b| > atol
    assert s.min_atol == pytest.approx(want_atol, rel=1e-12)
    assert s.min_rtol == want_rtol and s.max_rel == want_rel
    assert s.max_abs == float(d.max()) and s.max_abs_at == int(np.argmax(d))
    assert s.mean_abs == pytest.approx(float(d.mean()), rel=1e-12)
    # the reported min atol is exactly what the numpy check needs at this rtol
    assert np.all(d <= s.min_atol + rtol * absb + 1e-18)
    assert diff(a, b, atol=s.min_atol * (1 + 1e-9), rtol=rtol).passed
    assert not diff(a, b, atol=s.min_atol * (1 - 1e-6), rtol=rtol).passed


def test_chunked_statistics_equal_numpy(tmp_path: Path) -> None:
    param = "7767517\n2 2\nInput in 0 1 x 0=13\nInnerProduct fc 1 1 x y 0=7 1=0 2=91\n"
    rng = np.random.default_rng(3)
    wa = rng.standard_normal(91).astype(np.float32)
    wa[[10, 40, 41, 90]] = [1.0, 0.5, -2.0, 3.0]
    wb = wa.copy()
    wb[[10, 40, 41, 90]] += np.float32(0.25)  # exact: a true tie; the first (10) is reported
    wb[60] -= np.float32(0.125)
    a = model(tmp_path, "a", param, TAG_FP32 + f32(wa))
    b = model(tmp_path, "b", param, TAG_FP32 + f32(wb))
    d = np.abs(wa.astype(np.float64) - wb.astype(np.float64))
    for chunk in (1, 5, 8, 91, 1 << 20):
        s = diff(a, b, chunk=chunk).pairs[0].stats
        assert s is not None
        assert s.max_abs == float(d.max()) == 0.25 and s.max_abs_at == int(np.argmax(d)) == 10
        assert s.mean_abs == pytest.approx(float(d.mean()), rel=1e-12)
        assert s.cosine == pytest.approx(cosine(wa, wb), rel=1e-12)
        first = int(np.flatnonzero(wa != wb)[0])
        byte = next(j for j in range(4) if f32(wa[first : first + 1])[j] != f32(wb[first : first + 1])[j])
        assert s.first_diff == (4 + 4 * first + byte,) * 2


def test_threaded_parts_match_numpy(tmp_path: Path) -> None:
    n = 512 * 512  # large enough that a differing chunk is cut into parts computed in threads
    param = f"7767517\n2 2\nInput in 0 1 x 0=512\nInnerProduct fc 1 1 x y 0=512 1=0 2={n}\n"
    rng = np.random.default_rng(5)
    wa = rng.standard_normal(n).astype(np.float32)
    wb = (wa + rng.standard_normal(n).astype(np.float32) * np.float32(1e-4)).astype(np.float32)
    wa[[100, 200_000]] = [1.0, -3.0]
    wb[[100, 200_000]] = [2.0, -2.0]  # exact tie at 1.0, in different parts: the first (100) is reported
    wb[150_000] = np.nan
    a = model(tmp_path, "a", param, TAG_FP32 + f32(wa))
    b = model(tmp_path, "b", param, TAG_FP32 + f32(wb))
    finite = ~np.isnan(wb)
    d = np.abs(wa.astype(np.float64) - wb.astype(np.float64))[finite]
    results = [
        diff(a, b, jobs=jobs, chunk=chunk).pairs[0].stats for jobs in (1, 2, 3) for chunk in (n, 1 << 17)
    ]
    for s in results:
        assert s is not None and s.nan == (0, 1) and s.max_abs == math.inf and s.max_abs_at == 150_000
        assert s.cosine == pytest.approx(cosine(wa[finite], wb[finite]), rel=1e-12)
    wb[150_000] = wa[150_000]
    b.write_bytes(TAG_FP32 + f32(wb))
    d = np.abs(wa.astype(np.float64) - wb.astype(np.float64))
    for jobs in (1, 2, 3):
        s = diff(a, b, jobs=jobs, chunk=n).pairs[0].stats
        assert s is not None and s.max_abs == 1.0 and s.max_abs_at == 100 == int(np.argmax(d))
        assert s.mean_abs == pytest.approx(float(d.mean()), rel=1e-12)
        want = float(np.max(d - 1e-5 * np.abs(wb.astype(np.float64))))
        assert s.min_atol == pytest.approx(want, rel=1e-12)


def test_fp16_vs_fp32_storage(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    w = rng.standard_normal(12).astype(np.float32)
    halves = w.astype("<f2")
    a = model(tmp_path, "a", FC_PARAM, TAG_FP16 + halves.tobytes() + f32(BIAS))  # 24 bytes: no padding
    b = model(tmp_path, "b", FC_PARAM, fc_bin(w))
    report = diff(a, b, atol=1e-3, rtol=1e-3)
    p = pair(report, "fc.weight")
    assert p.how == "name" and (p.a.storage, p.b.storage) == ("fp16", "fp32")
    s = p.stats
    assert s is not None and s.passed
    d = np.abs(halves.astype(np.float64) - w.astype(np.float64))
    assert s.max_abs == float(d.max()) and s.max_abs_at == int(np.argmax(d))
    assert np.all(d <= np.abs(w) * 2.0**-11)  # fp16 rounding: half an ulp of an 11-bit significand
    first = int(np.flatnonzero(halves.astype(np.float32) != w)[0])
    assert s.first_diff == (4 + 2 * first, 4 + 4 * first)  # located by value: different encodings
    assert pair(report, "fc.bias").stats.identical  # type: ignore[union-attr]
    assert diff(a, b, atol=0, rtol=0).passed is False


def test_bf16_record_is_widened(tmp_path: Path) -> None:
    w = np.array([1.0, -2.0, 0.5, 3.25, 0.0, -0.125, 7.0, 8.0, -1.5, 2.5, 0.75, 6.0], dtype=np.float32)
    bits = (w.view("<u4") >> 16).astype("<u2")  # exact in bf16: the low 16 bits are zero
    assert np.all((w.view("<u4") & 0xFFFF) == 0)
    a = model(tmp_path, "a", FC_PARAM, TAG_BF16 + bits.tobytes() + f32(BIAS))
    b = model(tmp_path, "b", FC_PARAM, fc_bin(w))
    p = pair(diff(a, b, atol=0, rtol=0), "fc.weight")
    assert p.a.storage == "bf16" and p.stats is not None and p.stats.passed and p.stats.max_abs == 0.0


def test_nan_and_inf_counts(tmp_path: Path) -> None:
    wa, wb = W.copy(), W.copy()
    wa[2], wb[2] = np.nan, np.nan  # NaN on both sides at the same place: equal
    wb[3] = np.nan  # NaN in b only
    wa[5], wb[5] = np.inf, np.inf  # equal infinities: equal
    wa[6], wb[6] = np.inf, -np.inf  # opposite infinities: differ
    wa[9] = -np.inf  # inf in a only
    a = model(tmp_path, "a", FC_PARAM, fc_bin(wa))
    b = model(tmp_path, "b", FC_PARAM, fc_bin(wb))
    s = pair(diff(a, b, atol=1.0, rtol=1.0), "fc.weight").stats
    assert s is not None
    assert s.nan == (int(np.isnan(wa).sum()), int(np.isnan(wb).sum())) == (1, 2)
    assert s.inf == (int(np.isinf(wa).sum()), int(np.isinf(wb).sum())) == (3, 2)
    assert s.max_abs == math.inf and s.max_abs_at == 3 and not s.passed
    assert s.min_atol == math.inf and s.min_rtol == math.inf
    finite = np.isfinite(wa) & np.isfinite(wb)
    assert s.cosine == pytest.approx(cosine(wa[finite], wb[finite]), rel=1e-12)
    # the same non-finite values on both sides pass
    both = model(tmp_path, "c", FC_PARAM, fc_bin(wa))
    same = pair(diff(a, both, atol=0, rtol=0), "fc.weight").stats
    assert same is not None and same.passed and same.identical and same.nan == (1, 1) and same.inf == (3, 3)
    # JSON has no inf: strings instead
    js = diff(a, b).to_json()
    assert js["pairs"][0]["max_abs"] == "inf" and json.loads(json.dumps(js, allow_nan=False)) == js
