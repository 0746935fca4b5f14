"""The text questions the trained LLM fixture learns and is judged on: every answer re-derived from the
question's text alone (a parser written here, not the generator's code), the held-out set disjoint from the
training stream, balanced and deterministic; and the answer-only training batches."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from graphsurgeon.evaluation import text_tasks
from graphsurgeon.evaluation.lm_training import IGNORE, answer_batch, learning_rate

COUNTS = {1: "one", 2: "two", 3: "three"}


def solve(question: str) -> str:
    """The answer, from the question's words only."""
    if m := re.fullmatch(r"largest of (\d+) (\d+) (\d+)\?", question):
        return str(max(int(g) for g in m.groups()))
    if m := re.fullmatch(r"is (\d+) more or less than (\d+)\?", question):
        return "more" if int(m[1]) > int(m[2]) else "less"
    if m := re.fullmatch(r"which word is twice in: ([a-z ]+)\?", question):
        (word,) = [w for w, n in Counter(m[1].split()).items() if n == 2]
        return word
    if m := re.fullmatch(r"what is word (\d) of: ([a-z ]+)\?", question):
        return m[2].split()[int(m[1]) - 1]
    if m := re.fullmatch(r"how many times is ([a-z]+) in: ([a-z ]+)\?", question):
        return COUNTS[m[2].split().count(m[1])]
    raise AssertionError(f"no template matches {question!r}")


def test_every_answer_follows_from_its_question() -> None:
    items = text_tasks.eval_items() + text_tasks.train_items(500)
    for item in items:
        assert solve(item.question) == item.answer, item
        assert item.answer in item.choices


def test_held_out_set_is_disjoint_from_training_and_deterministic() -> None:
    held = text_tasks.eval_items()
    assert len(held) == text_tasks.EVAL_COUNT == 500
    assert [i.question for i in held] == [i.question for i in text_tasks.eval_items()]
    train = {i.question for i in text_tasks.train_items(20000)}
    assert not train & {i.question for i in held}
    assert all(text_tasks.is_eval_question(i.question) for i in held)
    assert len({i.question for i in held}) == 500  # no question twice


def test_held_out_set_is_balanced_and_far_above_chance_is_meaningful() -> None:
    held = text_tasks.eval_items()
    assert Counter(i.kind for i in held) == {k: 100 for k in text_tasks.KINDS}
    for kind in text_tasks.KINDS:
        answers = Counter(i.answer for i in held if i.kind == kind)
        choices = next(i.choices for i in held if i.kind == kind)
        top_share = answers.most_common(1)[0][1] / 100
        assert top_share <= max(0.1, 2.5 / len(choices)), (kind, answers.most_common(3))
    assert 0.1 < text_tasks.chance_accuracy(held) < 0.35


def test_item_depends_only_on_seed_and_index() -> None:
    assert text_tasks.item(5, 7) == text_tasks.item(5, 7)
    assert text_tasks.train_items(10) == text_tasks.train_items(30)[:10]
    assert text_tasks.item(5, 7) != text_tasks.item(6, 7)


def test_answer_batch_counts_only_the_answer_tokens() -> None:
    ids, targets = answer_batch([([1, 2, 3], [4, 5]), ([6], [7, 8, 9])], pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]]
    # position t predicts ids[t+1]; only answer ids are targets
    assert targets.tolist() == [[IGNORE, IGNORE, 4, 5, IGNORE], [7, 8, 9, IGNORE, IGNORE]]


@pytest.mark.parametrize(("step", "want"), [(0, 0.01), (9, 0.1), (10, 0.1), (110, 0.01)])
def test_learning_rate_warms_up_then_decays_to_a_tenth(step: int, want: float) -> None:
    assert learning_rate(step, 110, 0.1, 10) == pytest.approx(want)


def test_chance_on_part_of_the_set_is_the_whole_sets_guesser() -> None:
    """``gsurg eval --limit`` scores the same fixed guesser as the whole set does, not one fitted to the part
    (fitted to five items of five kinds it would score 100 %)."""
    held = text_tasks.eval_items()
    counts: dict[str, Counter[str]] = {}
    for item in held:
        counts.setdefault(item.kind, Counter())[item.answer] += 1
    top = {kind: c.most_common(1)[0][1] for kind, c in counts.items()}
    missed = [i for i in held if counts[i.kind][i.answer] < top[i.kind]][:5]
    sole_top = {k for k, c in counts.items() if list(c.values()).count(top[k]) == 1}
    hit = [i for i in held if i.kind in sole_top and counts[i.kind][i.answer] == top[i.kind]][:5]
    assert len(missed) == 5 and text_tasks.chance_accuracy(missed) == 0.0
    assert hit and text_tasks.chance_accuracy(hit) == 1.0
