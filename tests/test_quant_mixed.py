"""The mixed-precision choice (graphsurgeon.quant.mixed, issue 38 item 4): which matrices a budget of bits
per weight lets a conversion raise, checked against sizes counted by hand from ncnn's record layout."""

from __future__ import annotations

import pytest

from graphsurgeon.quant.blocks import BlockFormat
from graphsurgeon.quant.mixed import BudgetError, Candidate, average_bits, choose, stored_bits


def test_stored_bits_count_codes_block_scales_and_input_scales() -> None:
    # 10 rows of 100 values at 4 bits: 50 bytes a row; blocks of 64: 2 float32 scales a row
    assert stored_bits(BlockFormat(4, 64), 10, 100) == 10 * 50 * 8 + 10 * 2 * 32
    assert stored_bits(BlockFormat(4, 64), 10, 100, input_scales=True) == 10 * 50 * 8 + 10 * 2 * 32 + 100 * 32
    # 6 bits over 5 values: 30 bits, 4 bytes
    assert stored_bits(BlockFormat(6, 32), 1, 5) == 4 * 8 + 32
    assert stored_bits(BlockFormat(4, 64), 64, 64) / (64 * 64) == 4.5
    assert stored_bits(BlockFormat(8, 64), 64, 64) / (64 * 64) == 8.5


def _cand(name: str, count: int, gain: float) -> Candidate:
    return Candidate(name, count, int(count * 4.5), int(count * 8.5), gain)


def test_the_best_gain_per_extra_bit_is_raised_first_and_the_budget_holds() -> None:
    cands = [_cand("a", 1000, 0.01), _cand("b", 1000, 0.05), _cand("c", 4000, 0.08), _cand("d", 1000, 0.0)]
    # 7000 weights at 4.5 bits; budget 5.2 leaves 0.7 * 7000 = 4900 bits: b (4000 extra) fits, then c
    # (16000) does not, a (4000) does not either
    assert choose(cands, 5.2) == ["b"]
    assert average_bits(cands, {"b"}) <= 5.2
    # room for all but the zero-gain one
    assert choose(cands, 8.5) == ["b", "c", "a"]


def test_a_matrix_too_big_for_what_is_left_is_skipped_and_smaller_ones_still_fit() -> None:
    cands = [_cand("big", 10_000, 0.5), _cand("small", 100, 0.001)]
    chosen = choose(cands, 4.6)  # room: 0.1 * 10100 = 1010 bits: big needs 40000, small 400
    assert chosen == ["small"]
    assert average_bits(cands, set(chosen)) <= 4.6


def test_every_budget_is_respected() -> None:
    cands = [_cand(f"m{i}", 100 * (i + 1), 0.01 * ((i * 7) % 5 + 1)) for i in range(12)]
    for budget in (4.5, 4.7, 5.0, 5.5, 6.5, 8.0, 8.5, 9.0):
        assert average_bits(cands, set(choose(cands, budget))) <= budget + 1e-12


def test_a_budget_below_the_low_format_is_refused() -> None:
    with pytest.raises(BudgetError, match=r"budget 4.2 bits per weight is below the 4.5"):
        choose([_cand("a", 1000, 0.1)], 4.2)
