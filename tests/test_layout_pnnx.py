"""graphsurgeon.layout against pnnx's own conversions: the independent oracle.

Tiny torch modules are exported with ``pnnx.export`` (one export per module, several ops per module, each op
a separate graph output). pnnx names the graph outputs ``out0, out1, …`` in return order, so the producer of
``out<k>`` in the exported ``.ncnn.param`` is the ncnn layer pnnx made for the k-th returned tensor. Each
layer's params, read by catalog name through gsurg's own reader, must equal what ``graphsurgeon.layout``
computes from the torch call alone.

Batch: pnnx gives a tensor batch dim 0 only when a known batch-first op touches it (``F.layer_norm`` here);
otherwise it is 233, "no batch". Modules marked ``pin`` start with a layer norm.

What pnnx 20261020 does that the docs do not spell out (layout.py follows pnnx where they differ):
- Axes are written non-negative: ``softmax(dim=-1)`` on a batch-0 ``[1,C,H,W]`` is ``Softmax 0=2 1=1``, not
  the ``0=-1`` of the §4.2 example. ``torch_dim_to_ncnn_axis`` returns the same non-negative axis.
- A static export resolves ``-1`` in ``view``/``reshape``: ``reshape(1,-1,6)`` becomes ``Reshape 0=6 1=8``.
  With a second trace shape pnnx writes an expression (``6="12,0h"``), never ``-1``; see the dynamic module.
- An op along the batch dim is lossy in pnnx and an error in layout: ``cat(dim=0)`` → ``Concat 0=-233``;
  ``softmax(dim=0)`` → ``Softmax 1=1`` with no axis (ncnn's default axis 0, silently wrong); ``repeat`` and
  ``x[a:b]`` on the batch drop the batch entry with a warning. ``squeeze(0)`` of the batch emits no layer
  (layout: no axes); ``unsqueeze(0)`` before the batch writes ``ExpandDims axes=0`` (layout agrees).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pnnx = pytest.importorskip("pnnx")
F = torch.nn.functional
Module: Any = torch.nn.Module

from graphsurgeon.formats.param_text import read_param_text  # noqa: E402
from graphsurgeon.ir.graph import Graph, Layer  # noqa: E402
from graphsurgeon.layout import (  # noqa: E402
    ABSENT,
    LayoutError,
    TorchLayout,
    crop_params,
    expanddims_axes,
    expanded_layout,
    memorydata_params,
    ncnn_axis_to_torch_dim,
    permute_order_type,
    reshape_params,
    squeeze_axes,
    tile_repeats,
    torch_dim_to_ncnn_axis,
)

Tensor = Any  # torch.Tensor, imported lazily above
Expect = Callable[[TorchLayout], dict[str, Any]]


@dataclass(frozen=True)
class Case:
    """One torch op, the ncnn layer pnnx should make for it, and its params computed by layout."""

    id: str
    op: Callable[[Tensor], Tensor | tuple[Tensor, ...]]
    layer_type: str
    expect: Expect


def axis(d: int, key: str = "axis", **extra: Any) -> Expect:
    return lambda lay: {key: torch_dim_to_ncnn_axis(d, lay), **extra}


def reshape(*shape: int) -> Expect:
    """All four keys: absent ones must be absent (-233) in pnnx's layer too."""

    def expect(lay: TorchLayout) -> dict[str, Any]:
        out = TorchLayout(len(shape), None if lay.batch_dim is None else 0)
        return {"w": ABSENT, "h": ABSENT, "d": ABSENT, "c": ABSENT, **reshape_params(shape, out)}

    return expect


def permute(*perm: int) -> Expect:
    return lambda lay: {"order_type": permute_order_type(perm, lay)}


def crop(dims: Sequence[int], starts: Sequence[int | None], ends: Sequence[int | None]) -> Expect:
    return lambda lay: crop_params(dims, starts, ends, lay)


def unsqueeze(d: int) -> Expect:
    return lambda lay: {"axes": expanddims_axes([d], lay)}


def repeat(*reps: int) -> Expect:
    return lambda lay: {"repeats": tile_repeats(reps, lay)}


def unsqueeze_then_squeeze(d: int) -> Expect:
    return lambda lay: {"axes": squeeze_axes([d], expanded_layout([d], lay))}


MAX = 2**63 - 1  # what traced torch writes for an open slice end

# x is [1, 2, 4, 6] (torch dims B, C, H, W): the same ops with and without a pinned batch.
OPS_4D = [
    Case("cat-dim1", lambda x: torch.cat([x, x], dim=1), "Concat", axis(1)),
    Case("cat-dim2", lambda x: torch.cat([x, x * 2], dim=2), "Concat", axis(2)),
    Case("cat-dim-1", lambda x: torch.cat([x, x * 3], dim=-1), "Concat", axis(-1)),
    Case("split-dim-1", lambda x: torch.split(x, [2, 4], dim=-1), "Slice", axis(-1, slices=[2, 4])),
    Case("chunk-dim2", lambda x: torch.chunk(x, 2, dim=2), "Slice", axis(2, slices=[ABSENT, ABSENT])),
    Case("softmax-dim-1", lambda x: torch.softmax(x, dim=-1), "Softmax", axis(-1, fixbug0=1)),
    Case("softmax-dim1", lambda x: torch.softmax(x, dim=1), "Softmax", axis(1, fixbug0=1)),
    Case("permute-0213", lambda x: x.permute(0, 2, 1, 3), "Permute", permute(0, 2, 1, 3)),
    Case("permute-0312", lambda x: x.permute(0, 3, 1, 2), "Permute", permute(0, 3, 1, 2)),
    Case("view-1-4-12", lambda x: x.view(1, 4, 12), "Reshape", reshape(1, 4, 12)),
    # pnnx resolves the -1 of a static export: reshape(1, -1, 6) is written as view(1, 8, 6)
    Case("reshape-minus1", lambda x: x.reshape(1, -1, 6), "Reshape", reshape(1, 8, 6)),
    Case("crop-dim2", lambda x: x[:, :, 1:3], "Crop", crop([2], [1], [3])),
    Case("crop-dims1-3", lambda x: x[:, 1:, :, 2:-1], "Crop", crop([1, 3], [1, 2], [MAX, -1])),
    Case("repeat", lambda x: x.repeat(1, 1, 2, 3), "Tile", repeat(1, 1, 2, 3)),
]
# Only without the batch: a permutation that moves dim 0 (with a batch, pnnx cannot move it either).
OPS_4D_FREE = [*OPS_4D, Case("permute-3210", lambda x: x.permute(3, 2, 1, 0), "Permute", permute(3, 2, 1, 0))]
# Only with the batch: without it the unsqueezed tensor is 5-D for ncnn. pnnx still writes ExpandDims
# axes=2 there (a blob ncnn cannot make); layout raises LayoutError ("ncnn rank 5").
OPS_4D_BATCH = [
    *OPS_4D,
    Case("unsqueeze2", lambda x: x.unsqueeze(2), "ExpandDims", unsqueeze(2)),
    Case("squeeze2", lambda x: x.unsqueeze(2).squeeze(2), "Squeeze", unsqueeze_then_squeeze(2)),
]

# z is [1, 2, 3, 4, 5] with batch 0: ncnn rank 4 (c, d, h, w)
OPS_5D = [
    Case("permute-04231", lambda z: z.permute(0, 4, 2, 3, 1), "Permute", permute(0, 4, 2, 3, 1)),
    Case("permute-01243", lambda z: z.permute(0, 1, 2, 4, 3), "Permute", permute(0, 1, 2, 4, 3)),
    Case("reshape-1-6-20", lambda z: z.reshape(1, 6, 20), "Reshape", reshape(1, 6, 20)),
    Case("cat-dim-2", lambda z: torch.cat([z, z], dim=-2), "Concat", axis(-2)),
    Case("softmax-dim2", lambda z: torch.softmax(z, dim=2), "Softmax", axis(2, fixbug0=1)),
    Case("split-dim1", lambda z: torch.split(z, [1, 1], dim=1), "Slice", axis(1, slices=[1, 1])),
    Case("crop-dim3", lambda z: z[:, :, :, -3:-1], "Crop", crop([3], [-3], [-1])),
]

# y is [3, 4, 5] without batch (ncnn 3-D c, h, w)
OPS_3D_FREE = [
    Case("permute-201", lambda y: y.permute(2, 0, 1), "Permute", permute(2, 0, 1)),
    Case("permute-102", lambda y: y.permute(1, 0, 2), "Permute", permute(1, 0, 2)),
    Case("crop-neg-start", lambda y: y[1:, :, -3:], "Crop", crop([0, 2], [1, -3], [MAX, MAX])),
    Case("view-12-5", lambda y: y.view(12, 5), "Reshape", reshape(12, 5)),
    Case("softmax-dim0", lambda y: torch.softmax(y, dim=0), "Softmax", axis(0)),
    Case("cat-dim0", lambda y: torch.cat([y, y], dim=0), "Concat", axis(0)),
    Case("unsqueeze0", lambda y: y.unsqueeze(0), "ExpandDims", unsqueeze(0)),
]

# v is [1, 6, 8] with batch 0: attention-shaped head split and merge
OPS_3D_BATCH = [
    Case("view-heads", lambda v: v.view(1, 6, 2, 4), "Reshape", reshape(1, 6, 2, 4)),
    Case(
        "heads-permute",
        lambda v: (v * 2).view(1, 6, 2, 4).permute(0, 2, 1, 3),
        "Permute",
        lambda lay: {"order_type": permute_order_type((0, 2, 1, 3), TorchLayout(4, 0))},
    ),
    Case("transpose-12", lambda v: v.transpose(1, 2), "Permute", permute(0, 2, 1)),
    Case("split-dim-1", lambda v: torch.split(v, [3, 5], dim=-1), "Slice", axis(-1, slices=[3, 5])),
    Case("softmax-dim-1", lambda v: torch.softmax(v, dim=-1), "Softmax", axis(-1, fixbug0=1)),
    Case("unsqueeze-1", lambda v: v.unsqueeze(-1), "ExpandDims", unsqueeze(-1)),
]


class Ops(Module):
    """Every case applied to the input (after a layer norm when ``pin``), each result a graph output."""

    def __init__(self, cases: Sequence[Case], pin: bool) -> None:
        super().__init__()
        self.cases = list(cases)
        self.pin = pin

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        if self.pin:
            x = F.layer_norm(x, (x.shape[-1],))
        outs: list[Tensor] = []
        for case in self.cases:
            result = case.op(x)
            outs.extend(result if isinstance(result, tuple) else (result,))
        return tuple(outs)


MODULES: dict[str, tuple[Sequence[Case], tuple[int, ...], TorchLayout]] = {
    "4d-batch": (OPS_4D_BATCH, (1, 2, 4, 6), TorchLayout(4, 0)),
    "4d-free": (OPS_4D_FREE, (1, 2, 4, 6), TorchLayout(4, None)),
    "5d-batch": (OPS_5D, (1, 2, 3, 4, 5), TorchLayout(5, 0)),
    "3d-free": (OPS_3D_FREE, (3, 4, 5), TorchLayout(3, None)),
    "3d-batch": (OPS_3D_BATCH, (1, 6, 8), TorchLayout(3, 0)),
}


def export(
    module: Any, inputs: tuple[Any, ...], folder: Path, inputs2: tuple[Any, ...] | None = None
) -> Graph:
    """pnnx.export with fp32 weights; the .ncnn.param read back with gsurg's reader."""
    folder.mkdir(parents=True, exist_ok=True)
    pt = folder / "m.pt"
    if inputs2 is None:
        pnnx.export(module.eval(), str(pt), inputs, fp16=False)
    else:
        pnnx.export(module.eval(), str(pt), inputs, inputs2, fp16=False)
    param = folder / "m.ncnn.param"
    assert param.exists(), f"pnnx wrote no {param}"
    graph = read_param_text(param)
    leaked = [layer.type for layer in graph if "." in layer.type]
    assert not leaked, f"pnnx left unconverted ops: {leaked}"
    return graph


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Graph]:
    root = tmp_path_factory.mktemp("pnnx")
    torch.manual_seed(0)
    graphs = {}
    for key, (cases, shape, layout) in MODULES.items():
        module = Ops(cases, pin=layout.batch_dim is not None)
        graphs[key] = export(module, (torch.rand(*shape),), root / key)
    return graphs


def producer(graph: Graph, blob: str) -> Layer:
    """The layer that makes ``blob``, looking through the Splits pnnx inserts for fan-out."""
    layer = graph.blob(blob).producer
    while layer is not None and layer.type == "Split":
        layer = layer.inputs[0].producer
    assert layer is not None, f"{blob} has no producer"
    return layer


def output_layers(graph: Graph, cases: Sequence[Case]) -> dict[str, Layer]:
    """The producer of each case's first output (``out<k>`` in return order)."""
    found: dict[str, Layer] = {}
    k = 0
    for case in cases:
        found[case.id] = producer(graph, f"out{k}")
        k += 2 if case.layer_type == "Slice" else 1
    return found


def plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


CASES = [(key, case) for key, (cases, _, _) in MODULES.items() for case in cases]


@pytest.mark.parametrize(("key", "case"), CASES, ids=[f"{key}-{case.id}" for key, case in CASES])
def test_layout_matches_pnnx(exported: dict[str, Graph], key: str, case: Case) -> None:
    cases, _, layout = MODULES[key]
    layer = output_layers(exported[key], cases)[case.id]
    assert layer.type == case.layer_type, f"pnnx made {layer} for {case.id}"
    expected = case.expect(layout)
    got = {name: plain(layer.get(name)) for name in expected}
    assert got == expected, f"{key} {case.id}: pnnx {got}, layout {expected}"


# ---- constants (MemoryData) and the batch dim itself ------------------------------------------------------
class Constants(Module):
    """A batch-0 constant [1,2,4,6] added to x and a batch-free constant [4,3] as a matmul LHS."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.rand(1, 2, 4, 6))
        self.lhs = torch.nn.Parameter(torch.rand(5, 4))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = F.layer_norm(x, (6,))
        return x + self.bias, torch.matmul(self.lhs, x)


class BatchOps(Module):
    """Ops along the batch dim of a batch-0 [1,2,4,6]: pnnx writes lossy layers, layout raises."""

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        x = F.layer_norm(x, (6,))
        return (
            torch.cat([x, x], dim=0),
            torch.softmax(x, dim=0),
            x.squeeze(0) * 2,
            x.unsqueeze(0),
            x.repeat(2, 1, 2, 3),
            x[0:1, :, :, 1:4],
        )


def test_memorydata_matches_pnnx(tmp_path: Path) -> None:
    graph = export(Constants(), (torch.rand(1, 2, 4, 6),), tmp_path)
    found = sorted(
        tuple(layer.get(k) for k in ("w", "h", "d", "c")) for layer in graph if layer.type == "MemoryData"
    )
    bias = memorydata_params((1, 2, 4, 6), TorchLayout(4, 0))  # pnnx drops a batch entry of size 1
    lhs = memorydata_params((5, 4))
    expected = sorted(tuple(p.get(k, 0) for k in ("w", "h", "d", "c")) for p in (bias, lhs))
    assert found == expected


def test_batch_dim_ops_pnnx_is_lossy_layout_raises(tmp_path: Path) -> None:
    graph = export(BatchOps(), (torch.rand(1, 2, 4, 6),), tmp_path)
    lay = TorchLayout(4, 0)
    cat, softmax, squeezed, unsqueezed, tile, crop_ = (producer(graph, f"out{k}") for k in range(6))

    assert (cat.type, cat.get("axis")) == ("Concat", ABSENT)  # pnnx: Concat 0=-233
    with pytest.raises(LayoutError, match="batch"):
        torch_dim_to_ncnn_axis(0, lay)

    # pnnx writes no axis, so ncnn uses axis 0 = torch dim 1: a softmax over C instead of the batch
    assert softmax.type == "Softmax" and 0 not in softmax.params
    assert ncnn_axis_to_torch_dim(softmax.get("axis"), lay) == 1

    # squeezing the batch: nothing for ncnn to do, and pnnx emits no layer (x * 2 reads the layer norm)
    assert squeeze_axes([0], lay) == []
    assert squeezed.type == "BinaryOp" and producer(graph, squeezed.inputs[0].name).type == "LayerNorm"

    assert (unsqueezed.type, plain(unsqueezed.get("axes"))) == ("ExpandDims", expanddims_axes([0], lay))

    assert (tile.type, plain(tile.get("repeats"))) == ("Tile", [1, 2, 3])  # pnnx dropped the batch repeat 2
    with pytest.raises(LayoutError, match="batch"):
        tile_repeats([2, 1, 2, 3], lay)

    assert crop_.type == "Crop" and plain(crop_.get("axes")) == [2]  # pnnx dropped the batch slice
    with pytest.raises(LayoutError, match="batch"):
        crop_params([0, 3], [0, 1], [1, 4], lay)


class Dynamic(Module):
    """Exported with two trace shapes: the sequence length T is dynamic."""

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        x = F.layer_norm(x, (8,))
        return x.reshape(1, -1, 2, 4), torch.softmax(x, dim=-1), torch.cat([x, x * 2], dim=-2)


def test_dynamic_export(tmp_path: Path) -> None:
    graph = export(Dynamic(), (torch.rand(1, 3, 8),), tmp_path, (torch.rand(1, 5, 8),))
    lay = TorchLayout(3, 0)
    reshape_, softmax, cat = (producer(graph, f"out{k}") for k in range(3))
    # pnnx does not write view(1, -1, 2, 4) as Reshape 0=4 1=2 2=-1 but as an expression that copies the
    # input's h (the dynamic T); the fixed part still follows layout's reversal: w=4, h=2, then T.
    assert reshape_.type == "Reshape" and reshape_.get("w") == ABSENT
    fixed = reshape_params((1, -1, 2, 4), TorchLayout(4, 0))
    assert reshape_.get("shape_expr") == f"{fixed['w']},{fixed['h']},0h"
    assert softmax.get("axis") == torch_dim_to_ncnn_axis(-1, lay) == 1
    assert cat.get("axis") == torch_dim_to_ncnn_axis(-2, lay) == 0
