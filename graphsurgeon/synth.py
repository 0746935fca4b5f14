"""Deterministic random weights for any .param, so params shipped without weights can be loaded and run.

Like ``ncnnoptimize`` with a null .bin, but reproducible: the same param and seed give the same bytes. Each
load's values are cut into blocks of ``BLOCK`` elements, and block ``b`` of load ``i`` is drawn from its own
generator seeded with ``(seed, i, b)``, into one buffer reused for every block. The values are therefore
defined by the seed, the load's position and ``BLOCK`` alone (not by how a writer chunks them), and memory
stays bounded by one block whatever the weight's size. Weights are made lazily, at write time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from graphsurgeon.formats.model_bin import planned_loads
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.weights import Storage, Weight, default_storage
from graphsurgeon.schema.catalog import ActiveWeight

#: Elements per seeded block. Part of what the values are: changing it changes every synthesized weight.
BLOCK = 1 << 20


def _blocks(aw: ActiveWeight, init: str | None, seed: int, index: int) -> Iterator[np.ndarray]:
    """The load's values, block by block: uniform bytes for raw-byte loads, U[0.5, 1.5) for ``positive``
    slots (norm scales), else N(0, 1/fan_in) with fan_in from the logical (torch) shape, or N(0, 0.01)."""
    count = aw.count
    raw_bytes = aw.load_type in (3, 4, 6, 8)
    dims = aw.view or aw.shape
    fan_in = math.prod(dims[1:]) if len(dims) >= 2 else 0
    scale = np.float32(1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.1)
    buf = np.empty(min(count, BLOCK), dtype=np.float32)
    for b, start in enumerate(range(0, count, BLOCK)):
        rng = np.random.default_rng([seed, index, b])
        n = min(BLOCK, count - start)
        if raw_bytes:
            yield rng.integers(0, 256, size=n, dtype=np.uint8)
            continue
        out = buf[:n]
        if init == "positive":
            rng.random(dtype=np.float32, out=out)
            out += np.float32(0.5)
        else:
            rng.standard_normal(dtype=np.float32, out=out)
            out *= scale
        yield out


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

        def blocks(aw: ActiveWeight = aw, init: str | None = init, i: int = index) -> Iterator[np.ndarray]:
            return _blocks(aw, init, seed, i)

        layer.weights[aw.name] = Weight.streamed(
            blocks, shape=aw.shape, load_type=aw.load_type, storage=slot_storage
        )
        n += 1
    return n
