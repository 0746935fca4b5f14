"""The Penguin-VL processor (graphsurgeon/models/penguin_vl/processor.py) against hand-computed sizes, Pillow
itself, and transformers' tokenizer.

Oracles: target sizes worked out by hand from the official arithmetic (the float64 intermediates that
decide a near-tie are written next to each case); pixel values rebuilt in the test from Pillow's own
``resize`` output with the patch index formula ``p = r*grid_w + c``, element ``ch*p^2 + ky*p + kx``;
alpha dropped / grey replicated / palette looked up in numpy for the mode conversions; the prompt string
written out literally and encoded by ``transformers.AutoTokenizer`` from the checkpoint folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
pytest.importorskip("tokenizers")

from PIL import Image  # noqa: E402

from graphsurgeon.errors import GsurgError  # noqa: E402
from graphsurgeon.models.penguin_vl.config import load_files, processor_from_dict  # noqa: E402
from graphsurgeon.models.penguin_vl.make_tiny import SHIPPED, make_tiny, preprocessor_config  # noqa: E402
from graphsurgeon.models.penguin_vl.processor import (  # noqa: E402
    ImageError,
    PenguinTokenizer,
    PromptError,
    Turn,
    expand_image_tokens,
    load_and_preprocess,
    open_image,
    preprocess,
    prompt_ids,
    render_chat,
    resize_target,
)
from tests.conftest import CORPUS  # noqa: E402

REAL = processor_from_dict(preprocessor_config() | {"max_tokens": 16384})
"""The official preprocessor_config.json of Penguin-VL-2B (the tiny one differs only in max_tokens)."""


@pytest.mark.parametrize(
    ("height", "width", "max_tokens", "expected"),
    [
        # fact sheet: 565x353 (WxH) -> 560x350, 25 x 40 patches
        (353, 565, 16384, (350, 560)),
        # fact sheet: the #6825 override max_tokens=196: area 832^2 > 196*196*0.95 = 36495.2, sqrt = 191.03,
        # 191.03 / 14 = 13.65 -> 14 -> 196
        (832, 832, 196, (196, 196)),
        # exact ties (square: aspect 1.0, sqrt(h*h) = h exactly): 343/14 = 24.5 -> 24 (even), 357/14 = 25.5 ->
        # 26 (even); rounding half up would give 350 and 364
        (343, 343, 16384, (336, 336)),
        (357, 357, 16384, (364, 364)),
        # near-ties decided by one ulp: 343x318: aspect = 1.078616352201258, area/aspect = 101123.99999999999,
        # sqrt -> 318.0, h' = 318.0 * aspect = 343.00000000000006, /14 = 24.500000000000004 -> 25 -> 350
        # (exact arithmetic would tie and give 336); w: 318/14 = 22.71 -> 23 -> 322
        (343, 318, 16384, (350, 322)),
        # 357x326: h' = 356.99999999999994, /14 = 25.499999999999996 -> 25 -> 350 (exact: 364)
        (357, 326, 16384, (350, 322)),
        # over the budget: max_pixels = 16384*196*0.95 = 3050700.8, aspect 0.75, w' = sqrt(4067601.07) =
        # 2016.83 -> 144*14 = 2016, h' = 1512.62 -> 108*14 = 1512
        (3000, 4000, 16384, (1512, 2016)),
        # the minimum: 30x20 rounds to 28x14 = 392 < min_pixels = 16*196*1.5 = 4704, so w = sqrt(4704/1.5) =
        # 56 exactly, h = 84: ceil(6) * 14 = 84, ceil(4) * 14 = 56
        (30, 20, 16384, (84, 56)),
        # 10x10 rounds to 14x14 (at least one patch); the minimum: sqrt(4704) = 68.59, ceil(4.899) = 5 -> 70
        (10, 10, 16384, (70, 70)),
    ],
)
def test_resize_target_matches_hand_computed_cases(
    height: int, width: int, max_tokens: int, expected: tuple[int, int]
) -> None:
    assert resize_target(height, width, 14, 16, max_tokens) == expected


def _expected_patches(resized: Image.Image, patch: int) -> np.ndarray:
    """Patches from Pillow's resized image by the index formula, normalised in float64."""
    u8 = np.asarray(resized, dtype=np.uint8)
    gh, gw = u8.shape[0] // patch, u8.shape[1] // patch
    p, e = np.meshgrid(np.arange(gh * gw), np.arange(3 * patch * patch), indexing="ij")
    r, c = p // gw, p % gw
    ch, ky, kx = e // (patch * patch), (e % (patch * patch)) // patch, e % patch
    values = u8[r * patch + ky, c * patch + kx, ch].astype(np.float64)
    return (values / 255.0 - 0.5) / 0.5


@pytest.mark.parametrize(
    ("name", "mode", "size", "grid"),
    [
        # desert.jpg is an RGBA PNG, 720x478: 478/14 = 34.1 -> 476, 720/14 = 51.4 -> 714
        ("desert.jpg", "RGBA", (720, 478), (34, 51)),
        # 1148x832 RGBA: 832/14 = 59.4 -> 826, 1148/14 = 82 -> 1148
        ("newspaper.png", "RGBA", (1148, 832), (59, 82)),
        ("photo_20180413_3.jpg", "RGB", (720, 520), (37, 51)),
    ],
)
def test_corpus_images_give_pillow_pixels_in_patch_order(
    name: str, mode: str, size: tuple[int, int], grid: tuple[int, int]
) -> None:
    path = CORPUS / "images" / name
    with Image.open(path) as img:
        assert (img.mode, img.size) == (mode, size)
        rgb = img.convert("RGB")
    out = load_and_preprocess(path, REAL)
    assert out.grid == grid and grid[0] != grid[1]
    assert out.size == (grid[0] * 14, grid[1] * 14)
    assert out.pixel_values.dtype == np.float32 and out.pixel_values.shape == (grid[0] * grid[1], 588)
    expected = _expected_patches(rgb.resize((grid[1] * 14, grid[0] * 14), Image.Resampling.BICUBIC), 14)
    np.testing.assert_allclose(out.pixel_values, expected, rtol=0, atol=1e-6)


def test_the_tiny_budget_still_gives_non_square_grids() -> None:
    cfg = load_files(SHIPPED).processor
    grids = {
        name: load_and_preprocess(CORPUS / "images" / name, cfg).grid
        for name in ("desert.jpg", "newspaper.png")
    }
    assert all(gh != gw and gh * gw <= cfg.max_tokens for gh, gw in grids.values())
    assert len(set(grids.values())) == 2


def _rgb_array(seed: int, h: int, w: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_modes_are_converted_as_pillow_converts_to_rgb() -> None:
    rgb = _rgb_array(1, 61, 90)
    alpha = np.random.default_rng(2).integers(0, 256, (61, 90, 1), dtype=np.uint8)
    rgba = Image.fromarray(np.concatenate([rgb, alpha], axis=-1), "RGBA")
    assert np.array_equal(
        preprocess(rgba, REAL).pixel_values, preprocess(Image.fromarray(rgb), REAL).pixel_values
    )

    grey = rgb[..., 0]
    as_rgb = Image.fromarray(np.stack([grey, grey, grey], axis=-1))
    np.testing.assert_array_equal(
        preprocess(Image.fromarray(grey, "L"), REAL).pixel_values, preprocess(as_rgb, REAL).pixel_values
    )

    palette = _rgb_array(3, 1, 256)[0]
    index = np.random.default_rng(4).integers(0, 256, (61, 90), dtype=np.uint8)
    pal = Image.fromarray(index, "P")
    pal.putpalette(palette.tobytes())
    looked_up = Image.fromarray(palette[index])
    np.testing.assert_array_equal(
        preprocess(pal, REAL).pixel_values, preprocess(looked_up, REAL).pixel_values
    )


def test_unreadable_images_are_one_clear_error(tmp_path: Path) -> None:
    text = tmp_path / "notes.png"
    text.write_text("not an image\n")
    truncated = tmp_path / "cut.png"
    truncated.write_bytes((CORPUS / "images" / "newspaper.png").read_bytes()[:5000])
    for path, reason in (
        (tmp_path / "missing.png", "no such image file"),
        (text, "not an image"),
        (truncated, "cannot decode"),
    ):
        with pytest.raises(ImageError, match=reason) as err:
            open_image(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
        assert isinstance(err.value, GsurgError) and err.value.exit_code == 2


# --- chat template and tokens ------------------------------------------------------------------------


def test_the_template_is_the_official_one() -> None:
    image = "<image>"
    one = render_chat([Turn("user", [None, "Hi?"])], image)
    assert one == "<|im_start|>user\n<image>\nHi?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    thinking = render_chat([Turn("user", ["Hi?"])], image, think=True)
    assert thinking == "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    assert expand_image_tokens("a<image>b<image>c", image, [2, 3]) == "a<image><image>b<image><image><image>c"
    with pytest.raises(PromptError, match="2 image placeholders but 1 images"):
        expand_image_tokens("a<image>b<image>c", image, [2])


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(SHIPPED), local_files_only=True)


def test_prompt_ids_equal_transformers_encoding_of_the_literal_prompt(hf_tokenizer: Any) -> None:
    files = load_files(SHIPPED)
    tokenizer = PenguinTokenizer(files)
    img = load_and_preprocess(CORPUS / "images" / "desert.jpg", files.processor)
    n = img.grid[0] * img.grid[1]
    for text, images in (
        ("What month is printed at the top? Answer with the month only.", [img]),
        ("Hello, world!", []),
    ):
        literal = (
            "<|im_start|>user\n"
            + ("<image>" * n + "\n" if images else "")
            + text
            + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        )
        ours = prompt_ids(tokenizer, text, images)
        assert ours == hf_tokenizer.encode(literal)
        assert ours.count(files.tokens.image_id) == (n if images else 0)
    for token, our_id in (("<image>", files.tokens.image_id), ("<|im_end|>", files.tokens.eos_id)):
        assert hf_tokenizer.convert_tokens_to_ids(token) == our_id
    assert hf_tokenizer.eos_token == files.tokens.eos and hf_tokenizer.pad_token == files.tokens.pad
    assert files.tokens.image_id == files.config.image_token_index
    assert files.tokens.eos_id in files.config.eos_token_ids


def test_ids_come_from_the_checkpoint_files(tmp_path: Path) -> None:
    """A checkpoint whose tokenizer has another vocabulary size moves every special id; the processor and
    the model follow the files."""
    shipped = load_files(SHIPPED)
    other = load_files(make_tiny(tmp_path / "other", bpe_vocab=500))
    assert other.tokens.image_id != shipped.tokens.image_id and other.tokens.eos_id != shipped.tokens.eos_id
    assert other.config.image_token_index == other.tokens.image_id == 505
    img = load_and_preprocess(CORPUS / "images" / "desert.jpg", other.processor)
    ids = prompt_ids(PenguinTokenizer(other), "Describe the image.", [img])
    assert ids.count(other.tokens.image_id) == img.tokens and shipped.tokens.image_id not in ids
