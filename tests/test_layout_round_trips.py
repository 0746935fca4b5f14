"""graphsurgeon.layout, round trips (hypothesis): torch → ncnn → torch for axes, Reshape / MemoryData
params and permutations, over ncnn ranks 1..4 and every batch position (or none); unsqueeze / squeeze
and Tile repeats."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsurgeon.layout import (
    SHAPE_KEYS,
    LayoutError,
    TorchLayout,
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
from tests.layout_harness import layouts, non_batch_dim, torch_shapes

PROPS = settings(deadline=None, max_examples=200)


# ---- a. round trips ------------------------------------------------------------------------------------
@PROPS
@given(st.data())
def test_axis_round_trip(data: st.DataObject) -> None:
    layout = data.draw(layouts())
    n = ncnn_rank(layout)
    dim = non_batch_dim(data, layout)
    axis = torch_dim_to_ncnn_axis(dim, layout)
    assert 0 <= axis < n
    assert ncnn_axis_to_torch_dim(axis, layout) == dim % layout.rank
    assert ncnn_axis_to_torch_dim(axis - n, layout) == dim % layout.rank  # ncnn negatives: the ncnn rank
    if layout.batch_dim is not None:
        with pytest.raises(LayoutError, match="batch"):
            torch_dim_to_ncnn_axis(layout.batch_dim - layout.rank, layout)


@PROPS
@given(st.data())
def test_reshape_and_memorydata_round_trip(data: st.DataObject) -> None:
    layout = data.draw(layouts())
    shape = list(data.draw(torch_shapes(layout, max_size=9)))
    params = memorydata_params(shape, layout)
    assert set(params) == set(SHAPE_KEYS[ncnn_rank(layout)])
    assert torch_shape_from_memorydata(params, layout) == tuple(shape)
    infer = data.draw(st.sampled_from([None, *range(layout.rank)]))
    if infer is not None:
        shape[infer] = -1
    params = reshape_params(shape, layout)
    assert set(params) == set(SHAPE_KEYS[ncnn_rank(layout)])
    assert params["w"] == shape[-1] or (layout.batch_dim == layout.rank - 1 and params["w"] == shape[-2])
    back = torch_shape_from_reshape({**params, "shape_expr": 0}, layout)
    expected = tuple(1 if i == layout.batch_dim else v for i, v in enumerate(shape))
    assert back == expected


@PROPS
@given(st.data())
def test_permute_round_trip(data: st.DataObject) -> None:
    layout = data.draw(layouts())
    n = ncnn_rank(layout)
    free = data.draw(st.permutations(range(n)))
    perm = [ncnn_axis_to_torch_dim(a, layout) for a in free]
    if layout.batch_dim is not None:
        perm.insert(layout.batch_dim, layout.batch_dim)
    order = permute_order_type(perm, layout)
    assert order == list(itertools.permutations(range(n))).index(tuple(free))
    assert torch_perm_from_order_type(order, layout) == tuple(perm)
    negative = [p - layout.rank for p in perm]  # torch accepts negative dims in permute
    assert permute_order_type(negative, layout) == order


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_order_types_are_a_bijection(n: int) -> None:
    layout = TorchLayout(n, None)
    perms = [torch_perm_from_order_type(k, layout) for k in range(math.factorial(n))]
    assert perms == sorted(itertools.permutations(range(n)))
    assert [permute_order_type(p, layout) for p in perms] == list(range(math.factorial(n)))


@PROPS
@given(st.data())
def test_unsqueeze_then_squeeze(data: st.DataObject) -> None:
    layout = data.draw(layouts(max_ncnn=3))
    dim = data.draw(st.integers(-layout.rank - 1, layout.rank))
    out = expanded_layout([dim], layout)
    axes = expanddims_axes([dim], layout)
    assert axes == squeeze_axes([dim], out)
    assert squeezed_layout([dim], out) == layout
    assert ncnn_rank(out) == ncnn_rank(layout) + 1


@PROPS
@given(st.data())
def test_tile_repeats_drop_the_batch(data: st.DataObject) -> None:
    layout = data.draw(layouts(max_ncnn=3))
    extra = data.draw(st.integers(0, 4 - ncnn_rank(layout)))
    reps = [data.draw(st.integers(1, 3)) for _ in range(layout.rank + extra)]
    if layout.batch_dim is not None:
        reps[extra + layout.batch_dim] = 1
    if ncnn_rank(layout) == 3 and extra:
        with pytest.raises(LayoutError, match="3-D"):
            tile_repeats(reps, layout)
        return
    out = tile_repeats(reps, layout)
    assert len(out) == ncnn_rank(layout) + extra
    assert math.prod(out) == math.prod(reps)
