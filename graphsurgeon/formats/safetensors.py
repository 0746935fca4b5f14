"""Reading safetensors checkpoints without torch: a single ``.safetensors`` file or a sharded one named by
its ``*.safetensors.index.json``. Headers are read directly (8-byte little-endian length, JSON with
dtype/shape/data_offsets, then data), so untransformed tensors stream with ``preadv`` like .bin records;
bf16 has no numpy dtype and is widened to float32 by shifting its bits into the high half. Tensors that need
a transpose or a repeat are loaded one at a time in their stored dtype.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from graphsurgeon.formats.chunked import KINDS, ChunkReader, decode
from graphsurgeon.formats.safetensors_header import (
    DTYPES,
    CheckpointError,
    TensorInfo,
    read_header,
)
from graphsurgeon.input_files import read_json_input
from graphsurgeon.transforms import Transform, TransformError

CHECKPOINT_SUFFIXES = (".safetensors", ".safetensors.index.json")
#: The most a checkpoint folder's JSON file (config, generation config, tokenizer files) may hold: a real
#: tokenizer.json is ~11 MB, a config a few KB.
JSON_FILE_LIMIT = 64 << 20
_STORAGE_NAMES = {"F32": "fp32", "F16": "fp16", "BF16": "bf16"}


def storage_name(dtype: str) -> str:
    """A safetensors dtype in the spelling ncnn storages use (F32 → fp32); others lower-cased."""
    return _STORAGE_NAMES.get(dtype, dtype.lower())


def is_checkpoint(path: str) -> bool:
    return path.endswith(CHECKPOINT_SUFFIXES)


def checkpoint_path(path: str) -> str:
    """The checkpoint at ``path``: a ``.safetensors`` file or ``*.safetensors.index.json``, or a folder
    holding exactly one index (a sharded checkpoint) or else exactly one ``.safetensors``. CheckpointError,
    naming ``path``, otherwise."""
    p = Path(path)
    if p.is_file() and p.name.endswith(CHECKPOINT_SUFFIXES):
        return str(p)
    if not p.is_dir():
        raise CheckpointError(f"{path}: not a safetensors checkpoint file or a folder holding one")
    for pattern in ("*.safetensors.index.json", "*.safetensors"):
        found = sorted(p.glob(pattern))
        if len(found) == 1:
            return str(found[0])
        if len(found) > 1:
            names = ", ".join(f.name for f in found)
            raise CheckpointError(f"{path}: several checkpoints ({names}); name the file")
    raise CheckpointError(f"{path}: the folder holds no .safetensors checkpoint")


def _read_index(path: str) -> dict[str, str]:
    """The ``weight_map`` of a sharded checkpoint's index: tensor name → shard file name."""
    doc = read_json_input(path, what="a safetensors index", error=CheckpointError)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{path}: not a safetensors index (no weight_map)")
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise CheckpointError(f"{path}: weight_map: tensor {name!r} names no shard file")
    return weight_map


class Checkpoint:
    """Every tensor of a single or sharded safetensors checkpoint, by name (headers only)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tensors: dict[str, TensorInfo] = {}
        if path.endswith(".index.json"):
            weight_map = _read_index(path)
            folder = os.path.dirname(path)
            shards = sorted(set(weight_map.values()))
            headers = {s: read_header(os.path.join(folder, s)) for s in shards}
            for name, shard in weight_map.items():
                if name not in headers[shard]:
                    raise CheckpointError(f"{path}: tensor {name!r} is mapped to {shard}, which lacks it")
                self.tensors[name] = headers[shard][name]
        else:
            self.tensors = read_header(path)
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
        if info.dtype not in DTYPES:
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
        if info.dtype not in DTYPES:
            raise CheckpointError(f"{self.path}: tensor {name!r} is {info.dtype}, not bf16, fp16 or fp32")
        native = _load_native(info)
        if DTYPES[info.dtype] == "bf16":
            return (native.astype(np.uint32) << 16).view(np.float32)
        return native.astype(np.float32, copy=False)  # safetensors hands back a fresh array


def _load_native(info: TensorInfo) -> np.ndarray:
    kind = DTYPES[info.dtype]
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
    stored dtype) at the first read, transformed, and chunks are cut from it."""

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
        self.kind = DTYPES[info.dtype]
        self.itemsize = KINDS[self.kind][1]
        self._reader = ckpt.reader(info.file)
        self._loads = any(t.kind != "reshape" for t in transforms)
        self._array: np.ndarray | None = None

    def _transformed(self) -> np.ndarray | None:
        """The tensor after its transforms, loaded at the first read (so a source whose size does not
        match, say a repeat_interleave by a huge n, is refused before anything is loaded); None when the
        chunks stream from the file."""
        if self._loads and self._array is None:
            arr = _load_native(self.info)
            for t in self.transforms:
                arr = t.apply(arr)
            self._array = arr
        return self._array

    def read(self, start: int, stop: int) -> tuple[np.ndarray, memoryview | None]:
        n = stop - start
        arr = self._transformed()
        if arr is None:
            raw = self._reader.read(self.info.offset + start * self.itemsize, n * self.itemsize)
            native = np.frombuffer(raw, dtype=KINDS[self.kind][0], count=n)
        elif arr.flags.c_contiguous:
            native = arr.reshape(-1)[start:stop]
        else:
            native = arr.flat[start:stop]
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
