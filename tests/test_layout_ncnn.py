"""graphsurgeon.layout with the ncnn wheel as the oracle: one-layer nets (Permute, Reshape, Slice,
Concat, Softmax, Crop, ExpandDims, Squeeze, Tile) built from what layout computes must equal numpy's
torch-semantics result (numpy transpose = permute, reshape = view, tile = repeat, …) with the batch dim
dropped."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import ncnn
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsurgeon.formats.emit_text import emit_param_text
from graphsurgeon.ir.graph import Graph
from graphsurgeon.layout import (
    ABSENT,
    TorchLayout,
    crop_params,
    drop_batch,
    expanddims_axes,
    expanded_layout,
    ncnn_rank,
    permute_order_type,
    reshape_params,
    squeeze_axes,
    tile_repeats,
    torch_dim_to_ncnn_axis,
    torch_perm_from_order_type,
)
from graphsurgeon.schema.catalog import load_catalog
from tests.layout_harness import layout_and_array, non_batch_dim

ORACLE = settings(deadline=None, max_examples=100)

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
