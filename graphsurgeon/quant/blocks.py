"""ncnn's weight-only block quantization (R1020 Gemm ``quantize_term`` 4xy / 6xy / 8xy), in numpy.

The format, as ``src/layer/gemm.cpp`` of ncnn 1.0.20261020 reads it (``load_model`` and
``forward_weight_block_quantize``):

* a weight ``W[N, K]`` (torch Linear layout, Gemm ``transB=1``) is cut along K into blocks of ``block_size``
  (32, 64 or 128; the last block may be shorter);
* each element is a signed ``bits``-bit integer ``q`` (two's complement) and its value is ``q / scale`` with
  one float32 ``scale`` per (row, block); so ``scale`` is "levels per unit", not a step size;
* row ``n`` is ``ceil(K * bits / 8)`` bytes, element ``k`` at bit offset ``k * bits``, least significant bit
  first (``gemm_weight_block_quantize_unpack``); rows follow each other with no padding, and the whole
  record is padded to 4 bytes by the loader's byte types;
* the scales follow as ``N x block_count`` raw float32.

gsurg's quantizer is symmetric, ``|q| <= 2**(bits-1) - 1`` (the most negative code is never written, so the
grid is symmetric around zero), rounding half away from zero. Two ways to choose a block's scale:

* ``minmax``: the block's largest magnitude maps to the largest level — no value is clipped, and every value
  is within half a step of its level;
* ``clip``: the scale among ``CLIP_CANDIDATES`` shrinkings of the min-max range that gives the smallest sum
  of squared errors over the block — a few outliers are saturated so the rest get finer steps. Min-max is
  always a candidate, so ``clip``'s squared error is never larger. (ncnn's own ``ncnnllm2int`` offers the
  same two, ``minmax`` and ``mseclip``; on the same weights its ``minmax`` gives byte-identical files, and
  its ``mseclip`` the same scales but for float32 near-ties: benchmarks/README.md.)

A block of zeros gets scale 1 and all-zero codes (dividing by its zero range would give inf).

Format digit 1 (``bits * 100 + 10 + block code``) adds ``K`` raw float32 *input scales* after the block
scales: ncnn multiplies input ``k`` by ``input_scale[k]`` before the codes, so the stored matrix is
``W / input_scale`` (``quant.awq`` writes it). ``quant.gptq`` writes codes of format 0 or 1 that are not
the nearest levels of the weights but cancel the layer's output error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

QuantMethod = Literal["minmax", "clip"]
METHODS: tuple[QuantMethod, ...] = ("minmax", "clip")
#: What a storage policy's ``method: auto`` picks per bit width: ``clip`` at 4 and 6 bits, where it lowers
#: the squared error (x0.81-0.93 of min-max at 4 bits, x0.98 at 6: benchmarks/bench_quantizer.py), and
#: ``minmax`` at 8 bits, where the search kept min-max's scale in every one of 1.84M blocks measured (its
#: mildest clipping costs ~10 step² on the largest value and saves ~0.5 step²), so the files are the
#: same at a seventh of the time.
AUTO_METHOD: dict[int, QuantMethod] = {4: "clip", 6: "clip", 8: "minmax"}
BITS = (4, 6, 8)
BLOCK_SIZES = (32, 64, 128)
#: The fractions of a block's min-max range the ``clip`` search tries (1.0 is min-max itself).
CLIP_CANDIDATES = tuple(1.0 - 0.025 * i for i in range(21))  # 1.0, 0.975, ..., 0.5
#: Rows quantized at once, so the working arrays of a large matrix stay bounded (~rows * K * 8 bytes).
ROW_CHUNK = 1024


@dataclass(frozen=True, slots=True)
class BlockFormat:
    """A block-quantization format: ``bits`` per value and ``block_size`` values per scale, no input scale
    (ncnn's format code 0)."""

    bits: int
    block_size: int

    def __post_init__(self) -> None:
        if self.bits not in BITS:
            raise ValueError(f"block quantization has 4, 6 or 8 bits, not {self.bits}")
        if self.block_size not in BLOCK_SIZES:
            raise ValueError(f"block quantization blocks are 32, 64 or 128 values, not {self.block_size}")

    @property
    def qmax(self) -> int:
        """The largest code magnitude written: 7, 31 or 127."""
        return (1 << (self.bits - 1)) - 1

    @property
    def quantize_term(self) -> int:
        """Gemm's param 18 for this format: bits * 100 + block-size code (0, 1, 2 for 32, 64, 128)."""
        return self.bits * 100 + BLOCK_SIZES.index(self.block_size)

    @classmethod
    def from_quantize_term(cls, term: int) -> BlockFormat | None:
        """The format a Gemm ``quantize_term`` selects, or None when it is not weight-block quantization
        without input scales (format digit 0)."""
        parsed = cls.parse_term(term)
        return parsed[0] if parsed is not None and not parsed[1] else None

    @classmethod
    def parse_term(cls, term: int) -> tuple[BlockFormat, bool] | None:
        """The format a ``quantize_term`` selects and whether it reads per-input scales (format digit 1),
        or None when it is no weight-block quantization."""
        bits, fmt, code = term // 100, term % 100 // 10, term % 10
        if bits not in BITS or fmt not in (0, 1) or code > 2 or term < 0:
            return None
        return cls(bits, BLOCK_SIZES[code]), fmt == 1

    def packed_row_bytes(self, k: int) -> int:
        """Bytes of one packed row of ``k`` values."""
        return (k * self.bits + 7) // 8

    def block_count(self, k: int) -> int:
        return (k + self.block_size - 1) // self.block_size


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's ``roundf`` of float32 values: half away from zero. In double, where ``|x| + 0.5`` is exact
    (in float32, 0.49999997 + 0.5 rounds up to 1.0 and would give code 1 where ``roundf`` gives 0)."""
    wide = np.asarray(x, dtype=np.float64)
    return np.sign(wide) * np.floor(np.abs(wide) + 0.5)


def _blocked(w: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """``w[R, K]`` as ``[R, block_count, block_size]`` float32, the short last block padded with zeros
    (a zero neither moves a block's range nor adds to its error)."""
    rows, k = w.shape
    nb = fmt.block_count(k)
    out = np.zeros((rows, nb * fmt.block_size), dtype=np.float32)
    out[:, :k] = w
    return out.reshape(rows, nb, fmt.block_size)


def _codes(blocks: np.ndarray, scales: np.ndarray, qmax: int) -> np.ndarray:
    return np.clip(_round_half_away(blocks * scales[..., None]), -qmax, qmax)


def choose_scales(w: np.ndarray, fmt: BlockFormat, method: QuantMethod) -> np.ndarray:
    """The float32 scales ``[R, block_count]`` for the rows of ``w[R, K]`` by ``method``.

    The ``clip`` search rounds half to even and sums in float32 (the final codes round half away from
    zero): the two differ only on exact ties, which move a block's error by far less than one candidate
    step does, and the search runs in place, about six times faster."""
    if method not in METHODS:
        raise ValueError(f"quantization method must be one of {list(METHODS)}, not {method!r}")
    blocks = _blocked(np.asarray(w, dtype=np.float32), fmt)
    absmax = np.abs(blocks).max(axis=2)
    zero = absmax == 0
    safe = np.where(zero, 1.0, absmax).astype(np.float32)
    qmax = np.float32(fmt.qmax)
    best = (qmax / safe).astype(np.float32)
    if method == "clip":
        work = np.empty_like(blocks)
        best_err = _sq_error(blocks, best, qmax, work)
        for frac in CLIP_CANDIDATES[1:]:
            cand = (qmax / (safe * np.float32(frac))).astype(np.float32)
            err = _sq_error(blocks, cand, qmax, work)
            better = err < best_err
            best = np.where(better, cand, best)
            best_err = np.where(better, err, best_err)
    return np.where(zero, np.float32(1.0), best).astype(np.float32)


def _sq_error(blocks: np.ndarray, scales: np.ndarray, qmax: np.float32, work: np.ndarray) -> np.ndarray:
    """Per block, the sum of squared errors of quantizing ``blocks`` with ``scales`` (``work``: scratch of
    the blocks' shape)."""
    s = scales[..., None]
    np.multiply(blocks, s, out=work)
    np.rint(work, out=work)
    np.clip(work, -qmax, qmax, out=work)
    np.divide(work, s, out=work)
    np.subtract(blocks, work, out=work)
    np.square(work, out=work)
    return work.sum(axis=2, dtype=np.float32)


def codes(w: np.ndarray, scales: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """The signed codes ``[R, K]`` (int8) of ``w[R, K]`` under ``scales[R, block_count]``."""
    k = w.shape[1]
    q = _codes(_blocked(np.asarray(w, dtype=np.float32), fmt), scales.astype(np.float32), fmt.qmax)
    return q.reshape(w.shape[0], -1)[:, :k].astype(np.int8)


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Signed codes ``q[R, K]`` packed as ncnn reads them: ``[R, ceil(K * bits / 8)]`` uint8, value ``k`` at
    bit ``k * bits`` of its row, least significant bit first."""
    rows, k = q.shape
    if bits == 8:
        return np.ascontiguousarray(q.astype(np.int8).view(np.uint8))
    low = (q.astype(np.int16) & ((1 << bits) - 1)).astype(np.uint8)  # two's complement, bits wide
    planes = np.unpackbits(low[..., None], axis=2, bitorder="little")[..., :bits]  # [R, K, bits]
    flat = planes.reshape(rows, k * bits)
    return np.packbits(flat, axis=1, bitorder="little")


def unpack(packed: np.ndarray, bits: int, k: int) -> np.ndarray:
    """The signed codes ``[R, k]`` (int8) of packed rows ``[R, ceil(k * bits / 8)]``; the inverse of
    ``pack``, sign-extended as ncnn's ``gemm_weight_block_quantize_unpack`` does."""
    packed = np.asarray(packed, dtype=np.uint8)
    rows = packed.shape[0]
    if bits == 8:
        return np.ascontiguousarray(packed[:, :k]).view(np.int8)
    flat = np.unpackbits(packed, axis=1, bitorder="little")[:, : k * bits].reshape(rows, k, bits)
    weights = (1 << np.arange(bits, dtype=np.int16)).astype(np.int16)
    v = (flat.astype(np.int16) * weights).sum(axis=2)
    sign = 1 << (bits - 1)
    return ((v ^ sign) - sign).astype(np.int8)


def dequantize(packed: np.ndarray, scales: np.ndarray, fmt: BlockFormat, k: int) -> np.ndarray:
    """The float32 values ``[R, k]`` that packed rows and their scales stand for: ``q / scale``, computed
    as ncnn's reference kernel does (``q * (1 / scale)`` in float32)."""
    q = unpack(packed, fmt.bits, k).astype(np.float32)
    inv = (np.float32(1.0) / np.asarray(scales, dtype=np.float32)).astype(np.float32)
    per_value = np.repeat(inv, fmt.block_size, axis=1)[:, :k]
    return (q * per_value).astype(np.float32)


@dataclass(frozen=True, slots=True)
class Quantized:
    """One matrix quantized: the packed rows ``[N, packed_row_bytes]`` and scales ``[N, block_count]``."""

    packed: np.ndarray
    scales: np.ndarray


def quantize(w: np.ndarray, fmt: BlockFormat, method: QuantMethod) -> Quantized:
    """Quantize ``w[N, K]`` (float) per row block; rows are processed ``ROW_CHUNK`` at a time so the
    working memory stays a small multiple of one chunk."""
    w = np.asarray(w)
    if w.ndim != 2 or w.shape[1] == 0:
        raise ValueError(f"block quantization needs a [N, K] matrix with K > 0, not shape {list(w.shape)}")
    packed_parts, scale_parts = [], []
    for part in row_chunks(w):
        scales = choose_scales(part, fmt, method)
        packed_parts.append(pack(codes(part, scales, fmt), fmt.bits))
        scale_parts.append(scales)
    return Quantized(np.concatenate(packed_parts), np.concatenate(scale_parts))


def row_chunks(w: np.ndarray, rows: int = ROW_CHUNK) -> Iterator[np.ndarray]:
    """``w`` as float32 row chunks of at most ``rows`` rows."""
    for start in range(0, w.shape[0], rows):
        yield np.asarray(w[start : start + rows], dtype=np.float32)


def error_in_steps(original: np.ndarray, packed: np.ndarray, scales: np.ndarray, fmt: BlockFormat) -> Steps:
    """How far each stored value lies from ``original[N, K]``, in quantization steps (``1 / scale``).

    A value within the block's range must be within half a step of the original (rounding to the nearest
    level); a value outside it must be saturated at ``+-qmax`` on the original's side. Returns the largest
    error in steps over the values of the first kind and the count of the second kind, plus the values that
    are neither (``bad``: wrong data), with the first one's place."""
    k = original.shape[1]
    q = unpack(packed, fmt.bits, k).astype(np.float64)
    s = np.repeat(np.asarray(scales, dtype=np.float64), fmt.block_size, axis=1)[:, :k]
    x = np.asarray(original, dtype=np.float64) * s  # the original in steps
    err = np.abs(x - q)
    saturated = (np.abs(x) > fmt.qmax + 0.5) & (q == np.sign(x) * fmt.qmax)
    within = ~saturated
    tol = 0.5 + 1e-3  # float32 scales and products round; a wrong level is a whole step off
    bad = within & (err > tol)
    worst = float(err[within].max()) if within.any() else 0.0
    first = None
    if bad.any():
        r, c = np.argwhere(bad)[0]
        first = (int(r), int(c))
    return Steps(worst, int(saturated.sum()), int(bad.sum()), first)


@dataclass(frozen=True, slots=True)
class Steps:
    """``error_in_steps``'s answer: the largest error in steps of the unsaturated values, how many values
    were saturated, how many are wrong (neither nearest level nor right saturation), and the first wrong
    one's (row, column)."""

    max_steps: float
    saturated: int
    bad: int
    first_bad: tuple[int, int] | None
