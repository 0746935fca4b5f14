"""Weights as lazy views: a record in a memory-mapped .bin, or a new array a transform made.

A weight record is what one ``ModelBin::load`` call consumes: for load type 0 a 4-byte tag and the payload it
selects (padded to 4 bytes), for type 1 plain fp32, for types 3/4/6/8 raw bytes padded to 4. Unchanged
records are written back byte for byte; nothing is decoded until ``numpy()`` is called.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from graphsurgeon.errors import GsurgError

TAG_FP32 = 0x00000000
TAG_FP16 = 0x01306B47
TAG_BF16 = 0x01348B83
TAG_INT8 = 0x000D4B38
TAG_FP32_SCALED = 0x0002C056
#: Legacy 256-entry quantization tables: ncnn takes any other tag with a nonzero byte sum as one. The writers
#: that made them (caffe2ncnn and friends) used small tag values, so only tags below 256 are accepted as
#: tables; anything else is reported as an unknown tag, since it is almost always misaligned data.
QUANT_TABLE_MAX_TAG = 0xFF


class Storage(StrEnum):
    """How a weight's elements are stored in the .bin."""

    FP32 = "fp32"  # type 0, tag 0
    FP16 = "fp16"  # type 0, tag 0x01306B47
    BF16 = "bf16"  # type 0, tag 0x01348B83
    INT8 = "int8"  # type 0, tag 0x000D4B38
    FP32_SCALED = "fp32-scaled"  # type 0, tag 0x0002C056
    QUANT_TABLE = "quant-table"  # type 0, small nonzero tag: 256 fp32 + uint8 indices
    RAW = "raw"  # type 1: fp32, untagged
    BYTES = "bytes"  # types 3/4/6/8: raw bytes, untagged

    @property
    def tag(self) -> int | None:
        return _STORAGE_TAGS.get(self)


_STORAGE_TAGS = {
    Storage.FP32: TAG_FP32,
    Storage.FP16: TAG_FP16,
    Storage.BF16: TAG_BF16,
    Storage.INT8: TAG_INT8,
    Storage.FP32_SCALED: TAG_FP32_SCALED,
}
_TAG_STORAGES = {v: k for k, v in _STORAGE_TAGS.items()}


def default_storage(load_type: int) -> Storage:
    """How a new weight is stored when nothing says otherwise: fp32 (tag 0) for a tagged load (type 0), raw
    fp32 for type 1, raw bytes for the block-quantized byte loads (types 3/4/6/8)."""
    return Storage.FP32 if load_type == 0 else Storage.RAW if load_type == 1 else Storage.BYTES


def align4(n: int) -> int:
    return (n + 3) & ~3


def storage_for_tag(tag: int) -> Storage | None:
    """The storage a type-0 tag selects, or None for a tag gsurg does not accept."""
    if tag in _TAG_STORAGES:
        return _TAG_STORAGES[tag]
    if 0 < tag <= QUANT_TABLE_MAX_TAG:
        return Storage.QUANT_TABLE
    return None


def payload_size(storage: Storage, count: int) -> int:
    """Bytes after the tag (or the whole record when untagged) for ``count`` elements."""
    if storage in (Storage.FP32, Storage.FP32_SCALED, Storage.RAW):
        return 4 * count
    if storage in (Storage.FP16, Storage.BF16):
        return align4(2 * count)
    if storage in (Storage.INT8, Storage.BYTES):
        return align4(count)
    return 1024 + align4(count)  # QUANT_TABLE


def record_size(storage: Storage, count: int) -> int:
    """Bytes one load consumes, tag included."""
    tagged = storage not in (Storage.RAW, Storage.BYTES)
    return (4 if tagged else 0) + payload_size(storage, count)


class MappedBin:
    """A read-only memory map of a .bin file (never opened for writing)."""

    __slots__ = ("_fd", "_mm", "path", "size")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        st = os.fstat(self._fd)
        if stat.S_ISDIR(st.st_mode):  # mmap would fail with a bare EINVAL
            os.close(self._fd)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), self.path)
        self.size = st.st_size
        self._mm = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ) if self.size else None

    def buffer(self) -> memoryview:
        return memoryview(self._mm) if self._mm is not None else memoryview(b"")

    def read(self, offset: int, nbytes: int) -> bytes:
        return bytes(self.buffer()[offset : offset + nbytes])

    def u32(self, offset: int) -> int:
        return int.from_bytes(self.buffer()[offset : offset + 4], "little")

    def array(self, dtype: str, offset: int, count: int) -> np.ndarray:
        return np.frombuffer(self.buffer(), dtype=np.dtype(dtype), count=count, offset=offset)

    def close(self) -> None:
        try:
            if self._mm is not None:
                self._mm.close()
        except BufferError:
            pass  # views still alive keep the map; the OS releases it with them
        os.close(self._fd)

    def __enter__(self) -> MappedBin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class BinRegion:
    """Where an unchanged weight record lives: its file and the record's first byte (tag included)."""

    file: MappedBin
    offset: int
    nbytes: int


class Weight:
    """One weight slot's data: a lazy record in a .bin, or a new array.

    ``shape`` is the load shape in numpy order (the product is the element count the layer reads).
    ``storage`` says how it is (or will be) stored; ``region`` is set only for an unchanged record.
    """

    __slots__ = ("_array", "_make", "load_type", "region", "shape", "storage", "tag")

    def __init__(
        self,
        *,
        load_type: int,
        storage: Storage,
        shape: tuple[int, ...],
        region: BinRegion | None = None,
        array: np.ndarray | None = None,
        make: Callable[[], np.ndarray] | None = None,
        tag: int | None = None,
    ) -> None:
        if sum(x is not None for x in (region, array, make)) != 1:
            raise ValueError("a Weight has exactly one of region, array and make")
        self.load_type = load_type
        self.storage = storage
        self.shape = tuple(int(d) for d in shape)
        self.region = region
        self._array = array
        self._make = make
        self.tag = tag if tag is not None else storage.tag

    @classmethod
    def from_array(cls, array: np.ndarray, *, load_type: int, storage: Storage | None = None) -> Weight:
        """A new weight. Default storage: fp32 (tag 0) for tagged slots, raw fp32 for type 1, bytes else."""
        if storage is None:
            storage = default_storage(load_type)
        arr = np.asarray(array)
        if storage is Storage.BYTES or storage is Storage.INT8:
            arr = np.ascontiguousarray(arr).view(np.int8 if storage is Storage.INT8 else np.uint8)
        else:
            arr = np.ascontiguousarray(arr, dtype=np.float32)
        return cls(load_type=load_type, storage=storage, shape=arr.shape, array=arr)

    @classmethod
    def lazy(
        cls, make: Callable[[], np.ndarray], *, shape: tuple[int, ...], load_type: int, storage: Storage
    ) -> Weight:
        """A new weight computed on demand by ``make`` and never cached, so writing a large model holds one
        weight at a time."""
        return cls(load_type=load_type, storage=storage, shape=shape, make=make)

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def changed(self) -> bool:
        """True for a weight that did not come unchanged from a .bin."""
        return self.region is None

    @property
    def nbytes(self) -> int:
        return record_size(self.storage, self.count)

    def numpy(self) -> np.ndarray:
        """The decoded values in ``shape``: float32 for float storages, int8 / uint8 for byte storages."""
        if self._array is not None:
            return self._array.reshape(self.shape)
        if self._make is not None:
            return np.asarray(self._make()).reshape(self.shape)
        region = self.region
        assert region is not None
        f, n = region.file, self.count
        body = region.offset + (0 if self.storage in (Storage.RAW, Storage.BYTES) else 4)
        if self.storage in (Storage.FP32, Storage.FP32_SCALED, Storage.RAW):
            out = f.array("<f4", body, n)
        elif self.storage is Storage.FP16:
            out = f.array("<f2", body, n).astype(np.float32)
        elif self.storage is Storage.BF16:
            out = (f.array("<u2", body, n).astype(np.uint32) << 16).view(np.float32)
        elif self.storage is Storage.INT8:
            out = f.array("i1", body, n)
        elif self.storage is Storage.BYTES:
            out = f.array("u1", body, n)
        else:
            table = f.array("<f4", body, 256)
            out = table[f.array("u1", body + 1024, n)]
        return out.reshape(self.shape)


def encode_chunks(values: np.ndarray, storage: Storage) -> list[bytes | memoryview]:
    """Encode new values as one record — tag (if tagged), payload, zero padding to 4 bytes — as pieces to
    write in order. The payload is a view when the values are already stored that way, so writing a large
    weight makes at most one converted copy of it."""
    flat = np.ascontiguousarray(values).reshape(-1)
    if storage in (Storage.FP32, Storage.FP32_SCALED, Storage.RAW):
        payload = np.ascontiguousarray(flat, dtype="<f4")
    elif storage is Storage.FP16:
        with np.errstate(over="ignore"):
            payload = flat.astype("<f2")
        _check_no_overflow(flat, np.isfinite(payload), storage)
    elif storage is Storage.BF16:
        payload = bf16_bits(flat)
        _check_no_overflow(flat, (payload & 0x7F80) != 0x7F80, storage)
    elif storage in (Storage.INT8, Storage.BYTES):
        payload = flat.view(np.uint8)
    else:
        raise ValueError("new weights cannot be written as a quantization table")
    chunks: list[bytes | memoryview] = [] if storage.tag is None else [storage.tag.to_bytes(4, "little")]
    chunks.append(payload.data.cast("B"))
    pad = align4(payload.nbytes) - payload.nbytes
    if pad:
        chunks.append(b"\0" * pad)
    return chunks


class StorageOverflow(GsurgError):
    """Finite values that the requested storage cannot hold (they would become inf): how many, and the
    first one with its flat index."""

    def __init__(self, storage: Storage, count: int, first_value: float, first_index: int) -> None:
        self.storage = storage
        self.count = count
        self.first_value = first_value
        self.first_index = first_index
        super().__init__(
            f"{count} value(s) overflow {storage.value}, "
            f"the first {first_value!r} at flat index {first_index}"
        )


def _check_no_overflow(values: np.ndarray, stored_finite: np.ndarray, storage: Storage) -> None:
    bad = np.flatnonzero(np.isfinite(values) & ~stored_finite)
    if bad.size:
        i = int(bad[0])
        raise StorageOverflow(storage, int(bad.size), float(values[i]), i)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns, rounding to nearest even; NaN stays a quiet NaN."""
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = f32.view(np.uint32)
    rounded = ((bits >> 16) + (((bits >> 15) & 1) & (((bits >> 16) & 1) | ((bits & 0x7FFF) != 0)))).astype(
        np.uint16
    )
    rounded[np.isnan(f32)] = 0x7FC0
    return rounded.astype("<u2", copy=False)
