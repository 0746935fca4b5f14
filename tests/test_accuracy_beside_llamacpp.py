"""The pure helpers of ``benchmarks/accuracy_beside_llamacpp.py`` against hand-computed cases: how a row's
answers are scored against a reference (accuracy, agreement, mean KL), how calibration text is packed into
windows and what mask and positions a window gets. Nothing here runs a model."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))  # after the package

import accuracy_beside_llamacpp as bench

from graphsurgeon.evaluation.answers import Answer
from graphsurgeon.verify.rope import MASKED


@dataclass(frozen=True)
class Item:
    question: str
    answer: str
    kind: str
    choices: tuple[str, ...] = ()


def test_accuracy_counts_answers_by_kind() -> None:
    items = [Item("a?", "91", "largest"), Item("b?", "less", "compare"), Item("c?", "more", "compare")]
    answers = [Answer(" 91"), Answer("less"), Answer("less")]
    score = bench.accuracy(items, answers)
    assert (score.correct, score.items) == (2, 3)
    assert score.by_kind == {"largest": (1, 1), "compare": (1, 2)}
    assert score.agreement is None and score.mean_kl is None


def test_agreement_and_kl_against_a_reference_by_hand() -> None:
    # item 1: two steps; the reference chose tokens 0 then 1 from uniform, then peaked, distributions
    ref = [
        Answer("x", [0, 1], [np.array([0.0, 0.0]), np.array([0.0, math.log(3.0)])]),
        Answer("y", [1], [np.array([0.0, 0.0])]),
    ]
    mine = [Answer("x"), Answer("z")]
    forced = [
        [np.array([math.log(3.0), 0.0]), np.array([0.0, math.log(3.0)])],  # agrees twice
        [np.array([1.0, 0.0])],  # argmax 0, the reference's token is 1
    ]
    # KL(p||q) with p = (1/2, 1/2), q = (3/4, 1/4): (1/2) ln(2/3) + (1/2) ln 2 = (1/2) ln(4/3)
    step1 = 0.5 * math.log(4.0 / 3.0)
    # q = softmax(1, 0) = (e, 1) / (e + 1)
    q = np.array([math.e, 1.0]) / (math.e + 1.0)
    step3 = float(0.5 * math.log(0.5 / q[0]) + 0.5 * math.log(0.5 / q[1]))
    score = bench.against(bench.accuracy([Item("", "x", "k"), Item("", "y", "k")], mine), ref, mine, forced)
    assert (score.steps, score.agreeing, score.same_answers) == (3, 2, 1)
    assert score.agreement == pytest.approx(2 / 3)
    assert score.mean_kl == pytest.approx((step1 + 0.0 + step3) / 3, rel=1e-12)


def test_a_row_that_stopped_early_is_compared_over_the_steps_it_made() -> None:
    ref = [Answer("x", [0, 1, 2], [np.zeros(3)] * 3)]
    score = bench.against(bench.accuracy([Item("", "x", "k")], ref), ref, ref, [[np.zeros(3)]])
    assert (score.steps, score.agreeing, score.mean_kl) == (1, 1, 0.0)


def test_windows_are_whole_sequences_and_one_prefix() -> None:
    seqs = [[1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3, 3], [4, 4], [5, 5, 5, 5, 5, 5, 5]]
    assert bench.pack_windows(seqs, 6, 2) == [[[1, 1, 1], [2, 2, 2]], [[3, 3, 3, 3, 3], [4]]]
    assert bench.pack_windows(seqs, 6, 10) == [
        [[1, 1, 1], [2, 2, 2]],
        [[3, 3, 3, 3, 3], [4]],
        [[5, 5, 5, 5, 5, 5]],
    ]


def test_a_window_masks_each_sequence_from_the_others_and_restarts_positions() -> None:
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    inv_freq = np.array([1.0, 0.5], np.float32)
    feeds = bench.window_inputs([[3, 1], [4]], table, inv_freq)
    np.testing.assert_array_equal(feeds["in0"], table[[3, 1, 4]])
    visible = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1]], bool)
    np.testing.assert_array_equal(feeds["in1"], np.where(visible, np.float32(0), MASKED))
    angles = np.array([0.0, 1.0, 0.0])[:, None] * np.array([1.0, 0.5, 1.0, 0.5])[None, :]
    np.testing.assert_allclose(feeds["in2"], np.cos(angles), rtol=1e-6)
    np.testing.assert_allclose(feeds["in3"], np.sin(angles), atol=1e-7)


def test_the_table_has_one_line_per_row_in_text_and_markdown() -> None:
    good = {
        "row": "gsurg-int8",
        "bits_per_weight": 8.5,
        "holds": "29 int8/128 gemm",
        "accuracy": 0.5,
        "correct": 1,
        "items": 2,
        "vs": {bench.REF: {"agreement": 1.0, "mean_kl": 1.5e-7}},
    }
    failed = {"row": "ncnnllm2int-awq", "holds": "—", "error": "skipped: no tool\nmore"}
    text, md = bench.render([good, failed])
    assert len(text.splitlines()) == 3 and len(md.splitlines()) == 4
    assert "| gsurg-int8 | 8.50 | 29 int8/128 gemm | 50.0 % (1/2) | 100.0 % | 1.5e-07 | — | — |" in md
    assert "failed: skipped: no tool" in md and "more" not in md
