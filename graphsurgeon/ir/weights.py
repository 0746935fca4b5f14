"""The IR's weight values (``Weight``): a lazy view of a .bin record, a new array, or values made on demand.

A weight record is what one ``ModelBin::load`` call consumes: for load type 0 a 4-byte tag and the payload it
selects (padded to 4 bytes), for type 1 plain fp32, for types 3/4/6/8 raw bytes padded to 4. Unchanged
records are written back byte for byte; nothing is decoded until ``numpy()`` or ``pieces()`` is called.
Encoding new values into record bytes is ``graphsurgeon.ir.encode``.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from graphsurgeon.input_files import open_input

TAG_FP32 = 0x00000000
TAG_FP16 = 0x01306B47
TAG_BF16 = 0x01348B83
TAG_INT8 = 0x000D4B38
TAG_FP32_SCALED = 0x0002C056
#: Elements per piece when a weight's values are drawn in pieces (``Weight.pieces``): 4 MiB of float32.
PIECE_ELEMS = 1 << 20
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
    """A read-only memory map of a .bin file (never opened for writing; only a regular file, see
    ``input_files``)."""

    __slots__ = ("_fd", "_mm", "path", "size")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd = open_input(self.path)  # a folder, FIFO or device is refused, never waited on
        self.size = os.fstat(self._fd).st_size
        self._mm = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ) if self.size else None

    def fileno(self) -> int:
        """The read-only descriptor the map was made from (for in-kernel copies with explicit offsets)."""
        return self._fd

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
    """One weight slot's data: a lazy record in a .bin, a new array, or new values made on demand.

    ``shape`` is the load shape in numpy order (the product is the element count the layer reads).
    ``storage`` says how it is (or will be) stored; ``region`` is set only for an unchanged record.
    A new weight's values come from exactly one of: ``array`` (held), ``make`` (a function computing the
    whole array, called on every read) or ``blocks`` (a function yielding the flat values as consecutive
    blocks of bounded size, called on every read; see ``streamed``).
    """

    __slots__ = (
        "_array",
        "_blocks",
        "_make",
        "compensated",
        "load_type",
        "origin",
        "region",
        "shape",
        "storage",
        "tag",
    )

    def __init__(
        self,
        *,
        load_type: int,
        storage: Storage,
        shape: tuple[int, ...],
        region: BinRegion | None = None,
        array: np.ndarray | None = None,
        make: Callable[[], np.ndarray] | None = None,
        blocks: Callable[[], Iterator[np.ndarray]] | None = None,
        tag: int | None = None,
    ) -> None:
        if sum(x is not None for x in (region, array, make, blocks)) != 1:
            raise ValueError("a Weight has exactly one of region, array, make and blocks")
        self.load_type = load_type
        self.storage = storage
        self.shape = tuple(int(d) for d in shape)
        self.region = region
        self._array = array
        self._make = make
        self._blocks = blocks
        self.tag = tag if tag is not None else storage.tag
        #: for codes a quantizer made in this run: the float weight they encode (what a weight map pairs)
        self.origin: Weight | None = None
        #: for such codes: chosen to cancel the layer's output error (GPTQ), not each value's nearest level
        self.compensated = False

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
        """A new weight computed whole on demand by ``make`` and never cached, so writing a large model holds
        one weight at a time. For values that are a function of a whole tensor (a transpose, a checkpoint
        read): the writer then holds that array once and encodes it in bounded pieces."""
        return cls(load_type=load_type, storage=storage, shape=shape, make=make)

    @classmethod
    def streamed(
        cls,
        blocks: Callable[[], Iterator[np.ndarray]],
        *,
        shape: tuple[int, ...],
        load_type: int,
        storage: Storage,
    ) -> Weight:
        """A new weight produced block by block: ``blocks()`` yields 1-D arrays that, concatenated, are the
        flat values in C order (``count`` elements in all). A block may be a view of a buffer the next block
        reuses: every consumer is done with a block before it draws the next. Memory is then bounded by one
        block whatever the weight's size; nothing is cached, ``blocks()`` is called again for every read."""
        return cls(load_type=load_type, storage=storage, shape=shape, blocks=blocks)

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
        """The decoded values in ``shape``: float32 for float storages, int8 / uint8 for byte storages.
        Whole: for a large new weight prefer ``pieces``."""
        if self._array is not None:
            return self._array.reshape(self.shape)
        if self._make is not None:
            return np.asarray(self._make()).reshape(self.shape)
        if self._blocks is not None:
            out: np.ndarray | None = None
            pos = 0
            for block in self.pieces():
                if out is None:
                    out = np.empty(self.count, dtype=block.dtype)
                out[pos : pos + block.size] = block  # a copy: the next block may reuse this one's buffer
                pos += block.size
            if out is None:  # no elements at all
                out = np.empty(0, dtype=np.float32)
            return out.reshape(self.shape)
        return self._decode(0, self.count).reshape(self.shape)

    def pieces(self, max_elems: int = PIECE_ELEMS) -> Iterator[np.ndarray]:
        """The flat values in C order as consecutive 1-D arrays of at most ``max_elems`` elements each,
        decoded like ``numpy()``. A piece may be a view of a buffer that the next piece reuses: use it before
        drawing the next.

        Memory: a streamed weight holds one block, and an unchanged record decodes one piece, at a time,
        whatever the weight's size; an array weight is already held; a ``make`` weight (a transform of a
        whole tensor) is computed whole once and then sliced. Raises ValueError when a new weight yields
        another element count than its shape has (a bug in whatever made it)."""
        if max_elems < 1:
            raise ValueError("pieces need room for at least one element")
        if self.region is not None:
            for start in range(0, self.count, max_elems):
                yield self._decode(start, min(max_elems, self.count - start))
            return
        if self._blocks is not None:
            sources: Iterator[np.ndarray] = self._blocks()
        elif self._make is not None:
            sources = iter((np.asarray(self._make()),))
        else:
            assert self._array is not None
            sources = iter((self._array,))
        total = 0
        for block in sources:
            flat = np.ascontiguousarray(block).reshape(-1)  # pieces are contiguous, so encoders can view them
            total += flat.size
            if total > self.count:
                break
            for start in range(0, flat.size, max_elems):
                yield flat[start : start + max_elems]
        if total != self.count:
            raise ValueError(
                f"a new weight of shape {list(self.shape)} ({self.count} elements) produced "
                f"{'more' if total > self.count else total} values"
            )

    def _decode(self, start: int, n: int) -> np.ndarray:
        """Elements ``[start, start + n)`` of an unchanged record, decoded (a view for fp32 and bytes)."""
        region = self.region
        assert region is not None
        f = region.file
        body = region.offset + (0 if self.storage in (Storage.RAW, Storage.BYTES) else 4)
        if self.storage in (Storage.FP32, Storage.FP32_SCALED, Storage.RAW):
            return f.array("<f4", body + 4 * start, n)
        if self.storage is Storage.FP16:
            return f.array("<f2", body + 2 * start, n).astype(np.float32)
        if self.storage is Storage.BF16:
            return (f.array("<u2", body + 2 * start, n).astype(np.uint32) << 16).view(np.float32)
        if self.storage is Storage.INT8:
            return f.array("i1", body + start, n)
        if self.storage is Storage.BYTES:
            return f.array("u1", body + start, n)
        table = f.array("<f4", body, 256)
        return table[f.array("u1", body + 1024 + start, n)]
