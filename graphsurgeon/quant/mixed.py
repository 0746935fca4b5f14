"""Mixed precision inside a block-quantized conversion: which matrices to store at a higher bit width,
within a size budget, by their measured sensitivity (as llama.cpp's Q4_K_M keeps some tensors at 6 bits
inside a 4-bit file, though it picks them by name; here they are picked by measurement).

Each candidate matrix brings its size at the low and the high format (``stored_bits``: codes, block scales
and input scales, as ncnn reads them) and its **gain**: how much of its output error on the calibration
inputs the high format removes, relative to its output there, ``(E_low - E_high) / tr(W H W^T)``
(``gptq.output_error`` / ``gptq.output_energy``, for the codes each format would actually get). A relative
error is what one layer's rounding adds to the signal it passes on, whatever the layer's scale, so the
gains of different layers add up to a first-order measure of the whole graph's damage.

``choose`` raises matrices by the gain per extra stored bit, best first, while the average over all
candidates stays within ``budget`` bits per weight; a matrix that would overshoot is skipped and smaller
ones after it are still tried (greedy knapsack). The budget counts the scales, so plain int4 at block 64
is 4.5 bits per weight and int8 at block 64 8.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from graphsurgeon.errors import GsurgError
from graphsurgeon.quant.blocks import BlockFormat


def stored_bits(fmt: BlockFormat, rows: int, cols: int, *, input_scales: bool = False) -> int:
    """The bits a ``[rows, cols]`` matrix takes in ``fmt``: packed rows, float32 block scales, and the
    float32 input scales when it has them (the record's padding to 4 bytes left out)."""
    bits = rows * fmt.packed_row_bytes(cols) * 8 + rows * fmt.block_count(cols) * 32
    return bits + (cols * 32 if input_scales else 0)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One matrix that may be raised: its name, weight count, stored bits at the low and the high format,
    and its gain (relative output error removed by the high one)."""

    name: str
    count: int
    low_bits: int
    high_bits: int
    gain: float


class BudgetError(GsurgError, ValueError):
    """A budget below what the low format alone takes."""


def average_bits(candidates: Sequence[Candidate], raised: set[str]) -> float:
    """Bits per weight over ``candidates`` with the ``raised`` ones at the high format."""
    total = sum(c.count for c in candidates)
    bits = sum(c.high_bits if c.name in raised else c.low_bits for c in candidates)
    return bits / total if total else 0.0


def choose(candidates: Sequence[Candidate], budget: float) -> list[str]:
    """The names to raise, in order of choice, keeping ``average_bits`` within ``budget``."""
    total = sum(c.count for c in candidates)
    low = sum(c.low_bits for c in candidates)
    if total and low > budget * total:
        raise BudgetError(
            f"budget {budget:g} bits per weight is below the {low / total:.4g} the low format alone takes"
        )
    room = budget * total - low
    order = sorted(
        (c for c in candidates if c.gain > 0 and c.high_bits > c.low_bits),
        key=lambda c: (-c.gain / (c.high_bits - c.low_bits), c.name),
    )
    chosen = []
    for c in order:
        extra = c.high_bits - c.low_bits
        if extra <= room:
            chosen.append(c.name)
            room -= extra
    return chosen
