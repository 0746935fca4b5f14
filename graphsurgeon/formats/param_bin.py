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

import numpy as np

from graphsurgeon.errors import ParamBinError
from graphsurgeon.formats.atomic import AtomicGroup, atomic_write_bytes
from graphsurgeon.formats.param_text import MAGIC, MAX_NET_COUNT, OLD_ARRAY_BASE
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


def parse_param_bin(data: bytes, *, path: str = "<param.bin>", catalog: Catalog | None = None) -> Graph:
    """Decode .param.bin bytes into a Graph, typing scalar and array params through the catalog."""
    r = _Reader(data, path)
    if r.i32("the magic") != MAGIC:
        raise r.fail(f"bad magic (a .param.bin starts with the int32 {MAGIC})")
    layer_count, blob_count = r.i32("the layer count"), r.i32("the blob count")
    if not (0 < layer_count <= MAX_NET_COUNT and 0 < blob_count <= MAX_NET_COUNT):
        raise r.fail(f"implausible counts {layer_count} layers / {blob_count} blobs")
    graph = Graph(catalog, source=path)
    for i in range(layer_count):
        typeindex = r.i32(f"layer {i} type index")
        spec = graph.catalog.by_index(typeindex)
        if spec is None:
            raise r.fail(
                f"layer {i}: type index {typeindex} is not a built-in ncnn layer (custom layers need names)"
            )
        n_bottom, n_top = r.i32(f"layer {i} bottom count"), r.i32(f"layer {i} top count")
        if not (0 <= n_bottom <= MAX_NET_COUNT and 0 <= n_top <= MAX_NET_COUNT):
            raise r.fail(f"layer {i}: implausible bottom/top counts {n_bottom}/{n_top}")
        blobs: list[int] = []
        for _ in range(n_bottom + n_top):
            blob = r.i32(f"layer {i} blob indices")
            if not 0 <= blob < blob_count:
                raise r.fail(f"layer {i}: blob index {blob} outside 0..{blob_count - 1}")
            blobs.append(blob)
        tops_at = r.pos - 4 * n_top
        params: dict[int, Param] = {}
        while True:
            key = r.i32(f"layer {i} params")
            if key == END_OF_PARAMS:
                break
            pid, param = _read_param(r, key, spec.params.get(_param_id(key)), i)
            params[pid] = param
        names = [str(b) for b in blobs]
        for k, top in enumerate(names[n_bottom:]):
            earlier = graph.blobs.get(top)
            if (earlier is not None and earlier.producer is not None) or top in names[
                n_bottom : n_bottom + k
            ]:
                raise r.fail(
                    f"layer {i}: top blob index {top} is already produced (duplicate top)", tops_at + 4 * k
                )
        graph.add_layer(spec.type, f"{spec.type}_{i}", names[:n_bottom], names[n_bottom:], params)
    if r.pos != len(data):
        raise r.fail(f"{len(data) - r.pos} bytes after the last layer", r.pos)
    return graph


def _param_id(key: int) -> int:
    if key <= STRING_BASE:
        return STRING_BASE - key
    if key <= OLD_ARRAY_BASE:
        return OLD_ARRAY_BASE - key
    return key


def _read_param(r: _Reader, key: int, spec: object, layer_i: int) -> tuple[int, Param]:
    pid = _param_id(key)
    if not 0 <= pid < 32:
        raise r.fail(f"layer {layer_i}: param key {key} is outside the 32 param slots")
    expected = getattr(spec, "type", None)
    if key <= STRING_BASE:
        length = r.i32("a string length")
        if not 0 <= length <= 255:
            raise r.fail(f"layer {layer_i} param {pid}: string length {length} outside 0..255")
        text = r.raw(length + (-length % 4), "a string")[:length]
        return pid, Param(ValueType.STRING, text.decode("utf-8", errors="replace"))
    if key <= OLD_ARRAY_BASE:
        length = r.i32("an array length")
        if not 0 <= length <= MAX_NET_COUNT:
            raise r.fail(f"layer {layer_i} param {pid}: implausible array length {length}")
        raw = r.raw(4 * length, "an array")
        if expected is ValueType.FLOAT_ARRAY:
            return pid, Param.of(ValueType.FLOAT_ARRAY, np.frombuffer(raw, "<f4").tolist())
        return pid, Param(ValueType.INT_ARRAY, tuple(int(v) for v in np.frombuffer(raw, "<i4")))
    raw = r.raw(4, "a param value")
    if expected is ValueType.FLOAT:
        return pid, Param.of(ValueType.FLOAT, struct.unpack("<f", raw)[0])
    return pid, Param(ValueType.INT, struct.unpack("<i", raw)[0])


def read_param_bin(path: str | os.PathLike[str], *, catalog: Catalog | None = None) -> Graph:
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            data = fh.read()
    except OSError as err:
        raise ParamBinError(f"{name}: cannot read: {err.strerror}") from None
    return parse_param_bin(data, path=name, catalog=catalog)
