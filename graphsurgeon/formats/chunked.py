"""Reading .bin weight records (and whole files) chunk by chunk, decoded to float32: what ``diff-bin`` and
``lint --bin`` scan large models with.

Chunks are read with ``os.preadv`` into buffers reused from chunk to chunk, never through a memory map
(touched pages of a map count toward the resident set), and decoded to float32: fp16 by numpy, bf16 by
shifting its bits into the high half of a float32, int8 and raw bytes as their integer values, and
256-entry quantization tables by lookup. A ``ValueSource`` is what ``diff_stats.Comparator`` compares;
``formats.safetensors.TensorSource`` is the checkpoint side's.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np

from graphsurgeon.errors import BinFormatError
from graphsurgeon.input_files import open_input
from graphsurgeon.ir.weights import Storage

#: Native element kinds: numpy dtype as stored in the file, and bytes per element.
KINDS: dict[str, tuple[str, int]] = {
    "f32": ("<f4", 4),
    "f16": ("<f2", 2),
    "bf16": ("<u2", 2),
    "i8": ("i1", 1),
    "u8": ("u1", 1),
}


def decode(kind: str, native: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Widen ``native`` (elements of ``kind``) to float32, into ``out`` unless already float32."""
    if kind == "f32":
        return native
    n = native.size
    dst = out[:n]
    if kind == "bf16":
        bits = dst.view(np.uint32)
        np.copyto(bits, native, casting="unsafe")
        np.left_shift(bits, 16, out=bits)
    else:
        np.copyto(dst, native, casting="unsafe")
    return dst


class ChunkReader:
    """One open file read with ``preadv`` into a reused buffer; one per side, so the sides never alias."""

    __slots__ = ("_buf", "_out", "fd", "path", "size")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = open_input(path)  # a regular file only: a FIFO or device is refused, never waited on
        self.size = os.fstat(self.fd).st_size
        self._buf = bytearray(0)
        self._out = np.empty(0, dtype=np.float32)

    def read(self, offset: int, nbytes: int) -> memoryview:
        """Exactly ``nbytes`` at ``offset`` (a view valid until the next read)."""
        if len(self._buf) < nbytes:
            self._buf = bytearray(nbytes)
        view = memoryview(self._buf)[:nbytes]
        got = 0
        while got < nbytes:
            n = os.preadv(self.fd, [view[got:]], offset + got)
            if n == 0:
                raise BinFormatError(
                    f"file ends at {offset + got} while reading {nbytes} bytes at {offset} "
                    "(it shrank after it was walked?)",
                    path=self.path,
                )
            got += n
        return view

    def out(self, count: int) -> np.ndarray:
        """A reused float32 buffer of at least ``count`` elements for decoded values."""
        if self._out.size < count:
            self._out = np.empty(count, dtype=np.float32)
        return self._out

    def close(self) -> None:
        os.close(self.fd)


class ValueSource(Protocol):
    """One side of a pair: ``count`` elements, read as float32 in C order."""

    count: int
    #: Same non-empty encoding on both sides means the bytes can be compared directly (tag, payload,
    #: padding); otherwise the first difference is located by value.
    encoding: str

    def read(self, start: int, stop: int) -> tuple[np.ndarray, memoryview | None]:
        """Elements [start, stop) as float32, and their raw bytes when ``encoding`` is set."""
        ...

    def element_offset(self, index: int) -> int:
        """Absolute byte offset in its file of element ``index``'s first byte."""
        ...

    def header(self) -> tuple[int, bytes]:
        """The record bytes before the first element (tag, table) and where they start."""
        ...

    def trailer(self) -> tuple[int, bytes]:
        """The record bytes after the last element (padding) and where they start."""
        ...


_STORAGE_KINDS = {
    Storage.FP32: "f32",
    Storage.FP32_SCALED: "f32",
    Storage.RAW: "f32",
    Storage.FP16: "f16",
    Storage.BF16: "bf16",
    Storage.INT8: "i8",
    Storage.BYTES: "u8",
    Storage.QUANT_TABLE: "u8",
}


class FileSource:
    """Elements stored contiguously in a file: a .bin record (``record_offset``/``record_nbytes`` frame
    its tag and padding), or a whole file read as flat float32, or an untransformed checkpoint tensor."""

    __slots__ = ("_table", "body", "count", "encoding", "kind", "reader", "record_nbytes", "record_offset")

    def __init__(
        self,
        reader: ChunkReader,
        *,
        kind: str,
        count: int,
        body: int,
        record_offset: int | None = None,
        record_nbytes: int | None = None,
        encoding: str = "",
        table: np.ndarray | None = None,
    ) -> None:
        self.reader = reader
        self.kind = kind
        self.count = count
        self.body = body
        self.record_offset = body if record_offset is None else record_offset
        self.record_nbytes = count * KINDS[kind][1] if record_nbytes is None else record_nbytes
        self.encoding = encoding
        self._table = table

    @classmethod
    def for_record(
        cls, reader: ChunkReader, offset: int, nbytes: int, storage: Storage, count: int
    ) -> FileSource:
        """A .bin weight record (as ``model_bin.walk_records`` found it)."""
        tagged = storage not in (Storage.RAW, Storage.BYTES)
        body = offset + (4 if tagged else 0)
        table = None
        if storage is Storage.QUANT_TABLE:
            table = np.frombuffer(bytes(reader.read(body, 1024)), dtype="<f4").astype(np.float32)
            body += 1024
        return cls(
            reader,
            kind=_STORAGE_KINDS[storage],
            count=count,
            body=body,
            record_offset=offset,
            record_nbytes=nbytes,
            encoding=storage.value,
            table=table,
        )

    def read(self, start: int, stop: int) -> tuple[np.ndarray, memoryview | None]:
        dtype, size = KINDS[self.kind]
        n = stop - start
        raw = self.reader.read(self.body + start * size, n * size)
        native = np.frombuffer(raw, dtype=dtype, count=n)
        if self._table is not None:
            values = np.take(self._table, native, out=self.reader.out(n)[:n])
        else:
            values = decode(self.kind, native, self.reader.out(n))
        return values, raw

    def element_offset(self, index: int) -> int:
        return self.body + index * KINDS[self.kind][1]

    def header(self) -> tuple[int, bytes]:
        return self.record_offset, bytes(self.reader.read(self.record_offset, self.body - self.record_offset))

    def trailer(self) -> tuple[int, bytes]:
        end = self.body + self.count * KINDS[self.kind][1]
        return end, bytes(self.reader.read(end, self.record_offset + self.record_nbytes - end))
