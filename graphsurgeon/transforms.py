"""Tensor transforms for weights taken from a checkpoint: ``transpose``, ``reshape`` and
``repeat_interleave`` (GQA key/value heads: every slice along ``axis`` repeated ``n`` times in place, never
tiled). Each transform knows its output shape, applies itself to an array, and maps an output element back
to its source element (so a difference can be located in the checkpoint file). Written in rule and map
files as ``transpose`` (bare: 2-D) / ``{transpose: [axes]}``, ``{reshape: [shape]}`` (one -1 allowed),
``{repeat_interleave: {axis: A, n: N}}`` and ``{slice: {axis: A, start: S, stop: E}}`` (Python slice bounds;
a fused qkv weight split into its parts, for example).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsurgeon.errors import GsurgError


class TransformError(GsurgError):
    """A transform written wrong, or one that does not fit the tensor it is applied to."""


@dataclass(frozen=True, slots=True)
class Transform:
    kind: str  # "transpose" | "reshape" | "repeat_interleave" | "slice"
    dims: tuple[int, ...] | None = None  # transpose axes (None: 2-D) or reshape shape
    axis: int = 0
    n: int = 1
    start: int | None = None  # slice bounds, as Python writes them
    stop: int | None = None

    def describe(self) -> str:
        if self.kind == "repeat_interleave":
            return f"repeat_interleave(axis={self.axis}, n={self.n})"
        if self.kind == "slice":
            return f"slice(axis={self.axis}, {self.start}:{self.stop})"
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
        if self.kind == "slice":
            length = len(range(*slice(self.start, self.stop).indices(shape[ax])))
            if length == 0:
                raise TransformError(f"{self.describe()} selects nothing of {list(shape)}")
            return (*shape[:ax], length, *shape[ax + 1 :])
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
        if self.kind == "slice":
            index = [slice(None)] * arr.ndim
            index[self._axis(arr.shape)] = slice(self.start, self.stop)
            return arr[tuple(index)]
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
        if self.kind == "slice":
            first = slice(self.start, self.stop).indices(in_shape[ax])[0]
            return [c + first if k == ax else c for k, c in enumerate(coords)]
        return [c // self.n if k == ax else c for k, c in enumerate(coords)]


def _is_int(value: Any) -> bool:
    """An int written as one (``true`` is not 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        raise TransformError(f"{what} must be a list of ints, not {value!r}")
    return tuple(value)


def parse_transform(item: Any) -> Transform:
    if item == "transpose":
        return Transform("transpose")
    if not isinstance(item, dict) or len(item) != 1:
        raise TransformError(
            f"a transform is one of transpose, reshape, repeat_interleave, slice, not {item!r}"
        )
    ((kind, arg),) = item.items()
    if kind == "transpose":
        return Transform("transpose", None if arg in (None, True) else _int_list(arg, "transpose axes"))
    if kind == "reshape":
        dims = _int_list(arg, "reshape shape")
        if dims.count(-1) > 1 or any(d < -1 for d in dims):
            raise TransformError(f"reshape shape {list(dims)} may hold one -1 and no other negative")
        return Transform("reshape", dims)
    if kind == "repeat_interleave":
        if not isinstance(arg, dict) or set(arg) != {"axis", "n"}:
            raise TransformError(f"repeat_interleave takes {{axis: A, n: N}}, not {arg!r}")
        axis, n = arg["axis"], arg["n"]
        if not (_is_int(axis) and _is_int(n)) or n < 1:
            raise TransformError(f"repeat_interleave axis must be an int and n an int >= 1, not {arg!r}")
        return Transform("repeat_interleave", axis=axis, n=n)
    if kind == "slice":
        if not isinstance(arg, dict) or not set(arg) <= {"axis", "start", "stop"} or "axis" not in arg:
            raise TransformError(f"slice takes {{axis: A, start: S, stop: E}}, not {arg!r}")
        bounds = [arg.get("start"), arg.get("stop")]
        if not _is_int(arg["axis"]) or not all(b is None or _is_int(b) for b in bounds):
            raise TransformError(f"slice axis, start and stop must be ints, not {arg!r}")
        return Transform("slice", axis=arg["axis"], start=bounds[0], stop=bounds[1])
    raise TransformError(f"unknown transform {kind!r} (known: transpose, reshape, repeat_interleave, slice)")
