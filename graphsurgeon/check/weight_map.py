"""The checkpoint side of ``diff-bin``: safetensors files, the YAML weight map and its tensor transforms.

A map pairs ncnn weights with checkpoint tensors, one entry a line::

    fc1.weight: model.layers.0.mlp.up_proj.weight
    attn.k_weight: {tensor: model.layers.0.self_attn.k_proj.weight,
                    transforms: [{repeat_interleave: {axis: 0, n: 2}}]}

The key is ``layer.slot`` (split at the last dot, so layer names may contain dots). Transforms apply to the
checkpoint tensor in the order given: ``transpose`` (an axes list, or bare / null for a 2-D transpose),
``reshape`` (a shape list, one -1 allowed), ``repeat_interleave`` (``axis`` and ``n``: every slice along
``axis`` repeated ``n`` times in place, as torch's ``repeat_interleave`` does for GQA key/value heads).

Checkpoints are a single ``.safetensors`` file or a sharded one named by its ``*.safetensors.index.json``.
Headers are read directly (8-byte little-endian length, JSON with dtype/shape/data_offsets, then data) so
tensors without transforms stream with ``preadv`` like .bin records; bf16 has no numpy dtype and is widened
to float32 by shifting its bits into the high half. Tensors that need a transpose or a repeat are loaded
one at a time (fp32/fp16 through ``safetensors``' numpy API) in their stored dtype.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.chunked import KINDS, ChunkReader, decode

CHECKPOINT_SUFFIXES = (".safetensors", ".safetensors.index.json")
_DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16"}
_STORAGE_NAMES = {"F32": "fp32", "F16": "fp16", "BF16": "bf16"}


def storage_name(dtype: str) -> str:
    """A safetensors dtype in the spelling ncnn storages use (F32 → fp32); others lower-cased."""
    return _STORAGE_NAMES.get(dtype, dtype.lower())


class CheckpointError(GsurgError):
    """A weight map or safetensors checkpoint that cannot be read (exit 2)."""


class TransformError(ValueError):
    """A transform that does not fit the tensor it is applied to (a finding, not a usage error)."""


def is_checkpoint(path: str) -> bool:
    return path.endswith(CHECKPOINT_SUFFIXES)


# ---- transforms ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transform:
    kind: str  # "transpose" | "reshape" | "repeat_interleave"
    dims: tuple[int, ...] | None = None  # transpose axes (None: 2-D) or reshape shape
    axis: int = 0
    n: int = 1

    def describe(self) -> str:
        if self.kind == "repeat_interleave":
            return f"repeat_interleave(axis={self.axis}, n={self.n})"
        return f"{self.kind}({'' if self.dims is None else list(self.dims)})"

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape after this transform; TransformError when it does not fit ``shape``."""
        if self.kind == "transpose":
            return tuple(shape[i] for i in self._axes(shape))
        if self.kind == "reshape":
            assert self.dims is not None
            known = math.prod(d for d in self.dims if d != -1)
            total = math.prod(shape)
            if -1 in self.dims:
                if known == 0 or total % known:
                    raise TransformError(
                        f"{self.describe()} cannot hold the {total} elements of {list(shape)}"
                    )
                return tuple(total // known if d == -1 else d for d in self.dims)
            if known != total:
                raise TransformError(f"{self.describe()} has {known} elements but {list(shape)} has {total}")
            return self.dims
        ax = self._axis(shape)
        return (*shape[:ax], shape[ax] * self.n, *shape[ax + 1 :])

    def _axes(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.dims is None:
            if len(shape) != 2:
                raise TransformError(f"a bare transpose needs a 2-D tensor, not {list(shape)}")
            return (1, 0)
        axes = tuple(a + len(shape) if a < 0 else a for a in self.dims)
        if sorted(axes) != list(range(len(shape))):
            raise TransformError(f"{self.describe()} is not a permutation of the axes of {list(shape)}")
        return axes

    def _axis(self, shape: tuple[int, ...]) -> int:
        if not -len(shape) <= self.axis < len(shape):
            raise TransformError(f"{self.describe()}: axis out of range for {list(shape)}")
        return self.axis % len(shape)

    def apply(self, arr: np.ndarray) -> np.ndarray:
        shape = self.out_shape(arr.shape)
        if self.kind == "transpose":
            return np.transpose(arr, self._axes(arr.shape))
        if self.kind == "reshape":
            return arr.reshape(shape)
        return np.repeat(arr, self.n, axis=self._axis(arr.shape))

    def source_coords(self, coords: list[int], in_shape: tuple[int, ...]) -> list[int]:
        """Coordinates in the input of the element at ``coords`` in the output."""
        if self.kind == "transpose":
            src = [0] * len(in_shape)
            for k, a in enumerate(self._axes(in_shape)):
                src[a] = coords[k]
            return src
        if self.kind == "reshape":
            flat = int(np.ravel_multi_index(tuple(coords), self.out_shape(in_shape)))
            return [int(c) for c in np.unravel_index(flat, in_shape)]
        ax = self._axis(in_shape)
        return [c // self.n if k == ax else c for k, c in enumerate(coords)]


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{what} must be a list of ints, not {value!r}")
    return tuple(value)


def _parse_transform(item: Any) -> Transform:
    if item == "transpose":
        return Transform("transpose")
    if not isinstance(item, dict) or len(item) != 1:
        raise ValueError(f"a transform is one of transpose, reshape, repeat_interleave, not {item!r}")
    ((kind, arg),) = item.items()
    if kind == "transpose":
        return Transform("transpose", None if arg in (None, True) else _int_list(arg, "transpose axes"))
    if kind == "reshape":
        dims = _int_list(arg, "reshape shape")
        if dims.count(-1) > 1 or any(d < -1 for d in dims):
            raise ValueError(f"reshape shape {list(dims)} may hold one -1 and no other negative")
        return Transform("reshape", dims)
    if kind == "repeat_interleave":
        if not isinstance(arg, dict) or set(arg) != {"axis", "n"}:
            raise ValueError(f"repeat_interleave takes {{axis: A, n: N}}, not {arg!r}")
        axis, n = arg["axis"], arg["n"]
        if not (isinstance(axis, int) and isinstance(n, int)) or n < 1:
            raise ValueError(f"repeat_interleave axis must be an int and n an int >= 1, not {arg!r}")
        return Transform("repeat_interleave", axis=axis, n=n)
    raise ValueError(f"unknown transform {kind!r} (known: transpose, reshape, repeat_interleave)")


# ---- the map ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MapEntry:
    key: str  # "layer.slot" as written
    layer: str
    slot: str
    tensor: str
    transforms: tuple[Transform, ...]


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate keys (plain YAML silently keeps the last one)."""


def _construct_unique(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_pairs(node, deep=True))


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique)


def load_map(path: str) -> list[MapEntry]:
    """Read a weight map; CheckpointError names the file and the entry for anything malformed."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.load(fh, Loader=_UniqueKeyLoader)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise CheckpointError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(data, dict) or not data:
        raise CheckpointError(f"{path}: a weight map is a YAML mapping of `layer.slot: tensor-name`")
    entries = []
    for key, value in data.items():
        where = f"{path}: entry {key!r}"
        if not isinstance(key, str) or "." not in key.strip(".") or key.startswith("."):
            raise CheckpointError(f"{where}: the key must be `layer.slot`")
        layer, slot = key.rsplit(".", 1)
        transforms: tuple[Transform, ...] = ()
        try:
            if isinstance(value, str):
                tensor = value
            elif isinstance(value, dict) and isinstance(value.get("tensor"), str):
                extra = set(value) - {"tensor", "transforms"}
                if extra:
                    raise ValueError(f"unknown field(s) {sorted(extra)} (known: tensor, transforms)")
                items = value.get("transforms") or []
                if not isinstance(items, list):
                    raise ValueError("transforms must be a list")
                tensor, transforms = value["tensor"], tuple(_parse_transform(t) for t in items)
            else:
                raise ValueError("the value must be a tensor name or {tensor: NAME, transforms: [...]}")
        except ValueError as err:
            raise CheckpointError(f"{where}: {err}") from None
        entries.append(MapEntry(key, layer, slot, tensor, transforms))
    return entries


# ---- safetensors --------------------------------------------------------------------------------------


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
