"""``gsurg lint``, the graph as a whole: the magic and header counts, blobs (undefined bottoms, duplicate
tops, fan-out without a Split), name lengths, param ids and reader issues, and the declared interface
(``--inputs`` / ``--outputs``: missing, undeclared and unreachable blobs).

One tiny hand-written .param (and, where weights matter, a .bin built byte by byte from the format notes)
per check, with the expected check ids, layer names and line numbers written out exactly. Where a check
claims ncnn rejects something, the ``ncnn`` wheel is asked too, so the expectation does not rest on gsurg
alone; the shared builders are in ``tests/lint_harness.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.lint_harness import cli, lint, param, rows, write

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
