"""Block-quantize one layer's weight as the storage policy asks (``int8``/``int6``/``int4``).

The layer type's catalog entry says whether and how (``weight_quantize``: which float slot, which slot its
scales then take, which param selects the format, and the params under which ncnn accepts it); nothing here
knows a layer type. The new records are lazy: the codes and scales are computed when the .bin is written
(the scales once, kept for the scales record that follows), from the weight's values as the rules left
them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Layer
from graphsurgeon.ir.weights import Storage, Weight
from graphsurgeon.quant.blocks import AUTO_METHOD, BlockFormat, QuantMethod, quantize
from graphsurgeon.schema.catalog import WeightQuantizeSpec
from graphsurgeon.schema.expr import evaluate, evaluate_size

QUANT_BITS = {"int8": 8, "int6": 6, "int4": 4}
Method = Literal["auto", "minmax", "clip"]


class QuantizeError(GsurgError):
    """A weight the storage policy cannot quantize; names the layer and the weight."""


def quantizable(layer: Layer, slot: str) -> WeightQuantizeSpec | None:
    """The catalog's ``weight_quantize`` of ``layer`` when ``slot`` is the weight it can quantize and the
    layer's params allow it now, else None."""
    spec = layer.spec
    wq = spec.weight_quantize if spec is not None else None
    if wq is None or wq.weight != slot:
        return None
    return wq if evaluate(wq.when, layer.env()) else None


class _Source:
    """One weight's values and how to quantize them; computes the scales once and keeps them (they are
    ``1 / block_size`` of the values as float32), never the codes."""

    __slots__ = ("_scales", "fmt", "method", "values")

    def __init__(self, values: Callable[[], np.ndarray], fmt: BlockFormat, method: QuantMethod) -> None:
        self.values = values
        self.fmt = fmt
        self.method = method
        self._scales: np.ndarray | None = None

    def packed(self) -> np.ndarray:
        quantized = quantize(self.values(), self.fmt, self.method)
        self._scales = quantized.scales
        return quantized.packed

    def scales(self) -> np.ndarray:
        if self._scales is None:
            self.packed()
        assert self._scales is not None
        return self._scales


@dataclass(frozen=True)
class Precomputed:
    """A weight already quantized (``calibrated_quant``): loaders of its packed codes, block scales and,
    with the per-input-scale format, input scales; ``how`` says how it was made for the change line."""

    storage: str
    packed: Callable[[], np.ndarray]
    scales: Callable[[], np.ndarray]
    input_scales: Callable[[], np.ndarray] | None
    how: str
    compensated: bool = False  # codes chosen to cancel the output error (GPTQ), not nearest levels


def matrix_shape(layer: Layer, wq: WeightQuantizeSpec) -> tuple[int, int]:
    """The ``[rows, cols]`` of ``layer``'s quantizable weight, checked against the weight it holds."""
    env = layer.env()
    rows, cols = evaluate_size(wq.rows, env), evaluate_size(wq.cols, env)
    weight = layer.weights[wq.weight]
    if weight.storage not in (Storage.FP32, Storage.FP16, Storage.BF16) or weight.count != rows * cols:
        raise QuantizeError(
            f"layer {layer.name}, weight {wq.weight}: {weight.storage.value} {list(weight.shape)} is not a "
            f"float [{rows}, {cols}] matrix to block-quantize"
        )
    return rows, cols


def matrix_values(layer: Layer, wq: WeightQuantizeSpec) -> np.ndarray:
    """The float32 ``[rows, cols]`` values of ``layer``'s quantizable weight, as the rules left them."""
    rows, cols = matrix_shape(layer, wq)
    return np.asarray(layer.weights[wq.weight].numpy(), dtype=np.float32).reshape(rows, cols)


def quantize_layer_weight(
    layer: Layer,
    wq: WeightQuantizeSpec,
    storage: str,
    *,
    block: int,
    method: Method,
    precomputed: Precomputed | None = None,
) -> str:
    """Store ``layer``'s ``wq.weight`` block-quantized as ``storage`` (``int8``/``int6``/``int4``): set the
    format param, replace the weight by its packed codes and add the scales slot (and the input scales
    slot, for a ``precomputed`` result that has them). Returns the change line."""
    if precomputed is not None:
        storage = precomputed.storage
    fmt = BlockFormat(QUANT_BITS[storage], block)
    chosen: QuantMethod = AUTO_METHOD[fmt.bits] if method == "auto" else method
    rows, cols = matrix_shape(layer, wq)
    weight = layer.weights[wq.weight]
    old_storage = weight.storage.value

    def values() -> np.ndarray:
        return np.asarray(weight.numpy(), dtype=np.float32).reshape(rows, cols)

    if precomputed is None:
        source = _Source(values, fmt, chosen)
        make_packed, make_scales, make_inputs = source.packed, source.scales, None
        how: str = chosen
    else:
        make_packed, make_scales = precomputed.packed, precomputed.scales
        make_inputs = precomputed.input_scales
        how = precomputed.how
    term = fmt.quantize_term + (10 if make_inputs is not None else 0)
    layer.set(wq.term, term)
    active = {aw.name: aw for aw in layer.spec.active_weights(layer.env())} if layer.spec else {}
    packed_slot, scales_slot = active.get(wq.weight), active.get(wq.scales)
    inputs_slot = active.get(wq.input_scales) if wq.input_scales is not None else None
    if (
        packed_slot is None
        or scales_slot is None
        or packed_slot.load_type != fmt.bits
        or (make_inputs is not None and inputs_slot is None)
    ):
        raise QuantizeError(
            f"layer {layer.name}: the catalog's {layer.type} does not read {wq.weight} as {fmt.bits}-bit "
            f"codes and {wq.scales} after {wq.term}={term}"
        )
    packed = Weight.lazy(
        make_packed, shape=packed_slot.shape, load_type=packed_slot.load_type, storage=Storage.BYTES
    )
    packed.origin = weight
    packed.compensated = precomputed is not None and precomputed.compensated
    layer.weights[wq.weight] = packed
    layer.weights[wq.scales] = Weight.lazy(
        make_scales, shape=scales_slot.shape, load_type=scales_slot.load_type, storage=Storage.RAW
    )
    if make_inputs is not None and inputs_slot is not None and wq.input_scales is not None:
        layer.weights[wq.input_scales] = Weight.lazy(
            make_inputs, shape=inputs_slot.shape, load_type=inputs_slot.load_type, storage=Storage.RAW
        )
    return f"{layer.name}.{wq.weight}: {old_storage} -> {storage} (block {block}, {how}; {wq.term}={term})"
