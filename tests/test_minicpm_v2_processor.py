"""The MiniCPM-V-2 image processor and placeholder text (graphsurgeon/models/minicpm_v2) against the official
remote code.

Oracles: tests/goldens/minicpm_v2/processor.json, written by ``make_goldens.py`` from the official
``modeling_minicpmv.py`` (commit 1878519, its ``slice_image``, ``get_slice_image_placeholder`` and ``chat``
run as they are) under the official environment's Pillow 10.1.0, for 62 procedural images and the corpus
images: per image the grid, the refine size, every overview/slice size and ``tgt_size``, and sha256 of the
uint8 and the normalised float32 pixels; the chat text of a few chats. Besides: the worked examples of
docs/minicpm-v-2.md §6.3 and §7.1 written out, and the bad inputs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")

from PIL import Image  # noqa: E402

from graphsurgeon.errors import GsurgError  # noqa: E402
from graphsurgeon.models.minicpm_v2.processor import (  # noqa: E402
    ImageError,
    load_and_preprocess,
    open_image,
    patch_rows,
    preprocess,
    resize_h_then_v,
)
from graphsurgeon.models.minicpm_v2.prompt import PromptError, chat_prompt, image_placeholder  # noqa: E402
from graphsurgeon.models.minicpm_v2.slicing import (  # noqa: E402
    SliceError,
    candidate_grids,
    ensure_divide,
    plan_slices,
)
from tests.conftest import CORPUS  # noqa: E402
from tests.goldens.minicpm_v2.images import make_image, open_corpus, specs  # noqa: E402

GOLDENS = json.loads((Path(__file__).parent / "goldens" / "minicpm_v2" / "processor.json").read_text("utf-8"))
ENTRIES: list[dict[str, Any]] = GOLDENS["images"]
UNK64 = "<unk>" * 64
IMG = f"<image>{UNK64}</image>"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _input(entry: dict[str, Any]) -> Image.Image:
    spec = entry["spec"]
    if "file" in spec:
        folder = CORPUS / "images"
        if not (folder / spec["file"]).is_file():
            pytest.skip(f"corpus image {folder / spec['file']} missing")
        return open_corpus(folder, spec["file"])
    return make_image(spec)


def test_the_goldens_come_from_the_official_code_under_pillow_10_1_and_cover_at_least_50_images() -> None:
    prov = GOLDENS["provenance"]
    assert prov["Pillow"] == "10.1.0"
    assert "187851962daa9b63072d40ec802f597b71bff532" in prov["official"]
    assert len([e for e in ENTRIES if "file" not in e["spec"]]) >= 50
    grids = {tuple(e["grid"]) if e["grid"] else None for e in ENTRIES}
    assert None in grids and len(grids) >= 8  # unsliced and many grid shapes
    assert {e["spec"]["name"] for e in ENTRIES} >= {s["name"] for s in specs()}


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["spec"]["name"] for e in ENTRIES])
def test_processor_equals_the_official_one(entry: dict[str, Any]) -> None:
    image = _input(entry)
    assert image.mode == entry["input_mode"]
    assert sha(image.tobytes()) == entry["input_sha256"], (
        "the test image is not the one the goldens were made from"
    )
    out = preprocess(image, name=entry["spec"]["name"])
    assert list(out.plan.size) == entry["size"]
    assert (list(out.plan.grid) if out.plan.grid else None) == entry["grid"]
    assert (list(out.plan.refine) if out.plan.refine else None) == entry["refine"]
    assert len(out.pixel_values) == len(entry["outputs"])
    for i, (u8, x, tgt, want) in enumerate(
        zip(out.resized, out.pixel_values, out.tgt_sizes, entry["outputs"], strict=True)
    ):
        where = f"image {i} of {len(entry['outputs'])}"
        assert [x.shape[2], x.shape[1]] == want["size"], where
        assert list(tgt) == want["tgt_size"], where
        assert u8.dtype == np.uint8 and sha(u8.tobytes()) == want["u8"], f"{where}: resized pixels differ"
        assert x.dtype == np.float32 and x.flags.c_contiguous
        assert sha(x.astype("<f4").tobytes()) == want["f32"], f"{where}: normalised pixels differ"
    assert sha(out.placeholder.encode()) == entry["placeholder_sha256"]
    assert len(out.placeholder) == entry["placeholder_chars"]


@pytest.mark.parametrize("chat", GOLDENS["chats"], ids=lambda c: f"{c['image']}-{len(c['messages'])}")
def test_chat_text_equals_the_official_one(chat: dict[str, Any]) -> None:
    placeholder = None
    if chat["image"] is not None:
        spec = next(s for s in specs() if s["name"] == chat["image"])
        placeholder = image_placeholder(plan_slices(spec["width"], spec["height"]).grid)
    messages = [(m["role"], m["content"]) for m in chat["messages"]]
    text = chat_prompt(messages, placeholder)
    assert (sha(text.encode()), len(text)) == (chat["prompt_sha256"], chat["chars"])


# --- the size arithmetic, written out --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "grid", "overview", "refine", "cell"),
    [
        # docs/minicpm-v-2.md §6.3, (W, H) -> grid (cols, rows), overview, refine and slice sizes
        ((448, 448), None, (448, 448), None, None),  # exactly 448^2: not sliced
        ((1, 1), None, (448, 448), None, None),  # upscaled
        ((500, 500), (1, 2), (448, 448), (630, 644), (630, 322)),  # square tie: [1, 2] comes first
        ((640, 480), (2, 1), (518, 392), (728, 546), (364, 546)),
        ((800, 600), (2, 2), (518, 392), (1036, 784), (518, 392)),
        ((1280, 720), (3, 2), (602, 336), (1470, 812), (490, 406)),
        ((1000, 3000), (2, 4), (252, 770), (728, 2184), (364, 546)),
        ((14, 2000), None, (42, 5348), None, None),
        # 1x4000: r = 1/4000; h = int(448 / .0158) = 28333; w = int(7.08) = 7 -> 14; 28333/14 = 2023.8 -> 2024
        ((1, 4000), None, (14, 28336), None, None),
        # 4000x1: h = int(448 / 63.25) = 7 -> round(0.5) = 0 -> at least 14; w = 7 * 4000 = 28000
        ((4000, 1), None, (28000, 14), None, None),
        # 10000^2: multiple min(ceil(498.2), 9) = 9, grids of 8 and 9 slices, [3, 3] exact; 10000/3 -> 9999
        ((10000, 10000), (3, 3), (448, 448), (1344, 1344), (448, 448)),
        # 321x1001, grid [1, 3]: overview h = int(448 / sqrt(0.3207)) = 791, 791/14 = 56.5 -> 56 (even) -> 784
        ((321, 1001), (1, 3), (252, 784), (434, 1386), (434, 462)),
        # 300x721, grid [1, 2]: 721/2 = 360.5 -> 360 (to even), so the refine height comes from 720
        ((300, 721), (1, 2), (294, 700), (406, 980), (406, 490)),
        # 1150^2: 7 slices wanted, [2, 3] and [3, 2] tie in exact arithmetic, but in doubles
        # abs(log(2/3)) = 0.40546510810816444 > abs(log(3/2)) = 0.4054651081081644: the later [3, 2] wins
        ((1150, 1150), (3, 2), (448, 448), (1092, 1092), (364, 546)),
    ],
)
def test_slice_plan_matches_worked_examples(
    size: tuple[int, int],
    grid: tuple[int, int] | None,
    overview: tuple[int, int],
    refine: tuple[int, int] | None,
    cell: tuple[int, int] | None,
) -> None:
    plan = plan_slices(*size)
    assert (plan.grid, plan.overview, plan.refine, plan.slice_size) == (grid, overview, refine, cell)
    boxes = plan.slice_boxes()
    assert len(boxes) == (grid[0] * grid[1] if grid else 0)
    if grid and cell:
        assert boxes[1] == (
            (cell[0], 0, 2 * cell[0], cell[1]) if grid[0] > 1 else (0, cell[1], cell[0], 2 * cell[1])
        )


def test_ensure_divide_rounds_ties_to_even_and_keeps_one_multiple() -> None:
    assert [ensure_divide(35, 14), ensure_divide(21, 14), ensure_divide(641, 2), ensure_divide(643, 2)] == [
        28,
        28,
        640,
        644,
    ]
    assert ensure_divide(6, 14) == 14 and ensure_divide(7, 14) == 14 and ensure_divide(0, 14) == 14


def test_candidate_grids_are_in_the_official_order() -> None:
    assert candidate_grids(2, 9) == [(1, 2), (2, 1), (1, 3), (3, 1)]
    assert candidate_grids(9, 9) == [(1, 8), (2, 4), (4, 2), (8, 1), (1, 9), (3, 3), (9, 1)]


def test_placeholder_text_as_in_the_doc() -> None:
    assert image_placeholder(None) == IMG
    # docs/minicpm-v-2.md §7.1, 800x600 (2 columns x 2 rows)
    assert image_placeholder((2, 2)) == f"{IMG}<slice>{IMG}{IMG}\n{IMG}{IMG}</slice>"
    assert image_placeholder((1, 3)) == f"{IMG}<slice>{IMG}\n{IMG}\n{IMG}</slice>"
    assert chat_prompt([("user", "Q")], image_placeholder(None)) == f"<用户>{IMG}\nQ<AI>"


def test_chat_refuses_what_the_official_chat_asserts() -> None:
    with pytest.raises(PromptError, match=r"^message 1: role 'system'"):
        chat_prompt([("user", "a"), ("system", "b")], None)
    with pytest.raises(PromptError, match=r"^message 0: the image goes with a user message"):
        chat_prompt([("assistant", "a")], IMG)


@pytest.mark.skipif(
    int(PIL.__version__.split(".")[0]) < 13, reason="Pillow < 13 always runs horizontal first"
)
def test_a_single_resize_call_under_pillow_13_is_not_the_official_pixels() -> None:
    """Why ``resize_h_then_v``: Pillow 13 runs 447x449 -> 448x448 vertical first (the height shrinks, the
    width grows), and the uint8 rounding between the passes makes other pixels than Pillow 10.1.0's."""
    entry = next(e for e in ENTRIES if e["spec"]["name"] == "small_447x449")
    image = make_image(entry["spec"])
    want = entry["outputs"][0]["u8"]
    assert sha(resize_h_then_v(image, (448, 448)).tobytes()) == want
    assert sha(image.resize((448, 448), Image.Resampling.BICUBIC).tobytes()) != want


# --- patch rows -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("height", "width", "channels"), [(14, 14, 1), (28, 42, 5), (56, 14, 3), (14, 70, 2)]
)
def test_patch_rows_times_the_flattened_conv_weight_is_torchs_patch_conv(
    height: int, width: int, channels: int
) -> None:
    """torch's conv2d (stride = kernel = 14, no bias) is the oracle, in float64 on float32-representable
    pixels (patch_rows gives float32 rows, copied exactly). Integer-valued inputs make every sum exact, so any
    order of summation gives the same bits and the comparison can be exact; random reals are compared too, to
    a float64 rounding bound."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(height * 1000 + width + channels)
    for pixels, weight, tolerance in [
        (rng.integers(-8, 9, (3, height, width)), rng.integers(-8, 9, (channels, 3, 14, 14)), 0.0),
        (rng.standard_normal((3, height, width)), rng.standard_normal((channels, 3, 14, 14)), 1e-12),
    ]:
        x, w = pixels.astype(np.float32).astype(np.float64), weight.astype(np.float64)
        conv = torch.nn.functional.conv2d(torch.from_numpy(x)[None], torch.from_numpy(w), stride=14)[0]
        want = conv.reshape(channels, -1).T.numpy()  # [grid row-major, C]
        rows = patch_rows(x)
        assert rows.shape == ((height // 14) * (width // 14), 3 * 14 * 14) and rows.dtype == np.float32
        got = rows.astype(np.float64) @ w.reshape(channels, -1).T
        if tolerance == 0.0:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=tolerance)


def test_patch_rows_copies_patch_pixels_in_channel_row_column_order() -> None:
    pixels = np.arange(3 * 28 * 42, dtype=np.float32).reshape(3, 28, 42)
    rows = patch_rows(pixels)
    assert rows.dtype == np.float32 and rows.flags.c_contiguous
    # patch (gy=1, gx=2) is row 1 * 3 + 2; its column c*196 + ky*14 + kx is pixel (c, 14 + ky, 28 + kx)
    np.testing.assert_array_equal(rows[5].reshape(3, 14, 14), pixels[:, 14:28, 28:42])
    assert patch_rows(np.zeros((3, 8, 12), np.float32), patch_size=4).shape == (6, 48)


@pytest.mark.parametrize("shape", [(3, 15, 14), (3, 14, 13), (3, 28, 27)])
def test_patch_rows_refuses_pixels_not_in_whole_patches(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="is not a whole number of 14x14 patches"):
        patch_rows(np.zeros(shape, np.float32))


# --- bad input ------------------------------------------------------------------------------------------


def _one_line_naming(err: GsurgError, name: str) -> None:
    assert "\n" not in str(err) and name in str(err)


def test_a_missing_file_a_folder_and_a_non_image_are_refused_naming_the_file(tmp_path: Path) -> None:
    text = tmp_path / "notes.png"
    text.write_text("not an image\n")
    for path, message in [
        (tmp_path / "nope.jpg", "no such image file"),
        (tmp_path, "a folder, not an image file"),
        (text, "not an image Pillow can read"),
    ]:
        with pytest.raises(ImageError, match=message) as info:
            load_and_preprocess(path)
        _one_line_naming(info.value, str(path))


def test_a_truncated_image_is_refused_naming_the_file(tmp_path: Path) -> None:
    whole = tmp_path / "whole.png"
    make_image({"width": 64, "height": 48, "pattern": "noise", "seed": 5, "mode": "RGB"}).save(whole)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(ImageError, match="cannot decode the image") as info:
        load_and_preprocess(cut)
    _one_line_naming(info.value, str(cut))


def test_an_image_past_pillows_decompression_bomb_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.png"
    Image.new("RGB", (300, 200)).save(path)
    # Pillow refuses above twice MAX_IMAGE_PIXELS (here 2 * 20000 < 60000 pixels) and only warns in between
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)
    with pytest.raises(ImageError, match="too large to open") as info:
        open_image(path)
    _one_line_naming(info.value, str(path))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 40_000)
    with pytest.warns(Image.DecompressionBombWarning):
        assert open_image(path).size == (300, 200)


def test_a_file_gives_what_the_image_gives(tmp_path: Path) -> None:
    spec = next(s for s in specs() if s["name"] == "boundary_500x500")
    path = tmp_path / "img.png"
    make_image(spec).save(path)
    from_file, in_memory = load_and_preprocess(path), preprocess(make_image(spec))
    assert from_file.tgt_sizes == in_memory.tgt_sizes == [(32, 32), (23, 45), (23, 45)]
    for a, b in zip(from_file.pixel_values, in_memory.pixel_values, strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_image_without_pixels_is_refused() -> None:
    with pytest.raises(ImageError, match=r"^empty: an image of 0x5 pixels has no pixels$"):
        preprocess(Image.new("RGB", (0, 5)), name="empty")
    with pytest.raises(SliceError, match="5x0"):
        plan_slices(5, 0)


def test_a_mode_without_an_rgb_conversion_is_refused_naming_the_image() -> None:
    image = Image.new("I;16", (4, 4))
    try:
        image.convert("RGB")
    except ValueError:
        with pytest.raises(ImageError, match=r"^x\.png: cannot convert an image in mode I;16 to RGB"):
            preprocess(image, name="x.png")
    else:  # this Pillow converts it: then it is processed like any other image
        assert preprocess(image).tgt_sizes == [(32, 32)]
