"""A deterministic visual question-answering set, for training and evaluating tiny vision-language models.

Knows no model and no tokenizer: an item is an RGB image, a templated lowercase question and a one- or
two-word answer from the closed answer set of its question kind (``CHOICES``). All questions and answers
use the words of ``VOCABULARY`` alone. Scenes are flat shapes or one large text (``scenes``).

Determinism: item ``i`` of ``make_items(seed, ...)`` is drawn from its own generator, seeded with the seed,
the split and ``i``, so it is the same bytes on every run and whatever ``count`` is. Its kind cycles through
``kinds``, its size cycles through ``sizes`` among the items of its kind, and its answer comes from a
shuffled block of all the kind's answers (a permutation seeded per kind and block), so answers are uniform
per kind up to one unfinished block.

Disjoint splits: a scene's signature (``Scene.signature``: the size and, per shape, its shape, colour and
grid cell, or the text with its colour, font size and position bin) is read off what the image shows, and
``held_out`` puts one signature in ``HELD_OUT`` (by a hash) in the evaluation region. ``make_items`` redraws
a scene until its signature is in the region of its split, so a training item, whatever its seed, never
shows an image (nor a discrete layout) that an evaluation item shows.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from PIL import Image

from graphsurgeon.evaluation.scenes import (
    BACKGROUND,
    COLORS,
    GRID,
    SHAPES,
    Cell,
    Scene,
    check_size,
    place_shape,
    place_text,
)

KINDS = ("color", "shape", "count", "left_right", "above_below", "digit", "word")
NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: The closed list of written words: short, so they are drawn large.
WORDS = ("cat", "dog", "sun", "car", "hat", "cup", "bus", "key")
#: Every answer each kind can have (their count sets the uniform-guessing chance).
CHOICES: dict[str, tuple[str, ...]] = {
    "color": tuple(COLORS),
    "shape": SHAPES,
    "count": NUMBERS[1:5],
    "left_right": ("left", "right"),
    "above_below": ("above", "below"),
    "digit": NUMBERS,
    "word": WORDS,
}
#: The question of each kind; ``{shape}`` and ``{color}``, ``{first}``, ``{second}`` take a shape's or a
#: colour's name.
TEMPLATES = {
    "color": "what color is the {shape}?",
    "shape": "what shape is the {color} object?",
    "count": "how many shapes are there?",
    "left_right": "is the {first} shape left or right of the {second} shape?",
    "above_below": "is the {first} shape above or below the {second} shape?",
    "digit": "what digit is shown?",
    "word": "what word is written?",
}
#: Image sizes as (width, height): square, landscape, portrait, and a larger wide one (which a model
#: family slicing its input into tiles sees as several tiles).
SIZES: tuple[tuple[int, int], ...] = ((224, 224), (320, 240), (256, 384), (448, 336), (720, 520))
TRAIN_SEED = 1
EVAL_SEED = 2
SPLITS = ("train", "eval")
#: One scene signature in HELD_OUT belongs to the evaluation region.
HELD_OUT = 4
#: Redraws before giving up on finding a scene of the split's region (each succeeds with p >= 1/HELD_OUT).
_MAX_TRIES = 1000


def _vocabulary() -> tuple[str, ...]:
    words = {w for t in TEMPLATES.values() for w in t.removesuffix("?").split() if not w.startswith("{")}
    words.update(SHAPES, COLORS, *CHOICES.values())
    return tuple(sorted(words))


#: Every word a question or an answer uses (questions end with "?", attached to their last word).
VOCABULARY = _vocabulary()


@dataclass(frozen=True)
class VqaItem:
    """One question about one image.

    ``image`` is RGB of ``size`` (width, height); ``answer`` is one of ``choices``, every answer the
    ``kind`` can have; ``signature`` is the image's discrete description (``Scene.signature``), which
    decides its split."""

    image: Image.Image
    question: str
    answer: str
    kind: str
    choices: tuple[str, ...]
    size: tuple[int, int]
    signature: tuple[object, ...]


def make_items(
    seed: int,
    count: int,
    *,
    kinds: Sequence[str] | None = None,
    sizes: Sequence[tuple[int, int]] | None = None,
    split: str = "train",
) -> list[VqaItem]:
    """``count`` items of the ``split`` region (training by default, whatever the seed), item ``i`` fixed
    by (``seed``, ``split``, ``i``, ``kinds``, ``sizes``) alone. Kinds default to ``KINDS``, sizes to
    ``SIZES``; an unknown kind or split, a negative seed or count, or a side below 64 px is a ValueError."""
    kinds = tuple(KINDS if kinds is None else kinds)
    sizes = tuple(SIZES if sizes is None else sizes)
    _check_arguments(seed, count, kinds, sizes, split)
    return [_item(seed, i, kinds, sizes, split) for i in range(count)]


def train_items(
    count: int, *, kinds: Sequence[str] | None = None, sizes: Sequence[tuple[int, int]] | None = None
) -> list[VqaItem]:
    """The default training set: ``make_items(TRAIN_SEED, count, ...)``."""
    return make_items(TRAIN_SEED, count, kinds=kinds, sizes=sizes)


def eval_items(
    count: int = 500, *, kinds: Sequence[str] | None = None, sizes: Sequence[tuple[int, int]] | None = None
) -> list[VqaItem]:
    """The held-out evaluation set: ``make_items(EVAL_SEED, count, split="eval", ...)``. Every one of its
    scene signatures is ``held_out``; no training item's is."""
    return make_items(EVAL_SEED, count, kinds=kinds, sizes=sizes, split="eval")


def held_out(signature: tuple[object, ...]) -> bool:
    """Whether a scene signature is in the evaluation region: its BLAKE2b hash is 0 modulo ``HELD_OUT``."""
    digest = hashlib.blake2b(repr(signature).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % HELD_OUT == 0


def blank(item: VqaItem) -> VqaItem:
    """The same question and answer over a plain ``BACKGROUND`` image of the same size: a model that reads
    the image falls to chance on these."""
    image = Image.new("RGB", item.size, BACKGROUND)
    return replace(item, image=image, signature=(item.size, "blank"))


def chance_accuracy(items: Iterable[VqaItem]) -> float:
    """The accuracy, on ``items``, of guessing each kind's most frequent answer among ``items``.

    This is the stricter of the two chance levels: a kind's most frequent answer covers at least
    1/len(choices) of its items, so it never falls below uniform guessing (the mean of 1/len(choices)).
    Empty ``items`` is a ValueError."""
    by_kind: dict[str, Counter[str]] = {}
    for item in items:
        by_kind.setdefault(item.kind, Counter())[item.answer] += 1
    total = sum(sum(c.values()) for c in by_kind.values())
    if total == 0:
        raise ValueError("chance accuracy of no items")
    return sum(max(c.values()) for c in by_kind.values()) / total


def _check_arguments(
    seed: int, count: int, kinds: tuple[str, ...], sizes: tuple[tuple[int, int], ...], split: str
) -> None:
    if seed < 0 or count < 0:
        raise ValueError(f"seed and count are non-negative: got {seed}, {count}")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise ValueError(f"kinds are a non-empty selection of {KINDS}: unknown {unknown}")
    if split not in SPLITS:
        raise ValueError(f"split is one of {SPLITS}: got {split!r}")
    if not sizes:
        raise ValueError("no image sizes")
    for size in sizes:
        check_size(size)


def _rng(*words: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))


def _item(
    seed: int, index: int, kinds: tuple[str, ...], sizes: tuple[tuple[int, int], ...], split: str
) -> VqaItem:
    """Item ``index``: its kind, size and answer by turn, then scenes drawn until one is in ``split``."""
    kind = kinds[index % len(kinds)]
    turn = index // len(kinds)  # how many items of this kind came before
    size = sizes[turn % len(sizes)]
    answer = _balanced_answer(seed, split, kind, turn)
    rng = _rng(seed, SPLITS.index(split), 0, index)
    for _ in range(_MAX_TRIES):
        scene, question = _SCENES[kind](rng, size, answer)
        signature = scene.signature()
        if held_out(signature) == (split == "eval"):
            return VqaItem(scene.draw(), question, answer, kind, CHOICES[kind], size, signature)
    raise RuntimeError(f"no {kind} scene of size {size} answering {answer!r} in the {split} region")


def _balanced_answer(seed: int, split: str, kind: str, turn: int) -> str:
    """The kind's answer at ``turn``: position ``turn % n`` of block ``turn // n``'s own permutation."""
    choices = CHOICES[kind]
    block, position = divmod(turn, len(choices))
    order = _rng(seed, SPLITS.index(split), 1 + KINDS.index(kind), block).permutation(len(choices))
    return choices[int(order[position])]


def _sample(rng: np.random.Generator, pool: Sequence[str], k: int) -> list[str]:
    """``k`` distinct members of ``pool`` in random order."""
    return [pool[int(i)] for i in rng.choice(len(pool), size=k, replace=False)]


def _free_cells(rng: np.random.Generator, taken: Sequence[Cell], k: int) -> list[Cell]:
    """``k`` distinct grid cells outside ``taken``, in random order."""
    free = [(r, c) for r in range(GRID) for c in range(GRID) if (r, c) not in taken]
    return [free[int(i)] for i in rng.choice(len(free), size=k, replace=False)]


def _shapes(
    rng: np.random.Generator,
    size: tuple[int, int],
    shapes: Sequence[str],
    colors: Sequence[str],
    cells: Sequence[Cell],
) -> Scene:
    placed = tuple(
        place_shape(rng, size, s, c, cell) for s, c, cell in zip(shapes, colors, cells, strict=True)
    )
    return Scene(size, shapes=placed)


def _others(rng: np.random.Generator, kept: Sequence[str], k: int) -> list[str]:
    """``k`` distinct colours not in ``kept``."""
    return _sample(rng, [c for c in COLORS if c not in kept], k)


Built = tuple[Scene, str]


def _color_scene(rng: np.random.Generator, size: tuple[int, int], answer: str) -> Built:
    """The target shape in colour ``answer``, with 0-3 others of other colours and of other shapes (so the
    question's shape names one object)."""
    target = SHAPES[int(rng.integers(len(SHAPES)))]
    extra = int(rng.integers(4))
    rest = [s for s in SHAPES if s != target]
    shapes = [target, *(rest[int(i)] for i in rng.integers(len(rest), size=extra))]
    scene = _shapes(
        rng, size, shapes, [answer, *_others(rng, [answer], extra)], _free_cells(rng, [], 1 + extra)
    )
    return scene, TEMPLATES["color"].format(shape=target)


def _shape_scene(rng: np.random.Generator, size: tuple[int, int], answer: str) -> Built:
    """A shape ``answer`` in some colour, with 0-3 others of other colours and any shape."""
    color, *others = _sample(rng, list(COLORS), 1 + int(rng.integers(4)))
    shapes = [answer, *(SHAPES[int(i)] for i in rng.integers(len(SHAPES), size=len(others)))]
    scene = _shapes(rng, size, shapes, [color, *others], _free_cells(rng, [], len(shapes)))
    return scene, TEMPLATES["shape"].format(color=color)


def _count_scene(rng: np.random.Generator, size: tuple[int, int], answer: str) -> Built:
    """``answer`` shapes of distinct colours, any shapes."""
    n = NUMBERS.index(answer)
    shapes = [SHAPES[int(i)] for i in rng.integers(len(SHAPES), size=n)]
    scene = _shapes(rng, size, shapes, _sample(rng, list(COLORS), n), _free_cells(rng, [], n))
    return scene, TEMPLATES["count"]


def _relation_scene(rng: np.random.Generator, size: tuple[int, int], kind: str, before: bool) -> Built:
    """Two named shapes in different grid columns (``left_right``) or rows (``above_below``), the first
    one before (left of, above) the second iff ``before``; plus 0-2 others in other cells."""
    first, second, *others = _sample(rng, list(COLORS), 2 + int(rng.integers(3)))
    low, high = sorted(int(i) for i in rng.choice(GRID, size=2, replace=False))
    lines = (low, high) if before else (high, low)
    across = [int(i) for i in rng.integers(GRID, size=2)]
    if kind == "left_right":
        named = [(across[0], lines[0]), (across[1], lines[1])]
    else:
        named = [(lines[0], across[0]), (lines[1], across[1])]
    cells = [*named, *_free_cells(rng, named, len(others))]
    shapes = [SHAPES[int(i)] for i in rng.integers(len(SHAPES), size=len(cells))]
    scene = _shapes(rng, size, shapes, [first, second, *others], cells)
    return scene, TEMPLATES[kind].format(first=first, second=second)


def _left_right_scene(rng: np.random.Generator, size: tuple[int, int], answer: str) -> Built:
    return _relation_scene(rng, size, "left_right", answer == "left")


def _above_below_scene(rng: np.random.Generator, size: tuple[int, int], answer: str) -> Built:
    return _relation_scene(rng, size, "above_below", answer == "above")


def _text_scene(rng: np.random.Generator, size: tuple[int, int], text: str) -> Scene:
    """``text`` alone, in any palette colour."""
    color = list(COLORS)[int(rng.integers(len(COLORS)))]
    return Scene(size, text=place_text(rng, size, text, color))


def _digit_scene(rng: np.random.Generator, size: tuple[int, int], answer: str) -> Built:
    """The numeral of ``answer`` ("five" shows 5)."""
    return _text_scene(rng, size, str(NUMBERS.index(answer))), TEMPLATES["digit"]


def _word_scene(rng: np.random.Generator, size: tuple[int, int], answer: str) -> Built:
    return _text_scene(rng, size, answer), TEMPLATES["word"]


#: How each kind draws a scene (and its question) for a given answer from a generator.
_SCENES: dict[str, Callable[[np.random.Generator, tuple[int, int], str], Built]] = {
    "color": _color_scene,
    "shape": _shape_scene,
    "count": _count_scene,
    "left_right": _left_right_scene,
    "above_below": _above_below_scene,
    "digit": _digit_scene,
    "word": _word_scene,
}
