"""The header of a safetensors file, read and checked: an 8-byte little-endian length, that many bytes of
JSON, then the data. The JSON is an object of tensors, ``{name: {"dtype": "F32", "shape": [2, 3],
"data_offsets": [begin, end]}}`` (offsets relative to the end of the header), plus an optional
``"__metadata__"`` object, which is not read.

Whatever the bytes are, reading ends in a table of ``TensorInfo`` or in one ``CheckpointError`` naming
the file and, where there is one, the tensor: the length must fit the file and the library's own limit
(100 MB); the JSON must parse (nesting included) and be an object; each entry must be an object with a
string dtype, a shape that is a list of non-negative ints (not a string: ``"32"`` is not ``[3, 2]``), and
``data_offsets`` two non-negative ints that lie in the file and, for the dtypes read here, hold exactly
the shape's elements.
"""

from __future__ import annotations

import os
import reprlib
import struct
from dataclasses import dataclass
from typing import Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.chunked import KINDS
from graphsurgeon.input_files import open_input, parse_json

#: The dtypes whose values are read (safetensors spelling → ``chunked.KINDS`` kind).
DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16"}
#: The safetensors library refuses a longer header (its MAX_HEADER_SIZE).
MAX_HEADER = 100_000_000
_BRIEF = reprlib.Repr()  # an offending JSON value in a message: cut to a readable length and depth
_BRIEF.maxlevel, _BRIEF.maxlist, _BRIEF.maxdict = 3, 8, 4
_BRIEF.maxstring, _BRIEF.maxlong, _BRIEF.maxother = 60, 40, 60


class CheckpointError(GsurgError):
    """A weight map or safetensors checkpoint that cannot be read (exit 2)."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    file: str
    dtype: str  # safetensors spelling: F32, F16, BF16, ...
    shape: tuple[int, ...]
    offset: int  # absolute offset of the first data byte


def read_header(path: str) -> dict[str, TensorInfo]:
    """The tensors of safetensors file ``path`` (a regular file; only the header is read)."""
    fd = open_input(path, error=CheckpointError)
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, 8, 0)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 2 <= length <= size - 8:
            raise CheckpointError(f"{path}: not a safetensors file (header length {length}, size {size})")
        if length > MAX_HEADER:
            raise CheckpointError(
                f"{path}: safetensors header of {length} bytes is longer than the format's {MAX_HEADER}"
            )
        raw = _pread_exactly(fd, length, 8, path)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read: {err.strerror}") from None
    finally:
        os.close(fd)
    return parse_header(raw, path, size)


def _pread_exactly(fd: int, nbytes: int, offset: int, path: str) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < nbytes:
        part = os.pread(fd, nbytes - got, offset + got)
        if not part:
            raise CheckpointError(f"{path}: file ends inside the safetensors header (it shrank?)")
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def parse_header(raw: bytes, path: str, size: int) -> dict[str, TensorInfo]:
    """The tensors the header bytes ``raw`` describe in a file of ``size`` bytes named ``path``."""
    header = parse_json(raw, f"{path}: safetensors header", error=CheckpointError)
    if not isinstance(header, dict):
        raise CheckpointError(
            f"{path}: safetensors header is a JSON {_json_type(header)}, not an object of tensors"
        )
    base = 8 + len(raw)
    out: dict[str, TensorInfo] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {_brief(name)}"
        dtype, shape, (begin, end) = _entry(meta, where)
        kind = DTYPES.get(dtype)
        itemsize = KINDS[kind][1] if kind else None
        if not begin <= end <= size - base or (itemsize and end - begin != _bytes(shape, itemsize, size)):
            raise CheckpointError(
                f"{where}: data_offsets {[begin, end]} do not fit its "
                f"shape {list(shape)} and dtype {dtype} or the file ({size} bytes)"
            )
        out[name] = TensorInfo(name, path, dtype, shape, base + begin)
    return out


def _entry(meta: Any, where: str) -> tuple[str, tuple[int, ...], tuple[int, int]]:
    """An entry's dtype, shape and data offsets, each of the type the format gives it."""
    if not isinstance(meta, dict):
        raise CheckpointError(f"{where}: the entry is a JSON {_json_type(meta)}, not an object")
    missing = [key for key in ("dtype", "shape", "data_offsets") if key not in meta]
    if missing:
        raise CheckpointError(f"{where}: the entry has no {', '.join(missing)}")
    dtype, shape, offsets = meta["dtype"], meta["shape"], meta["data_offsets"]
    if not isinstance(dtype, str):
        raise CheckpointError(f"{where}: dtype must be a string, not {_brief(dtype)}")
    if not _naturals(shape):
        raise CheckpointError(f"{where}: shape must be a list of non-negative ints, not {_brief(shape)}")
    if not (_naturals(offsets) and len(offsets) == 2):
        raise CheckpointError(
            f"{where}: data_offsets must be two non-negative ints [begin, end], not {_brief(offsets)}"
        )
    return dtype, tuple(shape), (offsets[0], offsets[1])


def _bytes(shape: tuple[int, ...], itemsize: int, size: int) -> int:
    """The bytes of ``shape`` elements of ``itemsize``, or ``size + 1`` once that is sure to be more than a
    file of ``size`` bytes holds (so a shape of huge dimensions costs no huge arithmetic)."""
    total = itemsize
    for dim in shape:
        total *= dim
        if total > size:
            return 0 if 0 in shape else size + 1
    return total


def _naturals(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _brief(value: Any) -> str:
    """``value`` cut to a readable length and depth (a message stays one line, whatever the JSON held)."""
    return _BRIEF.repr(value)
