"""``diff-bin`` of block-quantized weights: the codes of a quantized Gemm ``B`` (ncnn R1020's weight-only
block quantization, ``quant.blocks``) checked in quantization steps against the float values they stand for.

A weight is block-quantized when its layer type's catalog entry has ``weight_quantize``, the record is that
entry's weight slot, stored as bytes, and the layer's term param selects a format
(``BlockFormat.from_quantize_term``). Its scales record (the entry's ``scales`` slot of the same layer) is
read with it and is no weight of its own.

**The check.** Each stored value is ``code / scale``. Against the float value ``x`` it was made from, it
must be the level nearest ``x`` (``|x * scale - code| <= 1/2``, ``quant.blocks.error_in_steps``'s bound), or
``+-qmax`` on ``x``'s side when ``x`` lies beyond the block's range (a clipping quantizer saturates outliers
on purpose). Every scale must be finite and > 0; a block whose scale is not is reported as the scale's
fault, and its values are not checked. A float value that is NaN or infinite cannot be matched by any code
and counts as wrong. With per-input scales (quantize_term format digit 1, AWQ's form) the record stands for
``x / input_scale`` column by column, and the check is made there; an input scale that is not finite and
> 0 fails the weight. Codes a weight map marks ``quantized: error-compensated`` (GPTQ's) are not meant to
be the nearest levels: their largest error and off-level count are reported, and only their scales can
fail. The figures per weight: the largest error in steps of the unsaturated values, the
saturated count, the wrong count with the first wrong value's row, column, block and byte, and the bad
scales with the first one's row, block and byte. Rows are read a chunk at a time, so memory does not grow
with the matrix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsurgeon.errors import BinFormatError
from graphsurgeon.formats.chunked import ChunkReader, ValueSource
from graphsurgeon.formats.model_bin import WeightRecord, planned_loads
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.weights import Storage
from graphsurgeon.quant.blocks import BlockFormat, error_in_steps, unpack
from graphsurgeon.schema.catalog import CatalogError
from graphsurgeon.schema.expr import evaluate_size


@dataclass(frozen=True, slots=True)
class QuantRecord:
    """A block-quantized weight of a walked .bin: its codes record, its layer's scales record, the format,
    and the ``[rows, cols]`` of the values it stands for."""

    codes: WeightRecord
    scales: WeightRecord
    fmt: BlockFormat
    rows: int
    cols: int
    input_scales: WeightRecord | None = None  # format digit 1: the per-input scales record

    @property
    def name(self) -> str:
        extra = " + input scales" if self.input_scales is not None else ""
        return f"int{self.fmt.bits} block {self.fmt.block_size}{extra}"

    @property
    def companions(self) -> tuple[WeightRecord, ...]:
        """The records read with the codes, which are no weights of their own."""
        return (self.scales,) if self.input_scales is None else (self.scales, self.input_scales)


def find_quantized(
    graph: Graph, records: Sequence[WeightRecord], path: str
) -> dict[WeightRecord, QuantRecord]:
    """The block-quantized weights among ``records`` (``walk_bin(graph, path)``'s), by their codes record.

    BinFormatError (exit 2), naming the file, layer, weight and offset, when such a weight's scales record
    is missing or its records do not have the sizes its format gives (which a valid .param cannot cause)."""
    by_layer: dict[int, dict[str, WeightRecord]] = {}
    layers = {}
    for (layer, _), rec in zip(planned_loads(graph), records, strict=True):  # the walk follows the plan
        by_layer.setdefault(id(layer), {})[rec.slot] = rec
        layers[id(layer)] = layer
    found: dict[WeightRecord, QuantRecord] = {}
    for key, slots in by_layer.items():
        layer = layers[key]
        wq = layer.spec.weight_quantize if layer.spec is not None else None
        codes = slots.get(wq.weight) if wq is not None else None
        if wq is None or codes is None or codes.storage is not Storage.BYTES:
            continue
        env = layer.env()
        term = int(env[wq.term])
        parsed = BlockFormat.parse_term(term)
        if parsed is None:
            continue
        fmt, has_inputs = parsed
        try:
            rows, cols = evaluate_size(wq.rows, env), evaluate_size(wq.cols, env)
        except CatalogError as err:
            raise _error(codes, path, f"cannot size this quantized weight from its params: {err}") from None
        scales = slots.get(wq.scales)
        if scales is None:
            msg = (
                f"block-quantized ({wq.term}={term}) but the walk found no {wq.scales} record for its scales"
            )
            raise _error(codes, path, msg)
        inputs = slots.get(wq.input_scales) if has_inputs and wq.input_scales is not None else None
        if has_inputs and inputs is None:
            msg = f"{wq.term}={term} reads per-input scales but the walk found no {wq.input_scales} record"
            raise _error(codes, path, msg)
        want_codes = (rows, fmt.packed_row_bytes(cols))
        want_scales = (rows, fmt.block_count(cols))
        wanted = [(codes, want_codes), (scales, want_scales)] + ([(inputs, (cols,))] if inputs else [])
        for rec, want in wanted:
            if math.prod(rec.shape) != math.prod(want):
                msg = (
                    f"holds {math.prod(rec.shape)} elements {list(rec.shape)}; {fmt.bits}-bit blocks of "
                    f"{fmt.block_size} over [{rows}, {cols}] need {list(want)}"
                )
                raise _error(rec, path, msg)
        found[codes] = QuantRecord(codes, scales, fmt, rows, cols, inputs)
    return found


def _error(rec: WeightRecord, path: str, message: str) -> BinFormatError:
    return BinFormatError(message, path=path, layer=rec.layer, slot=rec.slot, offset=rec.offset)


@dataclass(frozen=True, slots=True)
class WrongValue:
    """The first wrong value: its place, the code stored, and its float value in steps (``x * scale``)."""

    row: int
    col: int
    block: int
    offset: int  # the byte holding the code's first bit
    code: int
    steps: float

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("row", "col", "block", "offset", "code", "steps")}


@dataclass(frozen=True, slots=True)
class BadScale:
    """The first scale that is not finite and > 0."""

    row: int
    block: int
    offset: int
    value: float

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "block": self.block, "offset": self.offset, "value": self.value}


@dataclass(slots=True)
class QuantStats:
    """One quantized weight checked against its float values."""

    weight: str  # "layer.slot" of the codes record
    format: str  # "int8 block 64"
    bits: int
    block_size: int
    rows: int
    cols: int
    scales: str  # "layer.slot" of the scales record
    scales_offset: int
    max_steps: float = 0.0  # largest |x * scale - code| over the unsaturated, checked values
    saturated: int = 0
    wrong: int = 0
    first_wrong: WrongValue | None = None
    bad_scales: int = 0
    first_bad_scale: BadScale | None = None
    bad_input_scales: int = 0  # per-input scales that are not finite and > 0
    compensated: bool = False  # error-compensated codes: off-level values are expected, not wrong
    off_level: int = 0  # compensated: values that are not the level nearest their float value

    @property
    def passed(self) -> bool:
        return self.wrong == 0 and self.bad_scales == 0 and self.bad_input_scales == 0

    def problems(self) -> list[str]:
        """What is wrong, one sentence each (none when it passed)."""
        out = []
        w = self.first_wrong
        if w is not None:
            out.append(
                f"{self.wrong} of {self.rows * self.cols} value(s) are neither the level nearest the float "
                f"value nor saturated on its side; first {self.weight} row {w.row}, column {w.col} "
                f"(block {w.block}, byte offset {w.offset}): code {w.code}, float value {w.steps:.6g} steps"
            )
        if self.bad_input_scales:
            out.append(f"{self.bad_input_scales} input scale(s) are not finite and > 0")
        s = self.first_bad_scale
        if s is not None:
            out.append(
                f"{self.bad_scales} scale(s) are not finite and > 0 (their blocks are not checked); first "
                f"{self.scales} row {s.row}, block {s.block} (offset {s.offset}): {s.value!r}"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "format": self.format,
            "bits": self.bits,
            "block_size": self.block_size,
            "shape": [self.rows, self.cols],
            "max_steps": self.max_steps,
            "saturated": self.saturated,
            "wrong": self.wrong,
            "first_wrong": None if self.first_wrong is None else self.first_wrong.to_json(),
            "scales": self.scales,
            "scales_offset": self.scales_offset,
            "bad_scales": self.bad_scales,
            "first_bad_scale": None if self.first_bad_scale is None else self.first_bad_scale.to_json(),
            "bad_input_scales": self.bad_input_scales,
            "compensated": self.compensated,
            "off_level": self.off_level,
        }


def check_quantized(
    reader: ChunkReader, q: QuantRecord, floats: ValueSource, chunk: int, *, compensated: bool = False
) -> QuantStats:
    """Check ``q`` (read with ``reader``, its file's) against ``floats`` (``rows * cols`` values in C
    order, from another reader), ``chunk`` values' worth of rows at a time.

    With per-input scales the codes stand for ``x / input_scale`` (the matrix ncnn multiplies the scaled
    input by), so that is what they are checked against. ``compensated`` codes (GPTQ's, as a weight map
    marks them) are deliberately not the nearest levels: their values are measured (largest error in
    steps, how many are off their nearest level) but only the scales can fail."""
    fmt, n, k = q.fmt, q.rows, q.cols
    if floats.count != n * k:
        raise ValueError("sources of different sizes")
    packed, nb = fmt.packed_row_bytes(k), fmt.block_count(k)
    stats = QuantStats(
        f"{q.codes.layer}.{q.codes.slot}",
        q.name + (", error-compensated" if compensated else ""),
        fmt.bits,
        fmt.block_size,
        n,
        k,
        f"{q.scales.layer}.{q.scales.slot}",
        q.scales.offset,
        compensated=compensated,
    )
    divisor = None
    if q.input_scales is not None:
        raw_inputs = reader.read(q.input_scales.offset, k * 4)
        divisor = np.frombuffer(raw_inputs, dtype="<f4").astype(np.float32)
        good = np.isfinite(divisor) & (divisor > 0)
        stats.bad_input_scales = int(k - np.count_nonzero(good))
        divisor = np.where(good, divisor, np.float32(1.0)).astype(np.float32)
    step = max(1, chunk // k)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        values, _ = floats.read(r0 * k, r1 * k)
        x = values.reshape(r1 - r0, k)
        if divisor is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                x = (x.astype(np.float32) / divisor[None, :]).astype(np.float32)
        raw = reader.read(q.scales.offset + r0 * nb * 4, (r1 - r0) * nb * 4)
        scales = np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(r1 - r0, nb)  # a copy
        codes = np.frombuffer(reader.read(q.codes.offset + r0 * packed, (r1 - r0) * packed), np.uint8)
        _fold(stats, q, r0, x, codes.reshape(r1 - r0, packed), scales)
    if compensated:
        stats.off_level, stats.wrong, stats.first_wrong = stats.wrong, 0, None
    return stats


def _fold(
    stats: QuantStats, q: QuantRecord, r0: int, x: np.ndarray, codes: np.ndarray, scales: np.ndarray
) -> None:
    """Check rows ``r0..`` (values ``x``, their codes and scales) into ``stats``."""
    fmt, k = q.fmt, q.cols
    good_scale = np.isfinite(scales) & (scales > 0)
    finite = np.isfinite(x)
    extra_wrong = None
    if good_scale.all() and finite.all():
        steps = error_in_steps(x, codes, scales, fmt)
    else:
        # Leave out the blocks of bad scales (the scale is the fault) and make non-finite values wrong by
        # hand: each such value is replaced by its own level, which error_in_steps finds exact.
        bad_rows, bad_blocks = np.nonzero(~good_scale)
        if bad_rows.size:
            if stats.first_bad_scale is None:
                r, b = int(bad_rows[0]), int(bad_blocks[0])
                offset = q.scales.offset + ((r0 + r) * scales.shape[1] + b) * 4
                stats.first_bad_scale = BadScale(r0 + r, b, offset, float(scales[r, b]))
            stats.bad_scales += int(bad_rows.size)
        safe = np.where(good_scale, scales, np.float32(1.0)).astype(np.float32)
        per_value = np.repeat(good_scale, fmt.block_size, axis=1)[:, :k]
        levels = unpack(codes, fmt.bits, k).astype(np.float64)
        left_out = ~per_value | ~finite
        stand_in = levels / np.repeat(safe.astype(np.float64), fmt.block_size, axis=1)[:, :k]
        steps = error_in_steps(np.where(left_out, stand_in, x), codes, safe, fmt)
        extra_wrong = per_value & ~finite
    stats.max_steps = max(stats.max_steps, steps.max_steps)
    stats.saturated += steps.saturated
    first = steps.first_bad
    stats.wrong += steps.bad
    if extra_wrong is not None and extra_wrong.any():
        stats.wrong += int(extra_wrong.sum())
        r, c = (int(i) for i in np.argwhere(extra_wrong)[0])
        if first is None or (r, c) < first:
            first = (r, c)
    if first is not None and stats.first_wrong is None:
        r, c = first
        code = int(unpack(codes[r : r + 1], fmt.bits, k)[0, c])
        with np.errstate(invalid="ignore", over="ignore"):
            in_steps = float(np.float64(x[r, c]) * np.float64(scales[r, c // fmt.block_size]))
        offset = q.codes.offset + (r0 + r) * codes.shape[1] + c * fmt.bits // 8
        stats.first_wrong = WrongValue(r0 + r, c, c // fmt.block_size, offset, code, in_steps)
