"""The binary .param.bin form (ncnn2mem; read by ``Net::load_param_bin``).

Little-endian int32 words: magic, layer_count, blob_count; per layer the type index (the catalog's),
bottom/top counts and blob indices; params as ``id, 4 bytes`` (int or float bits: binary params are
untyped, so the catalog decides), arrays as ``-23300-id, len, len×4 bytes``, strings as ``-23400-id, len,
bytes padded to 4``; ``-233`` ends a layer's params. Names are not stored: blobs are read back as their
index and layers as ``<type>_<index>``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from graphsurgeon.errors import ParamBinError
from graphsurgeon.formats.atomic import AtomicGroup, atomic_write_bytes
from graphsurgeon.formats.param_build import (
    MAGIC,
    MAX_NET_COUNT,
    PARAM_LIMIT,
    Diagnostics,
    Header,
    Place,
    build_graph,
)
from graphsurgeon.formats.param_literals import MAX_PARAM_ID, MAX_STRING, OLD_ARRAY_BASE
from graphsurgeon.input_files import read_input
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.params import Param, ncnn_view
from graphsurgeon.schema.catalog import Catalog, ParamSpec, ValueType

END_OF_PARAMS = -233
STRING_BASE = -23400


def emit_param_bin(graph: Graph) -> bytes:
    """Encode ``graph`` as .param.bin bytes; custom layer types cannot be encoded (they have no index)."""
    words = bytearray()

    def put(*values: int) -> None:
        words.extend(struct.pack(f"<{len(values)}i", *values))

    blob_index = {name: i for i, name in enumerate(_blob_order(graph))}
    put(MAGIC, len(graph.layers), len(blob_index))
    for layer in graph.layers:
        spec = layer.spec
        if spec is None:
            raise ParamBinError(f"layer {layer.name}: custom type {layer.type!r} has no ncnn type index")
        put(spec.index, len(layer.inputs), len(layer.outputs))
        put(*(blob_index[b.name] for b in layer.inputs))
        put(*(blob_index[b.name] for b in layer.outputs))
        for pid in sorted(layer.params):
            param = _as_ncnn_sees_it(spec.params.get(pid), layer.params[pid])
            kind, value = param.kind, param.value
            if kind is ValueType.INT:
                put(pid, int(value))  # type: ignore[arg-type]
            elif kind is ValueType.FLOAT:
                put(pid)
                words.extend(struct.pack("<f", value))
            elif kind.is_array:
                items = list(value)  # type: ignore[arg-type]
                put(OLD_ARRAY_BASE - pid, len(items))
                fmt = "<%df" if kind is ValueType.FLOAT_ARRAY else "<%di"
                words.extend(struct.pack(fmt % len(items), *items))
            else:
                raw = str(value).encode("utf-8")
                if len(raw) > 255:
                    raise ParamBinError(f"layer {layer.name} param {pid}: string longer than 255 bytes")
                put(STRING_BASE - pid, len(raw))
                words.extend(raw + b"\0" * (-len(raw) % 4))
        put(END_OF_PARAMS)
    return bytes(words)


def _as_ncnn_sees_it(spec: ParamSpec | None, param: Param) -> Param:
    """Binary params are untyped, so write the value the text form gives the layer, in the layer's type.

    A text ``11=-233`` for a float param reads as -233.0 in R1020; written as int bits it would read back as
    NaN. A float literal for an int param reads as the default in R1020, so the default is written.
    """
    if spec is None or param.kind is spec.type:
        return param
    return Param.of(spec.type, ncnn_view(spec, param))


def _blob_order(graph: Graph) -> list[str]:
    """Blob indices as ncnn assigns them: by first appearance, bottoms before tops, layer by layer."""
    seen: dict[str, None] = {}
    for layer in graph.layers:
        for blob in (*layer.inputs, *layer.outputs):
            seen.setdefault(blob.name, None)
    return list(seen)


def write_param_bin(graph: Graph, path: str | os.PathLike[str], group: AtomicGroup | None = None) -> None:
    """Write ``graph`` as .param.bin atomically (with ``group`` when given)."""
    atomic_write_bytes(path, emit_param_bin(graph), group)


class _Reader:
    """Sequential little-endian reads; errors name the offset where the offending field starts."""

    def __init__(self, data: bytes, path: str) -> None:
        self.data, self.pos, self.start, self.path = data, 0, 0, path

    def fail(self, message: str, at: int | None = None) -> ParamBinError:
        return ParamBinError(f"{self.path}: offset {self.start if at is None else at}: {message}")

    def i32(self, what: str) -> int:
        self.start = self.pos
        if self.pos + 4 > len(self.data):
            raise self.fail(f"file ends inside {what}")
        (value,) = struct.unpack_from("<i", self.data, self.pos)
        self.pos += 4
        return int(value)

    def raw(self, nbytes: int, what: str) -> bytes:
        self.start = self.pos
        if nbytes < 0 or self.pos + nbytes > len(self.data):
            raise self.fail(f"file ends inside {what}")
        chunk = self.data[self.pos : self.pos + nbytes]
        self.pos += nbytes
        return chunk


@dataclass(slots=True)
class _BinLayer:
    """One binary layer record, blob indices as names; where its type index and first top index are."""

    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: dict[int, Param]
    offset: int
    tops_offset: int
    line: int = 0  # a .param.bin has no lines


def parse_param_bin(
    data: bytes, *, path: str = "<param.bin>", catalog: Catalog | None = None, strict: bool = True
) -> Graph:
    """Decode .param.bin bytes into a Graph, typing scalar and array params through the catalog.

    The file-level rules are the text reader's (``param_build``): strict (default) raises ParamBinError at
    the byte offset of the first problem; lenient records each in ``graph.issues`` (lint). Bytes that cannot
    be decoded as layer records (a truncated file, an unknown type index) raise in both modes. Whole layer
    records after the counted ones are ignored with a warning, as ncnn ignores them; other trailing bytes
    are an error.
    """
    r = _Reader(data, path)
    graph = Graph(catalog, source=path)
    diag = Diagnostics(graph, path, strict=strict, form=".param.bin")
    magic, layer_count, blob_count = r.i32("the magic"), r.i32("the layer count"), r.i32("the blob count")
    header = Header(str(magic), layer_count, blob_count, Place(offset=0), Place(offset=4), Place(offset=8))
    records = _records(r, diag, graph.catalog, layer_count, blob_count)
    return build_graph(diag, header, records, _place, fresh_slots=False)


def _place(rec: _BinLayer, k: int | None) -> Place:
    return Place(offset=rec.offset if k is None else rec.tops_offset + 4 * k)


def _records(
    r: _Reader, diag: Diagnostics, catalog: Catalog, layer_count: int, blob_count: int
) -> Iterator[_BinLayer]:
    """The layer records: the counted ones (all of them when the count itself is wrong), then whole
    records after them, which the builder ignores with a warning; trailing bytes that are not whole records
    are an error at their offset."""
    counted = layer_count if layer_count > 0 else None
    i = 0
    while r.pos < len(r.data) and (counted is None or i < counted):
        yield _read_layer(r, diag, catalog, i, blob_count)
        i += 1
    start = r.pos
    extras: list[_BinLayer] = []
    try:
        while r.pos < len(r.data):
            extras.append(_read_layer(r, None, catalog, i + len(extras), blob_count))
    except ParamBinError:
        raise r.fail(f"{len(r.data) - start} bytes after the last layer", start) from None
    yield from extras


def _read_layer(r: _Reader, diag: Diagnostics | None, catalog: Catalog, i: int, blob_count: int) -> _BinLayer:
    """Layer ``i``; ``diag`` None: an ignored layer after the counted ones, whose contents are not checked."""
    offset = r.pos
    typeindex = r.i32(f"layer {i} type index")
    spec = catalog.by_index(typeindex)
    if spec is None:
        raise r.fail(
            f"layer {i}: type index {typeindex} is not a built-in ncnn layer (custom layers need names)"
        )
    name = f"{spec.type}_{i}"
    n_bottom, n_top = r.i32(f"layer {i} bottom count"), r.i32(f"layer {i} top count")
    if not (0 <= n_bottom <= MAX_NET_COUNT and 0 <= n_top <= MAX_NET_COUNT):
        raise r.fail(f"layer {i}: implausible bottom/top counts {n_bottom}/{n_top}")
    names: list[str] = []
    for _ in range(n_bottom + n_top):
        blob = r.i32(f"layer {i} blob indices")
        if diag is not None and blob_count > 0 and not 0 <= blob < blob_count:
            message = (
                f"layer {name}: blob index {blob} is outside 0..{blob_count - 1} (the header's blob count)"
            )
            diag.problem("blob-count", message, Place(offset=r.start), name)
        names.append(str(blob))
    tops_offset = r.pos - 4 * n_top
    params: dict[int, Param] = {}
    while True:
        key = r.i32(f"layer {i} params")
        if key == END_OF_PARAMS:
            break
        read = _read_param(r, diag, key, spec.params.get(_param_id(key)), name)
        if read is not None:
            params[read[0]] = read[1]
    return _BinLayer(spec.type, name, names[:n_bottom], names[n_bottom:], params, offset, tops_offset)


def _param_id(key: int) -> int:
    if key <= STRING_BASE:
        return STRING_BASE - key
    if key <= OLD_ARRAY_BASE:
        return OLD_ARRAY_BASE - key
    return key


def _read_param(
    r: _Reader, diag: Diagnostics | None, key: int, spec: object, layer: str
) -> tuple[int, Param] | None:
    """One param; None for one whose id is outside the 32 slots (a problem, so dropped in lenient mode)."""
    pid = _param_id(key)
    valid_id = 0 <= pid <= MAX_PARAM_ID
    if not valid_id and diag is not None:
        what = "string key" if key <= STRING_BASE else "array key" if key <= OLD_ARRAY_BASE else "key"
        message = f"layer {layer}: {what} {key} addresses param id {pid}, outside 0..{MAX_PARAM_ID}"
        diag.problem("param-id", message + " (ncnn has 32 param slots)", Place(offset=r.start), layer)
    expected = getattr(spec, "type", None)
    param: Param
    if key <= STRING_BASE:
        length = r.i32("a string length")
        if length < 0:
            raise r.fail(f"layer {layer} param {pid}: negative string length {length}")
        if length > MAX_STRING and diag is not None:
            message = (
                f"layer {layer} param {pid}: string is {length} bytes long; ncnn reads at most {MAX_STRING}"
            )
            diag.problem("string-length", message, Place(offset=r.start), layer)
        text = r.raw(length + (-length % 4), "a string")[:length]
        param = Param(ValueType.STRING, text.decode("utf-8", errors="replace"))
    elif key <= OLD_ARRAY_BASE:
        length = r.i32("an array length")
        if not 0 <= length <= MAX_NET_COUNT:
            raise r.fail(f"layer {layer} param {pid}: implausible array length {length}")
        raw = r.raw(4 * length, "an array")
        if expected is ValueType.FLOAT_ARRAY:
            param = Param.of(ValueType.FLOAT_ARRAY, np.frombuffer(raw, "<f4").tolist())
        else:
            param = Param(ValueType.INT_ARRAY, tuple(int(v) for v in np.frombuffer(raw, "<i4")))
    else:
        raw = r.raw(4, "a param value")
        if expected is ValueType.FLOAT:
            param = Param.of(ValueType.FLOAT, struct.unpack("<f", raw)[0])
        else:
            param = Param(ValueType.INT, struct.unpack("<i", raw)[0])
    return (pid, param) if valid_id else None


def read_param_bin(
    path: str | os.PathLike[str], *, catalog: Catalog | None = None, strict: bool = True
) -> Graph:
    """Read a .param.bin file (a regular file of at most PARAM_LIMIT bytes); ``strict`` as in
    ``parse_param_bin``."""
    name = os.fspath(path)
    data = read_input(name, limit=PARAM_LIMIT, what="a .param.bin")
    return parse_param_bin(data, path=name, catalog=catalog, strict=strict)
