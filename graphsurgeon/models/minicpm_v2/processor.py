"""MiniCPM-V-2's image input as the official remote code makes it (``modeling_minicpmv.py`` at 1878519:
``slice_image``, ``get_slice_image_placeholder``, ``init_transform``; docs/minicpm-v-2.md §6), bit for bit
with the official environment's Pillow 10.1.0.

Per image:

1. ``convert("RGB")``, as the official README does after ``Image.open`` (RGBA drops its alpha, grey and
   palette images are expanded); no EXIF rotation, as there is none in the official code;
2. the geometry of ``slicing.plan_slices``: the overview size and, when the area exceeds 448^2, the grid,
   the refine size and the slices;
3. the overview and the refine image each resized from the original with Pillow's BICUBIC, **horizontal pass
   first** (``resize_h_then_v``); the slices are crops of the one refine image, row-major;
4. ``ToTensor`` then ``Normalize(0.5, 0.5)`` in float32: ``(float32(u8) / 255 - 0.5) / 0.5``, each operation
   rounded to float32 (torch's CPU ``div`` by a scalar is a true division for float32, not a multiplication
   by the reciprocal);
5. each image a ``[3, H, W]`` array at its own size (a list, not a batch; no patch reshaping in V-2), with
   ``tgt_size = (H // 14, W // 14)``, the patch grid the resampler gets (the official ``ceil(H / 14)``;
   every side is a multiple of 14). ``patch_rows`` lays one out as the rows the exported vision net's patch
   embedding (a matrix product) takes.

Why two resize calls: Pillow runs a 2-D resize as two separable passes with the image rounded to uint8 in
between, so the pass order changes pixels. Pillow up to 12.1 (the official 10.1.0) always runs the
horizontal pass first; Pillow 13 (this project's pin) runs the vertical pass first when the height shrinks by
more than twice as many pixels as the width. ``img.resize((w, H))`` then ``.resize((w, h))`` makes each call a
single pass, so the order is 10.1's under every Pillow (the coefficients and the fixed-point arithmetic of a
pass are the same in both versions). Checked against goldens made with Pillow 10.1.0
(tests/goldens/minicpm_v2).

Bad input: a file Pillow cannot open or decode is one ``ImageError`` naming it. So is an image above
Pillow's decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``, 89,478,485 pixels; Pillow's ``open`` refuses
above twice that and only warns in between), as it is for the official code, whose caller opens the file
with ``Image.open``. Every other size is processed as the official code processes it, however extreme: a
1x1 image becomes a 448x448 overview, a 1x4000 one a 14x28336 overview (a 2024x1 patch grid), a
10000x10000 one an overview and 3x3 slices of 448x448.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from graphsurgeon.models.common.images import ImageError, open_image

from .prompt import image_placeholder
from .slicing import SliceConfig, SlicePlan, plan_slices

if TYPE_CHECKING:
    from PIL import Image as PILImage

MEAN = np.float32(0.5)  # timm's IMAGENET_INCEPTION_MEAN, the same for the three channels
STD = np.float32(0.5)  # IMAGENET_INCEPTION_STD


def resize_h_then_v(image: PILImage.Image, size: tuple[int, int]) -> PILImage.Image:
    """Pillow's ``resize(size, BICUBIC)`` with the horizontal pass first, as Pillow 10.1.0 runs it."""
    from PIL import Image

    width, height = size
    out = image
    if width != out.width:
        out = out.resize((width, out.height), Image.Resampling.BICUBIC)
    if height != out.height:
        out = out.resize((width, height), Image.Resampling.BICUBIC)
    return out.copy() if out is image else out


def normalize(rgb: np.ndarray) -> np.ndarray:
    """uint8 ``[H, W, 3]`` -> float32 ``[3, H, W]``: ``ToTensor`` then ``Normalize(0.5, 0.5)``."""
    x = rgb.astype(np.float32) / np.float32(255)
    x = (x - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def resized_images(image: PILImage.Image, plan: SlicePlan) -> list[PILImage.Image]:
    """The RGB images the vision model sees, before normalisation: the overview, then the slices
    row-major."""
    out = [resize_h_then_v(image, plan.overview)]
    if plan.refine is not None:
        refine = resize_h_then_v(image, plan.refine)
        out.extend(refine.crop(box) for box in plan.slice_boxes())
    return out


@dataclass(frozen=True)
class ProcessedImage:
    """One image's inputs: ``pixel_values[i]`` float32 ``[3, H, W]`` for image i (the overview, then the
    slices row-major), ``resized[i]`` the uint8 ``[H, W, 3]`` it was normalised from, ``tgt_sizes[i]`` its
    patch grid ``(H // 14, W // 14)``, and the image's placeholder text in the prompt."""

    plan: SlicePlan
    resized: list[np.ndarray]
    pixel_values: list[np.ndarray]
    tgt_sizes: list[tuple[int, int]]
    placeholder: str


def to_rgb(image: PILImage.Image, name: str = "image") -> PILImage.Image:
    """``image.convert("RGB")``; a mode Pillow cannot convert is an ``ImageError`` naming ``name``."""
    if image.mode == "RGB":
        return image
    try:
        return image.convert("RGB")
    except (ValueError, OSError) as err:
        raise ImageError(f"{name}: cannot convert an image in mode {image.mode} to RGB: {err}") from None


def preprocess(
    image: PILImage.Image, cfg: SliceConfig | None = None, query_num: int = 64, name: str = "image"
) -> ProcessedImage:
    """One image -> the vision model's inputs and its placeholder text, as the official code makes them."""
    cfg = cfg or SliceConfig()
    rgb = to_rgb(image, name)
    if rgb.width < 1 or rgb.height < 1:
        raise ImageError(f"{name}: an image of {rgb.width}x{rgb.height} pixels has no pixels")
    plan = plan_slices(rgb.width, rgb.height, cfg)
    resized = [np.asarray(img, dtype=np.uint8) for img in resized_images(rgb, plan)]
    pixels = [normalize(u8) for u8 in resized]
    p = cfg.patch_size
    tgt = [(x.shape[1] // p, x.shape[2] // p) for x in pixels]
    return ProcessedImage(plan, resized, pixels, tgt, image_placeholder(plan.grid, query_num))


def patch_rows(pixels: np.ndarray, patch_size: int = 14) -> np.ndarray:
    """One ``[3, H, W]`` image (sides multiples of ``patch_size``) -> the vision net's input rows
    ``[N, 3*p*p]``: patches row-major over the ``(H/p, W/p)`` grid, each row ordered ``(channel, ky, kx)``,
    so the patch convolution's kernel ``[C, 3, p, p]`` viewed ``[C, 3*p*p]`` is a dot product with each
    row."""
    c, h, w = pixels.shape
    p = patch_size
    if h % p or w % p:
        raise ValueError(f"an image of {w}x{h} pixels is not a whole number of {p}x{p} patches")
    grid = pixels.reshape(c, h // p, p, w // p, p).transpose(1, 3, 0, 2, 4)
    return np.ascontiguousarray(grid.reshape((h // p) * (w // p), c * p * p), dtype=np.float32)


def load_and_preprocess(
    path: Path | str, cfg: SliceConfig | None = None, query_num: int = 64
) -> ProcessedImage:
    return preprocess(open_image(path), cfg, query_num, name=str(path))
