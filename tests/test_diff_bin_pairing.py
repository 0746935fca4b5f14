"""``gsurg diff-bin`` on two .bin files, which weight is compared with which and what the command says:
pairing by name, by position and in order, unpaired and mis-sized records; the JSON and Markdown
reports, the flat float32 fallback, and the exit-2 errors (truncated .bin, .bin of another .param,
usage).

Params, bins and checkpoints are built by hand from the format notes (the shared fc model is in
``tests/diff_bin_harness.py``); every expected number is computed here with plain numpy (or by hand),
never by gsurg.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.check.diff_bin import pair_records
from graphsurgeon.cli import main as gsurg
from tests.diff_bin_harness import BIAS, FC_PARAM, TAG_FP32, W, diff, f32, fc_bin, model, pair


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
