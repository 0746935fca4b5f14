"""The weight action kinds the registry lists: ``weight``, a wrapper of ``weight_ops``, and ``move_weight``.

``weight`` sets a slot from a checkpoint tensor or its own data, through transforms; its model and its work
are in ``rewrite.weight_ops``. ``move_weight`` carries a weight from one matched or inserted layer's slot to
another's, and is done here: as it is for the same load type, otherwise re-encoded exactly — or as its
declared ``storage`` — and refused when no exact conversion exists."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.weights import Storage, Weight
from graphsurgeon.rewrite.actions.base import ActionContext, ActionError, ActionModel, LayerAction
from graphsurgeon.rewrite.rule_values import StorageName
from graphsurgeon.rewrite.strict import StrictModel
from graphsurgeon.rewrite.weight_ops import WeightOp, apply_weight_op


class WeightAction(LayerAction):
    key: ClassVar[str] = "weight"
    weight: WeightOp

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        if self.weight.storage is not None:  # a declared storage wins over the graph's storage policy
            ctx.pinned.add((id(target), self.weight.slot))
        return apply_weight_op(graph, target, self.weight, ctx.render, ctx.checkpoints)


class MoveWeight(StrictModel):
    from_: str = Field(
        alias="from",
        description="%capture.slot of a matched layer (%const.data), or %capture for every slot it holds",
    )
    to: str = Field(
        description="layer.slot receiving it (a capture, or a replaced-in layer's name: a per-match "
        "template), or a layer receiving every slot in the same slots"
    )
    storage: StorageName | None = None


class MoveWeightAction(ActionModel):
    key: ClassVar[str] = "move_weight"
    move_weight: MoveWeight

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        move = self.move_weight

        def layer_of(name: str, ref: str) -> Layer:
            if name not in ctx.layers:
                raise ActionError(f"move_weight: {ref!r} does not name a matched or inserted layer")
            return ctx.layers[name]

        src_ref = ctx.render(move.from_, "move_weight").lstrip("%")
        dst_ref = ctx.render(move.to, "move_weight").lstrip("%")
        whole = src_ref in ctx.layers and dst_ref in ctx.layers  # layer to layer: every slot
        if whole:
            src, dst = layer_of(src_ref, move.from_), layer_of(dst_ref, move.to)
            if not src.weights:
                raise ActionError(f"move_weight: layer {src.name} holds no weights (was the .bin given?)")
            return "; ".join(self._one(ctx, src, slot, dst, slot) for slot in list(src.weights))
        src_name, _, src_slot = src_ref.rpartition(".")
        dst_name, _, dst_slot = dst_ref.rpartition(".")
        return self._one(ctx, layer_of(src_name, move.from_), src_slot, layer_of(dst_name, move.to), dst_slot)

    def _one(self, ctx: ActionContext, src: Layer, src_slot: str, dst: Layer, dst_slot: str) -> str:
        move = self.move_weight
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
        where = f"move_weight {src.name}.{src_slot} -> {dst.name}.{dst_slot}"
        storage = _target_storage(weight, slot.load_type, move.storage, where)
        if storage is None:  # the same load type and no declared storage: the record moves as it is
            dst.weights[dst_slot] = weight
            return f"weight {dst_slot} <- {src.name}.{src_slot}"
        if move.storage is not None:
            ctx.pinned.add((id(dst), dst_slot))
        values = weight.numpy
        dst.weights[dst_slot] = Weight.lazy(
            lambda: values().astype("float32").reshape(-1),
            shape=slot.shape,
            load_type=slot.load_type,
            storage=storage,
        )
        return f"weight {dst_slot} <- {src.name}.{src_slot} as {storage.value}"


#: Storages whose values decode to float32 exactly as the layer would see them.
_FLOAT = {
    Storage.FP32: Storage.FP32,
    Storage.RAW: Storage.FP32,
    Storage.FP16: Storage.FP16,
    Storage.BF16: Storage.BF16,
}


def _target_storage(weight: Weight, load_type: int, declared: str | None, where: str) -> Storage | None:
    """How a moved weight is stored in a slot of ``load_type``: None to move the record as it is, else the
    storage to re-encode it in. A declared ``storage`` must suit the slot; without one, a tagged slot keeps
    the source's precision and a raw slot takes fp32 (exact for fp16 and bf16 data). Anything else (int8,
    quantization tables, raw bytes into a float slot) is refused rather than converted silently."""
    if declared is not None:
        wanted = Storage(declared)
        if load_type == 1 and wanted is not Storage.FP32:
            raise ActionError(f"{where}: the slot is loaded raw (type 1), which is fp32 only, not {declared}")
        if load_type not in (0, 1):
            raise ActionError(
                f"{where}: the slot loads raw bytes (type {load_type}); storage {declared} does not apply"
            )
        if weight.storage not in _FLOAT:
            raise ActionError(f"{where}: the source is {weight.storage.value}, not float data to convert")
        return Storage.RAW if load_type == 1 else wanted
    if load_type == weight.load_type:
        return None
    if weight.storage not in _FLOAT or load_type not in (0, 1):
        raise ActionError(
            f"{where}: the source is {weight.storage.value} (load type {weight.load_type}) and the slot "
            f"loads type {load_type}; there is no exact conversion"
        )
    return Storage.RAW if load_type == 1 else _FLOAT[weight.storage]
