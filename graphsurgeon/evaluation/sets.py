"""The evaluation sets ``gsurg eval --set NAME`` knows, by name: each a fixed, held-out list of items and
the accuracy a guesser reaches on it (the floor a model must clear for its accuracy to mean anything)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graphsurgeon.evaluation.answers import Question
from graphsurgeon.evaluation.errors import EvalError


@dataclass(frozen=True)
class EvalSet:
    name: str
    summary: str
    load: Callable[[int | None], Sequence[Question]]  # the first N items (all when None)
    chance: Callable[[Sequence[Question]], float]


def _text_tasks(limit: int | None) -> Sequence[Question]:
    from graphsurgeon.evaluation import text_tasks

    return text_tasks.eval_items()[:limit]


def _text_chance(items: Sequence[Question]) -> float:
    from graphsurgeon.evaluation import text_tasks

    return text_tasks.chance_accuracy([i for i in items if isinstance(i, text_tasks.TextItem)])


def _vqa(limit: int | None) -> Sequence[Question]:
    from graphsurgeon.evaluation import vqa

    return vqa.eval_items(VQA_ITEMS if limit is None else min(limit, VQA_ITEMS))


def _vqa_blank(limit: int | None) -> Sequence[Question]:
    from graphsurgeon.evaluation import vqa

    return [vqa.blank(item) for item in _vqa(limit) if isinstance(item, vqa.VqaItem)]


def _vqa_chance(items: Sequence[Question]) -> float:
    from graphsurgeon.evaluation import vqa

    return vqa.chance_accuracy([i for i in items if isinstance(i, vqa.VqaItem)])


VQA_ITEMS = 500
SETS: dict[str, EvalSet] = {
    "text-tasks": EvalSet(
        "text-tasks",
        "500 held-out text questions (largest, compare, twice, nth, count; evaluation.text_tasks)",
        _text_tasks,
        _text_chance,
    ),
    "vqa": EvalSet(
        "vqa",
        f"{VQA_ITEMS} held-out visual questions on drawn scenes (color, shape, count, left_right, "
        "above_below, digit, word; five image sizes; evaluation.vqa)",
        _vqa,
        _vqa_chance,
    ),
    "vqa-blank": EvalSet(
        "vqa-blank",
        f"the same {VQA_ITEMS} questions over a blank image of the same size: a model that reads the image "
        "falls to about chance",
        _vqa_blank,
        _vqa_chance,
    ),
}


def find_set(name: str) -> EvalSet:
    """The set called ``name``; EvalError listing the known ones otherwise."""
    if name not in SETS:
        raise EvalError(f"no evaluation set {name!r} (known: {', '.join(sorted(SETS))})")
    return SETS[name]
