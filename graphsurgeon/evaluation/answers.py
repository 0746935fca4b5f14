"""What a family's evaluator gives ``gsurg eval``: a conversion answering evaluation questions, greedily
or teacher-forced, in the ncnn wheel.

A family that can be evaluated names its evaluator in its manifest (``evaluator: evaluate.py:open``); the
function is called as ``open(folder, model_json, precision=..., threads=...)`` and returns an ``Answerer``.
The engine never looks inside an item beyond the fields of ``Question``: how a question becomes prompt
ids (a tokenizer, a chat template, image features) is the family's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class Question(Protocol):
    """An evaluation item as the engine sees it (``text_tasks.TextItem``, ``vqa.VqaItem``)."""

    @property
    def question(self) -> str: ...

    @property
    def answer(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def choices(self) -> tuple[str, ...]: ...


@dataclass
class Answer:
    """A conversion's answer: its text (special tokens dropped), the tokens it chose at every step (the
    argmax, also when fed forced tokens) and the logits ``[V]`` each step's choice came from."""

    text: str
    tokens: list[int] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list)
    error: str = ""  # why the conversion stopped early (ncnn failed a step), else empty


class Answerer(Protocol):
    """A loaded conversion that answers questions; closed when done."""

    def answer(self, item: Question, max_tokens: int, forced: Sequence[int] | None = None) -> Answer:
        """Greedy decoding until EOS (kept in ``tokens``) or ``max_tokens``; with ``forced``, each step
        is fed ``forced[i]`` instead of its own choice, for ``len(forced)`` steps (teacher forcing)."""
        ...

    def close(self) -> None: ...


def is_correct(answer: Answer, item: Question) -> bool:
    """Whether the answer's text is the item's answer, compared as trimmed lowercase words."""
    return answer.text.strip().lower().split() == item.answer.strip().lower().split()
