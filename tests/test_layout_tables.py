"""graphsurgeon.layout against hand-written tables (torch dim → ncnn axis, Reshape and Permute params,
Crop / ExpandDims / Squeeze / Tile) and an observed pnnx export, and the errors that name the dim and
rank."""

from __future__ import annotations

from typing import Any

import pytest

from graphsurgeon.errors import GsurgError
from graphsurgeon.layout import (
    ABSENT,
    LayoutError,
    TorchLayout,
    crop_params,
    expanddims_axes,
    expanded_layout,
    memorydata_params,
    ncnn_axis_to_torch_dim,
    ncnn_rank,
    permute_order_type,
    reshape_params,
    squeeze_axes,
    squeezed_layout,
    tile_repeats,
    torch_dim_to_ncnn_axis,
    torch_perm_from_order_type,
    torch_shape_from_memorydata,
    torch_shape_from_reshape,
)

# ---- b. hand-written tables and an observed pnnx export -----------------------------------------------
NO_BATCH = {r: TorchLayout(r, None) for r in (1, 2, 3, 4)}
BATCH0 = {r: TorchLayout(r, 0) for r in (2, 3, 4, 5)}

PERMUTE_TABLE = [
    ((1, 0), NO_BATCH[2], 1),
    ((0, 1), NO_BATCH[2], 0),
    ((0, 1, 2), NO_BATCH[3], 0),
    ((0, 2, 1), NO_BATCH[3], 1),
    ((1, 0, 2), NO_BATCH[3], 2),  # torch [C,H,W].permute(1,0,2) is Permute 0=2 ("w c h")
    ((1, 2, 0), NO_BATCH[3], 3),
    ((2, 0, 1), NO_BATCH[3], 4),
    ((2, 1, 0), NO_BATCH[3], 5),
    ((0, 1, 3, 2), NO_BATCH[4], 1),
    ((0, 2, 1, 3), NO_BATCH[4], 2),
    ((3, 2, 1, 0), NO_BATCH[4], 23),
    ((0, 2, 1, 3), BATCH0[4], 2),  # [B,T,H,D].permute(0,2,1,3) in the observed export: Permute(0=2)
    ((0, 2, 1), BATCH0[3], 1),  # the export's last Permute(0=1)
    ((0, 1, 2, 4, 3), BATCH0[5], 1),
]


@pytest.mark.parametrize(("perm", "layout", "order"), PERMUTE_TABLE)
def test_permute_table(perm: tuple[int, ...], layout: TorchLayout, order: int) -> None:
    assert permute_order_type(perm, layout) == order
    assert torch_perm_from_order_type(order, layout) == perm


T, H, D, K, N = 6, 4, 8, 5, 3
RESHAPE_TABLE = [
    ((T, H, D), NO_BATCH[3], {"w": D, "h": H, "c": T}),  # §5.4 view(T,H,D) → 0=D 1=H 2=T
    ((-1, H, D), NO_BATCH[3], {"w": D, "h": H, "c": -1}),  # … or 2=-1 for a dynamic T
    ((1, T, H * D), BATCH0[3], {"w": H * D, "h": T}),  # [1,T,H,D] → view(1,T,H*D) with batch: 2-D
    ((1, 6, 4, 4), BATCH0[4], {"w": 4, "h": 4, "c": 6}),  # the export's Reshape(0=4 1=4 2=6)
    ((1, 6, 16), BATCH0[3], {"w": 16, "h": 6}),  # … and Reshape(0=16 1=6)
    ((2, 3, 4, 5), NO_BATCH[4], {"w": 5, "h": 4, "d": 3, "c": 2}),
    ((7,), NO_BATCH[1], {"w": 7}),
]


@pytest.mark.parametrize(("shape", "layout", "params"), RESHAPE_TABLE)
def test_reshape_table(shape: tuple[int, ...], layout: TorchLayout, params: dict[str, int]) -> None:
    assert reshape_params(shape, layout) == params


def test_memorydata_table() -> None:
    assert memorydata_params((K, N)) == {"w": N, "h": K}  # torch [K,N] → 0=N 1=K (§4.1)
    assert memorydata_params((1, K, N), BATCH0[3]) == {"w": N, "h": K}
    assert torch_shape_from_memorydata({"w": N, "h": K, "c": 0, "d": 0, "load_type": 1}) == (K, N)


def test_axis_table() -> None:
    # §5.2: torch dim -1 keeps meaning "last": ncnn -1, positive form torch rank - 2 once the batch drops.
    assert torch_dim_to_ncnn_axis(-1, NO_BATCH[3]) == 2
    assert torch_dim_to_ncnn_axis(-1, BATCH0[4]) == 2 == BATCH0[4].rank - 2
    assert ncnn_axis_to_torch_dim(-1, BATCH0[4]) == 3
    for k in range(1, 4):  # dim k ≥ 1 with a batch → k - 1
        assert torch_dim_to_ncnn_axis(k, BATCH0[4]) == k - 1
    # the observed export: split(dim=-1) → Slice 1=1; cat(dim=-1) → Concat 0=1; softmax(-1) → 0=1
    assert torch_dim_to_ncnn_axis(-1, BATCH0[3]) == 1
    assert torch_dim_to_ncnn_axis(1, TorchLayout(3, 2)) == 1  # a batch after the dim shifts nothing
    assert torch_dim_to_ncnn_axis(2, TorchLayout(3, 1)) == 1


def test_crop_expand_squeeze_tile_table() -> None:
    # x[:, :, 1:3] on [1,C,H,W] with batch → Crop starts 1, ends 3, axes 1
    assert crop_params([2], [1], [3], BATCH0[4]) == {"starts": [1], "ends": [3], "axes": [1]}
    assert crop_params([-1, 1], [None, -3], [-1, None], NO_BATCH[3]) == {
        "starts": [0, -3],
        "ends": [-1, ABSENT],
        "axes": [2, 1],
    }
    assert crop_params([1], [2], [2**63 - 1], BATCH0[3])["ends"] == [ABSENT]  # traced "to the end"
    assert expanddims_axes([2], BATCH0[4]) == [1]  # unsqueeze(2) on [1,C,H,W] → ExpandDims axes 1
    assert expanddims_axes([-1], BATCH0[4]) == [3]
    assert expanddims_axes([0], BATCH0[3]) == [0]  # before the batch: the batch moves to dim 1
    assert expanded_layout([0], BATCH0[3]) == TorchLayout(4, 1)
    assert squeeze_axes([2], BATCH0[5]) == [1]
    assert squeeze_axes([0], BATCH0[4]) == []  # squeezing the batch is a no-op (pnnx emits nothing)
    assert squeezed_layout([0], BATCH0[4]) == NO_BATCH[3]
    assert tile_repeats([1, 1, 2, 3], BATCH0[4]) == [1, 2, 3]
    assert tile_repeats([2, 1, 3], NO_BATCH[2]) == [2, 1, 3]  # extra leading entries add dims


ERRORS: list[tuple[Any, str]] = [
    (lambda: ncnn_rank(TorchLayout(5, None)), "rank 5"),
    (lambda: ncnn_rank(TorchLayout(6, 0)), "ncnn rank 5"),
    (lambda: ncnn_rank(TorchLayout(1, 0)), "ncnn rank 0"),
    (lambda: TorchLayout(3, 3), "batch dim 3"),
    (lambda: TorchLayout(0, None), "rank 0"),
    (lambda: torch_dim_to_ncnn_axis(0, BATCH0[4]), "torch dim 0 is the batch"),
    (lambda: torch_dim_to_ncnn_axis(-4, BATCH0[4]), "torch dim -4 is the batch"),
    (lambda: torch_dim_to_ncnn_axis(4, BATCH0[4]), "torch dim 4 is out of range for rank 4"),
    (lambda: ncnn_axis_to_torch_dim(ABSENT, BATCH0[4]), "ncnn axis -233"),
    (lambda: reshape_params((-1, 2, -1), NO_BATCH[3]), "at most once"),
    (lambda: reshape_params((2, 0), NO_BATCH[2]), "got 0"),
    (lambda: reshape_params((2, 3, 4), BATCH0[3]), "batch entry 2"),
    (lambda: reshape_params((2, 3), BATCH0[3]), "rank 3"),
    (lambda: torch_shape_from_reshape({"w": 3, "c": 2}, NO_BATCH[2]), "do not form a rank"),
    (lambda: torch_shape_from_reshape({"w": 3, "h": 0}, NO_BATCH[2]), "0 copies"),
    (lambda: torch_shape_from_reshape({"w": -1, "h": -1}, NO_BATCH[2]), "at most once"),
    (lambda: torch_shape_from_reshape({"w": 3, "h": 2}, NO_BATCH[3]), "ncnn rank 2"),
    (lambda: memorydata_params((3, 4), BATCH0[2]), "batch entry"),
    (lambda: permute_order_type((1, 0, 2), BATCH0[3]), "moves the batch dim 0"),
    (lambda: permute_order_type((0, 0, 1), NO_BATCH[3]), "not a permutation"),
    (lambda: permute_order_type((1, 0), NO_BATCH[3]), "2 dims"),
    (lambda: torch_perm_from_order_type(6, BATCH0[4]), "order_type 6"),
    (lambda: squeeze_axes([1, 1], NO_BATCH[3]), "same dim twice"),
    (lambda: squeeze_axes([0, 1], NO_BATCH[2]), "ncnn rank 0"),
    (lambda: expanddims_axes([0], NO_BATCH[4]), "ncnn rank 5"),
    (lambda: tile_repeats([2, 1, 1], BATCH0[3]), "batch dim 0"),
    (lambda: tile_repeats([2, 1], BATCH0[3]), "fewer entries"),
    (lambda: tile_repeats([0, 1], NO_BATCH[2]), "≥ 1"),
    (lambda: tile_repeats([2, 1, 1, 1, 1], NO_BATCH[1]), "ncnn rank 5"),
    (lambda: tile_repeats([2, 1, 1, 1], NO_BATCH[3]), "3-D blob"),
    (lambda: crop_params([0], [0], [2], BATCH0[3]), "batch"),
    (lambda: crop_params([1], [0], [0], BATCH0[3]), "end 0"),
]


@pytest.mark.parametrize(("call", "message"), ERRORS)
def test_errors_name_the_dim_and_rank(call: Any, message: str) -> None:
    with pytest.raises(LayoutError, match=message) as info:
        call()
    assert isinstance(info.value, GsurgError)
