"""Text questions whose answers can be checked, for training and evaluating tiny language models: what
a quantized conversion still gets right is measured on them (``gsurg eval``), not on random weights.

Every question is a template over a large space of numbers and words, so a model that answers held-out
questions has learned the rule, not the items; every answer is one word or number. The kinds:

* ``largest``: "largest of 38 91 24?" -> "91" (three distinct two-digit numbers);
* ``compare``: "is 47 more or less than 52?" -> "less" (two distinct two-digit numbers);
* ``twice``: "which word is twice in: cat dog sun dog?" -> "dog" (four words, one repeated);
* ``nth``: "what is word 3 of: red car sun box?" -> "sun" (four distinct words, position 1-4);
* ``count``: "how many times is cat in: cat dog cat sun?" -> "two" (four words, the named one 1-3 times).

Items are deterministic: item ``i`` of a seed depends only on (seed, i). The training stream and the
evaluation set cannot share a question: ``is_eval_question`` puts every question in exactly one of the two
halves by a hash of its text, ``train_items`` keeps only training-half questions and ``eval_items`` only
evaluation-half ones (their seeds differ too, so the streams are unrelated).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

#: The words questions draw from (each a single token of a small BPE trained on the questions).
WORDS = ("cat", "dog", "sun", "car", "box", "red", "cup", "hat", "key", "map", "pen", "egg")
COUNT_WORDS = ("one", "two", "three")
KINDS = ("largest", "compare", "twice", "nth", "count")
TRAIN_SEED, EVAL_SEED = 1, 2
EVAL_COUNT = 500


@dataclass(frozen=True)
class TextItem:
    """One question, its answer and the answers its kind can have (chance is one over their count)."""

    question: str
    answer: str
    kind: str
    choices: tuple[str, ...]


def _largest(rng: np.random.Generator) -> TextItem:
    nums = [int(n) for n in rng.choice(np.arange(10, 100), size=3, replace=False)]
    choices = tuple(str(n) for n in range(10, 100))
    return TextItem(f"largest of {nums[0]} {nums[1]} {nums[2]}?", str(max(nums)), "largest", choices)


def _compare(rng: np.random.Generator) -> TextItem:
    a, b = (int(n) for n in rng.choice(np.arange(10, 100), size=2, replace=False))
    answer = "more" if a > b else "less"
    return TextItem(f"is {a} more or less than {b}?", answer, "compare", ("more", "less"))


def _twice(rng: np.random.Generator) -> TextItem:
    words = [str(w) for w in rng.choice(WORDS, size=3, replace=False)]
    repeated = words[0]
    order = [int(i) for i in rng.permutation(4)]
    line = [[*words, repeated][i] for i in order]
    return TextItem(f"which word is twice in: {' '.join(line)}?", repeated, "twice", WORDS)


def _nth(rng: np.random.Generator) -> TextItem:
    words = [str(w) for w in rng.choice(WORDS, size=4, replace=False)]
    k = int(rng.integers(1, 5))
    return TextItem(f"what is word {k} of: {' '.join(words)}?", words[k - 1], "nth", WORDS)


def _count(rng: np.random.Generator) -> TextItem:
    times = int(rng.integers(1, 4))
    target = str(rng.choice(WORDS))
    others = [str(w) for w in rng.choice([w for w in WORDS if w != target], size=4 - times, replace=True)]
    line = [target] * times + others
    order = [int(i) for i in rng.permutation(4)]
    words = " ".join(line[i] for i in order)
    return TextItem(f"how many times is {target} in: {words}?", COUNT_WORDS[times - 1], "count", COUNT_WORDS)


_MAKERS: dict[str, Callable[[np.random.Generator], TextItem]] = {
    "largest": _largest,
    "compare": _compare,
    "twice": _twice,
    "nth": _nth,
    "count": _count,
}


def is_eval_question(question: str) -> bool:
    """Whether ``question`` belongs to the evaluation half (a fixed hash of its text, about one in eight)."""
    return hashlib.sha256(question.encode()).digest()[0] < 32


def item(seed: int, index: int) -> TextItem:
    """Item ``index`` of the stream of ``seed``: its kind cycles through ``KINDS``, its content comes from a
    generator seeded by (seed, index) alone."""
    rng = np.random.default_rng([seed, index])
    return _MAKERS[KINDS[index % len(KINDS)]](rng)


def _stream(seed: int, keep: Callable[[str], bool]) -> Iterator[TextItem]:
    index = 0
    while True:
        candidate = item(seed, index)
        index += 1
        if keep(candidate.question):
            yield candidate


def train_items(count: int, seed: int = TRAIN_SEED) -> list[TextItem]:
    """The first ``count`` training-half items of ``seed``'s stream."""
    stream = _stream(seed, lambda q: not is_eval_question(q))
    return [next(stream) for _ in range(count)]


def eval_items(count: int = EVAL_COUNT, seed: int = EVAL_SEED) -> list[TextItem]:
    """The held-out set: the first ``count`` distinct evaluation-half questions of ``seed``'s stream (none can
    be a training question), every kind in turn."""
    stream = _stream(seed, is_eval_question)
    per_kind: dict[str, list[TextItem]] = {k: [] for k in KINDS}
    seen: set[str] = set()
    need = -(-count // len(KINDS))
    while any(len(v) < need for v in per_kind.values()):
        candidate = next(stream)
        if len(per_kind[candidate.kind]) < need and candidate.question not in seen:
            seen.add(candidate.question)
            per_kind[candidate.kind].append(candidate)
    interleaved = [per_kind[KINDS[i % len(KINDS)]][i // len(KINDS)] for i in range(count)]
    return interleaved


def chance_accuracy(items: list[TextItem]) -> float:
    """What a fixed guesser scores on ``items``: it always gives each kind's most frequent answer in the
    whole held-out set (``eval_items()``), so a part of the set (``gsurg eval --limit``) is judged by the
    same guesser as the whole, not by one fitted to the part."""
    if not items:
        return 0.0
    by_kind: dict[str, list[str]] = {}
    for item in eval_items():
        by_kind.setdefault(item.kind, []).append(item.answer)
    guess = {kind: max(sorted(set(answers)), key=answers.count) for kind, answers in by_kind.items()}
    return sum(item.answer == guess.get(item.kind) for item in items) / len(items)


def training_lines(count: int = 4000, seed: int = 0) -> list[str]:
    """Question-and-answer lines a tokenizer is trained on (the training half only)."""
    return [f"{i.question} {i.answer}" for i in train_items(count, seed=seed + 100)]
