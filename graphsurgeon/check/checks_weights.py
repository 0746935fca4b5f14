"""Lint's checks on weight values with --bin: NaN/Inf, fp16 overflow, implausible magnitudes, all zero.

They scan the records of lint's exact-offset walk (``check.lint``), read in chunks so a multi-GB model is
scanned in bounded memory. The scales of a block-quantized weight get ``checks_quant``'s checks instead (a
huge scale is a block of tiny weights, not misread bits); its packed codes (raw bytes) are never read as
floats, only counted for the all-zero warning."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from graphsurgeon.check.checks_quant import check_scales, scales_kind
from graphsurgeon.check.context import LintContext
from graphsurgeon.check.findings import Finding, error, warning
from graphsurgeon.formats.chunked import ChunkReader, FileSource
from graphsurgeon.formats.model_bin import WeightRecord
from graphsurgeon.ir.weights import Storage

CHUNK = 1 << 22  # elements per read
SAMPLE = 1 << 20  # values looked at for the tag-plausibility test
SPREAD_GAP = 4.0  # binades by which the other 16-bit reading must be tighter to call the tag wrong
HUGE = 1e10  # no trained weight is this large; misread bits often are
TINY = 1e-20  # nor are most of a weight's values this small
FLOAT_STORAGES = {
    Storage.FP32,
    Storage.FP32_SCALED,
    Storage.RAW,
    Storage.FP16,
    Storage.BF16,
    Storage.QUANT_TABLE,
}


def check_weight_values(ctx: LintContext, records: list[WeightRecord]) -> Iterator[Finding]:
    """NaN/Inf per weight (fp16 infinities are overflowed conversions), implausible magnitudes, all-zero
    weights. Records are read in chunks with pread, never through the map, so RSS stays flat."""
    assert ctx.options.bin_path is not None
    reader = ChunkReader(ctx.options.bin_path)
    try:
        for rec in records:
            kind = scales_kind(ctx.graph.catalog, rec)
            if kind is None:
                yield from _check_record(reader, rec)
            else:
                yield from check_scales(reader, rec, kind)
    finally:
        reader.close()


def _check_record(reader: ChunkReader, rec: WeightRecord) -> Iterator[Finding]:
    count = math.prod(rec.shape)
    source = FileSource.for_record(reader, rec.offset, rec.nbytes, rec.storage, count)
    nan = inf = nonzero = tiny = 0
    peak = 0.0
    sample: np.ndarray | None = None
    for start in range(0, count, CHUNK):
        chunk, _ = source.read(start, min(count, start + CHUNK))
        if sample is None:
            sample = chunk[:SAMPLE].copy()
        if rec.storage in FLOAT_STORAGES:
            finite = np.abs(chunk[np.isfinite(chunk)])
            nans = int(np.count_nonzero(np.isnan(chunk)))
            nan += nans
            inf += chunk.size - finite.size - nans
            tiny += int(np.count_nonzero((finite > 0) & (finite < TINY)))
            peak = max(peak, float(finite.max(initial=0.0)))
        nonzero += int(np.count_nonzero(chunk))
    where = {"layer": rec.layer, "weight": rec.slot, "offset": rec.offset}
    swapped = _other_half_precision(sample, rec.storage) if sample is not None and nonzero else None
    if swapped is not None:
        yield error("weight-magnitude", swapped, **where)
    elif peak > HUGE or (nonzero and tiny * 2 > nonzero):
        yield error(
            "weight-magnitude",
            f"values are not plausible weights (largest |w| {peak:.3g}, {tiny} of {nonzero} nonzero "
            f"below {TINY:g}): a wrong storage tag (fp16 data tagged bf16?) or shifted data",
            **where,
        )
    if rec.storage is Storage.FP16 and inf:
        yield error(
            "fp16-overflow",
            f"{inf} of {count} fp16 values are infinite: values beyond ±65504 overflowed when the "
            "weight was converted to fp16",
            **where,
        )
    elif nan or inf:
        yield error(
            "weight-nonfinite",
            f"{nan} NaN and {inf} Inf values in {count} ({rec.storage.value}); every output they touch "
            "turns NaN",
            **where,
        )
    if nonzero == 0:
        yield warning("weight-all-zero", f"all {count} values are zero", **where)


def _log2_iqr(values: np.ndarray) -> float | None:
    """Interquartile range of log2|w| over nonzero finite values: how many binades a weight spans. A trained
    weight spans about two; 16-bit data read under the other 16-bit tag spans eight or more."""
    mags = np.abs(values[np.isfinite(values) & (values != 0)]).astype(np.float64)
    if mags.size < 256:
        return None
    q25, q75 = np.percentile(np.log2(mags), [25, 75])
    return float(q75 - q25)


def _other_half_precision(sample: np.ndarray, storage: Storage) -> str | None:
    """If fp16 data sits under a bf16 tag (or the reverse), the same bits read the other way form a far
    tighter, plausible distribution: name that case."""
    if storage is Storage.FP16:
        bits = sample.astype("<f2").view("<u2")
        other, other_name = (bits.astype(np.uint32) << 16).view(np.float32), "bf16"
    elif storage is Storage.BF16:
        bits = (sample.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        other, other_name = bits.view(np.float16).astype(np.float32), "fp16"
    else:
        return None
    stated, alternative = _log2_iqr(sample), _log2_iqr(other)
    if stated is None or alternative is None or stated - alternative <= SPREAD_GAP or alternative > 6:
        return None
    return (
        f"read as {storage.value} the values span {stated:.1f} binades (quartiles of log2|w|), read as "
        f"{other_name} {alternative:.1f}: this looks like {other_name} data under a {storage.value} tag"
    )
