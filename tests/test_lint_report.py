"""``gsurg lint``, the report: exit codes, the text and JSON forms, every fault of a file reported in one
run, unreadable .param / .bin files (exit 2, one error line) and a binary .param linted like a text one.

One tiny hand-written .param (and, where weights matter, a .bin built byte by byte from the format notes)
per check, with the expected check ids, layer names and line numbers written out exactly. Where a check
claims ncnn rejects something, the ``ncnn`` wheel is asked too, so the expectation does not rest on gsurg
alone; the shared builders are in ``tests/lint_harness.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import ncnn
import numpy as np
import pytest

from graphsurgeon.cli import main
from tests.conftest import CORPUS
from tests.lint_harness import TAG_FP32, cli, f32, lint, ncnn_load_param, param, rows, write

CLEAN = param(
    "Input in0 0 1 x",
    "InnerProduct fc 1 1 x y 0=2 1=1 2=8",
    "Softmax sm 1 1 y prob 0=0",
)


# --- the report: exit codes, text, JSON -------------------------------------------------------------------


def test_clean_model_exits_0_and_prints_passed_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = write(tmp_path, CLEAN)
    b = tmp_path / "m.bin"
    b.write_bytes(TAG_FP32 + f32(*np.linspace(-1, 1, 8)) + f32(0.5, -0.5))
    code, out, err = cli(capsys, str(p), "--bin", str(b))
    assert (code, err) == (0, "")
    assert out.splitlines() == ["3 layers, 3 blobs, 2 weights: 0 error(s), 0 warning(s)", "PASSED"]
    assert ncnn_load_param(CLEAN) == 0


def test_several_independent_faults_in_one_file_are_all_reported_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = param(
        "Input in0 0 1 x",  # line 3
        "ReLU r1 1 1 x a",  # line 4
        "ReLU r2 1 1 x b",  # line 5: x read twice, no Split
        "ReLU r3 1 1 ghost c",  # line 6: ghost is produced by nobody
        "ReLU r4 1 1 a b",  # line 7: b is produced by r2 already
        "InnerProduct fc 1 1 c d 0=2 1=1.0 2=8",  # line 8: float for an int param
        "Softmax sm 1 1 d e 0=1",  # line 9: axis 1 without 1=1
        "pnnx.Expression expr 1 1 e f",  # line 10: unconverted
        "Reshape rs 1 1 f g 0=-1 1=-1",  # line 11: two -1
        blobs=5,  # line 2: the layers name 10 blobs (b#2 included)
    )
    report = lint(write(tmp_path, text))
    assert sorted(rows(report), key=lambda r: (r[3] or 0, r[1])) == [
        ("error", "header-counts", None, 2),
        ("error", "fanout-without-split", "r2", 5),
        ("error", "undefined-bottom", "r3", 6),
        ("error", "duplicate-top", "r4", 7),
        ("error", "literal-type", "fc", 8),
        ("error", "softmax-fixbug", "sm", 9),
        ("error", "unconverted-op", "expr", 10),
        ("error", "reshape-two-minus-one", "rs", 11),
    ]
    code, out, _ = cli(capsys, str(tmp_path / "m.param"))
    assert code == 1
    lines = out.splitlines()
    assert lines[-1] == "FAILED"
    assert lines[-2] == "9 layers, 10 blobs: 8 error(s), 0 warning(s)"
    assert len(lines) == 10  # one line per finding, then the count, then the verdict
    assert f"{tmp_path / 'm.param'}: error: [duplicate-top] line 7, layer r4: " in out


def test_json_report_parses_with_schema_version_1_and_matching_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = param(
        "Input in0 0 1 x",
        "BinaryOp add 1 1 x y 0=0 1=1 2=2",  # int for a float param: warning
        "Softmax sm 1 1 y z 0=1",  # error
        "Foo custom 1 1 z w",  # custom type: warning
    )
    p = write(tmp_path, text)
    code, out, _ = cli(capsys, str(p), "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    assert set(doc) == {"schema_version", "summary", "findings"}
    summary, findings = doc["summary"], doc["findings"]
    levels = [f["level"] for f in findings]
    assert (summary["errors"], summary["warnings"]) == (levels.count("error"), levels.count("warning"))
    assert (summary["errors"], summary["warnings"]) == (1, 2)
    assert summary["by_check"] == {"custom-layer": 1, "literal-type": 1, "softmax-fixbug": 1}
    assert summary["passed"] is False and summary["layers"] == 4 and summary["blobs"] == 4
    assert [(f["level"], f["check"], f.get("layer"), f.get("line")) for f in findings] == [
        ("warning", "custom-layer", "custom", 6),
        ("warning", "literal-type", "add", 4),
        ("error", "softmax-fixbug", "sm", 5),
    ]
    assert all(isinstance(f["message"], str) and f["message"] for f in findings)


def test_warnings_only_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = param("Input in0 0 1 x", "BinaryOp add 1 1 x y 0=0 1=1 2=2")
    code, out, _ = cli(capsys, str(write(tmp_path, text)))
    assert code == 0
    assert out.splitlines()[-2:] == ["2 layers, 2 blobs: 0 error(s), 1 warning(s)", "PASSED"]
    assert "warning: [literal-type] line 4, layer add: param 2 (b) is a float" in out


@pytest.mark.parametrize(
    ("name", "content", "expect"),
    [
        ("syntax.param", "7767517\n2 2\nInput in0 0 1 x\nReLU r 1 1 x y 0=\n", "syntax.param:4:"),
        ("missing.param", None, "missing.param: cannot read: No such file or directory"),
        ("short.param", "7767517\n", "short.param"),
    ],
)
def test_unreadable_param_exits_2_with_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str | None, expect: str
) -> None:
    p = tmp_path / name
    if content is not None:
        p.write_text(content)
    code, out, err = cli(capsys, str(p))
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("gsurg: error: ") and expect in err


def test_unreadable_bin_exits_2_with_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, str(write(tmp_path, CLEAN)), "--bin", str(tmp_path / "nope.bin"))
    assert (code, out) == (2, "")
    assert err.startswith("gsurg: error: ") and "nope.bin" in err and len(err.splitlines()) == 1


def test_binary_param_is_linted_too(tmp_path: Path) -> None:
    assets = CORPUS / "ncnn-assets"
    pbin = tmp_path / "squeezenet.param.bin"
    assert main(["fmt", str(assets / "squeezenet_v1.1.param"), "-o", str(pbin), "-q"]) == 0
    report = lint(pbin, bin_path=assets / "squeezenet_v1.1.bin")
    assert report.findings == [] and report.weights == 52
    sm = tmp_path / "sm.param.bin"
    assert (
        main(["fmt", str(write(tmp_path, param("Input in0 0 1 x", "Softmax sm 1 1 x y 0=1"))), "-o", str(sm)])
        == 0
    )
    found = lint(sm).findings
    assert [(f.level.value, f.check) for f in found] == [("error", "softmax-fixbug")]
    assert ncnn.Net().load_param_bin(str(sm)) != 0
