"""Encoding a new weight's values into the bytes of its .bin record, in pieces of bounded size.

A record is the tag (tagged storages), the payload, then zero padding to 4 bytes (ncnn-format §3.2). The
payload is made piece by piece from ``Weight.pieces``: each piece is converted into buffers that the next
piece reuses, so encoding needs a few buffers of ``max_elems`` elements whatever the weight's size, on top
of what the weight's own source holds (see ``Weight.pieces``). fp32 pieces that are already little-endian
float32 are passed through as views, without a copy.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.weights import PIECE_ELEMS, Storage, Weight, align4

_NONE = np.empty(0, dtype=np.intp)
_FP32_STORAGES = (Storage.FP32, Storage.FP32_SCALED, Storage.RAW)


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


def record_chunks(weight: Weight, max_elems: int = PIECE_ELEMS) -> Iterator[bytes | memoryview]:
    """The bytes of a new weight's record, in order, as pieces to write: the tag (if tagged), payload pieces
    of at most ``max_elems`` elements, then the padding. A payload piece may be a view of a buffer the next
    one reuses: write it before drawing the next.

    Raises StorageOverflow for finite values fp16/bf16 cannot hold (after scanning every value, so it counts
    them all); ValueError for an unchanged record (copied as it is, never re-encoded) or a quantization
    table (never written new)."""
    if weight.region is not None:
        raise ValueError("an unchanged record is copied byte for byte, not encoded")
    storage = weight.storage
    if storage is Storage.QUANT_TABLE:
        raise ValueError("new weights cannot be written as a quantization table")
    if storage.tag is not None:
        yield storage.tag.to_bytes(4, "little")
    encoder = _PayloadEncoder(storage, max_elems)
    pieces = weight.pieces(max_elems)
    elems = nbytes = 0
    for piece in pieces:
        payload, bad = encoder.encode(piece)
        if bad.size:
            raise _overflow(storage, piece, bad, elems, pieces, encoder)
        yield payload.data.cast("B")
        elems += piece.size
        nbytes += payload.nbytes
    if align4(nbytes) != nbytes:
        yield b"\0" * (align4(nbytes) - nbytes)


class _PayloadEncoder:
    """Converts pieces of values into one storage's payload, in buffers allocated once and reused."""

    def __init__(self, storage: Storage, max_elems: int) -> None:
        self.storage = storage
        self.max_elems = max_elems
        self._buffers: dict[str, np.ndarray] = {}

    def _buffer(self, dtype: str, n: int) -> np.ndarray:
        buf = self._buffers.get(dtype)
        if buf is None:
            buf = self._buffers[dtype] = np.empty(self.max_elems, dtype=dtype)
        return buf[:n]

    def _f32(self, piece: np.ndarray) -> np.ndarray:
        if piece.dtype == np.dtype("<f4"):
            return piece
        out = self._buffer("<f4", piece.size)
        np.copyto(out, piece, casting="unsafe")
        return out

    def encode(self, piece: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(payload, flat indices within the piece of finite values the storage turned into inf)."""
        storage = self.storage
        if storage in _FP32_STORAGES:
            return self._f32(piece), _NONE
        if storage is Storage.FP16:
            half = self._buffer("<f2", piece.size)
            with np.errstate(over="ignore", invalid="ignore"):
                np.copyto(half, piece, casting="unsafe")
            return half, np.flatnonzero(np.isfinite(piece) & ~np.isfinite(half))
        if storage is Storage.BF16:
            f32 = self._f32(piece)
            bits = self._buffer("<u2", piece.size)
            _bf16_into(f32, bits, self._buffer("<u4", piece.size))
            return bits, np.flatnonzero(np.isfinite(f32) & ((bits & 0x7F80) == 0x7F80))
        if piece.dtype.itemsize != 1:
            raise ValueError(f"{storage.value} weights hold bytes, not {piece.dtype} values")
        return piece.view(np.uint8), _NONE


def _overflow(
    storage: Storage,
    piece: np.ndarray,
    bad: np.ndarray,
    start: int,
    rest: Iterator[np.ndarray],
    encoder: _PayloadEncoder,
) -> StorageOverflow:
    first, index, total = float(piece[bad[0]]), start + int(bad[0]), int(bad.size)
    for more in rest:  # count every overflowing value, not only this piece's
        total += int(encoder.encode(more)[1].size)
    return StorageOverflow(storage, total, first, index)


def _bf16_into(f32: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """float32 → bfloat16 bit patterns in ``out``, rounding to nearest even (add 0x7FFF plus the lowest kept
    bit, then truncate); NaN becomes the quiet NaN 0x7FC0. ``scratch`` is uint32 of the same length."""
    bits = f32.view(np.uint32)
    np.right_shift(bits, 16, out=scratch)
    np.bitwise_and(scratch, 1, out=scratch)
    np.add(scratch, 0x7FFF, out=scratch)
    np.add(scratch, bits, out=scratch)  # wraps only for NaN patterns, which are replaced below
    np.right_shift(scratch, 16, out=scratch)
    np.copyto(out, scratch, casting="unsafe")
    out[np.isnan(f32)] = 0x7FC0


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns (little-endian uint16, same shape), rounding to nearest even."""
    f32 = np.ascontiguousarray(values, dtype="<f4")
    out = np.empty(f32.shape, dtype="<u2")
    _bf16_into(f32.reshape(-1), out.reshape(-1), np.empty(f32.size, dtype=np.uint32))
    return out
