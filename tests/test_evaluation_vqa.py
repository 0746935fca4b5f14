"""The VQA set (graphsurgeon.evaluation.vqa): answers checked against the pixels by oracles of this file,
not by the generator's bookkeeping; determinism; disjoint train and evaluation splits; balance and coverage.

The oracles read the image alone: a colour's pixel mask (the scenes are drawn without antialiasing), the
shape of a mask from how much of its bounding box it fills, connected regions by a scanline flood fill,
centroids for the relations, and for the digits and words the nearest of reference renderings made here.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from graphsurgeon.evaluation import vqa
from graphsurgeon.evaluation.scenes import BACKGROUND, COLORS, GRID, TEXT_SCALES, Scene, Text
from graphsurgeon.evaluation.vqa import NUMBERS, VqaItem

SHAPE_KINDS = ("color", "shape", "count", "left_right", "above_below")


class Seen:
    """What an item's image shows, read once: each pixel's RGB packed into one integer."""

    def __init__(self, item: VqaItem) -> None:
        self.item = item
        rgb = np.asarray(item.image, dtype=np.int32)
        self.codes = rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2]
        self.foreground = self.codes != pack(BACKGROUND)
        self.masks = {name: m for name, rgb in COLORS.items() if (m := self.codes == pack(rgb)).any()}


def pack(rgb: tuple[int, int, int]) -> int:
    return rgb[0] << 16 | rgb[1] << 8 | rgb[2]


@pytest.fixture(scope="module")
def held() -> list[VqaItem]:
    return vqa.eval_items(500)


@pytest.fixture(scope="module")
def seen(held: list[VqaItem]) -> list[Seen]:
    return [Seen(item) for item in held]


@pytest.fixture(scope="module")
def trained() -> list[VqaItem]:
    return vqa.train_items(700)


def bbox(m: np.ndarray) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of the True pixels, inclusive."""
    ys, xs = np.nonzero(m)
    return int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())


def shape_of(m: np.ndarray) -> str:
    """A square fills its bounding box, a circle pi/4 of it, a triangle half of it."""
    left, top, right, bottom = bbox(m)
    fill = m.sum() / ((right - left + 1) * (bottom - top + 1))
    return "square" if fill > 0.95 else "circle" if fill > 0.65 else "triangle"


def centroid(m: np.ndarray) -> tuple[float, float]:
    ys, xs = np.nonzero(m)
    return float(xs.mean()), float(ys.mean())


def regions(m: np.ndarray) -> int:
    """Connected regions of True pixels (8-neighbours): a scanline flood fill, joining each row's runs
    to the runs of the row above that they touch (diagonally too), by union-find."""
    rows, cols = np.nonzero(np.diff(np.pad(m.astype(np.int8), ((0, 0), (1, 1))), axis=1))
    parent: list[int] = []

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    runs: dict[int, list[tuple[int, int, int]]] = {}  # row -> (start, end exclusive, run id)
    for row, start, end in zip(rows[::2].tolist(), cols[::2].tolist(), cols[1::2].tolist(), strict=True):
        parent.append(len(parent))
        for up_start, up_end, up in runs.get(row - 1, []):
            if up_start <= end and start <= up_end:  # end-exclusive runs: touching or diagonal
                parent[root(up)] = root(len(parent) - 1)
        runs.setdefault(row, []).append((start, end, len(parent) - 1))
    return len({root(i) for i in range(len(parent))})


def of_kind(seen: list[Seen], *kinds: str) -> list[Seen]:
    return [s for s in seen if s.item.kind in kinds]


def test_color_answers_name_the_colour_of_the_named_shape(seen: list[Seen]) -> None:
    for s in of_kind(seen, "color"):
        named = re.fullmatch(r"what color is the (\w+)\?", s.item.question)
        assert named is not None, s.item.question
        matches = [name for name, m in s.masks.items() if shape_of(m) == named[1]]
        assert matches == [s.item.answer], s.item.question


def test_shape_answers_name_the_shape_of_the_named_colour(seen: list[Seen]) -> None:
    for s in of_kind(seen, "shape"):
        named = re.fullmatch(r"what shape is the (\w+) object\?", s.item.question)
        assert named is not None, s.item.question
        assert shape_of(s.masks[named[1]]) == s.item.answer, s.item.question


def test_count_answers_are_the_connected_regions(seen: list[Seen]) -> None:
    for s in of_kind(seen, "count"):
        assert s.item.question == "how many shapes are there?"
        assert regions(s.foreground) == NUMBERS.index(s.item.answer)


def test_shapes_never_touch_and_are_large(seen: list[Seen]) -> None:
    """Every shape scene: only palette pixels on the background, one connected region per colour shown,
    each shape at least a fifth of the image's shorter side across."""
    for s in of_kind(seen, *SHAPE_KINDS):
        assert sum(int(m.sum()) for m in s.masks.values()) == s.foreground.sum()
        assert regions(s.foreground) == len(s.masks), s.item.question
        for m in s.masks.values():
            left, top, right, bottom = bbox(m)
            assert min(right - left, bottom - top) + 1 >= min(s.item.size) // 5


@pytest.mark.parametrize(("kind", "axis", "before"), [("left_right", 0, "left"), ("above_below", 1, "above")])
def test_relation_answers_follow_the_centroids(seen: list[Seen], kind: str, axis: int, before: str) -> None:
    """The first shape's centroid is before the second's iff the answer says so, and their extents along the
    axis do not overlap (the answer is never a judgment call)."""
    words = kind.replace("_", " or ")
    for s in of_kind(seen, kind):
        question = s.item.question
        named = re.fullmatch(rf"is the (\w+) shape {words}(?: of)? the (\w+) shape\?", question)
        assert named is not None, question
        first, second = s.masks[named[1]], s.masks[named[2]]
        assert (centroid(first)[axis] < centroid(second)[axis]) == (s.item.answer == before), question
        a, b = bbox(first), bbox(second)
        assert a[axis + 2] < b[axis] or b[axis + 2] < a[axis], question


def glyph(m: np.ndarray) -> np.ndarray:
    """The True pixels cropped to their bounding box, resized to 24 x 12 (0..1)."""
    left, top, right, bottom = bbox(m)
    crop = Image.fromarray(m[top : bottom + 1, left : right + 1].astype(np.uint8) * 255)
    return np.asarray(crop.resize((24, 12), Image.Resampling.BILINEAR), dtype=np.float32) / 255


def reference(text: str) -> np.ndarray:
    """``text`` rendered here, black on white at 100 px with Pillow's built-in font, as a glyph."""
    image = Image.new("L", (400, 200), 255)
    draw = ImageDraw.Draw(image)
    draw.fontmode = "1"
    draw.text((20, 20), text, fill=0, font=ImageFont.load_default(size=100))
    return glyph(np.asarray(image) == 0)


@pytest.mark.parametrize("kind", ["digit", "word"])
def test_text_is_drawn_and_reads_as_its_answer(seen: list[Seen], kind: str) -> None:
    """Text pixels of one colour, which read (nearest reference rendering) as the answer: "five" shows 5."""
    spelled = {
        answer: str(NUMBERS.index(answer)) if kind == "digit" else answer for answer in vqa.CHOICES[kind]
    }
    references = {answer: reference(text) for answer, text in spelled.items()}
    texts = of_kind(seen, kind)
    for s in texts:
        assert s.item.question == vqa.TEMPLATES[kind]
        assert len(s.masks) == 1 and next(iter(s.masks.values())).sum() == s.foreground.sum() > 100
        read = min(references, key=lambda answer: np.abs(references[answer] - glyph(s.foreground)).sum())
        assert read == s.item.answer
    assert {s.item.answer for s in texts} == set(spelled)


def test_signatures_describe_what_the_image_shows(seen: list[Seen]) -> None:
    """A shape scene's signature is (size, "shapes", its (colour, shape, cell)s) as read from the pixels,
    so the split a scene falls in is decided by the image itself."""
    for s in of_kind(seen, *SHAPE_KINDS):
        width, height = s.item.size
        shown = []
        for name, m in sorted(s.masks.items()):
            x, y = centroid(m)
            shown.append((name, shape_of(m), (int(y) * GRID // height, int(x) * GRID // width)))
        assert s.item.signature == (s.item.size, "shapes", tuple(shown))


def test_train_and_eval_never_share_a_scene(held: list[VqaItem], trained: list[VqaItem]) -> None:
    other_seed = vqa.make_items(12345, 300)
    assert all(vqa.held_out(item.signature) for item in held)
    assert not any(vqa.held_out(item.signature) for item in trained + other_seed)
    assert not {item.signature for item in held} & {item.signature for item in trained + other_seed}
    digests = {hashlib.sha256(item.image.tobytes()).digest() for item in trained + other_seed}
    assert not digests & {hashlib.sha256(item.image.tobytes()).digest() for item in held}


def test_every_text_and_size_has_scenes_in_both_regions() -> None:
    """Termination of the redraws: each text at each size has signatures in and out of the held-out region."""
    bins = [(column, row) for column in range(GRID) for row in range(GRID)]
    for size, text in itertools.product(vqa.SIZES, [str(d) for d in range(10)] + list(vqa.WORDS)):
        regions_seen = {
            vqa.held_out(Scene(size, text=Text(text, color, round(s * min(size)), (0, 0), place)).signature())
            for color, s, place in itertools.product(COLORS, TEXT_SCALES, bins)
        }
        assert regions_seen == {True, False}, (size, text)


def test_same_arguments_same_bytes_and_item_i_ignores_count() -> None:
    first = vqa.make_items(7, 21)
    again = vqa.make_items(7, 21)
    longer = vqa.make_items(7, 40)
    for a, b, c in zip(first, again, longer, strict=False):
        assert a.image.tobytes() == b.image.tobytes() == c.image.tobytes()
        assert (
            (a.question, a.answer, a.signature)
            == (b.question, b.answer, b.signature)
            == (c.question, c.answer, c.signature)
        )
    assert [item.image.tobytes() for item in vqa.make_items(8, 21)] != [
        item.image.tobytes() for item in first
    ]


#: The first 14 evaluation items (every kind at two sizes), hashed: the set must not move between runs,
#: machines or releases without this changing on purpose (models are trained and scored on it).
GOLDEN = "50f12d0487be6bb0b132018f34924eed9c08a987917d30711321aa249dcd5548"


def test_the_evaluation_set_is_pinned(held: list[VqaItem]) -> None:
    digest = hashlib.sha256()
    for item in held[:14]:
        digest.update(f"{item.question}|{item.answer}|{item.size}|".encode() + item.image.tobytes())
    assert digest.hexdigest() == GOLDEN


def test_every_kind_and_size_appears_and_answers_are_balanced(held: list[VqaItem]) -> None:
    assert {item.kind for item in held} == set(vqa.KINDS)
    assert {item.size for item in held} == set(vqa.SIZES)
    assert set(Counter(item.kind for item in held).values()) == {500 // 7, 500 // 7 + 1}
    for kind in vqa.KINDS:
        answers = Counter(item.answer for item in held if item.kind == kind)
        assert set(answers) == set(vqa.CHOICES[kind])
        assert max(answers.values()) <= 2 * sum(answers.values()) / len(vqa.CHOICES[kind]), (kind, answers)


def test_items_are_well_formed(held: list[VqaItem]) -> None:
    for item in held:
        assert item.image.mode == "RGB" and item.image.size == item.size
        assert item.question == item.question.lower() and item.question.endswith("?")
        assert item.answer in item.choices == vqa.CHOICES[item.kind]
        assert 1 <= len(item.answer.split()) <= 2
        assert set(item.question.removesuffix("?").split()) | {item.answer} <= set(vqa.VOCABULARY)


def test_sizes_cover_square_landscape_portrait_and_a_large_wide_one() -> None:
    assert (224, 224) in vqa.SIZES
    assert any(w > h for w, h in vqa.SIZES) and any(w < h for w, h in vqa.SIZES)
    assert max(vqa.SIZES, key=lambda s: s[0] * s[1]) == (720, 520)


def test_kinds_and_sizes_can_be_chosen() -> None:
    items = vqa.make_items(3, 12, kinds=["count", "word"], sizes=[(100, 64)])
    assert [item.kind for item in items] == ["count", "word"] * 6
    assert {item.size for item in items} == {(100, 64)}
    assert all(vqa.held_out(item.signature) for item in vqa.eval_items(6, kinds=["digit"]))


@pytest.mark.parametrize(
    "options",
    [{"kinds": ["colour"]}, {"kinds": []}, {"sizes": [(63, 200)]}, {"split": "test"}, {"sizes": []}],
)
def test_bad_arguments_are_value_errors(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        vqa.make_items(1, 3, **options)  # type: ignore[arg-type]


def test_blank_keeps_the_question_over_a_plain_image(held: list[VqaItem]) -> None:
    assert held[0].image.tobytes() != vqa.blank(held[0]).image.tobytes()
    for item in held[:14]:
        empty = vqa.blank(item)
        assert (empty.question, empty.answer, empty.kind, empty.size) == (
            item.question,
            item.answer,
            item.kind,
            item.size,
        )
        assert empty.image.mode == "RGB" and empty.image.size == item.size
        assert (np.asarray(empty.image) == BACKGROUND).all()


def test_chance_is_the_most_frequent_answer_per_kind(held: list[VqaItem]) -> None:
    a, b = held[0], held[7]  # two colour questions
    assert a.kind == b.kind == "color" and a.answer != b.answer
    assert vqa.chance_accuracy([a, a, b]) == pytest.approx(2 / 3)
    assert vqa.chance_accuracy([a, held[1]]) == 1.0
    uniform = float(np.mean([1 / len(item.choices) for item in held]))
    assert uniform <= vqa.chance_accuracy(held) < 1.5 * uniform
    with pytest.raises(ValueError):
        vqa.chance_accuracy([])
