"""Reading safetensors checkpoints without torch: a single ``.safetensors`` file or a sharded one named by
its ``*.safetensors.index.json``. Headers are read directly (8-byte little-endian length, JSON with
dtype/shape/data_offsets, then data), so untransformed tensors stream with ``preadv`` like .bin records;
bf16 has no numpy dtype and is widened to float32 by shifting its bits into the high half. Tensors that need
a transpose or a repeat are loaded one at a time in their stored dtype.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.chunked import KINDS, ChunkReader, decode
from graphsurgeon.transforms import Transform, TransformError

CHECKPOINT_SUFFIXES = (".safetensors", ".safetensors.index.json")
_DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16"}
_STORAGE_NAMES = {"F32": "fp32", "F16": "fp16", "BF16": "bf16"}


def storage_name(dtype: str) -> str:
    """A safetensors dtype in the spelling ncnn storages use (F32 → fp32); others lower-cased."""
    return _STORAGE_NAMES.get(dtype, dtype.lower())


class CheckpointError(GsurgError):
    """A weight map or safetensors checkpoint that cannot be read (exit 2)."""


def is_checkpoint(path: str) -> bool:
    return path.endswith(CHECKPOINT_SUFFIXES)


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    file: str
    dtype: str  # safetensors spelling: F32, F16, BF16, ...
    shape: tuple[int, ...]
    offset: int  # absolute offset of the first data byte


def _read_header(path: str) -> dict[str, TensorInfo]:
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            (length,) = struct.unpack("<Q", head) if len(head) == 8 else (-1,)
            size = os.fstat(fh.fileno()).st_size
            if not 2 <= length <= size - 8:
                raise CheckpointError(f"{path}: not a safetensors file (header length {length}, size {size})")
            header = json.loads(fh.read(length))
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read: {err.strerror}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: safetensors header is not valid JSON: {err}") from None
    base = 8 + length
    out: dict[str, TensorInfo] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = (
                meta["dtype"],
                tuple(int(d) for d in meta["shape"]),
                meta["data_offsets"],
            )
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: tensor {name!r}: malformed header entry {meta!r}") from None
        itemsize = KINDS[_DTYPES[dtype]][1] if dtype in _DTYPES else None
        if not 0 <= begin <= end <= size - base or (itemsize and end - begin != math.prod(shape) * itemsize):
            raise CheckpointError(
                f"{path}: tensor {name!r}: data_offsets {[begin, end]} do not fit its "
                f"shape {list(shape)} and dtype {dtype} or the file ({size} bytes)"
            )
        out[name] = TensorInfo(name, path, dtype, shape, base + begin)
    return out


class Checkpoint:
    """Every tensor of a single or sharded safetensors checkpoint, by name (headers only)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tensors: dict[str, TensorInfo] = {}
        if path.endswith(".index.json"):
            try:
                with open(path, encoding="utf-8") as fh:
                    weight_map = json.load(fh)["weight_map"]
                shards = sorted(set(weight_map.values()))
            except OSError as err:
                raise CheckpointError(f"{path}: cannot read: {err.strerror}") from None
            except (ValueError, KeyError, TypeError, AttributeError):
                raise CheckpointError(f"{path}: not a safetensors index (no weight_map)") from None
            folder = os.path.dirname(path)
            headers = {s: _read_header(os.path.join(folder, s)) for s in shards}
            for name, shard in weight_map.items():
                if name not in headers[shard]:
                    raise CheckpointError(f"{path}: tensor {name!r} is mapped to {shard}, which lacks it")
                self.tensors[name] = headers[shard][name]
        else:
            self.tensors = _read_header(path)
        self._readers: dict[str, ChunkReader] = {}

    def reader(self, file: str) -> ChunkReader:
        if file not in self._readers:
            self._readers[file] = ChunkReader(file)
        return self._readers[file]

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def source(self, name: str, transforms: tuple[Transform, ...]) -> TensorSource:
        """A value source for tensor ``name`` after ``transforms``; TransformError if they do not fit."""
        info = self.tensors[name]
        if info.dtype not in _DTYPES:
            raise TransformError(f"tensor dtype {info.dtype} is not supported (bf16, fp16 or fp32)")
        shapes = [info.shape]
        for t in transforms:
            shapes.append(t.out_shape(shapes[-1]))
        return TensorSource(self, info, transforms, tuple(shapes))

    def array(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a new float32 array in its stored shape (fp16 and bf16 widened). Reads that one
        tensor, from whichever shard holds it; nothing is kept."""
        if name not in self.tensors:
            raise CheckpointError(f"{self.path}: no tensor named {name!r}")
        info = self.tensors[name]
        if info.dtype not in _DTYPES:
            raise CheckpointError(f"{self.path}: tensor {name!r} is {info.dtype}, not bf16, fp16 or fp32")
        native = _load_native(info)
        if _DTYPES[info.dtype] == "bf16":
            return (native.astype(np.uint32) << 16).view(np.float32)
        return native.astype(np.float32, copy=False)  # safetensors hands back a fresh array


def _load_native(info: TensorInfo) -> np.ndarray:
    kind = _DTYPES[info.dtype]
    if kind == "bf16":  # numpy has no bfloat16: the raw bits, widened per chunk
        n = math.prod(info.shape)
        bits = np.fromfile(info.file, dtype="<u2", count=n, offset=info.offset)
        if bits.size != n:
            raise CheckpointError(f"{info.file}: tensor {info.name!r}: file ends inside its data")
        return bits.reshape(info.shape)
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(info.file, framework="numpy") as fh:
            return np.asarray(fh.get_tensor(info.name))
    except SafetensorError as err:
        raise CheckpointError(f"{info.file}: tensor {info.name!r}: {err}") from None


class TensorSource:
    """A checkpoint tensor after its transforms, read in C order as float32. Without a transpose or a
    repeat, the order is the file's and chunks stream from disk; otherwise the tensor is loaded (in its
    stored dtype), transformed, and chunks are cut from it."""

    encoding = ""

    def __init__(
        self,
        ckpt: Checkpoint,
        info: TensorInfo,
        transforms: tuple[Transform, ...],
        shapes: tuple[tuple[int, ...], ...],
    ) -> None:
        self.info = info
        self.transforms = transforms
        self.shapes = shapes
        self.shape = shapes[-1]
        self.count = math.prod(self.shape)
        self.kind = _DTYPES[info.dtype]
        self.itemsize = KINDS[self.kind][1]
        self._reader = ckpt.reader(info.file)
        self._array: np.ndarray | None = None
        if any(t.kind != "reshape" for t in transforms):
            arr = _load_native(info)
            for t in transforms:
                arr = t.apply(arr)
            self._array = arr

    def read(self, start: int, stop: int) -> tuple[np.ndarray, memoryview | None]:
        n = stop - start
        if self._array is None:
            raw = self._reader.read(self.info.offset + start * self.itemsize, n * self.itemsize)
            native = np.frombuffer(raw, dtype=KINDS[self.kind][0], count=n)
        elif self._array.flags.c_contiguous:
            native = self._array.reshape(-1)[start:stop]
        else:
            native = self._array.flat[start:stop]
        return decode(self.kind, native, self._reader.out(n)), None

    def element_offset(self, index: int) -> int:
        coords = [int(c) for c in np.unravel_index(index, self.shape)]
        for t, in_shape in zip(reversed(self.transforms), reversed(self.shapes[:-1]), strict=True):
            coords = t.source_coords(coords, in_shape)
        flat = int(np.ravel_multi_index(tuple(coords), self.info.shape)) if self.info.shape else 0
        return self.info.offset + flat * self.itemsize

    def header(self) -> tuple[int, bytes]:
        return self.info.offset, b""

    def trailer(self) -> tuple[int, bytes]:
        return self.info.offset + self.count * self.itemsize, b""
