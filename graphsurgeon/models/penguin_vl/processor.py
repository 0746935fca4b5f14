"""Penguin-VL's inputs as the official processor makes them: the image (resize budget, Pillow bicubic,
rescale and normalise, patch order) and the prompt (chat template, ``<image>`` expansion, tokenization with
HF ``tokenizers`` from the checkpoint's own ``tokenizer.json``).

Image, per image (a list is never sized jointly: the official processor would budget it as video frames):

1. ``convert("RGB")`` (RGBA drops its alpha, grey and palette images are expanded), as the official
   loader does on opening;
2. ``resize_target``: the official arithmetic in float64 in the reference's order, Python's ``round``
   (ties to even) and ``ceil`` on the minimum-area path;
3. Pillow's ``resize((w, h), BICUBIC)``: Pillow is the reference (fixed-point, antialiased, uint8 between
   the horizontal and vertical passes), so it is called, not re-implemented;
4. ``float32(u8 * rescale_factor)`` computed in float64 and rounded once, then ``(x - mean) / std`` in
   float32, as transformers' ``rescale`` and ``normalize`` do;
5. patches ``[grid_h*grid_w, 3*p*p]``: raster order over the grid, each patch an R block, a G block and a
   B block of ``p x p`` row-major pixels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.safetensors import CheckpointError
from graphsurgeon.models.common.images import ImageError, open_image

from .config import TOKENIZER, CheckpointFiles, ImageProcessorConfig, SpecialTokens

if TYPE_CHECKING:
    from PIL import Image as PILImage

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
EMPTY_THINK = "<think>\n\n</think>\n\n"


class PromptError(GsurgError):
    """A prompt whose image placeholders do not match the images given (exit 2)."""


def resize_target(height: int, width: int, factor: int, min_tokens: int, max_tokens: int) -> tuple[int, int]:
    """The official target ``(height, width)`` for one image: multiples of ``factor`` of about the same
    aspect ratio, the area capped at ``max_tokens * factor^2 * 0.95`` and, after rounding, at least
    ``min_tokens * factor^2 * 1.5`` (else recomputed from that minimum with ``ceil``)."""
    if height < 1 or width < 1:
        raise ImageError(f"an image of {width}x{height} pixels cannot be resized")
    min_pixels = min_tokens * factor * factor * 1.5
    max_pixels = max_tokens * factor * factor * 0.95
    aspect = height / width
    area: float = height * width
    if area > max_pixels:
        area = max_pixels  # one key frame: the whole budget (the official joint-budget path reduces to this)
        if area < min_pixels:
            area = min_pixels
    w_new = math.sqrt(area / aspect)
    h_new = w_new * aspect
    h_bar = max(round(h_new / factor) * factor, factor)
    w_bar = max(round(w_new / factor) * factor, factor)
    if h_bar * w_bar < min_pixels:
        w_min = math.sqrt(min_pixels / aspect)
        h_min = w_min * aspect
        h_bar = math.ceil(h_min / factor) * factor
        w_bar = math.ceil(w_min / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True)
class ProcessedImage:
    pixel_values: np.ndarray  # float32 [grid_h*grid_w, channels*patch^2]
    grid: tuple[int, int]  # (grid_h, grid_w)
    size: tuple[int, int]  # resized (height, width) in pixels

    @property
    def tokens(self) -> int:
        return self.grid[0] * self.grid[1]


def patchify(chw: np.ndarray, patch: int) -> np.ndarray:
    """``[C, H, W]`` with H, W multiples of ``patch`` -> ``[(H/p)*(W/p), C*p*p]``, patches in raster order,
    each flattened channel-major then row-major."""
    c, h, w = chw.shape
    gh, gw = h // patch, w // patch
    blocks = chw.reshape(c, gh, patch, gw, patch).transpose(1, 3, 0, 2, 4)
    return np.ascontiguousarray(blocks.reshape(gh * gw, c * patch * patch))


def preprocess(image: PILImage.Image, cfg: ImageProcessorConfig) -> ProcessedImage:
    """One image -> patches and grid, as the official processor computes them (merge size 1)."""
    from PIL import Image

    if image.mode != "RGB":
        if not cfg.do_convert_rgb:
            raise ImageError(f"an image in mode {image.mode} needs do_convert_rgb")
        image = image.convert("RGB")
    width, height = image.size
    h, w = resize_target(height, width, cfg.factor, cfg.min_tokens, cfg.max_tokens)
    resized = image.resize((w, h), resample=Image.Resampling(cfg.resample))
    pixels = np.asarray(resized, dtype=np.uint8)  # [h, w, 3]
    scaled = (pixels.astype(np.float64) * cfg.rescale_factor).astype(np.float32)
    mean = np.asarray(cfg.image_mean, dtype=np.float32)
    std = np.asarray(cfg.image_std, dtype=np.float32)
    normed = (scaled - mean) / std
    patches = patchify(normed.transpose(2, 0, 1), cfg.patch_size)
    return ProcessedImage(patches, (h // cfg.patch_size, w // cfg.patch_size), (h, w))


def load_and_preprocess(path: Path | str, cfg: ImageProcessorConfig) -> ProcessedImage:
    return preprocess(open_image(path), cfg)


# --- prompt -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One chat message: a role and its content, images (``None``) and text in order."""

    role: str
    content: Sequence[str | None]


def render_chat(
    turns: Sequence[Turn], image_token: str, add_generation_prompt: bool = True, think: bool = False
) -> str:
    """The official chat template: each turn ``<|im_start|>{role}\\n`` + content + ``<|im_end|>\\n``, an
    image rendering as ``{image_token}\\n``; no system turn is added; the generation prompt
    ``<|im_start|>assistant\\n`` is followed by an empty think block unless ``think``."""
    out = []
    for turn in turns:
        body = "".join(f"{image_token}\n" if item is None else item for item in turn.content)
        out.append(f"{IM_START}{turn.role}\n{body}{IM_END}\n")
    if add_generation_prompt:
        out.append(f"{IM_START}assistant\n" + ("" if think else EMPTY_THINK))
    return "".join(out)


def expand_image_tokens(prompt: str, image_token: str, counts: Sequence[int]) -> str:
    """Each ``image_token`` in ``prompt`` repeated ``counts[i]`` times (``grid_h*grid_w`` of image i)."""
    chunks = prompt.split(image_token)
    if len(chunks) - 1 != len(counts):
        raise PromptError(
            f"the prompt has {len(chunks) - 1} image placeholders but {len(counts)} images were given"
        )
    out = [chunks[0]]
    for count, chunk in zip(counts, chunks[1:], strict=True):
        out.append(image_token * count + chunk)
    return "".join(out)


class PenguinTokenizer:
    """``tokenizer.json`` through HF ``tokenizers`` (byte-level BPE with the Qwen2 pre-tokenizer), with the
    special ids the checkpoint's files give."""

    def __init__(self, files: CheckpointFiles) -> None:
        from tokenizers import Tokenizer

        path = files.folder / TOKENIZER
        try:
            self.backend = Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises a bare Exception for unreadable files
            raise CheckpointError(f"{path}: cannot load the tokenizer: {err}") from None
        self.tokens: SpecialTokens = files.tokens

    def encode(self, text: str) -> list[int]:
        return list(self.backend.encode(text).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=False))


def user_prompt(text: str, grids: Sequence[tuple[int, int]], image_token: str) -> str:
    """A single user turn, its images first then ``text``, as the model is prompted, with each image's
    placeholder expanded to its patch count."""
    rendered = render_chat([Turn("user", [*([None] * len(grids)), text])], image_token)
    return expand_image_tokens(rendered, image_token, [gh * gw for gh, gw in grids])


def prompt_ids(tokenizer: PenguinTokenizer, text: str, images: Sequence[ProcessedImage] = ()) -> list[int]:
    return tokenizer.encode(user_prompt(text, [img.grid for img in images], tokenizer.tokens.image))
