"""Actions on a layer's params: ``set`` and ``unset`` by name (typed by the catalog), and
``axis_from_torch`` (an axis param computed from a PyTorch dim by ``graphsurgeon.layout``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.layout import TorchLayout, torch_dim_to_ncnn_axis
from graphsurgeon.rewrite.actions.base import ActionContext, LayerAction
from graphsurgeon.rewrite.rule_values import ParamValue
from graphsurgeon.rewrite.strict import StrictModel


class SetAction(LayerAction):
    key: ClassVar[str] = "set"
    set: dict[str, ParamValue] = Field(description="params by name, typed by the layer catalog")

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        for name, value in self.set.items():
            target.set(name, value)
        return "set " + ", ".join(f"{k}={v!r}" for k, v in self.set.items())


class UnsetAction(LayerAction):
    key: ClassVar[str] = "unset"
    unset: list[str] = Field(description="params by name, back to the catalog default (not written)")

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        for name in self.unset:
            target.unset(name)
        return "unset " + ", ".join(self.unset)


class AxisFromTorch(StrictModel):
    """Set an axis param from a PyTorch dim, converted by graphsurgeon.layout for the tensor's torch rank
    and batch dim (``batch: null`` when the tensor has none)."""

    param: str = "axis"
    dim: int
    rank: int = Field(ge=1, le=5)
    batch: int | None = 0


class AxisAction(LayerAction):
    key: ClassVar[str] = "axis_from_torch"
    axis_from_torch: AxisFromTorch

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        spec = self.axis_from_torch
        axis = torch_dim_to_ncnn_axis(spec.dim, TorchLayout(spec.rank, spec.batch))
        target.set(spec.param, axis)
        return f"{spec.param}={axis} from torch dim {spec.dim} (rank {spec.rank}, batch {spec.batch})"
