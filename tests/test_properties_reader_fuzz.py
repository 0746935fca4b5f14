"""Mutation fuzzing of the readers (hardening issue 14: what found items 8 and 9, kept in the suite and
bounded in time): real corpus .params and a generated one, as text and as .param.bin bytes, and a
safetensors header, mutated by bit flips, huge integers, truncations and inserted control characters.

Every mutant has exactly two possible outcomes:

- the readers (strict and lenient) return a graph or raise a GsurgError whose message is one line;
- ``gsurg fmt`` exits 0, or 2 with one ``gsurg: error:`` line; ``gsurg lint`` exits 0 or 1 with a report,
  or 2 with one such line. No other exception, no traceback, no hang (each run is timed).

The safetensors header reader returns its tensors or raises one CheckpointError line.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from graphsurgeon.cli import main
from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.param_bin import emit_param_bin, parse_param_bin
from graphsurgeon.formats.param_text import parse_param_text
from graphsurgeon.formats.safetensors_header import CheckpointError, parse_header, read_header
from tests.conftest import CORPUS
from tests.safetensors_files import write_safetensors
from tests.test_properties_mutations import BASE_PARAM

#: Small real models (a few KB each, so one example takes milliseconds) and the generated one.
CORPUS_BASES = [
    CORPUS / "ncnn-benchmark" / "alexnet.param",
    CORPUS / "ncnn-benchmark" / "vgg16.param",
    CORPUS / "ncnn-assets" / "squeezenet_v1.1.param",
    CORPUS / "llm" / "qwen3_0.6b_proj_out.ncnn.param",
]
TEXT_BASES = [p.read_bytes() for p in CORPUS_BASES] + [BASE_PARAM.encode()]
BIN_BASES = [emit_param_bin(parse_param_text(t.decode())) for t in TEXT_BASES]

HUGE_INTS = [
    b"9" * 5000,  # past Python's int-string limit
    b"-" + b"9" * 4301,
    b"99999999999999999999",  # 20 digits: past int64
    b"2147483648",  # int32 + 1
    b"-2147483649",
    b"1000001",  # max_net_count + 1
    b"0" * 300 + b"1",
]
CONTROL = [b"\x00", b"\x0b", b"\x0c", b"\r", b"\x1b", b"\x7f", b"\xc2\x85", b"\xe2\x80\xa8", b"\xff", b"\t"]
WORDS = [0, 1, -1, -233, -23300, -23331, -23400, -23431, 7767517, 2**31 - 1, -(2**31), 1000001, 255, 256]
JSON_BITS = [b"null", b"[]", b"{}", b'"32"', b"-1", b"[", b"{", b"1e999", b"true", b'"', b",", b"9" * 5000]
#: Every mutant is read in well under this; a reader that hangs or does unbounded work fails here.
SECONDS = 10


@st.composite
def text_mutant(draw: st.DrawFn) -> bytes:
    buf = bytearray(draw(st.sampled_from(TEXT_BASES)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "huge", "truncate", "control", "delete-line", "duplicate-line"]))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "huge":
            numbers = list(re.finditer(rb"-?[0-9]+", bytes(buf)))
            if numbers:
                m = numbers[draw(st.integers(0, len(numbers) - 1))]
                buf[m.start() : m.end()] = draw(st.sampled_from(HUGE_INTS))
        elif op == "truncate":
            del buf[pos:]
        elif op == "control":
            buf[pos:pos] = draw(st.sampled_from(CONTROL))
        else:
            lines = bytes(buf).split(b"\n")
            k = draw(st.integers(0, len(lines) - 1))
            if op == "delete-line":
                del lines[k]
            else:
                lines.insert(k, lines[k])
            buf = bytearray(b"\n".join(lines))
    return bytes(buf)


@st.composite
def bin_mutant(draw: st.DrawFn) -> bytes:
    buf = bytearray(draw(st.sampled_from(BIN_BASES)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "word", "truncate", "insert"]))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "word":
            at = pos - pos % 4
            buf[at : at + 4] = struct.pack("<i", draw(st.sampled_from(WORDS)))
        elif op == "truncate":
            del buf[pos:]
        else:
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
    return bytes(buf)


def _one_line(err: GsurgError) -> None:
    message = str(err)
    assert message and "\n" not in message, repr(message)


def _timed_reads(data: bytes, read: Callable[[bytes, bool], None]) -> None:
    start = time.monotonic()
    for strict in (True, False):
        try:
            read(data, strict)
            event(f"read ({'strict' if strict else 'lenient'})")
        except GsurgError as err:
            _one_line(err)
            event(f"refused: {type(err).__name__}")
    assert time.monotonic() - start < SECONDS


def _read_text(data: bytes, strict: bool) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # not text: the file reader's own error (tested through the CLI below)
    parse_param_text(text, strict=strict)


def _read_bin(data: bytes, strict: bool) -> None:
    parse_param_bin(data, strict=strict)


#: GSURG_FUZZ_EXAMPLES=20000 for a long hunt; the suite's default takes seconds.
EXAMPLES = int(os.environ.get("GSURG_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # the whole run is bounded by max_examples and the per-example SECONDS check
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


@FUZZ
@given(data=text_mutant())
def test_mutated_param_text_reads_or_is_one_error(data: bytes) -> None:
    _timed_reads(data, _read_text)


@FUZZ
@given(data=bin_mutant())
def test_mutated_param_bin_reads_or_is_one_error(data: bytes) -> None:
    _timed_reads(data, _read_bin)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    assert time.monotonic() - start < SECONDS
    return code, out.getvalue(), err.getvalue()


def _check_commands(folder: Path, name: str, data: bytes) -> None:
    path, out = folder / name, folder / f"out-{name}"
    path.write_bytes(data)
    try:
        code, _, err = _cli(["fmt", str(path), "-o", str(out)])
        errors = [line for line in err.splitlines() if not line.startswith("gsurg: warning: ")]
        assert code in (0, 2), err
        if code == 2:
            assert len(errors) == 1 and errors[0].startswith(f"gsurg: error: {path}"), err
        else:
            assert errors == [] and out.exists()
        event(f"fmt exit {code}")
        code, report, err = _cli(["lint", str(path)])
        errors = [line for line in err.splitlines() if not line.startswith("gsurg: warning: ")]
        assert code in (0, 1, 2), err
        if code == 2:
            assert len(errors) == 1 and errors[0].startswith(f"gsurg: error: {path}"), err
        else:
            assert errors == [] and report.rstrip().endswith(("PASSED", "FAILED")), report[-200:]
        event(f"lint exit {code}")
    finally:
        path.unlink()
        out.unlink(missing_ok=True)


@FUZZ
@given(data=text_mutant())
def test_fmt_and_lint_of_a_mutated_param_exit_0_1_or_2_with_one_line(folder: Path, data: bytes) -> None:
    _check_commands(folder, "m.param", data)


@FUZZ
@given(data=bin_mutant())
def test_fmt_and_lint_of_a_mutated_param_bin_exit_0_1_or_2_with_one_line(folder: Path, data: bytes) -> None:
    _check_commands(folder, "m.param.bin", data)


# ---- safetensors headers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("st") / "c.safetensors"
    four = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    write_safetensors(
        path, {"a.weight": ("F32", (2, 2), four), "b": ("F16", (2,), four[:4]), "c": ("BF16", (0,), b"")}
    )
    return path.read_bytes()


@st.composite
def header_mutant(draw: st.DrawFn, base: bytes) -> bytes:
    length = struct.unpack("<Q", base[:8])[0]
    header, data = bytearray(base[8 : 8 + length]), base[8 + length :]
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "huge", "insert-json", "truncate", "control", "length"]))
        pos = draw(st.integers(0, max(len(header) - 1, 0)))
        if op == "flip" and header:
            header[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "huge":
            numbers = list(re.finditer(rb"[0-9]+", bytes(header)))
            if numbers:
                m = numbers[draw(st.integers(0, len(numbers) - 1))]
                header[m.start() : m.end()] = draw(st.sampled_from(HUGE_INTS))
        elif op == "insert-json":
            header[pos:pos] = draw(st.sampled_from(JSON_BITS))
        elif op == "truncate":
            del header[pos:]
        elif op == "control":
            header[pos:pos] = draw(st.sampled_from(CONTROL))
        else:
            length = draw(st.sampled_from([0, 1, 7, len(header) + 1, 2**63, 2**64 - 1]))
            return struct.pack("<Q", length) + bytes(header) + data
    return struct.pack("<Q", len(header)) + bytes(header) + data


@FUZZ
@given(st.data())
def test_a_mutated_safetensors_header_reads_or_is_one_checkpoint_error(
    checkpoint: bytes, folder: Path, data: st.DataObject
) -> None:
    blob = data.draw(header_mutant(checkpoint))
    path = folder / "m.safetensors"
    path.write_bytes(blob)
    start = time.monotonic()
    try:
        tensors = read_header(str(path))
        event("read")
        for info in tensors.values():
            assert all(type(d) is int and d >= 0 for d in info.shape) and info.offset >= 8
    except CheckpointError as err:
        _one_line(err)
        event("refused")
    finally:
        path.unlink()
    assert time.monotonic() - start < SECONDS


@FUZZ
@given(
    raw=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=12,
    )
)
def test_any_json_value_as_a_header_reads_or_is_one_checkpoint_error(raw: object) -> None:
    """Arbitrary JSON shapes, not only mutations of a valid header: in an entry, as the whole header."""
    for header in (raw, {"w": raw}, {"w": {"dtype": "F32", "shape": raw, "data_offsets": [0, 16]}}):
        text = json.dumps(header).encode()
        try:
            parse_header(text, "h.safetensors", 8 + len(text) + 16)
            event("read")
        except CheckpointError as err:
            _one_line(err)
            event("refused")
