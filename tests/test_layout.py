"""graphsurgeon.layout: round trips (hypothesis), hand-written axis tables, and the ncnn wheel.

a. Round trips torch → ncnn → torch for axes, Reshape / MemoryData params and permutations, over ncnn ranks
   1..4 and every batch position (or none).
b. Agreement with hand-written tables (torch dim → ncnn axis, Reshape and Permute params) and an observed
   pnnx export.
c. The ncnn wheel as the oracle: one-layer nets (Permute, Reshape, Slice, Concat, Softmax, Crop,
   ExpandDims, Squeeze, Tile) built from what layout computes must equal numpy's torch-semantics result
   (numpy transpose = permute, reshape = view, tile = repeat, …) with the batch dim dropped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import ncnn
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.emit_text import emit_param_text
from graphsurgeon.ir.graph import Graph
from graphsurgeon.layout import (
    ABSENT,
    SHAPE_KEYS,
    LayoutError,
    TorchLayout,
    crop_params,
    drop_batch,
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
from graphsurgeon.schema.catalog import load_catalog

PROPS = settings(deadline=None, max_examples=200)
ORACLE = settings(deadline=None, max_examples=100)


# ---- strategies ----------------------------------------------------------------------------------------
@st.composite
def layouts(draw: st.DrawFn, min_ncnn: int = 1, max_ncnn: int = 4) -> TorchLayout:
    """Any torch layout whose ncnn rank is in [min_ncnn, max_ncnn]; the batch anywhere, or none."""
    n = draw(st.integers(min_ncnn, max_ncnn))
    if draw(st.booleans()):
        return TorchLayout(n + 1, draw(st.integers(0, n)))
    return TorchLayout(n, None)


def torch_shapes(layout: TorchLayout, max_size: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    """Torch shapes for ``layout``: the batch entry 1, the others 1..max_size."""
    sizes = [st.just(1) if i == layout.batch_dim else st.integers(1, max_size) for i in range(layout.rank)]
    return st.tuples(*sizes)


@st.composite
def layout_and_array(draw: st.DrawFn, min_ncnn: int = 1, max_ncnn: int = 4) -> tuple[TorchLayout, np.ndarray]:
    layout = draw(layouts(min_ncnn, max_ncnn))
    shape = draw(torch_shapes(layout))
    return layout, np.arange(math.prod(shape), dtype=np.float32).reshape(shape) - 7.0


def non_batch_dim(data: st.DataObject, layout: TorchLayout) -> int:
    """A torch dim that is not the batch, drawn in positive or negative form."""
    d = data.draw(st.sampled_from([i for i in range(layout.rank) if i != layout.batch_dim]))
    return d - layout.rank if data.draw(st.booleans()) else d


# ---- the ncnn wheel ------------------------------------------------------------------------------------
CATALOG = load_catalog()


def run_ncnn(
    layer_type: str, params: Mapping[str, Any], inputs: Sequence[np.ndarray], n_out: int = 1
) -> list[np.ndarray]:
    """Run one layer (params set by catalog name, emitted by gsurg) in the ncnn wheel with exact fp32."""
    graph = Graph(CATALOG)
    names = [f"in{i}" for i in range(len(inputs))]
    graph.add_layer("Input", "input", [], names)
    tops = [f"out{i}" for i in range(n_out)]
    layer = graph.add_layer(layer_type, "op", names, tops)
    for name, value in params.items():
        layer.set(name, value)
    net = ncnn.Net()
    opt = net.opt
    opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = opt.use_bf16_storage = False
    opt.use_packing_layout = False
    opt.num_threads = 1
    assert net.load_param_mem(emit_param_text(graph)) == 0
    assert net.load_model(ncnn.DataReaderFromEmpty()) == 0
    results = []
    with net.create_extractor() as ex:
        for name, arr in zip(names, inputs, strict=True):
            assert ex.input(name, ncnn.Mat(np.ascontiguousarray(arr, dtype=np.float32)).clone()) == 0
        for top in tops:
            ret, mat = ex.extract(top)
            assert ret == 0, f"{layer_type} {dict(params)}: extract {top} returned {ret}"
            results.append(np.array(mat))
    return results


def ncnn_view(torch_array: np.ndarray, layout: TorchLayout) -> np.ndarray:
    """What ncnn holds for a torch array: the batch dim (size 1) removed."""
    return torch_array.reshape(drop_batch(torch_array.shape, layout))


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


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


# ---- c. the ncnn wheel as the oracle ------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3, 4])
def test_ncnn_permute_every_order_type(n: int) -> None:
    """All 2 + 6 + 24 order types: ncnn's Permute equals numpy transpose of the permutation layout gives."""
    x = np.arange(math.prod(range(2, n + 2)), dtype=np.float32).reshape(range(2, n + 2))
    layout = TorchLayout(n, None)
    for order in range(math.factorial(n)):
        perm = torch_perm_from_order_type(order, layout)
        (got,) = run_ncnn("Permute", {"order_type": order}, [x])
        assert_same(got, x.transpose(perm))


@ORACLE
@given(layout_and_array(min_ncnn=2), st.data())
def test_ncnn_permute(case: tuple[TorchLayout, np.ndarray], data: st.DataObject) -> None:
    layout, x = case
    free = data.draw(st.permutations([i for i in range(layout.rank) if i != layout.batch_dim]))
    perm = list(free)
    if layout.batch_dim is not None:
        perm.insert(layout.batch_dim, layout.batch_dim)
    (got,) = run_ncnn("Permute", {"order_type": permute_order_type(perm, layout)}, [ncnn_view(x, layout)])
    assert_same(got, ncnn_view(x.transpose(perm), layout))


@st.composite
def reshapes(draw: st.DrawFn) -> tuple[TorchLayout, np.ndarray, TorchLayout, tuple[int, ...]]:
    """An input (layout, array) and an output (layout, torch shape with maybe one -1) of the same size."""
    factors = draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))

    def split(n: int) -> list[int]:
        groups = draw(st.lists(st.integers(0, n - 1), min_size=len(factors), max_size=len(factors)))
        return [math.prod(f for f, g in zip(factors, groups, strict=True) if g == i) for i in range(n)]

    def with_batch(dims: list[int]) -> tuple[TorchLayout, list[int]]:
        if draw(st.booleans()):
            b = draw(st.integers(0, len(dims)))
            return TorchLayout(len(dims) + 1, b), [*dims[:b], 1, *dims[b:]]
        return TorchLayout(len(dims), None), dims

    in_layout, in_shape = with_batch(split(draw(st.integers(1, 4))))
    out_layout, out_shape = with_batch(split(draw(st.integers(1, 4))))
    infer = draw(st.sampled_from([None, *range(len(out_shape))]))
    if infer is not None:
        out_shape[infer] = -1
    x = np.arange(math.prod(in_shape), dtype=np.float32).reshape(in_shape)
    return in_layout, x, out_layout, tuple(out_shape)


@ORACLE
@given(reshapes())
def test_ncnn_reshape(case: tuple[TorchLayout, np.ndarray, TorchLayout, tuple[int, ...]]) -> None:
    in_layout, x, out_layout, shape = case
    params = reshape_params(shape, out_layout)
    (got,) = run_ncnn("Reshape", params, [ncnn_view(x, in_layout)])
    assert_same(got, ncnn_view(x.reshape(shape), out_layout))


@ORACLE
@given(layout_and_array(), st.data())
def test_ncnn_slice_and_concat(case: tuple[TorchLayout, np.ndarray], data: st.DataObject) -> None:
    layout, x = case
    dim = non_batch_dim(data, layout)
    size = x.shape[dim]
    axis = torch_dim_to_ncnn_axis(dim, layout)
    cut = data.draw(st.integers(1, size - 1)) if size > 1 else None
    if cut is not None:  # torch.split(x, [cut, size - cut], dim)
        got = run_ncnn("Slice", {"slices": [cut, ABSENT], "axis": axis}, [ncnn_view(x, layout)], n_out=2)
        for g, want in zip(got, np.split(x, [cut], axis=dim), strict=True):
            assert_same(g, ncnn_view(want, layout))
    y = np.flip(x, axis=dim)[tuple(slice(0, 1) if i == dim % x.ndim else slice(None) for i in range(x.ndim))]
    (got_cat,) = run_ncnn("Concat", {"axis": axis}, [ncnn_view(x, layout), ncnn_view(y, layout)])
    assert_same(got_cat, ncnn_view(np.concatenate([x, y], axis=dim), layout))


@ORACLE
@given(layout_and_array(), st.data())
def test_ncnn_softmax(case: tuple[TorchLayout, np.ndarray], data: st.DataObject) -> None:
    layout, x = case
    x = x / 8.0
    dim = non_batch_dim(data, layout)
    (got,) = run_ncnn(
        "Softmax", {"axis": torch_dim_to_ncnn_axis(dim, layout), "fixbug0": 1}, [ncnn_view(x, layout)]
    )
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    np.testing.assert_allclose(got, ncnn_view(e / e.sum(axis=dim, keepdims=True), layout), rtol=1e-5)


@ORACLE
@given(layout_and_array(), st.data())
def test_ncnn_crop(case: tuple[TorchLayout, np.ndarray], data: st.DataObject) -> None:
    layout, x = case
    dims = data.draw(
        st.lists(
            st.sampled_from([i for i in range(layout.rank) if i != layout.batch_dim]),
            min_size=1,
            max_size=2,
            unique=True,
        )
    )
    starts: list[int | None] = []
    ends: list[int | None] = []
    index: list[slice] = [slice(None)] * x.ndim
    for d in dims:
        size = x.shape[d]
        start = data.draw(st.integers(0, size - 1))
        end = data.draw(st.integers(start + 1, size))
        # torch-style spellings of the same range: negative start, negative end, or None for "to the end"
        s: int | None = data.draw(st.sampled_from([start, start - size] + ([None] if start == 0 else [])))
        e: int | None = data.draw(st.sampled_from([end] + ([end - size] if end < size else [None])))
        starts.append(s)
        ends.append(e)
        index[d] = slice(s, e)
    params = crop_params(dims, starts, ends, layout)
    (got,) = run_ncnn("Crop", params, [ncnn_view(x, layout)])
    assert_same(got, ncnn_view(x[tuple(index)], layout))


@ORACLE
@given(layout_and_array(max_ncnn=3), st.data())
def test_ncnn_expanddims_and_squeeze(case: tuple[TorchLayout, np.ndarray], data: st.DataObject) -> None:
    layout, x = case
    dim = data.draw(st.integers(-x.ndim - 1, x.ndim))
    out_layout = expanded_layout([dim], layout)
    (got,) = run_ncnn("ExpandDims", {"axes": expanddims_axes([dim], layout)}, [ncnn_view(x, layout)])
    want = np.expand_dims(x, dim)
    assert_same(got, ncnn_view(want, out_layout))
    (back,) = run_ncnn("Squeeze", {"axes": squeeze_axes([dim], out_layout)}, [got])
    assert_same(back, ncnn_view(x, layout))


@ORACLE
@given(layout_and_array(max_ncnn=3), st.data())
def test_ncnn_tile(case: tuple[TorchLayout, np.ndarray], data: st.DataObject) -> None:
    layout, x = case
    extra = data.draw(st.integers(0, 4 - ncnn_rank(layout) if ncnn_rank(layout) < 3 else 0))
    reps = [data.draw(st.integers(1, 3)) for _ in range(x.ndim + extra)]
    if layout.batch_dim is not None:
        reps[extra + layout.batch_dim] = 1
    want = np.tile(x, reps)  # = torch x.repeat(*reps)
    out_layout = TorchLayout(want.ndim, None if layout.batch_dim is None else extra + layout.batch_dim)
    (got,) = run_ncnn("Tile", {"repeats": tile_repeats(reps, layout)}, [ncnn_view(x, layout)])
    assert_same(got, ncnn_view(want, out_layout))
