"""Deterministic random weights for any .param, so params shipped without weights can be loaded and run.

Like ``ncnnoptimize`` with a null .bin, but reproducible: the same param and seed give the same bytes. Each
load gets its own generator seeded from (seed, load index), and weights are produced lazily at write time,
so memory stays bounded by the largest single weight.
"""

from __future__ import annotations

import math

import numpy as np

from graphsurgeon.formats.model_bin import planned_loads
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.weights import Storage, Weight, default_storage
from graphsurgeon.schema.catalog import ActiveWeight


def _values(aw: ActiveWeight, init: str | None, seed: int, index: int) -> np.ndarray:
    rng = np.random.default_rng([seed, index])
    if aw.load_type in (3, 4, 6, 8):
        return rng.integers(0, 256, size=aw.shape, dtype=np.uint8)
    if init == "positive":
        return rng.uniform(0.5, 1.5, size=aw.shape).astype(np.float32)
    dims = aw.view or aw.shape
    fan_in = math.prod(dims[1:]) if len(dims) >= 2 else 0
    scale = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.1
    values = rng.standard_normal(size=aw.shape, dtype=np.float32)
    values *= np.float32(scale)  # in place: one array per weight
    return values


def synthesize_weights(graph: Graph, *, seed: int = 0, storage: Storage = Storage.FP32) -> int:
    """Give every weight slot the params load a lazy random weight; tagged slots use ``storage``
    (fp32, fp16 or bf16). Replaces any weights already attached. Returns the number of loads."""
    if storage not in (Storage.FP32, Storage.FP16, Storage.BF16):
        raise ValueError(f"synthesized weights are fp32, fp16 or bf16, not {storage.value}")
    for layer in graph.layers:
        layer.weights.clear()
    n = 0
    for index, (layer, aw) in enumerate(planned_loads(graph)):
        spec = layer.spec
        assert spec is not None
        init = next((w.init for w in spec.weights if w.name == aw.name), None)
        slot_storage = storage if aw.load_type == 0 else default_storage(aw.load_type)

        def make(aw: ActiveWeight = aw, init: str | None = init, index: int = index) -> np.ndarray:
            return _values(aw, init, seed, index)

        layer.weights[aw.name] = Weight.lazy(
            make, shape=aw.shape, load_type=aw.load_type, storage=slot_storage
        )
        n += 1
    return n
