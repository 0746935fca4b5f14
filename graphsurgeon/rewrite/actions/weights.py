"""Actions on weights: ``weight`` (a slot from a checkpoint tensor or its own data, through transforms; see
``rewrite.weight_ops``) and ``move_weight`` (a weight carried from one matched or inserted layer's slot to
another's, converted to the receiving slot's load type)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.weights import Storage, Weight, default_storage
from graphsurgeon.rewrite.actions.base import ActionContext, ActionError, ActionModel, LayerAction
from graphsurgeon.rewrite.strict import StrictModel

StorageName = Literal["fp32", "fp16", "bf16"]


class WeightOp(StrictModel):
    """Replace or transform one weight slot of the matched layer. ``from`` names a checkpoint tensor; its
    ``{capture}`` fields are filled from the match (named groups of the ``name`` regex, pattern captures).
    Without ``from`` the slot's current data is transformed. Transforms apply in order; the result is
    stored as ``storage`` (default fp32 for tagged slots). Nothing is read until the .bin is written."""

    slot: str
    from_: str | list[str] | None = Field(
        default=None, alias="from", description="checkpoint tensor name template, or several to concatenate"
    )
    concat_axis: int = Field(
        default=0, description="with several `from` tensors: the axis they are joined on"
    )
    checkpoint: str | None = Field(default=None, description="entry of `checkpoints` (default: the only one)")
    transforms: list[Any] = Field(default_factory=list, description="transpose, reshape, repeat_interleave")
    scale: float | None = None
    storage: StorageName | None = None


class WeightAction(LayerAction):
    key: ClassVar[str] = "weight"
    weight: WeightOp

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        from graphsurgeon.rewrite.weight_ops import apply_weight_op  # weights are the heavier dependency

        return apply_weight_op(graph, target, self.weight, ctx.captures, ctx.checkpoints)


class MoveWeight(StrictModel):
    from_: str = Field(alias="from", description="%capture.slot of a matched layer, e.g. %const.data")
    to: str = Field(description="%capture.slot of the layer receiving it (a replaced-in layer's name works)")
    storage: StorageName | None = None


class MoveWeightAction(ActionModel):
    key: ClassVar[str] = "move_weight"
    move_weight: MoveWeight

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        move = self.move_weight

        def split(ref: str) -> tuple[Layer, str]:
            name, _, slot = ref.lstrip("%").rpartition(".")
            if name not in ctx.layers:
                raise ActionError(f"move_weight: {ref!r} does not name a matched or inserted layer")
            return ctx.layers[name], slot

        src, src_slot = split(move.from_)
        dst, dst_slot = split(move.to)
        weight = src.weights.get(src_slot)
        if weight is None:
            raise ActionError(
                f"move_weight: layer {src.name} has no weight {src_slot!r} (was the .bin given?)"
            )
        spec = dst.spec
        active = {a.name: a for a in spec.active_weights(dst.env())} if spec else {}
        if dst_slot not in active:
            raise ActionError(f"move_weight: layer {dst.name} loads no weight {dst_slot!r} with its params")
        slot = active[dst_slot]
        if slot.count != weight.count:
            raise ActionError(
                f"move_weight: {src.name}.{src_slot} has {weight.count} elements, "
                f"{dst.name}.{dst_slot} loads {slot.count}"
            )
        if slot.load_type == weight.load_type and move.storage is None:
            dst.weights[dst_slot] = weight
        else:
            storage = Storage(move.storage) if move.storage else default_storage(slot.load_type)
            values = weight.numpy
            dst.weights[dst_slot] = Weight.lazy(
                lambda: values().astype("float32").reshape(-1),
                shape=slot.shape,
                load_type=slot.load_type,
                storage=storage,
            )
        return f"weight {dst_slot} <- {src.name}.{src_slot}"
