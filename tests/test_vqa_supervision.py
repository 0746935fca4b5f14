"""The dense training targets of the VLM fixtures (``evaluation.vqa_supervision``) and the patch
embedding's whitening (``evaluation.patch_whitening``), on scenes placed here by hand: a patch wholly
inside a drawn square must carry that square's colour, shape and grid cell; a patch of plain background
none; a text image's inked patches the text; each question word naming one object that object."""

from __future__ import annotations

import numpy as np
import pytest

from graphsurgeon.evaluation import scenes, vqa
from graphsurgeon.evaluation.lm_training import IGNORE
from graphsurgeon.evaluation.patch_whitening import whitened_filters
from graphsurgeon.evaluation.vqa_supervision import (
    COLOR_NAMES,
    TEXTS,
    grounding_targets,
    naming_tokens,
    patch_targets,
)

PATCH = 14
SIZE = (224, 224)  # 16 x 16 patches, no resize needed


def _item(scene: scenes.Scene, question: str = "q") -> vqa.VqaItem:
    return vqa.VqaItem(scene.draw(), question, "a", "color", ("a",), scene.size, scene.signature())


def _shapes_scene() -> scenes.Scene:
    square = scenes.Shape("square", "blue", (0, 0), (0, 0, 70))  # patches (0..4, 0..4) wholly inside
    circle = scenes.Shape("circle", "red", (2, 1), (85, 160, 55))  # row 2, column 1: centre (112, 187)
    return scenes.Scene(SIZE, shapes=(square, circle))


def test_a_patch_inside_a_square_carries_its_colour_shape_and_cell() -> None:
    item = _item(_shapes_scene())
    targets = patch_targets(item, np.asarray(item.image), PATCH).reshape(16, 16, 5)
    inside = targets[:5, :5].reshape(-1, 5)
    blue = 1 + COLOR_NAMES.index("blue")
    assert (inside == [blue, scenes.SHAPES.index("square"), 0, 0, IGNORE]).all()
    background = targets[7, 7]  # the middle of the image: neither shape reaches it
    assert list(background) == [0, IGNORE, IGNORE, IGNORE, IGNORE]
    circle_centre = targets[187 // PATCH, 112 // PATCH]  # patches in row-major order: [row, column]
    assert list(circle_centre) == [1 + COLOR_NAMES.index("red"), scenes.SHAPES.index("circle"), 2, 1, IGNORE]


def test_a_text_image_marks_its_inked_patches_with_the_text() -> None:
    text = scenes.place_text(np.random.default_rng(0), SIZE, "7", "white")
    item = _item(scenes.Scene(SIZE, text=text))
    targets = patch_targets(item, np.asarray(item.image), PATCH)
    inked = targets[:, 0] > 0
    assert inked.any() and (targets[inked, 4] == TEXTS.index("7")).all()
    assert (targets[~inked, 4] == IGNORE).all() and (targets[:, 1:4] == IGNORE).all()


def test_a_resized_image_that_is_not_whole_patches_is_refused() -> None:
    item = _item(_shapes_scene())
    with pytest.raises(ValueError, match="multiples of 14"):
        patch_targets(item, np.zeros((100, 98, 3), np.uint8), PATCH)


def test_question_words_naming_one_object_are_grounded() -> None:
    ids = {"blue": 10, "red": 11, "green": 12, "square": 20, "circle": 21, "triangle": 22}
    names = naming_tokens(lambda text: [ids.get(text.strip(), 99)])
    item = _item(_shapes_scene())
    prompt = [1, 10, 2, 11, 12, 22, 20, 3]  # blue, red, an absent green, an absent triangle, square
    got = grounding_targets(item, prompt, names, start=1)
    blue_square = (COLOR_NAMES.index("blue"), scenes.SHAPES.index("square"), 0, 0)
    red_circle = (COLOR_NAMES.index("red"), scenes.SHAPES.index("circle"), 2, 1)
    assert got == [(1, *blue_square), (3, *red_circle), (6, *blue_square)]
    assert grounding_targets(item, prompt, names, start=4) == [(6, *blue_square)]
    with pytest.raises(ValueError, match="'red' after a space is 2 tokens"):
        naming_tokens(lambda text: [1, 2] if text == " red" else [3])


def test_whitened_filters_decorrelate_and_centre_the_patches() -> None:
    rng = np.random.default_rng(0)
    mixing = rng.standard_normal((6, 6))
    patches = rng.standard_normal((5000, 6)) @ mixing + 3.0
    filters, bias = whitened_filters(patches, 4, floor=0.0)
    features = patches @ filters.T.astype(np.float64) + bias
    assert np.allclose(features.mean(axis=0), 0.0, atol=1e-6)
    assert np.allclose(np.cov(features.T, bias=True), np.eye(4), atol=1e-4)
    with pytest.raises(ValueError, match="D >= 7"):
        whitened_filters(patches, 7, floor=0.0)
