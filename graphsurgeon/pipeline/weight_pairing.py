"""Pair each weight a conversion stored with the checkpoint tensor holding its values, by value alone.

The pairs are the facts behind a ``weight_map`` side file (``gsurg diff-bin``'s YAML map), which
``weight_map_side`` writes and ``check.weight_map`` reads; no rule says which tensor a weight came from.

**How.** A stored weight and a tensor are partners when their values are equal element for element, in C
order: the tensor may differ only in shape (the reshape or flatten a Linear, Conv or Embedding export
implies: a Conv kernel ``[O, C, kh, kw]`` stored as a Gemm's ``[O, C*kh*kw]``), never in order or value.
A weight stored fp16 or bf16 is compared with the tensor rounded to that storage exactly as gsurg's writer
rounds (round to nearest even). Only tensors with the weight's element count are candidates; a probe of
each (up to 64 values at its start, middle and end, read once per storage) rules out most of them, and
the rest are compared with the weight in full, chunk by chunk, stopping at the first difference. One
weight is held at a time; a tensor is read in chunks. ``gsurg diff-bin`` with the map then compares the
files themselves.

**Row ranges.** A weight that no whole tensor holds may hold one of the ``k`` equal row ranges of a fused
tensor (``k`` up to ``MAX_PARTS``): ``nn.MultiheadAttention``'s ``in_proj_weight`` split into q, k and v,
a gate/up pair stored as one matrix. Rows are contiguous in C order, so part ``j`` is the tensor's elements
``[j*n, (j+1)*n)`` for a weight of ``n`` values, compared exactly as a whole tensor is; the map names it
with a ``slice`` over axis 0 (``transforms``). Only row ranges: a column range is a strided copy, no
contiguous part of the tensor.

**Ambiguity.** Two tensors holding the same values (a checkpoint that stores a tied matrix twice, norms
still at their initial ones) both fit: the first one (in name order, numbers compared as numbers) that no
other weight of the run has taken is named, the others are reported. One tensor backing several weights
(tied embeddings: ``embed`` and ``lm_head``) is no ambiguity.

**Block-quantized weights** (the storage policy's ``int8``/``int6``/``int4``) are paired through the float
weight the quantizer read (``Weight.origin``): the tensor named is the one the codes were made from, and
``diff-bin`` then checks the codes against it in quantization steps (codes GPTQ chose are marked
``compensated``, and the map says so). Their scales records are no checkpoint
tensor and is not paired.

**Refused** (``WeightMatchError``, naming file, layer, slot and offset): a weight no tensor holds — a
transposed, scaled or column-sliced copy, a constant the export made — and int8, quantization-table or byte
weights that were not quantized in this run, which are not float data.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.model_bin import WeightRecord, planned_loads
from graphsurgeon.formats.safetensors import Checkpoint, TensorSource
from graphsurgeon.ir.encode import bf16_bits
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.weights import Storage, Weight

CHUNK = 1 << 20  # elements compared at a time
MAX_PARTS = 8  # the most equal row ranges of one fused tensor a weight is looked for in
PROBE = 64  # values a probe reads at each of three places
_FLOAT_DTYPES = {"F32", "F16", "BF16"}
_AS_STORED = {Storage.FP32, Storage.FP32_SCALED, Storage.RAW}
_ROUNDED = {Storage.FP16, Storage.BF16}


class WeightMatchError(GsurgError):
    """A stored weight that no checkpoint tensor holds, or one that is not float data."""


@dataclass(frozen=True)
class Pairing:
    """One stored weight and its checkpoint tensor."""

    layer: str
    slot: str
    offset: int
    storage: Storage
    tensor: str
    reshape: tuple[int, ...] | None  # the record's shape, when the tensor's (or its rows') differs
    also: tuple[str, ...] = ()  # other tensors holding the same values (an ambiguity resolved by order)
    quantized: bool = False  # block-quantized codes, paired through the values they were made from
    rows: tuple[int, int] | None = None  # the tensor's row range [start, stop) the weight holds, if a part
    compensated: bool = False  # such codes chosen to cancel the layer's output error (GPTQ)


def _is_quantize_scales(layer: Layer, slot: str) -> bool:
    """Whether ``slot`` holds the block scales or the input scales of ``layer``'s quantized weight (the
    catalog's ``weight_quantize``), which no checkpoint tensor holds."""
    spec = layer.spec
    wq = spec.weight_quantize if spec is not None else None
    return wq is not None and slot in (wq.scales, wq.input_scales)


def _natural(name: str) -> list[int | str]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _rounded(chunk: np.ndarray, storage: Storage) -> np.ndarray:
    """float32 values as ``storage`` holds them (fp32: unchanged)."""
    if storage is Storage.FP16:
        with np.errstate(over="ignore"):
            return chunk.astype("<f2").astype(np.float32)
    if storage is Storage.BF16:
        return (bf16_bits(chunk).astype(np.uint32) << 16).view(np.float32)
    return chunk


def stored_values(weight: Weight) -> np.ndarray:
    """A weight's values as the .bin holds them, flat float32: an unchanged record decoded, a new weight
    rounded to its storage as the writer encodes it."""
    values = np.asarray(weight.numpy(), dtype=np.float32).reshape(-1)
    if weight.region is None and weight.storage in _ROUNDED:
        return _rounded(values, weight.storage)
    return values


def _windows(count: int) -> list[tuple[int, int]]:
    """Where a probe reads: up to PROBE values at the start, the middle and the end."""
    n = min(PROBE, count)
    mid = max(0, min(count - n, count // 2 - n // 2))
    return [(0, n), (mid, mid + n), (count - n, count)]


def _canonical(values: np.ndarray) -> bytes:
    return np.add(values, np.float32(0.0), dtype=np.float32).tobytes()  # -0.0 and +0.0 alike


class WeightMatcher:
    """Pairs weights with the tensors of one checkpoint; shared by every graph of a run, so each tensor is
    probed once per storage and the order used to resolve ambiguities spans the run."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.path = checkpoint.path
        self.ckpt = checkpoint  # the caller opened it, and closes it
        by_count: dict[int, list[str]] = {}
        for name, info in self.ckpt.tensors.items():
            if info.dtype in _FLOAT_DTYPES:
                by_count.setdefault(math.prod(info.shape), []).append(name)
        self._by_count = {n: sorted(names, key=_natural) for n, names in by_count.items()}
        self._probes: dict[tuple[str, Storage], bytes] = {}
        self._sources: dict[str, TensorSource] = {}
        self._taken: set[str] = set()

    def _read(self, name: str, storage: Storage, start: int, stop: int) -> np.ndarray:
        """Elements ``start:stop`` of tensor ``name``, as ``storage`` holds them (valid until the next
        read: the checkpoint's readers reuse their buffers)."""
        source = self._sources.get(name)
        if source is None:
            source = self._sources[name] = self.ckpt.source(name, ())
        values, _ = source.read(start, stop)
        return _rounded(values, storage)

    def _probe(self, name: str, storage: Storage, count: int) -> bytes:
        key = (name, Storage.FP32 if storage in _AS_STORED else storage)
        if key not in self._probes:
            # each read may land in the reader's reused buffer: copy before the next one
            parts = [self._read(name, key[1], a, b).copy() for a, b in _windows(count)]
            self._probes[key] = _canonical(np.concatenate(parts))
        return self._probes[key]

    def _equal(self, values: np.ndarray, name: str, storage: Storage, base: int = 0) -> bool:
        """Whether the tensor's elements ``[base, base + values.size)`` equal ``values``."""
        for start in range(0, values.size, CHUNK):
            stop = min(values.size, start + CHUNK)
            theirs = self._read(name, storage, base + start, base + stop)
            if not np.array_equal(values[start:stop], theirs, equal_nan=True):
                return False
        return True

    def pair_graph(self, graph: Graph, records: list[WeightRecord], bin_name: str) -> list[Pairing]:
        """Every record of ``bin_name`` (written from ``graph``) with its tensor, in file order."""
        loads: dict[tuple[str, str], tuple[Layer, tuple[int, ...] | None]] = {}
        for layer, aw in planned_loads(graph):
            loads.setdefault((layer.name, aw.name), (layer, aw.view))
        out = []
        for rec in records:
            layer, view = loads[(rec.layer, rec.slot)]
            if _is_quantize_scales(layer, rec.slot):
                continue
            out.append(self._pair(layer.weights[rec.slot], rec, view, bin_name))
        return out

    def _pair(
        self, weight: Weight, rec: WeightRecord, view: tuple[int, ...] | None, bin_name: str
    ) -> Pairing:
        where = f"{bin_name}: layer {rec.layer}, weight {rec.slot}, offset {rec.offset}"
        storage = rec.storage
        origin, compensated = weight.origin, weight.compensated
        if origin is not None:  # codes quantized in this run: pair the values they were made from
            weight, storage, view = origin, origin.storage, origin.shape
        if storage not in _AS_STORED | _ROUNDED:
            raise WeightMatchError(
                f"{where}: stored as {storage.value}; a weight map pairs float weights only"
            )
        count = weight.count
        matches, part = self._holders(stored_values(weight), storage)
        candidates = self._by_count.get(count, [])
        if not matches:
            if part is not None:
                tensor, rows = part
                shape = tuple(view) if view is not None else (count,)
                info = self.ckpt.tensors[tensor]
                row_shape = (rows[1] - rows[0], *info.shape[1:])
                reshape = None if tuple(row_shape) == shape else shape
                return Pairing(
                    rec.layer,
                    rec.slot,
                    rec.offset,
                    storage,
                    tensor,
                    reshape,
                    (),
                    rec.storage is Storage.BYTES,
                    rows,
                    compensated,
                )
            rounding = "" if storage in _AS_STORED else f" (each rounded to {storage.value})"
            shown = ", ".join(candidates[:3]) + (", …" if len(candidates) > 3 else "")
            have = f"{len(candidates)} tensor(s) have {count} elements{': ' + shown if candidates else ''}"
            raise WeightMatchError(
                f"{where}: no tensor of {self.path} holds its {count} values{rounding}; {have} "
                "(a map pairs values as stored, only reshaped or as a row range of a fused tensor: a "
                "transposed, scaled or column-sliced weight or a constant the export made has no partner)"
            )
        free = [t for t in matches if t not in self._taken]
        chosen = free[0] if free else matches[0]
        self._taken.add(chosen)
        shape = tuple(view) if view is not None else (count,)  # as diff-bin shows the record
        reshape = None if tuple(self.ckpt.tensors[chosen].shape) == shape else shape
        also = tuple(t for t in matches if t != chosen)
        quantized = rec.storage is Storage.BYTES
        return Pairing(
            rec.layer, rec.slot, rec.offset, storage, chosen, reshape, also, quantized, None, compensated
        )

    def holders(self, weight: Weight) -> tuple[list[str], tuple[str, tuple[int, int]] | None]:
        """The tensors holding ``weight``'s values as stored (flat, C order) in name order, and, when none
        does, the fused tensor and row range holding them (else None): what a weight's pairing rests on,
        for a caller that needs the tensor a weight came from (``pipeline.repeat_layers``)."""
        return self._holders(stored_values(weight), weight.storage)

    def _holders(
        self, values: np.ndarray, storage: Storage
    ) -> tuple[list[str], tuple[str, tuple[int, int]] | None]:
        count = values.size
        probe = _canonical(np.concatenate([values[a:b] for a, b in _windows(count)]))
        matches = [
            t
            for t in self._by_count.get(count, [])
            if self._probe(t, storage, count) == probe and self._equal(values, t, storage)
        ]
        return matches, (None if matches else self._pair_part(values, count, storage))

    def _pair_part(
        self, values: np.ndarray, count: int, storage: Storage
    ) -> tuple[str, tuple[int, int]] | None:
        """The first tensor (in name order) of which one of ``k`` equal row ranges (``2 <= k <= MAX_PARTS``)
        holds ``values``, and that range; None when none does."""
        probe = _canonical(np.concatenate([values[a:b] for a, b in _windows(count)]))
        for k in range(2, MAX_PARTS + 1):
            for name in self._by_count.get(count * k, []):
                rows = int(self.ckpt.tensors[name].shape[0]) if self.ckpt.tensors[name].shape else 0
                if rows % k:
                    continue
                for j in range(k):
                    base = j * count
                    windows = [
                        self._read(name, storage, base + a, base + b).copy() for a, b in _windows(count)
                    ]
                    if _canonical(np.concatenate(windows)) != probe:
                        continue
                    if self._equal(values, name, storage, base):
                        step = rows // k
                        return name, (j * step, (j + 1) * step)
        return None
