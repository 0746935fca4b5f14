"""Lint's checks on ncnn's weight-only block quantization (Gemm ``quantize_term`` 4xy / 6xy / 8xy).

Params (no .bin): the quantize_term values ncnn 1.0.20261020's ``Gemm::load_param`` refuses, and the layer
forms it refuses for a block-quantized B. Read from ``src/layer/gemm.cpp``: 4, 5 and 6 are refused, and so
is any term from 400 up that is not ``bits * 100 + format * 10 + block`` with bits 4/6/8, format 0 (block
scales) or 1 (block scales and per-input scales), block 0/1/2 (32/64/128 values). A block-quantized Gemm
must read A from a bottom and B from the .bin, stored N x K (``constantA=0 constantB=1 transB=1``); A may be
transposed, the output 3-D (N1M), packed or transposed only at 8 bits, and its element type is 0 or 1.
Anything else makes ``load_param`` fail with "Gemm unsupported weight block quantize".

Values (with --bin): ncnn computes a weight as ``code * (1 / scale)`` per (row, block), so a zero or NaN
block scale gives NaN/Inf outputs and an infinite one zeroes its block (NaN in the 8-bit kernel); a
negative one flips its block's sign (ncnn computes with it; no quantizer writes one). Input scales multiply
the input, so a NaN or Inf one spoils every output.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from graphsurgeon.check.findings import Finding, error, warning
from graphsurgeon.formats.chunked import ChunkReader, FileSource
from graphsurgeon.formats.model_bin import WeightRecord
from graphsurgeon.ir.graph import Layer
from graphsurgeon.schema.catalog import Catalog

CHUNK = 1 << 20  # scales per read
TERM_REFUSED = "load_param fails: 'Gemm unsupported quantize_term {term}'"
FORM_REFUSED = "load_param fails: 'Gemm unsupported weight block quantize'"
#: The quantize_term values below 400 that ncnn refuses (the others are its plain int8 Gemm).
REFUSED_SMALL_TERMS = (4, 5, 6)
#: Per param of a block-quantized Gemm: the values load_param accepts at 4 and 6 bits, and at 8 bits
#: (None: any value, as far as this check goes).
ACCEPTED_FORM: Mapping[str, tuple[frozenset[int], frozenset[int] | None]] = {
    "constantA": (frozenset({0}), frozenset({0})),
    "constantB": (frozenset({1}), frozenset({1})),
    "transB": (frozenset({1}), frozenset({1})),
    "transA": (frozenset({0}), frozenset({0, 1})),
    "output_N1M": (frozenset({0}), None),
    "output_elempack": (frozenset({0}), None),
    "output_elemtype": (frozenset({0, 1}), frozenset({0, 1})),
    "output_transpose": (frozenset({0}), frozenset({0, 1})),
}


def _at(layer: Layer) -> dict[str, object]:
    return {"layer": layer.name, "line": layer.line or None}


def check_gemm_block_quantize(layer: Layer) -> Iterator[Finding]:
    """A Gemm whose quantize_term, or whose form under a block-quantizing term, load_param refuses."""
    spec, env = layer.spec, layer.env()
    assert spec is not None
    term, term_id = env["quantize_term"], spec.param("quantize_term").id
    if term in REFUSED_SMALL_TERMS or (term >= 400 and not env["weight_block_quantize"]):
        yield error(
            "gemm-quantize-term",
            f"quantize_term ({term_id}=) {term} {_why_refused(term)}: "
            f"ncnn's {TERM_REFUSED.format(term=term)}",
            **_at(layer),
        )
        return
    if not env["weight_block_quantize"]:
        return
    bits, size = env["weight_block_quantize_bits"], env["weight_block_quantize_block_size"]
    what = f"block-quantized B ({term_id}={term}: {bits}-bit, blocks of {size})"
    for name, (narrow, wide) in ACCEPTED_FORM.items():
        accepted = wide if bits == 8 else narrow
        value = env[name]
        if accepted is None or value in accepted:
            continue
        yield error(
            "gemm-block-quantize",
            f"{what} needs {name} ({spec.param(name).id}=) {_values(narrow, wide)}, not {value}: "
            f"ncnn's {FORM_REFUSED}",
            **_at(layer),
        )


def _why_refused(term: int) -> str:
    if term in REFUSED_SMALL_TERMS:
        return "is none of ncnn's quantizations (it refuses 4, 5 and 6)"
    bits, fmt, block = term // 100, term % 100 // 10, term % 10
    wrong = []
    if bits not in (4, 6, 8):
        wrong.append(f"bits {bits} (hundreds) is not 4, 6 or 8")
    if fmt not in (0, 1):
        wrong.append(f"format digit {fmt} (tens) is not 0 or 1")
    if block not in (0, 1, 2):
        wrong.append(f"block digit {block} (ones) is not 0, 1 or 2 (32, 64, 128 values)")
    return "is no weight block quantization: " + "; ".join(wrong)


def _values(narrow: frozenset[int], wide: frozenset[int] | None) -> str:
    def spell(values: frozenset[int]) -> str:
        return " or ".join(str(v) for v in sorted(values))

    if wide == narrow:
        return spell(narrow)
    if wide is None:
        return f"{spell(narrow)} at 4 and 6 bits (any at 8)"
    return f"{spell(narrow)} at 4 and 6 bits ({spell(wide)} at 8)"


# --- scale values (--bin) ---------------------------------------------------------------------------------


def scales_kind(catalog: Catalog, rec: WeightRecord) -> str | None:
    """``"block"`` for a block-scales record, ``"input"`` for a per-input scales record, else None."""
    spec = catalog.get(rec.layer_type)
    wq = spec.weight_quantize if spec is not None else None
    if wq is not None and rec.slot == wq.scales:
        return "block"
    if wq is not None and rec.slot == wq.input_scales:
        return "input"
    return None


@dataclass
class _Tally:
    """Counts over a scales record, and the first bad (and first negative) scale's index and value."""

    nan: int = 0
    inf: int = 0
    zero: int = 0
    negative: int = 0
    first_bad: tuple[int, float] | None = None
    first_negative: tuple[int, float] | None = None

    def add(self, start: int, values: np.ndarray, count_zero: bool) -> None:
        nan, inf = np.isnan(values), np.isinf(values)
        zero = values == 0 if count_zero else np.zeros(values.shape, dtype=bool)
        negative = np.isfinite(values) & (values < 0)
        self.nan += int(nan.sum())
        self.inf += int(inf.sum())
        self.zero += int(zero.sum())
        self.negative += int(negative.sum())
        bad = nan | inf | zero
        if self.first_bad is None and bad.any():
            i = int(np.argmax(bad))
            self.first_bad = (start + i, float(values[i]))
        if self.first_negative is None and negative.any():
            i = int(np.argmax(negative))
            self.first_negative = (start + i, float(values[i]))

    @property
    def bad(self) -> int:
        return self.nan + self.inf + self.zero

    def kinds(self) -> str:
        """The bad scales by kind, e.g. ``2 NaN, 1 zero``."""
        counts = ((self.nan, "NaN"), (self.inf, "Inf"), (self.zero, "zero"))
        return ", ".join(f"{n} {name}" for n, name in counts if n)


def _tally(reader: ChunkReader, rec: WeightRecord, count: int, count_zero: bool) -> _Tally:
    source = FileSource.for_record(reader, rec.offset, rec.nbytes, rec.storage, count)
    tally = _Tally()
    for start in range(0, count, CHUNK):
        values, _ = source.read(start, min(count, start + CHUNK))
        tally.add(start, values, count_zero)
    return tally


def check_scales(reader: ChunkReader, rec: WeightRecord, kind: str) -> Iterator[Finding]:
    """The scales record ``rec`` (``kind`` as ``scales_kind`` says): finite, and block scales non-zero."""
    count = int(np.prod(rec.shape))
    tally = _tally(reader, rec, count, count_zero=kind == "block")
    where = {"layer": rec.layer, "weight": rec.slot, "offset": rec.offset}
    if kind == "block":
        yield from _block_findings(rec, tally, count, where)
    else:
        yield from _input_findings(rec, tally, count, where)


def _place(rec: WeightRecord, index: int, kind: str) -> str:
    byte = rec.offset + 4 * index
    if kind == "block":
        blocks = rec.shape[-1] if len(rec.shape) > 1 else 1
        return f"byte offset {byte} (row {index // blocks}, block {index % blocks})"
    return f"byte offset {byte} (input {index})"


def _block_findings(rec: WeightRecord, t: _Tally, count: int, where: dict[str, object]) -> Iterator[Finding]:
    if t.first_bad is not None:
        index, value = t.first_bad
        yield error(
            "quant-scale",
            f"{t.bad} of {count} block scales are NaN, Inf or zero ({t.kinds()}); the first, {value:g}, at "
            f"{_place(rec, index, 'block')}: ncnn computes each weight as "
            "code * (1 / scale), so a zero or NaN scale turns the outputs the block reaches into NaN/Inf and "
            "an Inf one drops the block (NaN in the 8-bit kernel)",
            **where,
        )
    if t.first_negative is not None:
        index, value = t.first_negative
        yield warning(
            "quant-scale",
            f"{t.negative} of {count} block scales are negative; the first, {value:g}, at "
            f"{_place(rec, index, 'block')}: ncnn computes with them, which flips the sign of those blocks' "
            "weights; no quantizer writes a negative scale",
            **where,
        )


def _input_findings(rec: WeightRecord, t: _Tally, count: int, where: dict[str, object]) -> Iterator[Finding]:
    if t.first_bad is not None:
        index, value = t.first_bad
        yield error(
            "quant-input-scale",
            f"{t.bad} of {count} input scales are NaN or Inf ({t.kinds()}); the first, {value:g}, at "
            f"{_place(rec, index, 'input')}: ncnn multiplies the input by them, so every output turns NaN "
            "or wrong",
            **where,
        )
    if t.first_negative is not None:
        index, value = t.first_negative
        yield warning(
            "quant-input-scale",
            f"{t.negative} of {count} input scales are negative; the first, {value:g}, at "
            f"{_place(rec, index, 'input')}: ncnn multiplies the input by them (its sign flips), and the "
            "8-bit kernel sizes each block's activation range from |x| * scale, so there such an input "
            "can saturate",
            **where,
        )
