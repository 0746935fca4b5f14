"""``gsurg diff-bin A B``: compare the weights of two ncnn .bin files, or of a .bin and a safetensors
checkpoint, pair by pair, with Polygraphy-style tolerances and reports.

Each .bin is walked with its .param (found beside it unless given: ``x.bin`` → ``x.param``), so every
weight is a ``(layer, slot)`` record at an exact offset. Pairs are made by name first, then, among what is
left, by position in file order for records of the same layer type, slot and element count. A checkpoint
side is paired through a YAML map (``weight_map``). With no .param for a .bin the two files are compared
as flat float32 arrays, with a warning. A .bin side that is certainly not a weight file (a folder, a
.param.bin, UTF-8 text such as a .param; in the flat comparison, a size that is not whole float32 words) is
refused (``formats.weight_file``).

A block-quantized weight (``diff_quant``) paired with float values — its checkpoint tensor through the map,
or the same weight stored as floats in the other .bin — is checked in quantization steps, with its scales
record, which is then no weight of its own (neither paired nor unpaired). Two quantized records are
compared as any other pair: codes and scales byte for byte.

Exit codes: 0 compared (``--fail-on-diff``: and everything passed), 1 with ``--fail-on-diff`` when a pair
fails the tolerance, has mismatched sizes, or a weight is unpaired, 2 usage, parse or I/O error.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Sequence

from graphsurgeon.check.diff_quant import QuantRecord, check_quantized, find_quantized
from graphsurgeon.check.diff_report import DiffReport, Endpoint, PairResult
from graphsurgeon.check.diff_stats import CHUNK_ELEMS, Comparator, Tolerance
from graphsurgeon.check.weight_map import load_map
from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.chunked import ChunkReader, FileSource, ValueSource
from graphsurgeon.formats.model_bin import WeightRecord, custom_layer_note, walk_bin
from graphsurgeon.formats.param_any import read_param
from graphsurgeon.formats.safetensors import Checkpoint, is_checkpoint, storage_name
from graphsurgeon.formats.weight_file import not_a_weight_file
from graphsurgeon.input_files import check_input
from graphsurgeon.transforms import TransformError


class DiffUsageError(GsurgError):
    """Bad ``diff-bin`` arguments (exit 2)."""


class DiffOptionError(DiffUsageError):
    """A bad option of ``diff_bins``. The message names options as ``{name}`` fields of ``template``: as
    text it names the parameters (``atol``, ``map_path``); the command line spells them as its flags
    (``spelled``), so this module knows no flag."""

    def __init__(self, template: str, **values: object) -> None:
        self.template = template
        self.values = values
        names = {n: n for n in _OPTIONS}
        super().__init__(template.format(**names, **values))

    def spelled(self, flags: dict[str, str]) -> str:
        """The message with each option written as ``flags`` spells it."""
        return self.template.format(**{n: flags.get(n, n) for n in _OPTIONS}, **self.values)


#: The options of ``diff_bins`` an error may name.
_OPTIONS = ("atol", "rtol", "map_path", "param_a", "param_b")


# ---- sides --------------------------------------------------------------------------------------------


def find_param(bin_path: str) -> str | None:
    """The .param beside a .bin: same stem (``x.bin`` → ``x.param``, ``x.ncnn.bin`` → ``x.ncnn.param``),
    text form first, then ``x.param.bin``."""
    stem = bin_path[: -len(".bin")] if bin_path.endswith(".bin") else bin_path
    for candidate in (stem + ".param", stem + ".param.bin"):
        if candidate != bin_path and os.path.isfile(candidate):
            return candidate
    return None


def _walk(
    param: str, bin_path: str, warnings: list[str]
) -> tuple[list[WeightRecord], dict[WeightRecord, QuantRecord]]:
    """The records of ``bin_path`` walked with ``param``, and its block-quantized weights."""
    graph = read_param(param)
    warnings.extend(graph.notes)
    note = custom_layer_note(graph)
    if note:
        warnings.append(f"{param}: {note}")
    records = walk_bin(graph, bin_path)  # BinFormatError names layer, slot and offset
    return records, find_quantized(graph, records, bin_path)


def _endpoint(rec: WeightRecord, path: str, quant: QuantRecord | None = None) -> Endpoint:
    """A record as a side of a pair; a quantized weight has the shape of the values it stands for."""
    shape = rec.view if rec.view is not None else (math.prod(rec.shape),)
    if quant is not None:
        shape = (quant.rows, quant.cols)
    return Endpoint(f"{rec.layer}.{rec.slot}", path, rec.offset, rec.storage.value, shape, rec.layer_type)


def _count(rec: WeightRecord) -> int:
    return math.prod(rec.shape)


def _source(reader: ChunkReader, rec: WeightRecord) -> FileSource:
    return FileSource.for_record(reader, rec.offset, rec.nbytes, rec.storage, _count(rec))


def pair_records(
    ra: Sequence[WeightRecord], rb: Sequence[WeightRecord]
) -> tuple[list[tuple[WeightRecord, WeightRecord, str]], list[WeightRecord], list[WeightRecord]]:
    """Pair by (layer, slot) (repeated names pair in order), then the rest by position: an in-order
    alignment of records with the same layer type, slot and element count. Returns pairs in a's file
    order and the unpaired records of each side."""

    def keyed(recs: Sequence[WeightRecord]) -> list[tuple[str, str, int]]:
        seen: dict[tuple[str, str], int] = {}
        keys = []
        for r in recs:
            k = seen[(r.layer, r.slot)] = seen.get((r.layer, r.slot), -1) + 1
            keys.append((r.layer, r.slot, k))
        return keys

    b_index = {k: i for i, k in enumerate(keyed(rb))}
    partner: dict[int, tuple[int, str]] = {}
    for i, k in enumerate(keyed(ra)):
        if k in b_index:
            partner[i] = (b_index[k], "name")
    taken_b = {j for j, _ in partner.values()}
    left_a = [i for i in range(len(ra)) if i not in partner]
    left_b = [j for j in range(len(rb)) if j not in taken_b]
    ka = [(ra[i].layer_type, ra[i].slot, _count(ra[i])) for i in left_a]
    kb = [(rb[j].layer_type, rb[j].slot, _count(rb[j])) for j in left_b]
    for block in difflib.SequenceMatcher(None, ka, kb, autojunk=False).get_matching_blocks():
        for n in range(block.size):
            partner[left_a[block.a + n]] = (left_b[block.b + n], "position")
    taken_b = {j for j, _ in partner.values()}
    pairs = [(ra[i], rb[j], how) for i, (j, how) in sorted(partner.items())]
    return (
        pairs,
        [ra[i] for i in range(len(ra)) if i not in partner],
        [r for j, r in enumerate(rb) if j not in taken_b],
    )


# ---- the comparison -----------------------------------------------------------------------------------


def _size_message(na: int, nb: int) -> str:
    return f"element counts differ: {na} in a, {nb} in b"


def _quant_pair(
    pair: tuple[Endpoint, Endpoint],
    how: str,
    check: tuple[ChunkReader, QuantRecord],
    floats: ValueSource,
    chunk: int,
    *,
    compensated: bool = False,
) -> PairResult:
    """A quantized weight (``check``: its file's reader and records) against ``floats``, the other side."""
    reader, q = check
    na, nb = pair[0].shape, pair[1].shape
    if floats.count != q.rows * q.cols:
        msg = _size_message(math.prod(na), math.prod(nb))
        return PairResult(*pair, how, None, f"{msg} (shapes {list(na)} and {list(nb)}; {q.name})")
    for ep in pair:  # a flat side (a load without a view) is read as [rows, cols]
        if len(ep.shape) == 1:
            ep.shape = (q.rows, q.cols)
    na, nb = pair[0].shape, pair[1].shape
    note = None if na == nb else f"shapes differ ({list(na)} vs {list(nb)}); compared in C order"
    checked = check_quantized(reader, q, floats, chunk, compensated=compensated)
    return PairResult(*pair, how, None, note, checked)


def diff_bins(
    a: str,
    b: str,
    *,
    param_a: str | None = None,
    param_b: str | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    map_path: str | None = None,
    chunk: int = CHUNK_ELEMS,
    jobs: int | None = None,
) -> DiffReport:
    """Compare ``a`` and ``b`` (each a .bin, or one a safetensors checkpoint with ``map_path``).

    ``chunk`` elements are read per side at a time; ``jobs`` threads (default: the idle cores, at most 4)
    share the arithmetic of chunks that differ."""
    for name, value in (("atol", atol), ("rtol", rtol)):
        if not (math.isfinite(value) and value >= 0):
            raise DiffOptionError(f"{{{name}}} must be a finite number >= 0, not {{value}}", value=value)
    ckpt_a, ckpt_b = is_checkpoint(a), is_checkpoint(b)
    if ckpt_a and ckpt_b:
        raise DiffUsageError("at most one side may be a safetensors checkpoint")
    if (ckpt_a or ckpt_b) != (map_path is not None):
        raise DiffOptionError("a safetensors side needs {map_path}, and {map_path} needs a safetensors side")
    if (ckpt_a and param_a) or (ckpt_b and param_b):
        raise DiffOptionError("{param_a}/{param_b} name the .param of a .bin side, not of a checkpoint")
    for path in (p for p, ckpt in ((a, ckpt_a), (b, ckpt_b)) if ckpt):
        if not os.path.exists(path):
            raise DiffUsageError(f"{path}: no such file")
        check_input(path, error=DiffUsageError)  # a folder, FIFO or device: refused, never waited on
    if not ckpt_a:
        param_a = param_a or find_param(a)
    if not ckpt_b:
        param_b = param_b or find_param(b)
    tol = Tolerance(float(atol), float(rtol))
    if ckpt_a or ckpt_b:
        mode = "checkpoint"
    elif param_a is None or param_b is None:
        mode = "flat"
    else:
        mode = "param"
    for path, ckpt in ((a, ckpt_a), (b, ckpt_b)):
        reason = None if ckpt else not_a_weight_file(path, flat=mode == "flat")
        if reason is not None:
            raise DiffUsageError(f"{path}: {reason}")
    report = DiffReport(a, b, param_a, param_b, map_path, mode, tol)
    comparator = Comparator(tol, chunk, jobs)
    try:
        if mode == "flat":
            _diff_flat(report, comparator)
        elif mode == "param":
            assert param_a is not None and param_b is not None
            _diff_params(report, comparator, param_a, param_b)
        else:
            _diff_checkpoint(report, comparator, ckpt_a)
    finally:
        comparator.close()
    return report


def _diff_flat(report: DiffReport, comparator: Comparator) -> None:
    missing = [p for p, q in ((report.a, report.param_a), (report.b, report.param_b)) if q is None]
    report.warnings.append(
        f"no .param found for {' and '.join(missing)} (looked beside it for the same stem with .param); "
        "comparing the two files as flat float32 arrays: weights are not paired by layer, and tags, "
        "fp16/bf16 records and padding are read as if they were float32"
    )
    ra, rb = ChunkReader(report.a), ChunkReader(report.b)
    try:
        na, nb = ra.size // 4, rb.size // 4
        ea, eb = (
            Endpoint(os.path.basename(r.path), r.path, 0, "fp32", (n,)) for r, n in ((ra, na), (rb, nb))
        )
        if ra.size != rb.size:
            report.pairs.append(
                PairResult(ea, eb, "flat", None, f"file sizes differ: {ra.size} and {rb.size} bytes")
            )
            return
        sa, sb = (
            FileSource(r, kind="f32", count=na, body=0, record_nbytes=r.size, encoding="flat")
            for r in (ra, rb)
        )
        report.pairs.append(PairResult(ea, eb, "flat", comparator.compare(sa, sb)))
    finally:
        ra.close()
        rb.close()


def _diff_params(report: DiffReport, comparator: Comparator, param_a: str, param_b: str) -> None:
    recs_a, quant_a = _walk(param_a, report.a, report.warnings)
    recs_b, quant_b = _walk(param_b, report.b, report.warnings)
    pairs, left_a, left_b = pair_records(recs_a, recs_b)
    # the scales of a weight checked in steps, or of one left unpaired, go with it
    with_weight = {c for q in quant_a.values() if q.codes in left_a for c in q.companions}
    with_weight |= {c for q in quant_b.values() if q.codes in left_b for c in q.companions}
    for x, y, _ in pairs:
        if (x in quant_a) != (y in quant_b):
            with_weight.update(quant_a[x].companions if x in quant_a else quant_b[y].companions)
    reason = "no partner by name, or by position with the same layer type, slot and size"
    for recs, quant, out, path in (
        (left_a, quant_a, report.unpaired_a, report.a),
        (left_b, quant_b, report.unpaired_b, report.b),
    ):
        for rec in recs:
            if rec in with_weight:
                continue
            ep = _endpoint(rec, path, quant.get(rec))
            ep.note = reason + _with_scales(quant.get(rec))
            out.append(ep)
    ra, rb = ChunkReader(report.a), ChunkReader(report.b)
    try:
        for x, y, how in pairs:
            qx, qy = quant_a.get(x), quant_b.get(y)
            if (qx is None) != (qy is None):  # one side quantized: checked in steps against the other
                pair = (_endpoint(x, report.a, qx), _endpoint(y, report.b, qy))
                if qx is not None:
                    result = _quant_pair(pair, how, (ra, qx), _source(rb, y), comparator.chunk)
                else:
                    assert qy is not None
                    result = _quant_pair(pair, how, (rb, qy), _source(ra, x), comparator.chunk)
                report.pairs.append(result)
                continue
            if x in with_weight or y in with_weight:
                continue  # a scales record paired by position; its weight's check covers it
            ea, eb = _endpoint(x, report.a), _endpoint(y, report.b)  # both quantized: the codes as stored
            formats = None
            if qx is not None and qy is not None and qx.fmt != qy.fmt:
                formats = f"quantized as {qx.name} in a, {qy.name} in b; codes compared byte for byte"
            if _count(x) != _count(y):
                msg = _size_message(_count(x), _count(y))
                report.pairs.append(PairResult(ea, eb, how, None, f"{msg} ({formats})" if formats else msg))
                continue
            sa, sb = _source(ra, x), _source(rb, y)
            note = None if ea.shape == eb.shape else f"shapes differ ({list(ea.shape)} vs {list(eb.shape)})"
            report.pairs.append(PairResult(ea, eb, how, comparator.compare(sa, sb), formats or note))
    finally:
        ra.close()
        rb.close()


def _with_scales(q: QuantRecord | None) -> str:
    if q is None:
        return ""
    names = " and ".join(f"{c.layer}.{c.slot}" for c in q.companions)
    return f" ({q.name}; its scales {names} go with it)"


def _diff_checkpoint(report: DiffReport, comparator: Comparator, ckpt_is_a: bool) -> None:
    assert report.map is not None
    entries = load_map(report.map)
    bin_path, ckpt_path = (report.b, report.a) if ckpt_is_a else (report.a, report.b)
    param = report.param_b if ckpt_is_a else report.param_a
    if param is None:
        option = "{param_b}" if ckpt_is_a else "{param_a}"
        raise DiffOptionError(
            "{bin}: no .param beside it; pairing with a checkpoint needs one (" + option + ")", bin=bin_path
        )
    records, quant = _walk(param, bin_path, report.warnings)
    ckpt = Checkpoint(ckpt_path)
    unpaired_bin, unpaired_ckpt = (
        (report.unpaired_b, report.unpaired_a) if ckpt_is_a else (report.unpaired_a, report.unpaired_b)
    )
    by_key = {f"{r.layer}.{r.slot}": r for r in records}
    mapped = {e.key for e in entries if e.key in by_key and e.tensor in ckpt.tensors}
    report.unmapped_tensors = len(set(ckpt.tensors) - {e.tensor for e in entries})
    for entry in entries:
        if entry.key in by_key and entry.tensor not in ckpt.tensors:
            q = quant.get(by_key[entry.key])
            ep = _endpoint(by_key[entry.key], bin_path, q)
            ep.note = (
                f"map entry {entry.key!r}: tensor {entry.tensor!r} is not in {ckpt_path}{_with_scales(q)}"
            )
            unpaired_bin.append(ep)
        elif entry.key not in by_key:
            info = ckpt.tensors.get(entry.tensor)
            file, offset = (info.file, info.offset) if info else (ckpt_path, 0)
            ec = Endpoint(
                entry.tensor,
                file,
                offset,
                storage_name(info.dtype) if info else "?",
                info.shape if info else (),
            )
            ec.note = f"map entry {entry.key!r} names no weight in {bin_path}"
            unpaired_ckpt.append(ec)
    named = {e.key for e in entries}
    scales = {c for q in quant.values() for c in q.companions}  # checked with their weight, never mapped
    for rec in records:
        if f"{rec.layer}.{rec.slot}" not in named and rec not in scales:
            ep = _endpoint(rec, bin_path, quant.get(rec))
            ep.note = "no map entry names this weight" + _with_scales(quant.get(rec))
            unpaired_bin.append(ep)
    reader = ChunkReader(bin_path)
    try:
        for entry in entries:
            if entry.key not in mapped:
                continue
            rec, info = by_key[entry.key], ckpt.tensors[entry.tensor]
            q = quant.get(rec)
            ep = _endpoint(rec, bin_path, q)
            ec = Endpoint(entry.tensor, info.file, info.offset, storage_name(info.dtype), info.shape)
            if entry.transforms:
                steps = ", ".join(t.describe() for t in entry.transforms)
                ec.note = f"{steps} applied to {entry.tensor} {list(info.shape)}"
            pair = (ec, ep) if ckpt_is_a else (ep, ec)
            try:
                src = ckpt.source(entry.tensor, entry.transforms)
            except TransformError as err:
                report.pairs.append(PairResult(*pair, "map", None, f"tensor {entry.tensor!r}: {err}"))
                continue
            ec.shape = src.shape
            if q is not None:
                checked = _quant_pair(
                    pair, "map", (reader, q), src, comparator.chunk, compensated=entry.compensated
                )
                report.pairs.append(checked)
                continue
            na, nb = pair[0].shape, pair[1].shape
            if src.count != _count(rec):
                msg = _size_message(math.prod(na), math.prod(nb))
                report.pairs.append(
                    PairResult(*pair, "map", None, f"{msg} (shapes {list(na)} and {list(nb)})")
                )
                continue
            rs = FileSource.for_record(reader, rec.offset, rec.nbytes, rec.storage, _count(rec))
            stats = comparator.compare(src, rs) if ckpt_is_a else comparator.compare(rs, src)
            note = None if na == nb else f"shapes differ ({list(na)} vs {list(nb)}); compared in C order"
            report.pairs.append(PairResult(*pair, "map", stats, note))
    finally:
        reader.close()
        ckpt.close()
