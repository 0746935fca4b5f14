"""PyTorch dim ↔ ncnn axis: the one place that knows the layout conventions; rules and code call it,
nobody re-derives them.

A torch tensor is described by a :class:`TorchLayout`: its rank and which dim, if any, pnnx drops as the batch
(``batch_dim=None`` is pnnx's ``233``, "no batch"). ncnn sees the remaining dims in the same order (pnnx
writes a ``[b, c, h, w]`` torch tensor as ncnn ``c, h, w``), so an ncnn axis is a torch dim with the batch
removed, and negative ncnn axes count from the end of the *ncnn* rank. Reshape, MemoryData and Input list
those dims reversed (``0=w`` is the last torch dim); Permute ``0=order_type`` is the lexicographic index of
the batch-free permutation of ncnn's own Permute table. Every function here is pure and raises
:class:`LayoutError` naming the dim and rank.

What pnnx 20261020 writes, checked by ``tests/test_layout_pnnx.py``: axes come out non-negative (``dim=-1``
on a batch-0 ``[1,C,H,W]`` is written ``2``), which is what :func:`torch_dim_to_ncnn_axis` returns.
Where pnnx writes something lossy for an op on the batch dim (Concat ``0=-233``, Softmax with no axis, a
Crop or Tile whose batch entry is silently dropped), this module raises instead.

Callers today: the ``axis_from_torch`` action (``rewrite.actions.params``) uses :class:`TorchLayout` and
:func:`torch_dim_to_ncnn_axis`. The other conversions (Reshape, MemoryData, Permute, Squeeze, ExpandDims,
Tile and Crop params, and the inverses that read ncnn params back) have no caller outside the tests yet.
They stay here and in ``__all__`` on purpose: they are the conventions the design notes put in this one
module (invariant 8; the layout in docs/architecture.md), each checked against pnnx and the ncnn wheel,
for the rules and actions that will need them. Moved into the tests, the tests would become a second
place that knows them.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from graphsurgeon.errors import GsurgError

__all__ = [
    "ABSENT",
    "PNNX_NO_BATCH",
    "SHAPE_KEYS",
    "LayoutError",
    "TorchLayout",
    "crop_params",
    "drop_batch",
    "expanddims_axes",
    "expanded_layout",
    "memorydata_params",
    "ncnn_axis_to_torch_dim",
    "ncnn_rank",
    "permute_order_type",
    "reshape_params",
    "squeeze_axes",
    "squeezed_layout",
    "tile_repeats",
    "torch_dim_to_ncnn_axis",
    "torch_perm_from_order_type",
    "torch_shape_from_memorydata",
    "torch_shape_from_reshape",
]

T = TypeVar("T")

ABSENT = -233  # Reshape "key absent", Crop "default start/end", Slice "split the rest evenly"
PNNX_NO_BATCH = 233  # pnnx's __batch_index for "no batch"; here batch_dim=None
INT32_MAX = 2**31 - 1
MAX_NCNN_RANK = 4

# Reshape / MemoryData / Input keys in ncnn order (innermost first) for each ncnn rank.
SHAPE_KEYS: dict[int, tuple[str, ...]] = {
    1: ("w",),
    2: ("w", "h"),
    3: ("w", "h", "c"),
    4: ("w", "h", "d", "c"),
}


class LayoutError(GsurgError):
    """A torch dim, shape or permutation that has no ncnn equivalent (or an ncnn value with no torch one)."""


@dataclass(frozen=True, slots=True)
class TorchLayout:
    """A torch tensor's rank and the dim pnnx drops as the batch (``None`` = no batch, pnnx's 233).

    A negative ``batch_dim`` is normalised with ``rank``; it must name one of the tensor's dims.
    """

    rank: int
    batch_dim: int | None = 0

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise LayoutError(f"torch rank {self.rank}: a tensor needs at least one dim")
        if self.batch_dim is not None:
            b = _normalise(self.batch_dim, self.rank, "batch dim")
            object.__setattr__(self, "batch_dim", b)

    def describe(self) -> str:
        """``torch rank 4, batch dim 0`` / ``torch rank 2, no batch``: for error messages."""
        batch = "no batch" if self.batch_dim is None else f"batch dim {self.batch_dim}"
        return f"torch rank {self.rank}, {batch}"


def _normalise(dim: int, rank: int, what: str) -> int:
    """``dim`` in ``[-rank, rank)`` made non-negative, else LayoutError naming ``what`` and the rank."""
    d = operator.index(dim)
    if not -rank <= d < rank:
        raise LayoutError(f"{what} {d} is out of range for rank {rank} (valid: {-rank}..{rank - 1})")
    return d + rank if d < 0 else d


def ncnn_rank(layout: TorchLayout) -> int:
    """The ncnn Mat rank: the torch rank less the batch dim. LayoutError unless it is 1..4."""
    n = layout.rank - (0 if layout.batch_dim is None else 1)
    if not 1 <= n <= MAX_NCNN_RANK:
        raise LayoutError(f"{layout.describe()} gives ncnn rank {n}; ncnn supports ranks 1..{MAX_NCNN_RANK}")
    return n


def drop_batch(values: Sequence[T], layout: TorchLayout) -> tuple[T, ...]:
    """``values`` (one per torch dim, e.g. a torch shape) without the batch entry: the ncnn numpy order."""
    ncnn_rank(layout)
    if len(values) != layout.rank:
        raise LayoutError(f"{len(values)} entries {tuple(values)} for {layout.describe()}")
    return tuple(v for i, v in enumerate(values) if i != layout.batch_dim)


def _insert_batch(values: Sequence[T], layout: TorchLayout, fill: T) -> tuple[T, ...]:
    """Inverse of :func:`drop_batch`: put ``fill`` back at the batch position."""
    out = list(values)
    if layout.batch_dim is not None:
        out.insert(layout.batch_dim, fill)
    return tuple(out)


def torch_dim_to_ncnn_axis(dim: int, layout: TorchLayout) -> int:
    """The non-negative ncnn axis for torch ``dim`` (Slice, Concat, Softmax, Crop axes, …).

    A negative ``dim`` counts from the end of the torch rank; dims after the batch shift down by one. The
    batch dim itself has no ncnn axis: LayoutError (pnnx would write Concat ``0=-233``).
    """
    n = ncnn_rank(layout)
    d = _normalise(dim, layout.rank, "torch dim")
    b = layout.batch_dim
    if b is None:
        return d
    if d == b:
        raise LayoutError(f"torch dim {dim} is the batch dim ({layout.describe()}): ncnn drops it")
    axis = d - 1 if d > b else d
    assert 0 <= axis < n
    return axis


def ncnn_axis_to_torch_dim(axis: int, layout: TorchLayout) -> int:
    """The non-negative torch dim for ncnn ``axis``; a negative axis counts from the end of the ncnn rank.

    pnnx's ``-233`` (an op along the batch dim) is out of range and raises LayoutError.
    """
    n = ncnn_rank(layout)
    a = _normalise(axis, n, "ncnn axis")
    b = layout.batch_dim
    return a + 1 if b is not None and a >= b else a


def _shape_values(shape: Sequence[int], what: str, *, allow_infer: bool) -> tuple[int, ...]:
    values = tuple(operator.index(v) for v in shape)
    bad = [v for v in values if v < 1 and not (allow_infer and v == -1)]
    if bad:
        allowed = "positive or -1 (infer)" if allow_infer else "positive"
        raise LayoutError(f"{what} {values}: entries must be {allowed}, got {bad[0]}")
    if values.count(-1) > 1:
        raise LayoutError(f"{what} {values}: -1 (infer) may appear at most once")
    return values


def _reversed_params(dims: tuple[int, ...]) -> dict[str, int]:
    return dict(zip(SHAPE_KEYS[len(dims)], reversed(dims), strict=True))


def _dims_from_params(params: Mapping[str, int], absent: int, what: str) -> tuple[int, ...]:
    present = {k: operator.index(params[k]) for k in ("w", "h", "d", "c") if params.get(k, absent) != absent}
    for keys in SHAPE_KEYS.values():
        if set(present) == set(keys):
            return tuple(present[k] for k in reversed(keys))
    raise LayoutError(
        f"{what} keys {sorted(present)} do not form a rank: expected w / w,h / w,h,c / w,h,d,c "
        f"(absent = {absent})"
    )


def reshape_params(torch_shape: Sequence[int], layout: TorchLayout) -> dict[str, int]:
    """Reshape params by catalog name for torch ``view(*torch_shape)``; ``layout`` is the *output's*.

    The batch entry (which must be 1 or -1: pnnx assumes batch 1) is removed and the rest reversed:
    ``(A, B, C)`` without batch → ``{"w": C, "h": B, "c": A}``; 4-D → ``w, h, d, c``. The keys present set
    the ncnn rank. ``-1`` (infer) may appear at most once; ``0`` is rejected (ncnn reads it as "copy").
    """
    shape = _shape_values(torch_shape, "torch shape", allow_infer=True)
    rest = drop_batch(shape, layout)
    if layout.batch_dim is not None and shape[layout.batch_dim] not in (1, -1):
        raise LayoutError(
            f"torch shape {shape}: batch entry {shape[layout.batch_dim]} at dim {layout.batch_dim} "
            "must be 1 (pnnx assumes batch 1)"
        )
    return _reversed_params(rest)


def torch_shape_from_reshape(params: Mapping[str, int], layout: TorchLayout) -> tuple[int, ...]:
    """Inverse of :func:`reshape_params`: the torch shape (batch entry 1) from keys ``w, h, d, c``.

    Keys absent or ``-233`` are absent; other keys (``shape_expr``, …) are not read. LayoutError when the
    keys form no rank, the rank does not match ``layout``, or a value is ``0`` ("copy the input dim" has
    no torch equivalent without the input shape).
    """
    dims = _dims_from_params(params, ABSENT, "Reshape")
    n = ncnn_rank(layout)
    if len(dims) != n:
        raise LayoutError(f"Reshape of ncnn rank {len(dims)} does not fit {layout.describe()} (rank {n})")
    if 0 in dims:
        raise LayoutError(f"Reshape {dims}: 0 copies an input dim, which torch cannot say without the shape")
    _shape_values(dims, "Reshape dims", allow_infer=True)
    return _insert_batch(dims, layout, 1)


def memorydata_params(torch_shape: Sequence[int], layout: TorchLayout | None = None) -> dict[str, int]:
    """MemoryData (or Input) ``w, h, d, c`` for a constant of ``torch_shape``: reversed like Reshape.

    ``layout`` defaults to no batch; with one, the batch entry must be 1 and is dropped (pnnx drops it
    only when it is 1). The data itself stays in torch row-major order.
    """
    shape = _shape_values(torch_shape, "torch shape", allow_infer=False)
    layout = layout or TorchLayout(len(shape), None)
    rest = drop_batch(shape, layout)
    if layout.batch_dim is not None and shape[layout.batch_dim] != 1:
        raise LayoutError(f"torch shape {shape}: batch entry at dim {layout.batch_dim} must be 1")
    return _reversed_params(rest)


def torch_shape_from_memorydata(
    params: Mapping[str, int], layout: TorchLayout | None = None
) -> tuple[int, ...]:
    """Inverse of :func:`memorydata_params`; keys absent or 0 are absent (MemoryData's defaults)."""
    dims = _dims_from_params(params, 0, "MemoryData")
    _shape_values(dims, "MemoryData dims", allow_infer=False)
    layout = layout or TorchLayout(len(dims), None)
    if len(dims) != ncnn_rank(layout):
        raise LayoutError(f"MemoryData of ncnn rank {len(dims)} does not fit {layout.describe()}")
    return _insert_batch(dims, layout, 1)


def permute_order_type(torch_perm: Sequence[int], layout: TorchLayout) -> int:
    """Permute ``order_type`` for torch ``permute(*torch_perm)``.

    The batch dim must stay in place; the other dims form a permutation of the ncnn rank whose
    lexicographic index is the order type (rank 3: 012→0, 021→1, 102→2, 120→3, 201→4, 210→5).
    """
    n = ncnn_rank(layout)
    if len(torch_perm) != layout.rank:
        raise LayoutError(f"permutation {tuple(torch_perm)} has {len(torch_perm)} dims; {layout.describe()}")
    perm = tuple(_normalise(p, layout.rank, "torch dim") for p in torch_perm)
    if sorted(perm) != list(range(layout.rank)):
        raise LayoutError(f"{tuple(torch_perm)} is not a permutation of {layout.rank} dims")
    b = layout.batch_dim
    if b is not None and perm[b] != b:
        raise LayoutError(f"permutation {tuple(torch_perm)} moves the batch dim {b}; ncnn has no batch axis")
    axes = [torch_dim_to_ncnn_axis(p, layout) for i, p in enumerate(perm) if i != b]
    index = 0
    for i, a in enumerate(axes):
        smaller_later = sum(1 for later in axes[i + 1 :] if later < a)
        index += smaller_later * math.factorial(n - 1 - i)
    return index


def torch_perm_from_order_type(order_type: int, layout: TorchLayout) -> tuple[int, ...]:
    """Inverse of :func:`permute_order_type`: the torch permutation, batch dim (if any) in place."""
    n = ncnn_rank(layout)
    count = math.factorial(n)
    index = operator.index(order_type)
    if not 0 <= index < count:
        raise LayoutError(f"Permute order_type {order_type} is not in 0..{count - 1} (ncnn rank {n})")
    pool = list(range(n))
    axes: list[int] = []
    for i in range(n):
        step = math.factorial(n - 1 - i)
        axes.append(pool.pop(index // step))
        index %= step
    dims = [ncnn_axis_to_torch_dim(a, layout) for a in axes]
    return _insert_batch(dims, layout, layout.batch_dim or 0)


def _distinct(dims: Sequence[int], rank: int, what: str) -> list[int]:
    out = [_normalise(d, rank, what) for d in dims]
    if len(set(out)) != len(out):
        raise LayoutError(f"{what}s {tuple(dims)} name the same dim twice (rank {rank})")
    return out


def squeezed_layout(torch_dims: Sequence[int], layout: TorchLayout) -> TorchLayout:
    """The layout after torch ``squeeze(torch_dims)``; squeezing the batch dim leaves no batch."""
    dims = _distinct(torch_dims, layout.rank, "torch dim")
    b = layout.batch_dim
    new_b = None if b is None or b in dims else b - sum(1 for d in dims if d < b)
    return TorchLayout(layout.rank - len(dims), new_b)


def squeeze_axes(torch_dims: Sequence[int], layout: TorchLayout) -> list[int]:
    """Squeeze ``axes`` (input-rank positions) for torch ``squeeze(torch_dims)`` on a tensor of ``layout``.

    The batch dim is left out: ncnn has already dropped it, so squeezing it is a no-op (pnnx then emits no
    Squeeze at all). An empty result means "no layer needed". LayoutError if nothing would remain.
    """
    dims = _distinct(torch_dims, layout.rank, "torch dim")
    axes = [torch_dim_to_ncnn_axis(d, layout) for d in dims if d != layout.batch_dim]
    if len(axes) >= ncnn_rank(layout):
        raise LayoutError(f"squeeze{tuple(torch_dims)} on {layout.describe()} leaves ncnn rank 0")
    return axes


def expanded_layout(torch_dims: Sequence[int], layout: TorchLayout) -> TorchLayout:
    """The layout after numpy-style ``expand_dims(torch_dims)`` (torch ``unsqueeze`` for one dim).

    ``torch_dims`` are positions in the *output* rank; the batch keeps its place among the old dims, so a
    new dim inserted before it moves it right.
    """
    out_rank = layout.rank + len(torch_dims)
    new = set(_distinct(torch_dims, out_rank, "unsqueeze dim"))
    old_positions = [p for p in range(out_rank) if p not in new]
    b = layout.batch_dim
    return TorchLayout(out_rank, None if b is None else old_positions[b])


def expanddims_axes(torch_dims: Sequence[int], layout: TorchLayout) -> list[int]:
    """ExpandDims ``axes`` (output-rank positions) for ``unsqueeze(torch_dims)`` on a tensor of ``layout``.

    ``layout`` is the *input's*; the output's is :func:`expanded_layout`. LayoutError if the output's ncnn
    rank exceeds 4.
    """
    out = expanded_layout(torch_dims, layout)
    return [torch_dim_to_ncnn_axis(d, out) for d in torch_dims]


def tile_repeats(torch_repeats: Sequence[int], layout: TorchLayout) -> list[int]:
    """Tile ``repeats`` (numpy style, innermost last) for torch ``x.repeat(*torch_repeats)``.

    As in torch, ``torch_repeats`` has at least ``layout.rank`` entries, right-aligned with the dims (extra
    entries add leading dims). The batch entry must be 1 and is removed (pnnx drops any value with a
    warning; here a batch repeat is an error). Every entry must be ≥ 1; the output ncnn rank ≤ 4. ncnn's Tile
    grows a 1-D or 2-D blob numpy-style but a 3-D one as (c, 1, h, w), so 3-D → 4-D raises.
    """
    reps = [operator.index(r) for r in torch_repeats]
    if len(reps) < layout.rank:
        raise LayoutError(f"repeat{tuple(reps)} has fewer entries than {layout.describe()}")
    if any(r < 1 for r in reps):
        raise LayoutError(f"repeat{tuple(reps)}: ncnn Tile needs every repeat ≥ 1")
    b = layout.batch_dim
    if b is not None:
        at = len(reps) - layout.rank + b
        if reps[at] != 1:
            raise LayoutError(f"repeat{tuple(reps)} repeats the batch dim {b} ({layout.describe()})")
        del reps[at]
    if len(reps) > MAX_NCNN_RANK:
        raise LayoutError(f"repeat{tuple(torch_repeats)} gives ncnn rank {len(reps)}; ncnn supports 1..4")
    if ncnn_rank(layout) == 3 and len(reps) == 4:  # ncnn 1.0.20261020 widens (c,h,w) to (c,1,h,w)
        raise LayoutError(f"repeat{tuple(torch_repeats)}: ncnn Tile cannot add a leading dim to a 3-D blob")
    return reps


def crop_params(
    torch_dims: Sequence[int],
    starts: Sequence[int | None],
    ends: Sequence[int | None],
    layout: TorchLayout,
) -> dict[str, list[int]]:
    """Crop ``starts``, ``ends``, ``axes`` (numpy style) for ``x[..., start:end, ...]`` along ``torch_dims``.

    A ``None`` start is 0; a ``None`` end (or one ≥ INT32_MAX, as traced torch writes it) is -233, "to the
    end". Negative starts and ends keep torch's meaning. An end of 0 is rejected: ncnn reads ``end ≤ 0``
    as counting from the end, so ``0`` would mean "to the end", not "empty". Slicing the batch dim raises
    (pnnx drops it with a warning).
    """
    if not len(torch_dims) == len(starts) == len(ends):
        raise LayoutError(f"crop: {len(torch_dims)} dims, {len(starts)} starts and {len(ends)} ends differ")
    axes = [torch_dim_to_ncnn_axis(d, layout) for d in torch_dims]
    if len(set(axes)) != len(axes):
        raise LayoutError(f"crop dims {tuple(torch_dims)} name the same dim twice ({layout.describe()})")
    out_starts = [0 if s is None else operator.index(s) for s in starts]
    out_ends: list[int] = []
    for d, e in zip(torch_dims, ends, strict=True):
        if e is None or e >= INT32_MAX:
            out_ends.append(ABSENT)
        elif e == 0:
            raise LayoutError(f"crop end 0 on torch dim {d}: ncnn would read it as 'to the end'")
        else:
            out_ends.append(operator.index(e))
    return {"starts": out_starts, "ends": out_ends, "axes": axes}
