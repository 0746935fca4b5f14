"""Calibration samples for the Penguin-VL export (``ExportSpec.calibration``): what each of the six
sub-models sees when the reference answers a prompt about an image, computed once, on first access (only a
conversion whose storage policy calibrates, ``--set storage=fp16``, reads them).

The image is the rule file's variable ``calibration_image`` (a path, relative to the current directory),
or, when it is empty, a deterministic synthetic picture (smooth colour fields, edges and a little seeded
noise, 252 x 168, not square). It goes through the official processor with the token budget capped at
``MAX_TOKENS`` (the real checkpoint allows 16384 patches; activation magnitudes do not need them):

* ``vision_embed_patch``: its pixel patches ``[1, N, 588]``;
* ``vision_encoder``: the patch embedding ``[1, N, Cv]`` with the grid's 2-D RoPE tables;
* ``vision_projector``: the encoder's output ``[1, N, Cv]``;
* ``embed`` / ``decoder`` / ``lm_head`` (``graphsurgeon.models.common.llm_calibration``): the chat prompt with
  the image (the decoder reads the fused rows: text embeddings with the projected image features over the
  ``<image>`` rows), and the same prompt without the image.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from graphsurgeon.models.common.llm_calibration import LazySamples, Prompt, Sample

from .config import CheckpointFiles
from .model import PenguinVL, VisionStages
from .parts import vision_rope_inputs
from .processor import PenguinTokenizer, ProcessedImage, load_and_preprocess, preprocess, prompt_ids

if TYPE_CHECKING:
    from PIL.Image import Image

PROMPT = "Describe the image."
MAX_TOKENS = 1024
SYNTHETIC_SIZE = (252, 168)  # width, height


def synthetic_image(size: tuple[int, int] = SYNTHETIC_SIZE) -> Image:
    """A deterministic RGB picture with smooth regions, hard edges and fine texture."""
    from PIL import Image

    w, h = size
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    red = 128 + 90 * np.sin(x / 17.0) * np.cos(y / 23.0)
    green = 255 * x / (w - 1)
    blue = np.where(((x // 28) + (y // 28)) % 2 == 0, 40.0, 210.0)
    disc = (x - 0.6 * w) ** 2 + (y - 0.4 * h) ** 2 < (0.2 * h) ** 2
    rgb = np.stack([red, green, blue], axis=-1)
    rgb[disc] = (250.0, 240.0, 30.0)
    rgb += np.random.default_rng(0).normal(0.0, 6.0, rgb.shape)
    return Image.fromarray(np.clip(np.rint(rgb), 0, 255).astype(np.uint8), mode="RGB")


class PenguinSamples:
    """The six sub-models' samples, computed together on the first access of any."""

    def __init__(self, model: PenguinVL, files: CheckpointFiles, image: str | None) -> None:
        self._model, self._files, self._image = model, files, image
        self._vision: dict[str, list[Sample]] = {}
        self._prompts: list[Prompt] = []

    def _processed(self) -> ProcessedImage:
        cfg = self._files.processor
        capped = min(cfg.max_tokens, max(cfg.min_tokens, MAX_TOKENS))
        cfg = dataclasses.replace(cfg, max_tokens=capped)
        if self._image:
            return load_and_preprocess(Path(self._image), cfg)
        return preprocess(synthetic_image(), cfg)

    def _compute(self) -> None:
        if self._prompts:
            return
        model = self._model
        image = self._processed()
        with torch.no_grad():
            stages: VisionStages = model.encode_image(torch.from_numpy(image.pixel_values), image.grid)
            cos, sin = vision_rope_inputs(model, image.grid)
            self._vision = {
                "vision_embed_patch": [(torch.from_numpy(image.pixel_values)[None],)],
                "vision_encoder": [(stages.patch_embed[None], cos, sin)],
                "vision_projector": [(stages.encoder[None],)],
            }
            tokenizer = PenguinTokenizer(self._files)
            with_image = prompt_ids(tokenizer, PROMPT, [image])
            rows = model.fuse(with_image, [stages.projector])[None]
            text_only = prompt_ids(tokenizer, PROMPT)
        self._prompts = [
            Prompt(torch.tensor([with_image], dtype=torch.int64), rows),
            Prompt(torch.tensor([text_only], dtype=torch.int64)),
        ]

    def vision(self, name: str) -> LazySamples:
        def make() -> list[Sample]:
            self._compute()
            return self._vision[name]

        return LazySamples(make)

    def prompts(self) -> list[Prompt]:
        self._compute()
        return self._prompts


def calibration_image(variables: Mapping[str, Any]) -> str | None:
    value = variables.get("calibration_image", "")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"calibration_image must be a path, not {value!r}")
    return value
