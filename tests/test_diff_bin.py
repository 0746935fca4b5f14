"""``gsurg diff-bin``: params, bins and checkpoints built by hand from the format notes; every expected
number is computed here with plain numpy (or by hand), never by gsurg."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from graphsurgeon.check.diff_bin import diff_bins, pair_records
from graphsurgeon.check.diff_report import DiffReport, PairResult
from graphsurgeon.cli import main as gsurg
from tests.safetensors_files import bf16_bytes, write_safetensors

TAG_FP32 = b"\x00\x00\x00\x00"
TAG_FP16 = b"\x47\x6b\x30\x01"  # 0x01306B47, ncnn's fp16 weight tag
TAG_BF16 = b"\x83\x8b\x34\x01"  # 0x01348B83

FC_PARAM = "7767517\n3 3\nInput in 0 1 x 0=4\nInnerProduct fc 1 1 x y 0=3 1=1 2=12\nReLU r 1 1 y z\n"
W = np.array([0.5, -1.25, 2.0, 3.0, -0.75, 0.125, 1.0, 1.0, 4.0, -2.5, 0.25, 8.0], dtype=np.float32)
BIAS = np.array([0.1, -0.2, 0.3], dtype=np.float32)


def f32(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype="<f4").tobytes()


def fc_bin(weight: np.ndarray = W, bias: np.ndarray = BIAS) -> bytes:
    """InnerProduct 0=3 1=1 2=12: tag 0 + 12 fp32 weights, then the raw fp32 bias (no tag)."""
    return TAG_FP32 + f32(weight) + f32(bias)


def model(tmp: Path, stem: str, param: str, data: bytes) -> Path:
    (tmp / f"{stem}.param").write_text(param)
    path = tmp / f"{stem}.bin"
    path.write_bytes(data)
    return path


def diff(a: Path, b: Path, **kw: object) -> DiffReport:
    return diff_bins(str(a), str(b), **kw)  # type: ignore[arg-type]


def pair(report: DiffReport, name: str) -> PairResult:
    return next(p for p in report.pairs if p.a.name == name)


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


def test_renamed_layer_pairs_by_position(tmp_path: Path) -> None:
    renamed = FC_PARAM.replace("InnerProduct fc ", "InnerProduct dense ")
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    b = model(tmp_path, "b", renamed, fc_bin())
    report = diff(a, b)
    assert [(p.a.name, p.b.name, p.how) for p in report.pairs] == [
        ("fc.weight", "dense.weight", "position"),
        ("fc.bias", "dense.bias", "position"),
    ]
    assert report.passed and not report.unpaired_a and not report.unpaired_b
    assert report.summary()["by"] == {"position": 2}


def test_extra_layer_is_unpaired(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = (
        FC_PARAM.replace("3 3\n", "4 4\n") + "InnerProduct fc2 1 1 z w 0=3 1=0 2=9\n"
    )  # 9 more weights, no bias
    w2 = np.arange(9, dtype=np.float32)
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    b = model(tmp_path, "b", extra, fc_bin() + TAG_FP32 + f32(w2))
    report = diff(a, b)
    assert all(p.status == "pass" for p in report.pairs) and len(report.pairs) == 2
    assert [(e.name, e.offset, e.storage, e.shape) for e in report.unpaired_b] == [
        ("fc2.weight", 64, "fp32", (3, 3))
    ]
    assert not report.unpaired_a and not report.passed
    assert gsurg(["diff-bin", str(a), str(b)]) == 0  # a report only, without --fail-on-diff
    assert capsys.readouterr().out.rstrip().endswith("FAILED")
    assert gsurg(["diff-bin", str(a), str(b), "--fail-on-diff"]) == 1
    assert "in b: fc2.weight" in capsys.readouterr().out


def test_size_mismatch_by_name(tmp_path: Path) -> None:
    bigger = FC_PARAM.replace("0=4\n", "0=5\n").replace("2=12", "2=15")
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    b = model(tmp_path, "b", bigger, TAG_FP32 + f32(np.zeros(15, np.float32)) + f32(BIAS))
    report = diff(a, b)
    p = pair(report, "fc.weight")
    assert p.status == "shape-mismatch" and p.stats is None and p.message is not None
    assert "12 in a, 15 in b" in p.message and not report.passed


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


def test_json_report_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wb = W.copy()
    wb[0] = 0.75
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    b = model(tmp_path, "b", FC_PARAM, fc_bin(wb))
    assert gsurg(["diff-bin", str(a), str(b), "--format", "json", "--fail-on-diff"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"schema_version", "summary", "pairs", "unpaired", "warnings"}
    assert doc["schema_version"] == 1 and set(doc["unpaired"]) == {"a", "b"}
    summary = doc["summary"]
    assert summary["result"] == "FAILED" and summary["pairs"] == 2 and summary["failed"] == 1
    assert summary["by"] == {"name": 2} and summary["max_abs"] == 0.25
    p = doc["pairs"][0]
    for key in ("cosine", "max_abs", "max_abs_index", "max_rel", "mean_abs", "nan", "inf", "first_diff"):
        assert key in p
    assert p["how"] == "name" and p["status"] == "fail" and p["a"]["shape"] == [3, 4]
    assert p["first_diff"] == {"a": 4 + 2, "b": 4 + 2}  # 0.5 = 00 00 00 3f, 0.75 = 00 00 40 3f
    assert p["max_abs_index"] == [0, 0] and p["nan"] == {"a": 0, "b": 0}


def test_markdown_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    b = model(tmp_path, "b", FC_PARAM, fc_bin())
    assert gsurg(["diff-bin", str(a), str(b), "--format", "md"]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0].startswith("## diff-bin")
    header = next(line for line in lines if line.startswith("| a | b | how"))
    assert lines[lines.index(header) + 1].startswith("|---|")
    assert sum(line.startswith("| fc.") for line in lines) == 2 and lines[-1] == "**PASSED**"


def test_the_gsurg_entry_runs_diff_bin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    assert gsurg(["diff-bin", str(a), str(a), "--format", "json", "--fail-on-diff"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["result"] == "PASSED"


def test_ncnn_stem_param_found(tmp_path: Path) -> None:
    a = model(tmp_path, "m.ncnn", FC_PARAM, fc_bin())
    other = tmp_path / "o"
    other.mkdir()
    b = model(other, "m.ncnn", FC_PARAM, fc_bin())
    report = diff(a, b)
    assert report.mode == "param" and report.param_a == str(tmp_path / "m.ncnn.param")


def test_flat_fallback_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(f32(W))
    wb = W.copy()
    wb[3] = 5.0
    b.write_bytes(f32(wb))
    assert gsurg(["diff-bin", str(a), str(b), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "gsurg: warning: no .param found" in captured.err and "flat float32" in captured.err
    doc = json.loads(captured.out)
    assert doc["summary"]["mode"] == "flat" and doc["pairs"][0]["how"] == "flat"
    assert doc["pairs"][0]["max_abs"] == 2.0 and doc["pairs"][0]["max_abs_at"] == 3


def test_truncated_bin_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    b = model(tmp_path, "b", FC_PARAM, fc_bin()[:-4])
    assert gsurg(["diff-bin", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gsurg: error: ")
    assert "layer fc" in err and "weight bias" in err and "offset 52" in err and "truncated" in err


def test_bin_for_wrong_param_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = model(tmp_path, "a", FC_PARAM, fc_bin())
    smaller = FC_PARAM.replace("0=3 1=1 2=12", "0=2 1=1 2=8")
    b = model(tmp_path, "b", smaller, fc_bin())  # a 3x4 model's bytes for a 2x4 param
    assert gsurg(["diff-bin", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gsurg: error: ") and "b.bin" in err and "another .param" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["x.safetensors", "b.bin"], "needs --map"),
        (["a.bin", "b.bin", "--map", "m.yaml"], "needs --map"),
        (["a.safetensors", "b.safetensors", "--map", "m.yaml"], "at most one side"),
        (["a.bin", "missing.bin"], "no such file"),
        (["a.bin", "b.bin", "--atol", "-1"], "--atol"),
    ],
)
def test_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    model(tmp_path, "a", FC_PARAM, fc_bin())
    model(tmp_path, "b", FC_PARAM, fc_bin())
    paths = [str(tmp_path / x) if "." in x and not x.startswith("-") else x for x in argv]
    assert gsurg(["diff-bin", *paths]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gsurg: error: ") and needle in err


def test_repeated_layer_names_pair_in_order(tmp_path: Path) -> None:
    param = (
        "7767517\n3 3\nInput in 0 1 x 0=2\n"
        "InnerProduct fc 1 1 x y 0=2 1=0 2=4\nInnerProduct fc 1 1 y z 0=2 1=0 2=4\n"
    )
    one, two = np.array([1, 2, 3, 4], np.float32), np.array([5, 6, 7, 8], np.float32)
    a = model(tmp_path, "a", param, TAG_FP32 + f32(one) + TAG_FP32 + f32(two))
    b = model(tmp_path, "b", param, TAG_FP32 + f32(one) + TAG_FP32 + f32(two + 1))
    report = diff(a, b)
    assert [(p.a.offset, p.b.offset, p.how, p.status) for p in report.pairs] == [
        (0, 0, "name", "pass"),
        (20, 20, "name", "fail"),
    ]


def test_pair_records_prefers_names() -> None:
    from graphsurgeon.formats.model_bin import WeightRecord
    from graphsurgeon.ir.weights import Storage

    def rec(layer: str, slot: str, n: int, t: str = "InnerProduct") -> WeightRecord:
        return WeightRecord(layer, t, slot, 0, 0, Storage.FP32, (n,), 4 + 4 * n)

    ra = [rec("a", "weight", 4), rec("x", "weight", 6), rec("c", "weight", 4)]
    rb = [rec("a", "weight", 4), rec("y", "weight", 6), rec("z", "weight", 5), rec("c", "weight", 4)]
    pairs, left_a, left_b = pair_records(ra, rb)
    assert [(x.layer, y.layer, how) for x, y, how in pairs] == [
        ("a", "a", "name"),
        ("x", "y", "position"),
        ("c", "c", "name"),
    ]
    assert left_a == [] and [r.layer for r in left_b] == ["z"]


# ---- a .bin against a safetensors checkpoint ----------------------------------------------------------

GQA_PARAM = (
    "7767517\n3 3\nInput in 0 1 x 0=2\n"
    "InnerProduct fc 1 1 x y 0=3 1=1 2=12\n"
    "InnerProduct attn.k 1 1 y z 0=4 1=0 2=8\n"
)
K = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)  # 2 kv heads of dim 2 (rows)


def gqa_bin(k_weight: np.ndarray) -> bytes:
    return fc_bin() + TAG_FP32 + f32(k_weight)


def gqa_checkpoint(tmp: Path) -> Path:
    """fc.weight stored transposed ([4, 3], fp32), fc.bias as bf16, k_proj as bf16 [2, 2], plus an extra."""
    ckpt = tmp / "model.safetensors"
    write_safetensors(
        ckpt,
        {
            "fc_t": ("F32", (4, 3), f32(W.reshape(3, 4).T)),
            "fc_b": ("BF16", (3,), bf16_bytes(np.array([0.125, -0.25, 0.375], np.float32))),
            "k_proj": ("BF16", (2, 2), bf16_bytes(K)),
            "unused": ("F32", (2,), f32(np.zeros(2, np.float32))),
        },
    )
    with safe_open(str(ckpt), framework="numpy") as fh:  # the package agrees with the hand-written file
        assert sorted(fh.keys()) == ["fc_b", "fc_t", "k_proj", "unused"]
        np.testing.assert_array_equal(fh.get_tensor("fc_t"), W.reshape(3, 4).T)
    return ckpt


GQA_MAP = """\
fc.weight: {tensor: fc_t, transforms: [transpose]}
fc.bias: fc_b
attn.k.weight: {tensor: k_proj, transforms: [{repeat_interleave: {axis: 0, n: 2}}]}
"""
BF16_BIAS = np.array([0.125, -0.25, 0.375], np.float32)


def test_checkpoint_with_transpose_and_repeat_interleave(tmp_path: Path) -> None:
    ckpt = gqa_checkpoint(tmp_path)
    (tmp_path / "map.yaml").write_text(GQA_MAP)
    interleaved = np.repeat(K, 2, axis=0)  # rows 0,0,1,1 — torch.repeat_interleave(dim=0)
    b = model(tmp_path, "m", GQA_PARAM, fc_bin(W, BF16_BIAS) + TAG_FP32 + f32(interleaved))
    report = diff(b, ckpt, map_path=str(tmp_path / "map.yaml"), atol=0, rtol=0)
    assert report.mode == "checkpoint" and report.passed, report.to_json()
    assert [(p.a.name, p.b.name, p.how) for p in report.pairs] == [
        ("fc.weight", "fc_t", "map"),
        ("fc.bias", "fc_b", "map"),
        ("attn.k.weight", "k_proj", "map"),
    ]
    k = pair(report, "attn.k.weight")
    assert k.b.storage == "bf16" and k.b.shape == (4, 2) and k.a.shape == (4, 2)
    assert k.stats is not None and k.stats.identical and k.stats.cosine == 1.0
    assert report.unmapped_tensors == 1  # "unused": listed, not a failure


def test_tile_order_does_not_pass_repeat_interleave(tmp_path: Path) -> None:
    ckpt = gqa_checkpoint(tmp_path)
    (tmp_path / "map.yaml").write_text(GQA_MAP)
    tiled = np.tile(K, (2, 1))  # rows 0,1,0,1: what a plain repeat/tile would give
    b = model(tmp_path, "m", GQA_PARAM, fc_bin(W, BF16_BIAS) + TAG_FP32 + f32(tiled))
    report = diff(b, ckpt, map_path=str(tmp_path / "map.yaml"), atol=0, rtol=0)
    k = pair(report, "attn.k.weight")
    interleaved = np.repeat(K, 2, axis=0)
    s = k.stats
    assert s is not None and not s.passed and not report.passed
    d = np.abs(tiled.astype(np.float64) - interleaved).reshape(-1)
    assert s.max_abs == float(d.max()) == 2.0 and s.max_abs_at == int(np.argmax(d))
    first = int(np.flatnonzero(d)[0])  # element 2: row 1, column 0
    record = 64  # after fc.weight (4 + 48) and fc.bias (12)
    header = struct.unpack("<Q", ckpt.read_bytes()[:8])[0]
    k_data = 8 + header + 48 + 6  # after fc_t (48 bytes) and fc_b (6 bytes)
    # interleaved row 1 is checkpoint row 0: element (1, 0) comes from k_proj[0, 0]
    assert s.first_diff == (record + 4 + 4 * first, k_data + 0) and s.first_diff_at == first == 2


def test_checkpoint_without_transform_fails_and_sizes_are_checked(tmp_path: Path) -> None:
    ckpt = gqa_checkpoint(tmp_path)
    (tmp_path / "map.yaml").write_text(
        "fc.weight: fc_t\n"  # no transpose: same count, wrong order
        "fc.bias: {tensor: k_proj, transforms: [{reshape: [-1]}]}\n"  # 4 elements for a 3-element bias
        "attn.k.weight: missing_tensor\n"
        "ghost.weight: unused\n"
    )
    b = model(tmp_path, "m", GQA_PARAM, fc_bin(W, BF16_BIAS) + TAG_FP32 + f32(np.repeat(K, 2, axis=0)))
    report = diff(b, ckpt, map_path=str(tmp_path / "map.yaml"))
    w = pair(report, "fc.weight")
    assert w.status == "fail" and w.stats is not None
    assert w.stats.max_abs == float(np.abs(W.astype(np.float64) - W.reshape(3, 4).T.reshape(-1)).max())
    bias = pair(report, "fc.bias")
    assert bias.status == "shape-mismatch" and "3 in a, 4 in b" in (bias.message or "")
    assert [(e.name, e.note) for e in report.unpaired_a] == [
        ("attn.k.weight", f"map entry 'attn.k.weight': tensor 'missing_tensor' is not in {ckpt}")
    ]
    assert [e.name for e in report.unpaired_b] == ["unused"] and "ghost.weight" in (
        report.unpaired_b[0].note or ""
    )
    assert not report.passed


def test_sharded_checkpoint_and_checkpoint_as_a(tmp_path: Path) -> None:
    save_file({"fc_t": W.reshape(3, 4).T.copy()}, str(tmp_path / "s-00001-of-00002.safetensors"))
    write_safetensors(
        tmp_path / "s-00002-of-00002.safetensors",
        {"fc_b": ("BF16", (3,), bf16_bytes(BF16_BIAS)), "k_proj": ("BF16", (2, 2), bf16_bytes(K))},
    )
    index = tmp_path / "s.safetensors.index.json"
    index.write_text(
        json.dumps(
            {
                "metadata": {"total_size": 66},
                "weight_map": {
                    "fc_t": "s-00001-of-00002.safetensors",
                    "fc_b": "s-00002-of-00002.safetensors",
                    "k_proj": "s-00002-of-00002.safetensors",
                },
            }
        )
    )
    (tmp_path / "map.yaml").write_text(GQA_MAP)
    b = model(tmp_path, "m", GQA_PARAM, fc_bin(W, BF16_BIAS) + TAG_FP32 + f32(np.repeat(K, 2, axis=0)))
    report = diff(index, b, map_path=str(tmp_path / "map.yaml"), atol=0, rtol=0)
    assert report.passed and len(report.pairs) == 3 and report.unmapped_tensors == 0
    assert [(p.a.name, p.b.name) for p in report.pairs] == [
        ("fc_t", "fc.weight"),
        ("fc_b", "fc.bias"),
        ("k_proj", "attn.k.weight"),
    ]
    assert pair(report, "fc_t").a.file == str(tmp_path / "s-00001-of-00002.safetensors")


def test_fp16_checkpoint_tensor_through_the_package(tmp_path: Path) -> None:
    halves = W.reshape(3, 4).T.astype(np.float16)  # all of W is exact in fp16
    save_file({"fc_t": np.ascontiguousarray(halves), "fc_b": BIAS}, str(tmp_path / "h.safetensors"))
    (tmp_path / "map.yaml").write_text(
        "fc.weight: {tensor: fc_t, transforms: [{transpose: [1, 0]}]}\nfc.bias: fc_b\n"
    )
    b = model(tmp_path, "m", FC_PARAM, fc_bin())
    report = diff(b, tmp_path / "h.safetensors", map_path=str(tmp_path / "map.yaml"), atol=0, rtol=0)
    assert report.passed and [p.b.storage for p in report.pairs] == ["fp16", "fp32"]
    assert pair(report, "fc.weight").b.shape == (3, 4)


def test_bad_map_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = gqa_checkpoint(tmp_path)
    b = model(tmp_path, "m", GQA_PARAM, fc_bin() + TAG_FP32 + f32(np.zeros(8, np.float32)))
    for text, needle in (
        ("fc.weight: {tensor: fc_t, transforms: [{rotate: 1}]}\n", "unknown transform 'rotate'"),
        ("fc.weight: fc_t\nfc.weight: fc_b\n", "duplicate key"),
        ("weight: fc_t\n", "layer.slot"),
    ):
        (tmp_path / "bad.yaml").write_text(text)
        assert gsurg(["diff-bin", str(b), str(ckpt), "--map", str(tmp_path / "bad.yaml")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gsurg: error: ") and needle in err and "bad.yaml" in err
