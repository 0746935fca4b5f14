"""Both .param readers apply the same file-level checks (issue 7 item 5): every refusal of the text reader,
run through the binary form too.

Each case is a small text .param with one fault and the same file as .param.bin, written word by word from
ncnn-format §2 (int32 magic, layer and blob counts; per layer the type index, bottom and top counts, blob
indices, params as ``id, value`` words, ``-233`` at the end). Both forms must be refused in strict mode with
the check that lenient mode records (the same ``ParseIssue`` codes in both forms, and the same lint check
ids), and ``ncnn.Net().load_param_bin`` is asked what it does with the binary form: it refuses most of
these; where it loads one, the table says why gsurg still refuses it.

Refusals that have no binary form are listed with the reason; a last test checks that the table names every
problem code the text reader's sources can record, so a new text check cannot skip the binary reader.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import ncnn
import pytest

from graphsurgeon.check.context import LintOptions
from graphsurgeon.check.findings import Level
from graphsurgeon.check.lint import run_lint
from graphsurgeon.cli import main
from graphsurgeon.errors import GsurgError, ParamBinError, ParamSyntaxError
from graphsurgeon.formats.param_any import read_param
from graphsurgeon.formats.param_bin import emit_param_bin, parse_param_bin
from graphsurgeon.formats.param_text import parse_param_text
from tests.conftest import REPO

MAGIC = 7767517
INPUT, RELU, SIGMOID, SPLIT = 16, 26, 30, 33  # ncnn.layer_to_index, ncnn-format §2
END = -233
STRING_256 = b"a" * 256


def words(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def header(layers: int, blobs: int, magic: int = MAGIC) -> bytes:
    return words(magic, layers, blobs)


def layer(typeindex: int, bottoms: tuple[int, ...], tops: tuple[int, ...], *params: int) -> bytes:
    return words(typeindex, len(bottoms), len(tops), *bottoms, *tops, *params, END)


def text(counts: str, *lines: str, magic: int = MAGIC) -> str:
    return f"{magic}\n{counts}\n" + "".join(f"{line}\n" for line in lines)


IN_X = "Input in 0 1 x"
IN_0 = layer(INPUT, (), (0,))
RELU_XY = "ReLU r 1 1 x y"
RELU_01 = layer(RELU, (0,), (1,))


@dataclass(frozen=True)
class Case:
    """One fault in both forms; ``codes``: what a lenient read of either form records (the first one is
    the fault itself); ``wheel_loads``: whether ncnn 1.0.20261020's load_param_bin returns 0."""

    id: str
    text: str
    binary: bytes
    codes: tuple[str, ...]
    wheel_loads: bool = False
    warning: bool = False  # a hazard ncnn tolerates: both forms are read, with a warning

    @property
    def param(self) -> object:
        return pytest.param(self, id=self.id)


CASES = [
    Case(
        "magic",
        text("2 2", IN_X, RELU_XY, magic=MAGIC + 1),
        header(2, 2, MAGIC + 1) + IN_0 + RELU_01,
        ("magic",),
    ),
    Case("layer-count-0", text("0 2", IN_X, RELU_XY), header(0, 2) + IN_0 + RELU_01, ("header-count",)),
    Case(
        "blob-count-0",
        text("2 0", IN_X, RELU_XY),
        header(2, 0) + IN_0 + RELU_01,
        ("header-count", "blob-count"),
    ),
    Case(
        "blob-count-over-max-net-count",
        text("2 1000001", IN_X, RELU_XY),
        header(2, 1_000_001) + IN_0 + RELU_01,
        ("header-count", "spare-blobs"),
    ),
    Case(
        "fewer-layers-than-counted",
        text("3 2", IN_X, RELU_XY),
        header(3, 2) + IN_0 + RELU_01,
        ("layer-count",),
    ),
    Case("too-few-blob-slots", text("2 1", IN_X, RELU_XY), header(2, 1) + IN_0 + RELU_01, ("blob-count",)),
    # ncnn loads a top produced twice and computes wrong numbers (the fault table of docs/lint.md); text gives
    # the second y a fresh slot (3 slots), binary reuses index 1 (2 slots)
    Case(
        "duplicate-top",
        text("3 3", IN_X, RELU_XY, "Sigmoid s 1 1 x y"),
        header(3, 2) + IN_0 + RELU_01 + layer(SIGMOID, (0,), (1,)),
        ("duplicate-top",),
        wheel_loads=True,
    ),
    Case(
        "duplicate-top-in-place",
        text("2 2", IN_X, "ReLU r 1 1 x x"),
        header(2, 1) + IN_0 + layer(RELU, (0,), (0,)),
        ("duplicate-top",),
    ),
    Case(
        "same-top-twice",
        text("2 3", IN_X, "Split s 1 2 x a a"),
        header(2, 2) + IN_0 + layer(SPLIT, (0,), (1, 1)),
        ("duplicate-top",),
        wheel_loads=True,
    ),
    # read on line 4, produced on line 5: text ncnn reads an empty orphan; binary ncnn follows the index (it
    # loads and would even compute this order), but the text form of the file would not, and the IR keeps
    # file order producer-first
    Case(
        "read-before-produced",
        text("3 4", IN_X, "ReLU r 1 1 y z", "Sigmoid s 1 1 x y"),
        header(3, 3) + IN_0 + layer(RELU, (2,), (1,)) + layer(SIGMOID, (0,), (2,)),
        ("use-before-def",),
        wheel_loads=True,
    ),
    Case(
        "reads-its-own-output",
        text("2 3", IN_X, "ReLU r 1 1 q q"),
        header(2, 2) + IN_0 + layer(RELU, (1,), (1,)),
        ("use-before-def",),
    ),
    Case(
        "param-id-32",
        text("2 2", IN_X, RELU_XY + " 32=1"),
        header(2, 2) + IN_0 + layer(RELU, (0,), (1,), 32, 1),
        ("param-id",),
    ),
    Case(
        "array-param-id-32",
        text("2 2", IN_X, RELU_XY + " -23332=1,1"),
        header(2, 2) + IN_0 + layer(RELU, (0,), (1,), -23332, 1, 1),
        ("param-id",),
    ),
    Case(
        "string-256-bytes",
        text("2 2", IN_X, RELU_XY + " 0=" + STRING_256.decode()),
        header(2, 2) + IN_0 + words(RELU, 1, 1, 0, 1, -23400, 256) + STRING_256 + words(END),
        ("string-length",),
    ),
    Case(
        "extra-layer",
        text("1 1", IN_X, RELU_XY),
        header(1, 1) + IN_0 + RELU_01,
        ("extra-layers",),
        wheel_loads=True,
        warning=True,
    ),
    Case(
        "spare-blob-slots",
        text("2 3", IN_X, RELU_XY),
        header(2, 3) + IN_0 + RELU_01,
        ("spare-blobs",),
        True,
        True,
    ),
]

#: Text-reader problem codes with no binary form, and why.
TEXT_ONLY = {
    "int-overflow": "a .param.bin holds every int as one 32-bit word",
    "float-overflow": "a .param.bin holds a float as its 32 bits, no decimal text that could overflow",
    "mixed-array": "a .param.bin array is untyped 32-bit words (the catalog types it)",
    "array-length": "a .param.bin array has an explicit length word and exactly that many elements",
    "array-syntax": "a .param.bin array is a key, a length and the words: there is no array syntax",
    "name-length": "a .param.bin stores no names (blobs and layers are indices)",
    "value-length": "a .param.bin stores numbers as words, not as text",
    "array-element-length": "a .param.bin stores numbers as words, not as text",
    "quoted-string-length": "a .param.bin string has no quotes; its length is checked as string-length",
    "pattern-value": "captures and * belong to rule patterns, never to a model file",
    "param-id-length": "a .param.bin param id is a 32-bit word, not text ncnn scans with a width",
    "count-length": "a .param.bin header and blob counts are 32-bit words, not text ncnn scans with %31s",
}

OK_TEXT = text("2 2", IN_X, RELU_XY)
OK_BINARY = header(2, 2) + IN_0 + RELU_01


def test_the_unbroken_files_are_read_by_both_readers_and_loaded_by_ncnn(tmp_path: Path) -> None:
    """Every case breaks one thing in files that are otherwise good (the same layout and encoding)."""
    assert emit_param_bin(parse_param_text(OK_TEXT)) == OK_BINARY
    assert parse_param_bin(OK_BINARY).issues == parse_param_text(OK_TEXT).issues == []
    path = tmp_path / "ok.param.bin"
    path.write_bytes(OK_BINARY)
    assert ncnn.Net().load_param_bin(str(path)) == 0


@pytest.mark.parametrize("case", [c.param for c in CASES])
def test_both_readers_apply_the_same_check(case: Case) -> None:
    text_graph = parse_param_text(case.text, strict=False)
    bin_graph = parse_param_bin(case.binary, strict=False)
    text_codes = [i.code for i in text_graph.issues]
    bin_codes = [i.code for i in bin_graph.issues]
    assert sorted(set(text_codes)) == sorted(set(bin_codes)) == sorted(case.codes)
    assert all(i.warning == case.warning for i in bin_graph.issues if i.code == case.codes[0])
    assert all(i.offset is not None and i.line == 0 for i in bin_graph.issues), "binary issues have offsets"
    if case.warning:
        parse_param_text(case.text)
        parse_param_bin(case.binary)
        return
    with pytest.raises(ParamSyntaxError) as text_err:
        parse_param_text(case.text)
    with pytest.raises(ParamBinError) as bin_err:
        parse_param_bin(case.binary)
    # the strict refusal is the first problem the lenient read recorded, at the same place
    assert str(text_err.value).endswith(text_graph.issues[0].message)
    first = bin_graph.issues[0]
    assert str(bin_err.value).endswith(f"offset {first.offset}: {first.message}")


@pytest.mark.parametrize("case", [c.param for c in CASES])
def test_ncnn_agrees_where_it_can_see_the_fault(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "m.param.bin"
    path.write_bytes(case.binary)
    result = ncnn.Net().load_param_bin(str(path))
    assert (result == 0) == case.wheel_loads, result


@pytest.mark.parametrize("case", [c.param for c in CASES if c.id != "magic"])
def test_lint_reads_a_param_bin_leniently_and_reports_what_it_reports_for_text(
    case: Case, tmp_path: Path
) -> None:
    """Through the files (``read_param`` tells the forms apart by their first bytes) and ``gsurg lint``.
    (A bad magic is not a .param.bin to ``read_param``: that case is read as text and refused.)"""
    (tmp_path / "m.param").write_text(case.text)
    (tmp_path / "m.param.bin").write_bytes(case.binary)
    assert [i.code for i in read_param(str(tmp_path / "m.param.bin"), strict=False).issues] == [
        i.code for i in parse_param_bin(case.binary, strict=False).issues
    ]
    reports = [run_lint(str(tmp_path / name), LintOptions()) for name in ("m.param", "m.param.bin")]
    text_checks, bin_checks = ({(f.level, f.check) for f in r.findings} for r in reports)
    assert text_checks == bin_checks
    assert any(f.level is (Level.WARNING if case.warning else Level.ERROR) for f in reports[1].findings)
    placed = {(f.message, f.offset) for f in reports[1].findings}
    assert all((i.message, i.offset) in placed for i in parse_param_bin(case.binary, strict=False).issues)


def test_fmt_refuses_a_param_bin_that_reads_a_blob_before_it_is_produced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: fmt used to accept it and write a text .param it could not read back."""
    (case,) = [c for c in CASES if c.id == "read-before-produced"]
    src = tmp_path / "m.param.bin"
    src.write_bytes(case.binary)
    code = main(["fmt", str(src), "-o", str(tmp_path / "out.param")])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "out.param").exists()
    # the third layer's top index (header 12 bytes, Input 20, ReLU 24, Sigmoid's type and counts 12, its
    # bottom 4) is at 12 + 20 + 24 + 16 = 72
    (line,) = err.splitlines()
    assert line.startswith(f"gsurg: error: {src}: offset 72: blob '2' is read by layer ReLU_1")
    assert main(["lint", str(src)]) == 1
    assert "[undefined-bottom] layer Sigmoid_2, offset 72:" in capsys.readouterr().out


def _text_reader_codes() -> set[str]:
    """The problem codes the text reader's sources can record (string literals passed to problem/hazard,
    and the ``<what>-length`` codes of check_len)."""
    codes: set[str] = set()
    for name in ("param_text.py", "param_records.py", "param_literals.py", "param_build.py"):
        source = (REPO / "graphsurgeon" / "formats" / name).read_text(encoding="utf-8")
        codes |= set(re.findall(r"\b(?:problem|hazard)\(\s*\"([a-z][a-z-]*)\"", source))
        codes |= {
            f"{what.replace(' ', '-')}-length"
            for what in re.findall(r"check_len\([^\"]*\"([a-z ]+)\"", source)
        }
    return codes


def test_every_text_reader_refusal_is_covered() -> None:
    codes = _text_reader_codes()
    assert len(codes) >= 15, codes  # the scan itself works
    covered = {c for case in CASES for c in case.codes} | set(TEXT_ONLY)
    assert codes <= covered, f"add a binary case (or a reason it has none) for {sorted(codes - covered)}"
    assert not set(TEXT_ONLY) & {case.codes[0] for case in CASES}


@pytest.mark.parametrize("code", sorted(TEXT_ONLY))
def test_text_only_codes_are_real_text_refusals(code: str) -> None:
    """Each text-only code is recorded by the text reader for a fixture here (so the list holds no stale
    names)."""
    fixtures = {
        "int-overflow": RELU_XY + " 0=2147483648",
        "float-overflow": RELU_XY + " 0=1e39",
        "mixed-array": "Eltwise e 1 1 x y -23301=2,1.0,2",
        "array-length": "Crop c 1 1 x y -23309=3,1,2",
        "array-syntax": 'Crop c 1 1 x y -23309="a"',
        "name-length": "ReLU " + "n" * 256 + " 1 1 x y",
        "value-length": RELU_XY + " 0=1." + "0" * 126,
        "array-element-length": RELU_XY + " 0=1," + "1" * 128,
        "quoted-string-length": RELU_XY + ' 0="' + "a" * 256 + '"',
        "pattern-value": RELU_XY + " 0=%x",
        "param-id-length": RELU_XY + " " + "0" * 15 + "1=1",
        "count-length": "ReLU r " + "0" * 31 + "1 1 x y",
    }
    graph = parse_param_text(text("2 2", IN_X, fixtures[code]), strict=False)
    assert code in {i.code for i in graph.issues}
    with pytest.raises(GsurgError):
        parse_param_text(text("2 2", IN_X, fixtures[code]))
