"""Malformed safetensors headers and indexes (hardening issue 14, item 9): each one is a single
CheckpointError naming the file and the tensor, never an AttributeError, TypeError or RecursionError, and
a shape is only ever a list of non-negative ints (``"32"`` is not ``[3, 2]``; ``[-1, -2]`` does not reach
``repeat_interleave``). Through ``gsurg diff-bin`` that is one ``gsurg: error:`` line and exit 2.

The files are written byte by byte here (u64 LE length, JSON, data), as ``tests/safetensors_files.py``
writes valid ones.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.formats.safetensors import Checkpoint
from graphsurgeon.formats.safetensors_header import MAX_HEADER, CheckpointError, read_header
from tests.diff_bin_harness import FC_PARAM, W, f32, fc_bin, model
from tests.safetensors_files import write_safetensors


def raw_file(path: Path, header: bytes, data: bytes = b"") -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def entry(shape: object, offsets: object = (0, 24), dtype: object = "F32") -> bytes:
    offsets = list(offsets) if isinstance(offsets, tuple) else offsets
    return json.dumps({"w": {"dtype": dtype, "shape": shape, "data_offsets": offsets}}).encode()


DATA = bytes(24)  # six fp32 zeros
HEADERS = {
    # the whole header
    "null": (b"null", "header is a JSON null, not an object of tensors"),
    "array": (b"[]", "header is a JSON array, not an object of tensors"),
    "string": (b'"model"', "header is a JSON string, not an object of tensors"),
    "number": (b"12", "header is a JSON number, not an object of tensors"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "not valid JSON: nested too deeply"),
    "deep-in-an-entry": (
        b'{"w": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "not valid JSON: nested too deeply",
    ),
    "not-json": (b"{'w': 1}", "not valid JSON"),
    "huge-int": (b'{"w": ' + b"9" * 5000 + b"}", "not valid JSON"),
    # one entry
    "entry-null": (b'{"w": null}', "tensor 'w': the entry is a JSON null, not an object"),
    "entry-list": (b'{"w": [1, 2]}', "tensor 'w': the entry is a JSON array, not an object"),
    "no-shape": (b'{"w": {"dtype": "F32", "data_offsets": [0, 24]}}', "tensor 'w': the entry has no shape"),
    "dtype-number": (entry([6], dtype=4), "tensor 'w': dtype must be a string, not 4"),
    "shape-string": (entry("32"), "tensor 'w': shape must be a list of non-negative ints, not '32'"),
    "shape-negative": (entry([-2, -3]), "shape must be a list of non-negative ints, not [-2, -3]"),
    "shape-float": (entry([6.0]), "shape must be a list of non-negative ints, not [6.0]"),
    "shape-bool": (entry([True, 6]), "shape must be a list of non-negative ints, not [True, 6]"),
    "shape-nested": (entry([[6]]), "shape must be a list of non-negative ints, not [[6]]"),
    "offsets-strings": (entry([6], ["0", "24"]), "data_offsets must be two non-negative ints"),
    "offsets-one": (entry([6], [24]), "data_offsets must be two non-negative ints [begin, end], not [24]"),
    "offsets-negative": (entry([6], [-24, 0]), "data_offsets must be two non-negative ints"),
    "offsets-null": (entry([6], None), "data_offsets must be two non-negative ints [begin, end], not None"),
    "offsets-reversed": (entry([6], [24, 0]), "data_offsets [24, 0] do not fit its shape [6]"),
    "offsets-past-the-end": (entry([12], [0, 48]), "data_offsets [0, 48] do not fit its shape [12]"),
    "shape-too-large": (entry([10**30, 10**30]), "data_offsets [0, 24] do not fit its shape"),
}


@pytest.mark.parametrize("name", list(HEADERS))
def test_a_malformed_header_is_one_checkpoint_error(name: str, tmp_path: Path) -> None:
    header, reason = HEADERS[name]
    path = raw_file(tmp_path / "c.safetensors", header, DATA)
    with pytest.raises(CheckpointError) as err:
        read_header(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: ") and reason in message, message
    assert "\n" not in message and len(message) < 400


def test_a_string_shape_is_not_read_as_its_digits(tmp_path: Path) -> None:
    """``"32"`` iterated is 3, 2: six elements, exactly what the 24 data bytes hold, so the old reader
    accepted it as shape [3, 2]."""
    path = raw_file(tmp_path / "c.safetensors", entry("32"), DATA)
    with pytest.raises(CheckpointError, match="shape must be a list"):
        Checkpoint(str(path))


def test_the_header_length_is_bounded_by_the_format(tmp_path: Path) -> None:
    path = tmp_path / "c.safetensors"
    with open(path, "wb") as fh:  # sparse: the claimed header is never written, nor read
        fh.write(struct.pack("<Q", MAX_HEADER + 1))
        fh.truncate(8 + MAX_HEADER + 1)
    with pytest.raises(CheckpointError, match=f"header of {MAX_HEADER + 1} bytes is longer than"):
        read_header(str(path))


def test_a_valid_header_still_reads(tmp_path: Path) -> None:
    path = write_safetensors(
        tmp_path / "c.safetensors", {"a": ("F32", (2, 3), DATA), "b": ("F16", (0,), b"")}
    )
    tensors = read_header(str(path))
    assert [(t.name, t.dtype, t.shape) for t in tensors.values()] == [
        ("a", "F32", (2, 3)),
        ("b", "F16", (0,)),
    ]
    header_end = 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]
    assert tensors["a"].offset == header_end


INDEXES = {
    "list": ("[]", "not a safetensors index (no weight_map)"),
    "weight-map-list": ('{"weight_map": []}', "not a safetensors index (no weight_map)"),
    "shard-number": ('{"weight_map": {"w": 3}}', "weight_map: tensor 'w' names no shard file"),
    "shard-null": ('{"weight_map": {"w": null}}', "weight_map: tensor 'w' names no shard file"),
    "deep": ("[" * 100_000 + "]" * 100_000, "not valid JSON: nested too deeply"),
}


@pytest.mark.parametrize("name", list(INDEXES))
def test_a_malformed_index_is_one_checkpoint_error(name: str, tmp_path: Path) -> None:
    text, reason = INDEXES[name]
    path = tmp_path / "c.safetensors.index.json"
    path.write_text(text)
    with pytest.raises(CheckpointError) as err:
        Checkpoint(str(path))
    assert str(err.value).startswith(f"{path}: ") and reason in str(err.value), str(err.value)


def test_diff_bin_with_a_negative_shape_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[-2, -6] holds 12 elements by product, as the fc weight does: the old reader let it through to the
    repeat_interleave of the map."""
    b = model(tmp_path, "m", FC_PARAM, fc_bin())
    ckpt = raw_file(tmp_path / "c.safetensors", entry([-2, -6], (0, 48)), f32(W))
    (tmp_path / "map.yaml").write_text(
        "fc.weight: {tensor: w, transforms: [{repeat_interleave: {axis: 0, n: 2}}]}\n"
    )
    code = main(["diff-bin", str(b), str(ckpt), "--map", str(tmp_path / "map.yaml")])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"gsurg: error: {ckpt}: tensor 'w': shape must be a list of non-negative ints, not [-2, -6]"
    ]


def test_a_huge_repeat_is_a_size_mismatch_not_an_allocation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The transformed size is compared with the weight's before the tensor is loaded and repeated: a
    repeat_interleave by 10**12 used to ask numpy for terabytes."""
    b = model(tmp_path, "m", FC_PARAM, fc_bin())
    ckpt = write_safetensors(tmp_path / "c.safetensors", {"w": ("F32", (3, 4), f32(W))})
    (tmp_path / "map.yaml").write_text(
        "fc.weight: {tensor: w, transforms: [{repeat_interleave: {axis: 0, n: 1000000000000}}]}\n"
    )
    code = main(["diff-bin", str(b), str(ckpt), "--map", str(tmp_path / "map.yaml"), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (pair,) = [p for p in json.loads(out)["pairs"] if p["b"]["name"] == "w"]
    assert pair["b"]["shape"] == [3 * 10**12, 4] and pair["a"]["shape"] == [3, 4]
    assert pair["status"] == "shape-mismatch"
    assert "element counts differ: 12 in a, 12000000000000 in b" in pair["message"]
