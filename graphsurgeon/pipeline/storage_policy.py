"""A graph's storage policy (``storage: {default, rules}``): how its tagged weights are stored.

Applied after the graph's rules (and its calibration, ``calibrate``), before writing. For every tagged (load
type 0) weight slot: a weight a rule action gave an explicit ``storage`` is pinned and kept; a weight of a
layer the calibration found above its limit (``keep_fp32``) is stored fp32; otherwise the policy's
``default``, then each of its ``rules`` whose selector matches the layer (and whose ``slots``, if given,
name the slot) in order — the last wins. A weight already stored that way keeps its bytes; a float weight
stored otherwise is re-encoded (fp16 overflow is an error naming the layer, weight and offset when the .bin
is written). Int8, scaled and quantization-table weights are not float data to convert: the default leaves
them alone, and a rule that selects one explicitly is an error.

A quantized target (``int8``, ``int6``, ``int4``) block-quantizes the weight when the layer's catalog entry
allows it for its params now (``weight_quantize``: Gemm's constant ``B`` with ``transB=1``), per the
policy's ``block`` and ``method`` (``pipeline.quantize_weights``); every other weight it selects is stored
as the policy's ``unquantized`` float storage. Calibration's and the rules' choices come first, as above: a
layer calibration keeps fp32 is not quantized.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.weights import Storage, Weight
from graphsurgeon.pipeline.quantize_weights import QUANT_BITS, Precomputed, quantizable, quantize_layer_weight
from graphsurgeon.rewrite.sections import StoragePolicy
from graphsurgeon.rewrite.select import find
from graphsurgeon.schema.catalog import WeightQuantizeSpec

_CONVERTIBLE = {Storage.FP32, Storage.FP16, Storage.BF16}


class Precomputes(Protocol):
    """What quantized some weights ahead of the policy (``calibrated_quant.CalibratedQuant``)."""

    def outcome(self, layer: Layer) -> Precomputed | None:
        """The result for ``layer``'s quantizable weight, or None to quantize it here."""


class StoragePolicyError(GsurgError):
    """A storage rule that selects a weight it cannot convert; names the layer and the weight."""


@dataclass(frozen=True)
class Decision:
    """What the policy asks of one tagged weight before calibration's marks: the storage ``name`` and
    whether a storage rule chose it (``explicit``; else it is the policy's ``default``)."""

    layer: Layer
    slot: str
    name: str
    explicit: bool


def decisions(graph: Graph, policy: StoragePolicy, pinned: set[tuple[int, str]]) -> Iterator[Decision]:
    """The policy's choice for every tagged weight of ``graph`` a rule action did not pin, in graph order."""
    selected = [({id(x) for x in find(graph, rule.match)}, rule) for rule in policy.rules]
    for layer in graph.layers:
        spec = layer.spec
        if spec is None or not layer.weights:
            continue
        for aw in spec.active_weights(layer.env()):
            weight = layer.weights.get(aw.name)
            if aw.load_type != 0 or weight is None or (id(layer), aw.name) in pinned:
                continue
            name, explicit = policy.default, False
            for ids, rule in selected:
                if id(layer) in ids and (rule.slots is None or aw.name in rule.slots):
                    name, explicit = rule.storage, True
            yield Decision(layer, aw.name, name, explicit)


def block_quantized(decision: Decision) -> WeightQuantizeSpec | None:
    """The catalog's ``weight_quantize`` when ``decision`` block-quantizes its weight (an int storage, a
    float weight the layer can hold so), else None."""
    if decision.name not in QUANT_BITS:
        return None
    weight = decision.layer.weights[decision.slot]
    return quantizable(decision.layer, decision.slot) if weight.storage in _CONVERTIBLE else None


def apply_storage_policy(
    graph: Graph,
    policy: StoragePolicy,
    pinned: set[tuple[int, str]],
    keep_fp32: frozenset[int] | set[int] = frozenset(),
    calibrated: Precomputes | None = None,
) -> list[str]:
    """Re-store the graph's tagged weights per ``policy``, the layers in ``keep_fp32`` (ids) as fp32, the
    weights ``calibrated`` quantized from the calibration samples as it made them; returns one line per
    changed weight."""
    changes = []
    for d in list(decisions(graph, policy, pinned)):
        layer, slot = d.layer, d.slot
        weight = layer.weights[slot]
        name, explicit = d.name, d.explicit
        if id(layer) in keep_fp32:
            name, explicit = "fp32", False  # int8 and tables are left alone, as by default
        if name in QUANT_BITS:
            wq = quantizable(layer, slot) if weight.storage in _CONVERTIBLE else None
            if wq is not None:
                done = calibrated.outcome(layer) if calibrated is not None else None
                changes.append(
                    quantize_layer_weight(
                        layer, wq, name, block=policy.block, method=policy.method, precomputed=done
                    )
                )
                continue  # the slots after it (a bias) are read as before
            name = policy.unquantized
        target = Storage(name)
        if weight.storage is target:
            continue
        if weight.storage not in _CONVERTIBLE:
            if explicit:
                raise StoragePolicyError(
                    f"layer {layer.name}, weight {slot}: stored as {weight.storage.value}, which the "
                    f"storage policy cannot convert to {target.value}"
                )
            continue
        layer.weights[slot] = Weight.lazy(weight.numpy, shape=weight.shape, load_type=0, storage=target)
        changes.append(f"{layer.name}.{slot}: {weight.storage.value} -> {target.value}")
    return changes
