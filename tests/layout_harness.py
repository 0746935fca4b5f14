"""What test_layout_round_trips.py and test_layout_ncnn.py share: hypothesis strategies for torch
layouts (ncnn rank 1..4, the batch anywhere or none), torch shapes and arrays of them."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from graphsurgeon.layout import TorchLayout


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
