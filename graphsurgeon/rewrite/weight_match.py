"""Pair each weight a conversion stores with the checkpoint tensor whose values it holds: the facts behind
a ``weight_map`` side file (``gsurg diff-bin``'s YAML map).

**How.** A stored weight and a tensor are partners when their values are equal element for element, in C
order: the tensor may differ only in shape (the reshape or flatten a Linear, Conv or Embedding export
implies: a Conv kernel ``[O, C, kh, kw]`` stored as a Gemm's ``[O, C*kh*kw]``), never in order or value.
A weight stored fp16 or bf16 is compared with the tensor rounded to that storage exactly as gsurg's writer
rounds (round to nearest even). Values are compared through a digest (BLAKE2b, 160 bits) of their float32
bytes, ``-0.0`` counted as ``+0.0``, computed in chunks: one weight and one tensor at a time, each tensor
read at most once per storage and only when some weight has its element count. The digest only finds the
partner; ``gsurg diff-bin`` with the map then compares the files themselves.

**Ambiguity.** Two tensors holding the same values (a checkpoint that stores a tied matrix twice, norms
still at their initial ones) both fit: the first one (in name order, numbers compared as numbers) that no
other weight of the run has taken is named, the others are reported. One tensor backing several weights
(tied embeddings: ``embed`` and ``lm_head``) is no ambiguity.

**Refused** (``WeightMatchError``, naming file, layer, slot and offset): a weight no tensor holds — a
transposed, scaled or sliced copy, a constant the export made — and int8 or quantization-table weights,
which are not float data.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.model_bin import WeightRecord, planned_loads
from graphsurgeon.formats.safetensors import Checkpoint
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.weights import Storage, Weight, bf16_bits

CHUNK = 1 << 20  # elements per digest step
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
    reshape: tuple[int, ...] | None  # the record's shape, when the tensor's differs
    also: tuple[str, ...] = ()  # other tensors holding the same values (an ambiguity resolved by order)


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


def _digest(chunks: Iterator[np.ndarray]) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for chunk in chunks:
        canon = np.add(np.asarray(chunk, dtype=np.float32), np.float32(0.0))  # -0.0 -> +0.0
        h.update(np.ascontiguousarray(canon, dtype="<f4").data.cast("B"))
    return h.digest()


def stored_values(weight: Weight) -> np.ndarray:
    """A weight's values as the .bin holds them, flat float32: an unchanged record decoded, a new weight
    rounded to its storage as the writer encodes it."""
    values = np.asarray(weight.numpy(), dtype=np.float32).reshape(-1)
    if weight.region is None and weight.storage in _ROUNDED:
        return _rounded(values, weight.storage)
    return values


def _chunks(values: np.ndarray) -> Iterator[np.ndarray]:
    for start in range(0, values.size, CHUNK):
        yield values[start : start + CHUNK]


class WeightMatcher:
    """Pairs weights with the tensors of one checkpoint; shared by every graph of a run, so each tensor is
    digested once per storage and the order used to resolve ambiguities spans the run."""

    def __init__(self, checkpoint: str) -> None:
        self.path = checkpoint
        self.ckpt = Checkpoint(checkpoint)
        by_count: dict[int, list[str]] = {}
        for name, info in self.ckpt.tensors.items():
            if info.dtype in _FLOAT_DTYPES:
                by_count.setdefault(math.prod(info.shape), []).append(name)
        self._by_count = {n: sorted(names, key=_natural) for n, names in by_count.items()}
        self._digests: dict[tuple[str, Storage], bytes] = {}
        self._taken: set[str] = set()

    def close(self) -> None:
        self.ckpt.close()

    def _tensor_digest(self, name: str, storage: Storage) -> bytes:
        key = (name, Storage.FP32 if storage in _AS_STORED else storage)
        if key not in self._digests:
            source = self.ckpt.source(name, ())

            def chunks() -> Iterator[np.ndarray]:
                for start in range(0, source.count, CHUNK):
                    values, _ = source.read(start, min(source.count, start + CHUNK))
                    yield _rounded(values, key[1])

            self._digests[key] = _digest(chunks())
        return self._digests[key]

    def pair_graph(self, graph: Graph, records: list[WeightRecord], bin_name: str) -> list[Pairing]:
        """Every record of ``bin_name`` (written from ``graph``) with its tensor, in file order."""
        loads: dict[tuple[str, str], tuple[Layer, tuple[int, ...] | None]] = {}
        for layer, aw in planned_loads(graph):
            loads.setdefault((layer.name, aw.name), (layer, aw.view))
        out = []
        for rec in records:
            layer, view = loads[(rec.layer, rec.slot)]
            out.append(self._pair(layer.weights[rec.slot], rec, view, bin_name))
        return out

    def _pair(
        self, weight: Weight, rec: WeightRecord, view: tuple[int, ...] | None, bin_name: str
    ) -> Pairing:
        where = f"{bin_name}: layer {rec.layer}, weight {rec.slot}, offset {rec.offset}"
        if rec.storage not in _AS_STORED | _ROUNDED:
            raise WeightMatchError(
                f"{where}: stored as {rec.storage.value}; a weight map pairs float weights only"
            )
        count = math.prod(rec.shape)
        digest = _digest(_chunks(stored_values(weight)))
        candidates = self._by_count.get(count, [])
        matches = [t for t in candidates if self._tensor_digest(t, rec.storage) == digest]
        if not matches:
            rounding = "" if rec.storage in _AS_STORED else f" (each rounded to {rec.storage.value})"
            shown = ", ".join(candidates[:3]) + (", …" if len(candidates) > 3 else "")
            have = f"{len(candidates)} tensor(s) have {count} elements{': ' + shown if candidates else ''}"
            raise WeightMatchError(
                f"{where}: no tensor of {self.path} holds its {count} values{rounding}; {have} "
                "(a map pairs values as stored, only reshaped: a transposed, scaled or sliced weight or a "
                "constant the export made has no partner)"
            )
        free = [t for t in matches if t not in self._taken]
        chosen = free[0] if free else matches[0]
        self._taken.add(chosen)
        shape = tuple(view) if view is not None else (count,)  # as diff-bin shows the record
        reshape = None if tuple(self.ckpt.tensors[chosen].shape) == shape else shape
        also = tuple(t for t in matches if t != chosen)
        return Pairing(rec.layer, rec.slot, rec.offset, rec.storage, chosen, reshape, also)
