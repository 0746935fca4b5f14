"""``gsurg lint``: one tiny hand-written .param (and, where weights matter, a .bin built byte by byte from the
format notes) per check, with the expected check ids, layer names and line numbers written out exactly.

Where a check claims ncnn rejects something, the ``ncnn`` wheel is asked too, so the expectation does not
rest on gsurg alone.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import ncnn
import numpy as np
import pytest

from graphsurgeon.check.context import LintOptions
from graphsurgeon.check.findings import LintReport
from graphsurgeon.check.lint import run_lint
from graphsurgeon.cli import main
from tests.conftest import CORPUS

# Weight tags written by hand from ncnn's src/modelbin.cpp (uint32 little-endian on disk).
TAG_FP32 = bytes(4)
TAG_FP16 = bytes.fromhex("476b3001")
YOLOV5S = CORPUS / "ncnn-assets" / "yolov5s.param"

Row = tuple[str, str, str | None, int | None]  # (level, check, layer, line)


def f32(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def write(tmp_path: Path, text: str, name: str = "m.param") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def param(*layer_lines: str, blobs: int | None = None) -> str:
    """A text .param with an exact header (layer count, distinct blob names) unless ``blobs`` overrides it."""
    names: set[str] = set()
    for line in layer_lines:
        tok = line.split()
        nb, nt = int(tok[2]), int(tok[3])
        names.update(tok[4 : 4 + nb + nt])
    count = len(names) if blobs is None else blobs
    return "7767517\n" + f"{len(layer_lines)} {count}\n" + "".join(f"{line}\n" for line in layer_lines)


def lint(
    path: Path,
    *,
    bin_path: Path | None = None,
    inputs: list[str] | None = None,
    outputs: list[str] | None = None,
    custom: list[str] | None = None,
) -> LintReport:
    options = LintOptions(bin_path=str(bin_path) if bin_path else None, inputs=inputs, outputs=outputs)
    return run_lint(str(path), options, custom=custom)


def rows(report: LintReport) -> list[Row]:
    return [(f.level.value, f.check, f.layer, f.line) for f in report.findings]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["lint", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def ncnn_load_param(text: str) -> int:
    net = ncnn.Net()
    return int(net.load_param_mem(text))


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


# --- header, blobs, names, ids ----------------------------------------------------------------------------


def test_magic_and_header_counts(tmp_path: Path) -> None:
    lines = ["Input in0 0 1 x", "ReLU r 1 1 x y"]
    bad_magic = param(*lines).replace("7767517", "7767518", 1)
    assert rows(lint(write(tmp_path, bad_magic))) == [("error", "magic", None, 1)]
    too_many_layers = param(*lines).replace("2 2", "3 2", 1)
    assert rows(lint(write(tmp_path, too_many_layers))) == [("error", "header-counts", None, 2)]
    too_few_blobs = param(*lines, blobs=1)
    assert rows(lint(write(tmp_path, too_few_blobs))) == [("error", "header-counts", None, 2)]
    too_many_blobs = param(*lines, blobs=5)
    assert [r[:2] for r in rows(lint(write(tmp_path, too_many_blobs)))] == [("warning", "header-counts")]
    extra_layer_line = param(*lines).replace("2 2", "1 2", 1)
    report = lint(write(tmp_path, extra_layer_line))
    assert report.errors == 0 and "header-counts" in {f.check for f in report.findings}


def test_header_count_warnings_carry_line_2(tmp_path: Path) -> None:
    report = lint(write(tmp_path, param("Input in0 0 1 x", "ReLU r 1 1 x y", blobs=5)))
    assert rows(report) == [("warning", "header-counts", None, 2)]


def test_undefined_bottom_and_use_before_definition(tmp_path: Path) -> None:
    text = param(
        "Input in0 0 1 x",
        "ReLU r1 1 1 ghost a",  # line 4: never produced
        "ReLU r2 1 1 late b",  # line 5: produced only on line 6
        "ReLU r3 1 1 x late",
        blobs=6,  # ncnn makes an orphan for the early read of late, then a fresh slot for r3's top
    )
    assert rows(lint(write(tmp_path, text))) == [
        ("error", "undefined-bottom", "r3", 6),
        ("error", "undefined-bottom", "r1", 4),
    ]


def test_duplicate_top(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "ReLU r1 1 1 x y", "ReLU r2 1 1 y y", blobs=3)
    assert rows(lint(write(tmp_path, text))) == [("error", "duplicate-top", "r2", 5)]
    same_twice = param("Input in0 0 1 x", "Slice s 1 2 x a a -23300=2,-233,-233", blobs=3)
    assert rows(lint(write(tmp_path, same_twice))) == [("error", "duplicate-top", "s", 4)]


def test_fanout_needs_a_split(tmp_path: Path) -> None:
    without = param("Input in0 0 1 x", "ReLU r 1 1 x a", "BinaryOp add 2 1 x a y 0=0")
    assert rows(lint(write(tmp_path, without))) == [("error", "fanout-without-split", "add", 5)]
    report = lint(write(tmp_path, without))
    assert report.findings[0].blob == "x" and "(r, add)" in report.findings[0].message
    with_split = param(
        "Input in0 0 1 x", "Split sp 1 2 x x0 x1", "ReLU r 1 1 x0 a", "BinaryOp add 2 1 x1 a y 0=0"
    )
    assert rows(lint(write(tmp_path, with_split))) == []
    same_layer_twice = param("Input in0 0 1 x", "BinaryOp sq 2 1 x x y 0=2")
    assert rows(lint(write(tmp_path, same_layer_twice))) == []


def test_names_over_255_characters(tmp_path: Path) -> None:
    long = "n" * 256
    text = param("Input in0 0 1 x", f"ReLU r 1 1 x {long}", "ReLU ok 1 1 " + long + " " + "m" * 255)
    found = rows(lint(write(tmp_path, text)))
    # each line that holds the 256-character name (its top on line 4, its bottom on line 5), and nothing for
    # the 255-character one
    assert [r for r in found if r[1] == "name-length"] == [
        ("error", "name-length", "r", 4),
        ("error", "name-length", "ok", 5),
    ]
    assert {r[1] for r in found} == {"name-length"}
    ok = param("Input in0 0 1 x", "ReLU r 1 1 x " + "m" * 255)
    assert rows(lint(write(tmp_path, ok))) == []


def test_param_ids_outside_0_31_and_reserved_30_31(tmp_path: Path) -> None:
    text = param(
        "Input in0 0 1 x",
        "ReLU r1 1 1 x a 32=1",  # line 4
        "ReLU r2 1 1 a b 30=1",  # line 5: not shape hints
        "ReLU r3 1 1 b c 31=1.0",  # line 6: featmask must be an int
        "ReLU r4 1 1 c d 31=1 -23330=4,2,8,4,1",  # line 7: both used as ncnn means them
    )
    found = rows(lint(write(tmp_path, text)))
    assert [(r[1], r[3]) for r in found] == [
        ("param-id", 4),
        ("reserved-param", 5),
        ("reserved-param", 6),
    ]
    assert [r[2] for r in found][1:] == ["r2", "r3"]


def test_reader_issue_findings_name_their_layer(tmp_path: Path) -> None:
    text = param(
        "Input in0 0 1 x",
        "ReLU r1 1 1 x a 32=1",
        "Eltwise e 1 1 a b 0=1 -23301=2,1.0,2",
        "ReLU r3 1 1 b " + "n" * 300,
    )
    found = [(r[1], r[2], r[3]) for r in rows(lint(write(tmp_path, text))) if r[1] != "name"]
    assert found == [
        ("param-id", "r1", 4),
        ("mixed-array", "e", 5),
        ("name-length", "r3", 6),
    ]


def test_a_long_name_is_reported_once(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "ReLU r 1 1 x " + "n" * 300)
    assert len(lint(write(tmp_path, text)).findings) == 1


def test_mixed_type_old_style_array(tmp_path: Path) -> None:
    text = param("Input in0 0 2 x y", "Eltwise e 2 1 x y z 0=1 -23301=2,1.0,2")
    assert [(r[1], r[3]) for r in rows(lint(write(tmp_path, text)))] == [("mixed-array", 4)]
    uniform = param("Input in0 0 2 x y", "Eltwise e 2 1 x y z 0=1 -23301=2,1.0,2.0")
    assert rows(lint(write(tmp_path, uniform))) == []


# --- literal types and layer types ------------------------------------------------------------------------


def test_float_literal_for_an_int_param_is_an_error(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "InnerProduct fc 1 1 x y 0=2 1=1.0 2=8")
    report = lint(write(tmp_path, text))
    assert rows(report) == [("error", "literal-type", "fc", 4)]
    assert "bias_term" in report.findings[0].message
    assert ncnn_load_param(text) == 0  # ncnn loads it silently (and uses bias_term = 0)


def test_wrong_literal_kinds_for_arrays_and_strings(tmp_path: Path) -> None:
    text = param(
        "Input in0 0 1 x",
        "Slice s 1 2 x a b -23300=2,1.0,1.0",  # line 4: float array for an int array
        "BinaryOp add 1 1 a c 0=0 1=1 2=inf",  # line 5: inf is read as a string
        "Concat cat 2 1 b c d 0=1.5",  # line 6: float for an int
    )
    assert rows(lint(write(tmp_path, text))) == [
        ("error", "literal-type", "s", 4),
        ("error", "literal-type", "add", 5),
        ("error", "literal-type", "cat", 6),
    ]
    slice_only = param("Input in0 0 1 x", "Slice s 1 2 x a b -23300=2,1.0,1.0")
    assert ncnn_load_param(slice_only) != 0


def test_shape_hints_must_hold_one_record_per_top(tmp_path: Path) -> None:
    bad = param("Input in0 0 1 x", "ReLU r 1 1 x y -23330=8,2,8,4,1,2,8,4,1")
    assert rows(lint(write(tmp_path, bad))) == [("error", "reserved-param", "r", 4)]
    good = param("Input in0 0 1 x", "Split s 1 2 x a b -23330=8,2,8,4,1,2,8,4,1")
    assert rows(lint(write(tmp_path, good))) == []


def test_duplicate_layer_names_are_a_warning(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "ReLU r 1 1 x y", "ReLU r 1 1 y z")
    assert rows(lint(write(tmp_path, text))) == [("warning", "duplicate-layer-name", "r", 5)]


def test_int_literal_for_a_float_param_is_a_warning(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "BinaryOp add 1 1 x y 0=0 1=1 2=2")
    assert rows(lint(write(tmp_path, text))) == [("warning", "literal-type", "add", 4)]
    fixed = param("Input in0 0 1 x", "BinaryOp add 1 1 x y 0=0 1=1 2=2.0")
    assert rows(lint(write(tmp_path, fixed))) == []


@pytest.mark.parametrize(
    "op_type", ["pnnx.Expression", "F.scaled_dot_product_attention", "aten::add", "torch.cat", "Tensor.view"]
)
def test_unconverted_pnnx_ops_are_errors(tmp_path: Path, op_type: str) -> None:
    text = param("Input in0 0 2 x y", f"{op_type} op 2 1 x y z", "ReLU r 1 1 z w")
    report = lint(write(tmp_path, text))
    assert rows(report) == [("error", "unconverted-op", "op", 4)]
    assert op_type in report.findings[0].message
    assert ncnn_load_param(text) != 0  # the wheel: "layer … not exists or registered"


def test_custom_layer_in_corpus_yolov5s_is_a_warning_silenced_by_custom(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = lint(YOLOV5S)
    assert rows(report) == [("warning", "custom-layer", "focus", 4)]
    assert "YoloV5Focus" in report.findings[0].message
    assert lint(YOLOV5S, custom=["YoloV5Focus"]).findings == []
    code, out, _ = cli(capsys, str(YOLOV5S), "--custom", "YoloV5Focus")
    assert code == 0 and out.splitlines() == ["192 layers, 216 blobs: 0 error(s), 0 warning(s)", "PASSED"]


def test_undeclared_custom_types_give_one_warning_per_type(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "Foo f1 1 1 x a", "Bar b1 1 1 a b", "Foo f2 1 1 b c", "Bar b2 1 1 c d")
    report = lint(write(tmp_path, text))
    assert rows(report) == [("warning", "custom-layer", "f1", 4), ("warning", "custom-layer", "b1", 5)]
    assert ["Foo" in report.findings[0].message, "Bar" in report.findings[1].message] == [True, True]
    assert rows(lint(write(tmp_path, text), custom=["Foo"])) == [("warning", "custom-layer", "b1", 5)]


def test_custom_weights_spec_drives_the_bin_walk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, param("Input in0 0 1 x", "MyL my 1 1 x y 0=2 1=3"))
    good, short = tmp_path / "good.bin", tmp_path / "short.bin"
    good.write_bytes(TAG_FP32 + f32(1, 2, 3, 4, 5, 6))  # tag + p0*p1 floats
    short.write_bytes(good.read_bytes()[:-4])
    spec = "MyL:w=tagged(p0*p1)"
    report = lint(p, bin_path=good, custom=[spec])
    assert rows(report) == [] and report.weights == 1
    code, out, _ = cli(capsys, str(p), "--bin", str(good), "--custom", spec)
    assert code == 0
    assert out.splitlines() == ["2 layers, 2 blobs, 1 weights: 0 error(s), 0 warning(s)", "PASSED"]

    report = lint(p, bin_path=short, custom=[spec])
    assert rows(report) == [("error", "bin-walk", "my", None)]
    (f,) = report.findings
    assert (f.weight, f.offset) == ("w", 0)
    assert "fp32 weight of 6 elements needs 28 bytes but the file ends 24 bytes later" in f.message

    undeclared = lint(p, bin_path=good)  # without --custom MyL reads nothing: every byte is left over
    assert [(r[0], r[1]) for r in rows(undeclared)] == [("warning", "custom-layer"), ("error", "bin-walk")]
    assert undeclared.findings[1].offset == 0


def test_bad_custom_declaration_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, param("Input in0 0 1 x", "MyL my 1 1 x y 0=2"))
    code, out, err = cli(capsys, str(p), "--custom", "MyL:w=blob(p0)")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("gsurg: error: ")
    code, _, err = cli(capsys, str(p), "--custom", "ReLU")
    assert code == 2 and "built-in" in err


# --- the declared interface -------------------------------------------------------------------------------

IFACE = param(
    "Input in0 0 1 a",  # line 3
    "Input in1 0 1 b",  # line 4
    "ReLU r1 1 1 a ya",  # line 5
    "ReLU r2 1 1 b yb",  # line 6
    "ReLU r3 1 1 ya yd",  # line 7
)


def test_declared_outputs_missing_is_an_error_and_undeclared_leaves_are_warnings(tmp_path: Path) -> None:
    p = write(tmp_path, IFACE)
    assert rows(lint(p)) == []  # nothing declared: nothing to compare
    assert rows(lint(p, inputs=["a", "b"], outputs=["yd", "yb"])) == []
    report = lint(p, inputs=["a", "b"], outputs=["yd", "nope"])
    assert [(f.level.value, f.check, f.blob) for f in report.findings] == [
        ("error", "interface", "nope"),
        ("warning", "undeclared-output", "yb"),
    ]
    assert report.findings[1].layer == "r2"
    # yb is computed from input b, which is no longer declared: unreachable from the declared inputs
    report = lint(p, inputs=["a", "zz"], outputs=["yd", "yb"])
    assert [(f.check, f.blob) for f in report.findings] == [("interface", "zz"), ("interface", "yb")]
    report = lint(p, inputs=["ya"], outputs=["yd", "yb"])
    assert [(f.check, f.blob) for f in report.findings if f.level.value == "error"] == [
        ("interface", "ya"),
        ("interface", "yb"),
    ]


def test_declared_output_unreachable_through_a_dangling_bottom_is_an_error(tmp_path: Path) -> None:
    p = write(tmp_path, param("Input in0 0 1 a", "ReLU r1 1 1 a ya", "ReLU r2 1 1 ghost yc"))
    report = lint(p, inputs=["a"], outputs=["ya", "yc"])
    assert [(f.check, f.blob) for f in report.findings] == [
        ("undefined-bottom", "ghost"),
        ("interface", "yc"),
    ]
    assert "not reachable" in report.findings[1].message


def test_declared_output_unreachable_from_the_declared_inputs_is_an_error(tmp_path: Path) -> None:
    report = lint(write(tmp_path, IFACE), inputs=["a"], outputs=["yd", "yb"])
    assert [(f.level.value, f.check, f.blob) for f in report.findings] == [("error", "interface", "yb")]


def test_cli_inputs_outputs_accept_commas_and_repeats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = write(tmp_path, IFACE)
    code, out, _ = cli(capsys, str(p), "--inputs", "a,b", "--outputs", "yd", "--outputs", "nope")
    assert code == 1
    assert "error: [interface] blob nope: declared output 'nope' is not produced by any layer" in out
    assert re.search(r"warning: \[undeclared-output\] line \d+, layer r2, blob yb:", out)


# --- per-layer rules --------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [1, -1, 2])
def test_softmax_axis_needs_fixbug_and_ncnn_agrees(tmp_path: Path, axis: int) -> None:
    bad = param("Input in0 0 1 x 0=8 1=4 2=2", f"Softmax sm 1 1 x y 0={axis}")
    good = param("Input in0 0 1 x 0=8 1=4 2=2", f"Softmax sm 1 1 x y 0={axis} 1=1")
    axis0 = param("Input in0 0 1 x 0=8 1=4 2=2", "Softmax sm 1 1 x y 0=0")
    assert rows(lint(write(tmp_path, bad))) == [("error", "softmax-fixbug", "sm", 4)]
    assert rows(lint(write(tmp_path, good))) == []
    assert rows(lint(write(tmp_path, axis0))) == []
    assert ncnn_load_param(bad) != 0  # "param is too old, please regenerate"
    assert ncnn_load_param(good) == 0
    assert ncnn_load_param(axis0) == 0


def test_one_layer_rule_failure_does_not_hide_the_others(tmp_path: Path) -> None:
    text = param(
        "Input in0 0 1 x",
        "Softmax sm 1 1 x y 0=-1",
        "MultiHeadAttention mha 3 1 y y y z 0=10 1=0 2=100",
    )
    found = rows(lint(write(tmp_path, text)))
    assert ("error", "softmax-fixbug", "sm", 4) in found
    assert ("error", "attention-heads", "mha", 5) in found


def test_reshape_with_two_minus_ones(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "Reshape rs 1 1 x y 0=-1 1=-1")
    assert rows(lint(write(tmp_path, text))) == [("error", "reshape-two-minus-one", "rs", 4)]
    expr = param("Input in0 0 1 x", 'Reshape rs 1 1 x y 6="-1,-1"')
    assert rows(lint(write(tmp_path, expr))) == [("error", "reshape-two-minus-one", "rs", 4)]
    one = param("Input in0 0 1 x", "Reshape rs 1 1 x y 0=4 1=-1")
    assert rows(lint(write(tmp_path, one))) == []


def test_slice_sizes_against_a_known_input_shape(tmp_path: Path) -> None:
    text = param(
        "Input in0 0 1 x 0=8 1=4",  # shape (4, 8)
        "Split sp 1 4 x x0 x1 x2 x3",
        "Slice too_big 1 2 x0 a b -23300=2,3,3 1=0",  # line 5: 6 rows of 4
        "Slice rows 1 2 x1 c d -23300=2,1,3 1=0",  # line 6: fits
        "Slice cols 1 2 x2 e f -23300=2,4,-233 1=-1",  # line 7: fits (the rest of 8)
        "Slice no_axis 1 2 x3 g h -23300=2,1,1 1=2",  # line 8: rank 2 has no axis 2
    )
    found = rows(lint(write(tmp_path, text)))
    assert found == [("error", "slice", "too_big", 5), ("error", "slice", "no_axis", 8)]


def test_slice_sizes_vs_top_count(tmp_path: Path) -> None:
    text = param("Input in0 0 1 x", "Slice s 1 2 x a b -23300=3,1,1,1")
    assert rows(lint(write(tmp_path, text))) == [("error", "slice", "s", 4)]


def test_binaryop_operands_of_different_rank(tmp_path: Path) -> None:
    # shape hints (30= / -23330=): records [dims, w, h, c]: a (2,4,8), b (3,8), c (2,4), d (8,)
    hints = "-23330=16,3,8,4,2,2,8,3,1,2,4,2,1,1,8,1,1"
    text = param(
        f"Input in0 0 4 a b c d {hints}",
        "Split sa 1 3 a a0 a1 a2",
        "BinaryOp bad 2 1 a0 b y1 0=0",  # line 5: (2,4,8) vs (3,8): no broadcast in ncnn
        "BinaryOp outer 2 1 a1 c y2 0=0",  # line 6: (2,4) aligns to the outer dims: a hazard
        "BinaryOp inner 2 1 a2 d y3 0=0",  # line 7: 1D of the innermost width: fine
    )
    found = rows(lint(write(tmp_path, text)))
    assert found == [("error", "binaryop-rank", "bad", 5), ("warning", "binaryop-rank", "outer", 6)]


def test_sdpa_query_heads_must_be_a_multiple_of_kv_heads(tmp_path: Path) -> None:
    # q (5,6,16), k and v (2,6,16)
    bad = param("Input in0 0 3 q k v -23330=12,3,16,6,5,3,16,6,2,3,16,6,2", "SDPA attn 3 1 q k v o")
    assert rows(lint(write(tmp_path, bad))) == [("error", "attention-heads", "attn", 4)]
    good = param("Input in0 0 3 q k v -23330=12,3,16,6,4,3,16,6,2,3,16,6,2", "SDPA attn 3 1 q k v o")
    assert rows(lint(write(tmp_path, good))) == []
    unknown = param("Input in0 0 3 q k v", "SDPA attn 3 1 q k v o")
    assert rows(lint(write(tmp_path, unknown))) == []


def test_multiheadattention_embed_dim_divisible_by_heads(tmp_path: Path) -> None:
    bad = param("Input in0 0 1 x", "MultiHeadAttention mha 3 1 x x x y 0=10 1=3 2=100")
    assert rows(lint(write(tmp_path, bad))) == [("error", "attention-heads", "mha", 4)]
    good = param("Input in0 0 1 x", "MultiHeadAttention mha 3 1 x x x y 0=12 1=3 2=144")
    assert rows(lint(write(tmp_path, good))) == []


ROPE = param(
    "Input in0 0 1 x 0=8 1=4 2=2",  # (heads 2, seq 4, head_dim 8)
    "MemoryData cos_table 0 1 cos 0=8 1=4",  # (4, 8): full width
    "MemoryData sin_table 0 1 sin 0=4 1=4",  # (4, 4): half width, as ncnn expects
    "RotaryEmbed rope 3 1 x cos sin y",
)


def _rope_bin(path: Path, cos: np.ndarray) -> Path:
    sin = np.linspace(-1, 1, 16, dtype=np.float32)
    path.write_bytes(cos.astype("<f4").tobytes() + sin.astype("<f4").tobytes())  # raw MemoryData loads
    return path


def test_rotaryembed_full_width_cos_with_different_halves(tmp_path: Path) -> None:
    """ncnn 1.0.20261020 applies a full-width row's halves independently in the default mode (checked below
    against numpy in the wheel): a portability warning. The interleaved mode reads one entry per pair, so
    differing halves there are an error."""
    p = write(tmp_path, ROPE)
    cos = np.arange(32, dtype=np.float32).reshape(4, 8) / 32  # halves differ (a 2D RoPE)
    bin_path = _rope_bin(tmp_path / "diff.bin", cos)
    report = lint(p, bin_path=bin_path)
    assert [r for r in rows(report) if r[1] == "rotary-full-width"] == [
        ("warning", "rotary-full-width", "rope", 6)
    ]
    found = next(f for f in report.findings if f.check == "rotary-full-width")
    assert "'cos'" in found.message and "older ncnn" in found.message
    interleaved = write(
        tmp_path, ROPE.replace("RotaryEmbed rope 3 1 x cos sin y", "RotaryEmbed rope 3 1 x cos sin y 0=1")
    )
    assert ("error", "rotary-full-width", "rope", 6) in rows(lint(interleaved, bin_path=bin_path))
    # the oracle for the warning level: with full-width cos and sin, the wheel rotates each half of the
    # head with its own half of the rows (2-D RoPE):
    #   y[i] = x[i] cos_a - x[i+4] sin_a,  y[i+4] = x[i+4] cos_b + x[i] sin_b
    from graphsurgeon.verify.ncnn_fp32 import fp32_net, run

    full = write(tmp_path, ROPE.replace("sin 0=4 1=4", "sin 0=8 1=4"))
    sin = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    both = tmp_path / "both.bin"
    both.write_bytes(cos.astype("<f4").tobytes() + sin.astype("<f4").tobytes())
    assert rows(lint(full, bin_path=both)) == [("warning", "rotary-full-width", "rope", 6)] * 2
    x = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    y = run(fp32_net(full, both), {"x": x}, ["y"])["y"]
    x0, x1 = x[..., :4], x[..., 4:]
    expected = np.concatenate([x0 * cos[:, :4] - x1 * sin[:, :4], x1 * cos[:, 4:] + x0 * sin[:, 4:]], axis=-1)
    np.testing.assert_allclose(y, expected, atol=1e-6)


def test_rotaryembed_cos_and_sin_of_different_widths_is_an_error(tmp_path: Path) -> None:
    """ncnn takes the full-width decision from cos alone and offsets sin the same way."""
    report = lint(write(tmp_path, ROPE))
    assert [r for r in rows(report) if r[0] == "error"] == [("error", "rotary-width-mismatch", "rope", 6)]


def test_rotaryembed_full_width_cos_with_equal_halves_is_clean(tmp_path: Path) -> None:
    p = write(tmp_path, ROPE)
    half = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    p = write(tmp_path, ROPE.replace("sin 0=4 1=4", "sin 0=8 1=4"))
    same = np.concatenate([half, half], axis=1)
    both = tmp_path / "same.bin"
    both.write_bytes(same.astype("<f4").tobytes() + same.astype("<f4").tobytes())
    assert rows(lint(p, bin_path=both)) == []
    assert rows(lint(p)) == []  # data unknown without --bin: nothing to say


def test_gemm_constant_m_in_a_dynamic_graph(tmp_path: Path) -> None:
    kv = param("Input in0 0 4 q k v w", "SDPA attn 3 1 q k v o 7=1", "Gemm proj 2 1 o w y 7=5")
    assert rows(lint(write(tmp_path, kv))) == [("error", "gemm-constant-m", "proj", 5)]
    dynamic_m = param("Input in0 0 4 q k v w", "SDPA attn 3 1 q k v o 7=1", "Gemm proj 2 1 o w y 7=0")
    assert rows(lint(write(tmp_path, dynamic_m))) == []
    unshaped = param("Input in0 0 2 a b", "Gemm proj 2 1 a b y 7=5")
    assert rows(lint(write(tmp_path, unshaped))) == [("warning", "gemm-constant-m", "proj", 4)]
    shaped = param("Input in0 0 1 a 0=4 1=5", "Input in1 0 1 b 0=3 1=4", "Gemm proj 2 1 a b y 7=5")
    assert rows(lint(write(tmp_path, shaped))) == []


# --- weights (--bin) --------------------------------------------------------------------------------------

FC = param("Input in0 0 1 x", "InnerProduct fc 1 1 x y 0=2 1=1 2=4")


def test_fp16_weight_holding_inf_is_an_fp16_overflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = write(tmp_path, FC)
    b = tmp_path / "m.bin"
    halves = struct.pack("<4H", 0x3C00, 0x7C00, 0xBC00, 0x3800)  # 1.0, +inf, -1.0, 0.5
    b.write_bytes(TAG_FP16 + halves + f32(0.1, 0.2))
    report = lint(p, bin_path=b)
    assert rows(report) == [("error", "fp16-overflow", "fc", None)]
    assert (report.findings[0].weight, report.findings[0].offset) == ("weight", 0)
    code, out, _ = cli(capsys, str(p), "--bin", str(b))
    assert code == 1 and "error: [fp16-overflow] layer fc, weight weight, offset 0: 1 of 4" in out


def test_all_zero_weight_is_a_warning(tmp_path: Path) -> None:
    p = write(tmp_path, FC)
    b = tmp_path / "m.bin"
    b.write_bytes(TAG_FP32 + f32(0, 0, 0, 0) + f32(0.1, 0.2))
    report = lint(p, bin_path=b)
    assert rows(report) == [("warning", "weight-all-zero", "fc", None)]
    assert (report.findings[0].weight, report.findings[0].offset) == ("weight", 0)
    assert report.exit_code == 0


def test_nan_in_raw_bias_is_weight_nonfinite(tmp_path: Path) -> None:
    p = write(tmp_path, FC)
    b = tmp_path / "m.bin"
    b.write_bytes(TAG_FP32 + f32(1, 2, 3, 4) + f32(0.1, float("nan")))
    report = lint(p, bin_path=b)
    assert rows(report) == [("error", "weight-nonfinite", "fc", None)]
    assert (report.findings[0].weight, report.findings[0].offset) == ("bias", 20)


@pytest.mark.parametrize(
    ("data", "offset", "needle"),
    [
        (TAG_FP32 + f32(1, 2, 3, 4) + f32(0.1), 20, "truncated"),  # 4 bytes short: the bias
        (TAG_FP32 + f32(1, 2, 3, 4) + f32(0.1, 0.2) + bytes(8), 28, "8 more bytes"),  # trailing bytes
        (struct.pack("<I", 0x12345678) + f32(1, 2, 3, 4) + f32(0.1, 0.2), 0, "unknown weight tag"),
    ],
    ids=["truncated", "trailing", "unknown-tag"],
)
def test_bin_walk_errors_name_the_offset(tmp_path: Path, data: bytes, offset: int, needle: str) -> None:
    p = write(tmp_path, FC)
    b = tmp_path / "m.bin"
    b.write_bytes(data)
    report = lint(p, bin_path=b)
    assert [(r[0], r[1]) for r in rows(report)] == [("error", "bin-walk")]
    assert report.findings[0].offset == offset
    assert needle in report.findings[0].message
