"""The .bin weight file: an exact-offset walk driven by the catalog, lazy reading, and checked writing.

ncnn's .bin has no header, names or framing: it is the concatenation of every ``mb.load`` call, layer by
layer in .param order, slot by slot in ``load_model`` order. The walk records ``(layer, slot, offset, tag,
storage, shape)`` for every load and fails, naming the layer, slot, offset and the bytes found, unless it ends
exactly at end of file. Writing recomputes every offset from the IR and re-walks its own output before the
file is moved into place.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsurgeon.errors import BinFormatError, CatalogError, OutputSpaceError
from graphsurgeon.formats.atomic import AtomicGroup, atomic_output
from graphsurgeon.formats.record_copy import RecordCopier
from graphsurgeon.ir.encode import StorageOverflow, record_chunks
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.weights import (
    TAG_BF16,
    TAG_FP16,
    TAG_FP32_SCALED,
    TAG_INT8,
    BinRegion,
    MappedBin,
    Storage,
    Weight,
    record_size,
    storage_for_tag,
)
from graphsurgeon.schema.catalog import ActiveWeight

#: ncnn's ``ModelBin::load(int w, int type)`` counts a weight's elements in an int, and its multi-dim loads
#: multiply the dims in int: a larger count wraps, and ncnn then fails or reads a different size.
NCNN_MAX_ELEMENTS = 2**31 - 1
_KNOWN_NONZERO_TAGS = {TAG_FP16: "fp16", TAG_BF16: "bf16", TAG_INT8: "int8", TAG_FP32_SCALED: "fp32-scaled"}


@dataclass(frozen=True, slots=True)
class _Where:
    path: str
    layer: str
    slot: str
    offset: int

    def kwargs(self) -> dict[str, Any]:
        return {"path": self.path, "layer": self.layer, "slot": self.slot, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class WeightRecord:
    """One load in a .bin: where it starts, how it is stored, how many bytes it takes."""

    layer: str
    layer_type: str
    slot: str
    offset: int
    tag: int | None
    storage: Storage
    shape: tuple[int, ...]
    nbytes: int
    view: tuple[int, ...] | None = (
        None  # the logical (torch) layout of a flat load, when the catalog knows it
    )
    load_type: int = 0  # the ModelBin::load type: 0 tagged, 1 raw fp32, 3/4/6/8 raw bytes

    @property
    def storage_name(self) -> str:
        """How the values are stored, for people: the storage, or ``int4``/``int6``/``int8`` for the codes
        of block quantization (byte loads of type 4/6/8)."""
        if self.storage is Storage.BYTES and self.load_type in (4, 6, 8):
            return f"int{self.load_type}"
        return self.storage.value


def planned_loads(graph: Graph) -> Iterator[tuple[Layer, ActiveWeight]]:
    """Every ``mb.load`` the graph's layers make, in file order, per the catalog.

    Custom layer types (not in the catalog) are taken to read nothing, as ncnn's base ``Layer::load_model``
    does. Params that give a weight no elements (or a negative size), or more than ncnn's int element count
    holds, are an error naming the .param, layer and weight, since ncnn cannot load such a layer.
    """
    for layer in graph.layers:
        spec = layer.spec
        if spec is None:
            continue
        source = graph.source or "<param>"
        try:
            actives = spec.active_weights(layer.env())
        except CatalogError as err:
            raise BinFormatError(
                f"cannot size its weights from its params: {err}", path=source, layer=layer.name
            ) from None
        for aw in actives:
            if aw.count <= 0 or any(d < 0 for d in aw.shape):
                raise BinFormatError(
                    f"params give this weight {aw.count} elements (shape {list(aw.shape)}); "
                    "ncnn fails to load it",
                    path=source,
                    layer=layer.name,
                    slot=aw.name,
                )
            if aw.count > NCNN_MAX_ELEMENTS:
                raise BinFormatError(
                    f"params give this weight {aw.count} elements (shape {list(aw.shape)}), more than the "
                    f"{NCNN_MAX_ELEMENTS} ncnn can count (its loader takes an int element count, so the size "
                    "wraps around and ncnn fails to load it or reads a different size)",
                    path=source,
                    layer=layer.name,
                    slot=aw.name,
                )
            yield layer, aw


def custom_layer_note(graph: Graph) -> str | None:
    custom = sorted({layer.type for layer in graph.layers if layer.spec is None})
    if not custom:
        return None
    return f"custom layer type(s) {', '.join(custom)} are not in the catalog and are taken to read no weights"


def _describe_bytes(raw: bytes) -> str:
    """What four unexpected bytes probably are, for an error message."""
    (as_f32,) = struct.unpack("<f", raw)
    halves = np.frombuffer(raw, dtype="<f2").astype(np.float64)
    if np.isfinite(as_f32) and 1e-7 <= abs(as_f32) <= 1e4:
        return f"they look like fp32 data ({as_f32:.6g})"
    if np.all(np.isfinite(halves)) and np.all((np.abs(halves) >= 1e-5) & (np.abs(halves) <= 1e4)):
        return f"they look like fp16 data ({halves[0]:.4g}, {halves[1]:.4g})"
    return "they match no known tag or data pattern"


def _nearby_tag(mb: MappedBin, offset: int) -> str:
    """Look for a well-known nonzero tag within 64 bytes: it tells how far the walk is off."""
    for delta in sorted(range(-64, 65, 4), key=abs):
        pos = offset + delta
        if delta == 0 or pos < 0 or pos + 4 > mb.size:
            continue
        tag = mb.u32(pos)
        if tag in _KNOWN_NONZERO_TAGS:
            side = "later" if delta > 0 else "earlier"
            fix = (
                f"the previous weight is probably {delta} bytes short (the .bin holds {delta} more bytes "
                f"than "
                "its params say)"
                if delta > 0
                else f"the previous weight is probably {-delta} bytes too long for this .bin"
            )
            return f"; an {_KNOWN_NONZERO_TAGS[tag]} tag sits {abs(delta)} bytes {side}: {fix}"
    return "; the previous weight is probably 4 bytes short, or this slot's tag is missing"


Loads = list[tuple[Layer, ActiveWeight]]


def walk_records(graph: Graph, mb: MappedBin, loads: Loads | None = None) -> list[WeightRecord]:
    """Walk ``mb`` as ncnn's loader would for ``graph``; raise BinFormatError unless it ends at EOF.
    ``loads`` is ``list(planned_loads(graph))`` when the caller already has it (the catalog is then not
    evaluated again); the tags and sizes always come from the file."""
    records: list[WeightRecord] = []
    offset = 0
    size = mb.size
    last: WeightRecord | None = None
    for layer, aw in planned_loads(graph) if loads is None else loads:
        where = _Where(mb.path, layer.name, aw.name, offset)
        count = aw.count
        tag: int | None = None
        if aw.load_type == 0:
            if offset + 4 > size:
                raise BinFormatError(
                    f"file ends before this weight's 4-byte tag (file size {size})", **where.kwargs()
                )
            tag = mb.u32(offset)
            storage = storage_for_tag(tag)
            if storage is None:
                raw = mb.read(offset, 4)
                prev = f" after {last.layer}.{last.slot}" if last else ""
                raise BinFormatError(
                    f"unknown weight tag 0x{tag:08x} (bytes {raw.hex(' ')}){prev}; {_describe_bytes(raw)}"
                    + _nearby_tag(mb, offset),
                    **where.kwargs(),
                )
        elif aw.load_type == 1:
            storage = Storage.RAW
        else:
            storage = Storage.BYTES
        nbytes = record_size(storage, count)
        if offset + nbytes > size:
            short = offset + nbytes - size
            zero_tagged = next((r for r in records if r.tag == 0), None) if short == 4 else None
            hint = (
                "; the file is exactly 4 bytes short: perhaps tagged weight "
                f"{zero_tagged.layer}.{zero_tagged.slot} was written without its tag and its first value "
                "(0.0) was read as one"
                if zero_tagged is not None
                else ""
            )
            raise BinFormatError(
                f"{storage.value} weight of {count} elements needs {nbytes} bytes but the file ends "
                f"{size - offset} bytes later (file size {size}): the .bin is truncated or belongs to "
                f"another .param{hint}",
                **where.kwargs(),
            )
        last = WeightRecord(
            layer.name, layer.type, aw.name, offset, tag, storage, aw.shape, nbytes, aw.view, aw.load_type
        )
        records.append(last)
        offset += nbytes
    if offset != size:
        after = f" after {last.layer}.{last.slot}" if last else ""
        hint = _describe_bytes(mb.read(offset, 4)) if size - offset >= 4 else "a partial word"
        raise BinFormatError(
            f"the weights the .param describes end here{after} but the file has {size - offset} more bytes "
            f"({hint}): a weight is shorter in the params than in the file, or the .bin belongs to "
            "another .param",
            path=mb.path,
            offset=offset,
        )
    return records


def read_bin(graph: Graph, path: str | os.PathLike[str]) -> list[WeightRecord]:
    """Walk ``path`` for ``graph`` and attach a lazy Weight to every layer slot. The file stays mapped
    read-only while any weight refers to it."""
    try:
        mb = MappedBin(path)
    except OSError as err:
        raise BinFormatError(f"cannot read: {err.strerror}", path=os.fspath(path)) from None
    try:
        loads = list(planned_loads(graph))
        records = walk_records(graph, mb, loads)
    except BaseException:
        mb.close()
        raise
    for (layer, _), rec in zip(loads, records, strict=True):  # the walk follows the plan
        layer.weights[rec.slot] = Weight(
            load_type=0 if rec.tag is not None else (1 if rec.storage is Storage.RAW else 3),
            storage=rec.storage,
            shape=rec.shape,
            region=BinRegion(mb, rec.offset, rec.nbytes),
            tag=rec.tag,
        )
    return records


def walk_bin(graph: Graph, path: str | os.PathLike[str]) -> list[WeightRecord]:
    """Only check ``path`` against ``graph`` (nothing is attached); returns the records."""
    try:
        with MappedBin(path) as mb:
            return walk_records(graph, mb)
    except OSError as err:
        raise BinFormatError(f"cannot read: {err.strerror}", path=os.fspath(path)) from None


def _weight_for(layer: Layer, aw: ActiveWeight, path: str, offset: int) -> Weight:
    where = _Where(path, layer.name, aw.name, offset)
    weight = layer.weights.get(aw.name)
    if weight is None:
        raise BinFormatError("no data for this weight slot (set it before writing)", **where.kwargs())
    if weight.count != aw.count:
        raise BinFormatError(
            f"holds {weight.count} elements {list(weight.shape)} "
            f"but the params load {aw.count} {list(aw.shape)}",
            **where.kwargs(),
        )
    tagged_ok = aw.load_type == 0 and weight.storage not in (Storage.RAW, Storage.BYTES)
    raw_ok = aw.load_type == 1 and weight.storage is Storage.RAW
    bytes_ok = aw.load_type in (3, 4, 6, 8) and weight.storage is Storage.BYTES
    if not (tagged_ok or raw_ok or bytes_ok):
        raise BinFormatError(
            f"stored as {weight.storage.value} but this slot is loaded with type {aw.load_type}",
            **where.kwargs(),
        )
    return weight


def write_bin(
    graph: Graph,
    path: str | os.PathLike[str],
    group: AtomicGroup | None = None,
    on_written: Callable[[int], None] | None = None,
) -> list[WeightRecord]:
    """Write every layer's weights to ``path`` atomically.

    First every slot is checked (data present, element count, load type; slots the params do not load must
    hold no weight) and the total size is checked against the free space of the destination's filesystem,
    so nothing is written for a model that cannot be. Then unchanged weights are copied byte for byte (runs
    of adjacent records in one in-kernel copy) and new ones are encoded in their Weight's storage, in pieces
    of bounded size. The temporary file is walked again and compared with the plan before it replaces
    ``path`` (together with the rest of ``group``, when given). ``on_written(nbytes)`` is told of every
    record as it is handed to the writer (for a progress bar).
    """
    target = os.fspath(path)
    loads = list(planned_loads(graph))
    plan, weights = _plan(graph, loads, target)
    _check_room(graph, plan, target)

    def check(tmp: str) -> None:
        with MappedBin(tmp) as mb:
            walked = walk_records(graph, mb, loads)
        if [(r.offset, r.tag, r.nbytes) for r in walked] != [(r.offset, r.tag, r.nbytes) for r in plan]:
            raise BinFormatError(
                "re-walk of the written file disagrees with the plan (a writer bug)", path=target
            )

    try:
        with atomic_output(target, check=check, group=group) as fh:
            copier = RecordCopier(fh)
            for rec, weight in zip(plan, weights, strict=True):
                if on_written is not None:
                    on_written(rec.nbytes)
                if weight.region is not None:
                    copier.add(weight.region)
                    continue
                copier.flush()
                try:
                    for chunk in record_chunks(weight):
                        fh.write(chunk)
                except StorageOverflow as err:
                    raise BinFormatError(
                        str(err), path=target, layer=rec.layer, slot=rec.slot, offset=rec.offset
                    ) from None
            copier.flush()
    except OSError as err:  # e.g. the disk filled up after all (other writers): the temporary file is gone
        raise BinFormatError(f"cannot write: {err.strerror}", path=target) from None
    return plan


def _plan(graph: Graph, loads: Loads, target: str) -> tuple[list[WeightRecord], list[Weight]]:
    """Every record the graph's weights make, in file order, with the Weight that fills each one."""
    plan: list[WeightRecord] = []
    weights: list[Weight] = []
    expected_slots: dict[int, set[str]] = {}
    offset = 0
    for layer, aw in loads:
        expected_slots.setdefault(id(layer), set()).add(aw.name)
        weight = _weight_for(layer, aw, target, offset)
        rec = WeightRecord(
            layer.name,
            layer.type,
            aw.name,
            offset,
            weight.tag,
            weight.storage,
            aw.shape,
            weight.nbytes,
            load_type=aw.load_type,
        )
        plan.append(rec)
        weights.append(weight)
        offset += weight.nbytes
    for layer in graph.layers:
        stray = set(layer.weights) - expected_slots.get(id(layer), set())
        if stray:
            raise BinFormatError(
                f"holds weight(s) {sorted(stray)} that its params do not load",
                path=target,
                layer=layer.name,
            )
    return plan, weights


def _check_room(graph: Graph, plan: list[WeightRecord], target: str) -> None:
    """Refuse, before writing, a .bin larger than the free space of the destination's filesystem."""
    total = sum(r.nbytes for r in plan)
    folder = os.path.dirname(os.path.abspath(target))
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # the folder cannot be examined: creating the output reports why
    if total <= free:
        return
    big = max(plan, key=lambda r: r.nbytes)
    raise OutputSpaceError(
        f"{graph.source or '<param>'}: its weights take {total} bytes ({_gib(total)}) but {folder} has "
        f"{free} bytes ({_gib(free)}) free; the largest is layer {big.layer}, weight {big.slot}: "
        f"{big.nbytes} bytes ({big.storage.value}, shape {list(big.shape)})"
    )


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"
