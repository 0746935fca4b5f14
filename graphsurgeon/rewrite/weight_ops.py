"""The ``weight`` rule action's model and work: replace or transform one weight slot of a matched layer.

A rule writes ``{weight: {slot, from, checkpoint, transforms, scale, storage}}`` (``WeightOp`` below, the
rule-file model with its transforms; ``rewrite.actions.weights`` wraps it as an action kind and calls
``apply_weight_op``, so this module never imports the actions).
Applied to one matched layer, in this order:

1. **Slot.** ``slot`` must be one the layer's params load, per the catalog (``active_weights`` for the
   layer's *current* params, so an earlier ``set`` that resizes the layer is seen). Only float slots can be
   written: tagged (load type 0) and raw fp32 (type 1); raw-byte loads (block-quantized types 3/4/6/8)
   cannot.
2. **Source.** With ``from``, a checkpoint tensor: the name is a per-match template
   (``rewrite.match_template``: the named groups of the selector's ``name`` regex, e.g. ``name:
   'fc(?P<i>\\d+)'`` and ``from: "model.layers.{i}.weight"``, pattern captures, ``match``, variables), read
   from checkpoint ``checkpoint`` — or from the only
   checkpoint the rule file declares. Its dtype must be fp32, fp16 or bf16 (widened to float32). Without
   ``from``, the slot's current data (the model must have been given with ``--bin``, or an earlier weight
   action set it), in its own shape: the load shape the .bin walk recorded (flat for InnerProduct
   ``weight``, ``[N, K]`` for a Gemm ``B`` with transB=1), decoded to float32 — int8 and raw-byte data are
   refused.
3. **Transforms**, in order, as ``graphsurgeon.transforms`` parses them: ``transpose``, ``reshape``,
   ``repeat_interleave`` (GQA; a tile is ``reshape`` to a leading axis of 1, then ``repeat_interleave``
   over it).
4. **Scale**: every element multiplied by ``scale`` (in float32).
5. **Count.** The result must have exactly the element count the slot loads; it is stored flat in C order
   (the slot's load shape is only a view of the same row-major data).
6. **Storage.** ``storage`` fp32 (the default), fp16 or bf16 for a tagged slot; a raw slot is fp32 only
   (leaving ``storage`` out, or ``fp32``) and anything else is an error.

**Lazy.** Nothing is read when the rule runs: the slot gets a ``Weight.lazy`` whose ``make`` reads the
tensor (or the current data), transforms and scales it when ``write_bin`` encodes it, and keeps nothing,
so writing holds one weight at a time (the source array and at most one transformed copy). Every check
that does not need the values runs eagerly, from metadata only — the safetensors header's shape and dtype,
the transforms' ``out_shape``, the catalog's slot size — so a bad rule fails when it runs, before anything
is written. Only an fp16/bf16 overflow, which depends on the values, is found at write time (by the
writer, naming layer, slot and offset).

**Errors** are ``WeightOpError`` (a ``GsurgError``: one line, exit 2) naming the layer and the slot, plus
what was wrong: the template and the captures the match had, the checkpoint and the closest tensor name,
the transform that did not fit and the shape it got, both counts and shapes.

``apply_weight_op`` returns the provenance line recorded in the ``*.gsurg.json`` sidecar, e.g.
``weight k_weight <- model.layers.3.self_attn.k_proj.weight | repeat_interleave(axis=0, n=2) as fp32``.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Discriminator, Field, Tag

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.safetensors import Checkpoint, storage_name
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.weights import Storage, Weight
from graphsurgeon.rewrite.match_template import TemplateError
from graphsurgeon.rewrite.rule_values import StorageName
from graphsurgeon.rewrite.strict import StrictModel
from graphsurgeon.schema.catalog import ActiveWeight
from graphsurgeon.transforms import Transform, TransformError, parse_transform


class TransposeSpec(StrictModel):
    transpose: list[int] | None = Field(description="the new order of the axes (null: a 2-D transpose)")


class ReshapeSpec(StrictModel):
    reshape: list[int] = Field(description="the new shape; one -1 is inferred")


class RepeatArgs(StrictModel):
    axis: int
    n: int = Field(ge=1)


class RepeatInterleaveSpec(StrictModel):
    repeat_interleave: RepeatArgs = Field(description="every slice along axis repeated n times in place")


class SliceArgs(StrictModel):
    axis: int
    start: int | None = None
    stop: int | None = None


class SliceSpec(StrictModel):
    slice: SliceArgs = Field(description="Python slice bounds along axis")


_TRANSFORM_KEYS = ("transpose", "reshape", "repeat_interleave", "slice")


def _transform_kind(value: Any) -> str | None:
    """Which transform an entry is: bare ``transpose``, or the one key of its mapping."""
    if value == "transpose":
        return "bare"
    if isinstance(value, dict):
        keys = [k for k in _TRANSFORM_KEYS if k in value]
        return keys[0] if len(keys) == 1 else None
    for key in _TRANSFORM_KEYS:
        if getattr(value, key, None) is not None or (key == "transpose" and isinstance(value, TransposeSpec)):
            return key
    return None


#: One step of a weight's transforms, as ``graphsurgeon.transforms`` applies them.
TransformItem = Annotated[
    Annotated[Literal["transpose"], Tag("bare")]
    | Annotated[TransposeSpec, Tag("transpose")]
    | Annotated[ReshapeSpec, Tag("reshape")]
    | Annotated[RepeatInterleaveSpec, Tag("repeat_interleave")]
    | Annotated[SliceSpec, Tag("slice")],
    Discriminator(_transform_kind),
]


def transform_dicts(items: list[TransformItem]) -> list[Any]:
    """The transforms in the plain form ``graphsurgeon.transforms.parse_transform`` reads."""
    return [item if isinstance(item, str) else item.model_dump() for item in items]


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
    transforms: list[TransformItem] = Field(
        default_factory=list, description="applied in order: transpose, reshape, repeat_interleave, slice"
    )
    scale: float | None = None
    storage: StorageName | None = None


#: Fills a per-match template (``ActionContext.render``): (template, where) -> text.
Render = Callable[[str, str], str]
_CHECKPOINT_DTYPES = {"F32", "F16", "BF16"}
#: Current data that decodes to meaningful float32 values (int8 and raw bytes do not).
_FLOAT_STORAGES = {
    Storage.FP32,
    Storage.FP16,
    Storage.BF16,
    Storage.FP32_SCALED,
    Storage.QUANT_TABLE,
    Storage.RAW,
}


class WeightOpError(GsurgError):
    """A weight action that cannot be applied to a matched layer; names the layer and the slot."""


def apply_weight_op(
    graph: Graph,
    layer: Layer,
    op: WeightOp,
    render: Render,
    checkpoints: Mapping[str, Checkpoint],
) -> str:
    """Give ``layer``'s slot ``op.slot`` a lazy weight per ``op`` (see the module docstring); returns the
    one-line provenance description."""
    where = f"layer {layer.name}, weight {op.slot}"
    aw = _active_slot(layer, op.slot, where)
    storage = _storage(aw, op.storage, where)
    transforms = _parse_transforms(transform_dicts(op.transforms), where)

    read: Callable[[], np.ndarray]
    if op.from_ is not None:
        label, ckpt = _checkpoint(op.checkpoint, checkpoints, where)
        templates = [op.from_] if isinstance(op.from_, str) else list(op.from_)
        names = [_tensor_name(t, render, where) for t in templates]
        shapes = [_tensor_shape(ckpt, label, n, t, where) for n, t in zip(names, templates, strict=True)]
        in_shape = _concat_shape(shapes, op.concat_axis, names, where)
        if len(names) == 1:
            read = functools.partial(ckpt.array, names[0])
        else:
            read = functools.partial(_concat_read, ckpt, names, op.concat_axis)
        joined = " + ".join(names)
        source = joined if len(checkpoints) == 1 else f"{label}:{joined}"
    else:
        current = layer.weights.get(op.slot)
        if current is None:
            raise WeightOpError(
                f"{where}: no current data to transform (name a checkpoint tensor with `from`, "
                "or give the model's .bin with --bin)"
            )
        if current.storage not in _FLOAT_STORAGES:
            raise WeightOpError(
                f"{where}: the current data is {current.storage.value}, not float data a transform can "
                "work on"
            )
        in_shape = current.shape
        read = current.numpy  # the previous Weight (a .bin view, or an earlier lazy action), not a copy
        source = f"current {current.storage.value} data"

    out_shape = _out_shape(in_shape, transforms, where)
    if math.prod(out_shape) != aw.count:
        raise WeightOpError(
            f"{where}: {source} {list(in_shape)}"
            + (f" gives {list(out_shape)} after its transforms" if transforms else "")
            + f", {math.prod(out_shape)} elements, but the params load {aw.count} elements "
            f"{list(aw.shape)}"
        )

    scale = None if op.scale is None else np.float32(op.scale)
    load_shape = aw.shape

    def make() -> np.ndarray:
        arr = read()
        for t in transforms:
            arr = t.apply(arr)
        if scale is not None:  # one fresh C-order array, whatever the layout of the transformed view
            arr = np.multiply(arr, scale, out=np.empty(arr.shape, dtype=np.float32), casting="unsafe")
        return np.ascontiguousarray(arr, dtype=np.float32).reshape(load_shape)

    layer.weights[op.slot] = Weight.lazy(make, shape=load_shape, load_type=aw.load_type, storage=storage)
    steps = f" {list(in_shape)}" if op.from_ is None else ""
    steps += "".join(f" | {t.describe()}" for t in transforms)
    steps += f" | scale {op.scale:g}" if op.scale is not None else ""
    return f"weight {op.slot} <- {source}{steps} as {storage.value}"


def _active_slot(layer: Layer, slot: str, where: str) -> ActiveWeight:
    spec = layer.spec
    if spec is None:
        raise WeightOpError(
            f"{where}: type {layer.type} is not in the catalog, so its weight slots are unknown"
        )
    try:
        actives = spec.active_weights(layer.env())
    except GsurgError as err:
        raise WeightOpError(f"{where}: cannot size the layer's weights from its params: {err}") from None
    for aw in actives:
        if aw.name == slot:
            return aw
    loaded = ", ".join(aw.name for aw in actives) or "none"
    other = {w.name for w in spec.weights}
    why = "its params do not load it" if slot in other else f"{layer.type} has no such slot"
    raise WeightOpError(f"{where}: {why} (slots loaded: {loaded})")


def _storage(aw: ActiveWeight, wanted: str | None, where: str) -> Storage:
    if aw.load_type == 0:
        return Storage(wanted or "fp32")
    if aw.load_type == 1:
        if wanted not in (None, "fp32"):
            raise WeightOpError(
                f"{where}: the slot is loaded raw (type 1), which is fp32 only; "
                f"storage {wanted} needs a tagged slot"
            )
        return Storage.RAW
    raise WeightOpError(
        f"{where}: the slot is loaded as raw bytes (type {aw.load_type}, block-quantized); "
        "weight actions write float data only"
    )


def _parse_transforms(items: list[Any], where: str) -> tuple[Transform, ...]:
    out = []
    for i, item in enumerate(items, 1):
        try:
            out.append(parse_transform(item))
        except TransformError as err:
            raise WeightOpError(f"{where}: transform {i}: {err}") from None
    return tuple(out)


def _out_shape(shape: tuple[int, ...], transforms: tuple[Transform, ...], where: str) -> tuple[int, ...]:
    for i, t in enumerate(transforms, 1):
        try:
            shape = t.out_shape(shape)
        except TransformError as err:
            raise WeightOpError(f"{where}: transform {i} ({t.describe()}) on {list(shape)}: {err}") from None
    return shape


def _checkpoint(
    wanted: str | None, checkpoints: Mapping[str, Checkpoint], where: str
) -> tuple[str, Checkpoint]:
    declared = ", ".join(sorted(checkpoints)) or "none"
    if wanted is not None:
        if wanted not in checkpoints:
            raise WeightOpError(
                f"{where}: checkpoint {wanted!r} is not declared in the rule file's checkpoints "
                f"(declared: {declared})"
            )
        return wanted, checkpoints[wanted]
    if len(checkpoints) != 1:
        why = "declares none" if not checkpoints else f"declares several ({declared}): name one"
        raise WeightOpError(f"{where}: `from` needs a checkpoint, and the rule file {why}")
    ((label, ckpt),) = checkpoints.items()
    return label, ckpt


def _tensor_name(template: str, render: Render, where: str) -> str:
    try:
        return render(template, f"{where}: tensor template")
    except TemplateError as err:
        raise WeightOpError(str(err)) from None


def _tensor_shape(ckpt: Checkpoint, label: str, name: str, template: str, where: str) -> tuple[int, ...]:
    info = ckpt.tensors.get(name)
    if info is None:
        close = difflib.get_close_matches(name, list(ckpt.tensors), n=1)
        filled = f" (from template {template!r})" if template != name else ""
        hint = f"; closest: {close[0]!r}" if close else ""
        raise WeightOpError(f"{where}: checkpoint {label} ({ckpt.path}) has no tensor {name!r}{filled}{hint}")
    if info.dtype not in _CHECKPOINT_DTYPES:
        raise WeightOpError(
            f"{where}: tensor {name!r} is {storage_name(info.dtype)}; weight actions read bf16, fp16 or fp32"
        )
    return info.shape


def _concat_shape(shapes: list[tuple[int, ...]], axis: int, names: list[str], where: str) -> tuple[int, ...]:
    """The shape of several tensors joined on ``axis`` (all other dims equal); one tensor is itself."""
    if len(shapes) == 1:
        return shapes[0]
    rank = len(shapes[0])
    if not -rank <= axis < rank or any(len(s) != rank for s in shapes):
        raise WeightOpError(
            f"{where}: cannot concatenate {names} of shapes {[list(s) for s in shapes]} on {axis}"
        )
    ax = axis % rank
    rest = {s[:ax] + s[ax + 1 :] for s in shapes}
    if len(rest) != 1:
        raise WeightOpError(
            f"{where}: {names} differ outside axis {axis} ({[list(s) for s in shapes]}): cannot concatenate"
        )
    total = sum(s[ax] for s in shapes)
    first = shapes[0]
    return (*first[:ax], total, *first[ax + 1 :])


def _concat_read(ckpt: Checkpoint, names: list[str], axis: int) -> np.ndarray:
    return np.concatenate([ckpt.array(n) for n in names], axis=axis)
