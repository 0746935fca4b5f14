"""Dense training targets for a VQA fixture, read off each item's scene: what every image patch shows, and
what every object the question names is. Training only; nothing here is in a checkpoint.

A VQA answer is one token of supervision per image, and at the fixtures' size that is too little: trained
on the answers alone, the first VLM fixture learnt to count (pooled image energy is enough) and stayed at
chance on colour, shape, relations, digits and words (its trainer's docstring has the history). Two auxiliary
losses, each a linear head that is thrown away after training, give the model the signal the answers
lack:

- **per patch** (``patch_targets``), on the projected image features the LLM reads: the palette colour
  covering the patch (or background), and for the object of that colour its shape and grid row and
  column, or for a text image the text (a digit or word) whose ink the patch holds;
- **per named object** (``grounding_targets``), on the LLM's final hidden state at each question token
  that names a colour or a shape: the named object's colour, shape, row and column, so the question's
  words learn to look the object up in the image rows before the answer compares or reports it.

The targets come from ``VqaItem.signature`` (colours are unique within a scene, and a colour question's
shape names one object) and from the resized image's pixels, never from the answer, so they add no
information about the held-out answers beyond what the image shows.

``tokenizer_lines`` is the text a fixture's byte-level BPE is trained on, so that every word a question
or an answer uses is one token (which ``naming_tokens`` relies on).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from . import vqa
from .lm_training import IGNORE
from .scenes import BACKGROUND, COLORS, GRID, SHAPES
from .vqa import NUMBERS, WORDS, VqaItem

#: Index 0 is the background; 1.. the palette in ``COLORS`` order.
PALETTE = np.asarray([BACKGROUND, *COLORS.values()], dtype=np.float32)
COLOR_NAMES = tuple(COLORS)
#: The strings a text image can show: the numerals, then the words.
TEXTS = tuple(str(NUMBERS.index(n)) for n in NUMBERS) + WORDS
#: Classes of each per-patch target column: colour (with background), shape, row, column, text.
PATCH_CLASSES = (len(PALETTE), len(SHAPES), GRID, GRID, len(TEXTS))
#: Classes of each per-named-object target column: colour, shape, row, column.
GROUNDING_CLASSES = (len(COLORS), len(SHAPES), GRID, GRID)
#: The share of a patch's pixels a colour must cover to be that patch's colour.
MIN_COVER = 0.08


def tokenizer_lines() -> list[str]:
    """What the BPE is trained on: every question the templates can ask, every answer, every vocabulary
    word alone and after a space, and the chat template's role words."""
    lines: list[str] = []
    for template in vqa.TEMPLATES.values():
        if "{shape}" in template:
            lines += [template.format(shape=s) for s in SHAPES]
        elif "{color}" in template:
            lines += [template.format(color=c) for c in COLORS]
        elif "{first}" in template:
            pairs = itertools.permutations(COLORS, 2)
            lines += [template.format(first=a, second=b) for a, b in pairs]
        else:
            lines.append(template)
    lines += [answer for kind in vqa.KINDS for answer in vqa.CHOICES[kind]]
    lines += ["user\n", "assistant\n", "\n\n", *vqa.VOCABULARY, " ".join(vqa.VOCABULARY)]
    return lines * 2  # every pair at least twice: the trainer's min_frequency


def patch_targets(item: VqaItem, resized: np.ndarray, patch: int) -> np.ndarray:
    """``[N, 5]`` int64 targets of the ``N`` patches of ``resized`` (the image as the model's processor
    resized it, ``[h, w, 3]`` uint8, ``h`` and ``w`` multiples of ``patch``), patches in row-major order.

    Each pixel is given its nearest palette colour (resampling blends edges); a patch's colour is the
    non-background colour covering most of it if that covers at least ``MIN_COVER``, else background.
    Columns: colour (0 background), then for a shape scene the shape, row and column of the object of that
    colour, for a text scene the index of its text in ``TEXTS``; ``IGNORE`` where a column does not
    apply."""
    h, w = resized.shape[:2]
    if resized.ndim != 3 or h % patch or w % patch:
        raise ValueError(f"a resized image is [h, w, 3] with sides multiples of {patch}: got {resized.shape}")
    nearest = _nearest_palette(resized)
    tiles = nearest.reshape(h // patch, patch, w // patch, patch).transpose(0, 2, 1, 3)
    blocks = tiles.reshape(-1, patch * patch)
    owner = np.repeat(np.arange(len(blocks)) * len(PALETTE), patch * patch)
    cover = np.bincount(owner + blocks.ravel(), minlength=len(blocks) * len(PALETTE))
    cover = cover.reshape(len(blocks), len(PALETTE))
    cover[:, 0] = 0
    color = cover.argmax(1)
    color[cover.max(1) < MIN_COVER * patch * patch] = 0
    out = np.full((len(blocks), len(PATCH_CLASSES)), IGNORE, dtype=np.int64)
    out[:, 0] = color
    inked = color > 0
    if item.signature[1] == "text":
        out[inked, 4] = TEXTS.index(str(item.signature[2]))
        return out
    objects = {c: (s, cell) for c, s, cell in _objects(item)}
    for k in np.flatnonzero(inked):
        found = objects.get(COLOR_NAMES[color[k] - 1])
        if found is not None:  # a blended edge can read as a colour the scene does not hold
            shape, (row, col) = found
            out[k, 1:4] = SHAPES.index(shape), row, col
    return out


def _nearest_palette(image: np.ndarray) -> np.ndarray:
    """``[h, w]`` index of each pixel's nearest ``PALETTE`` colour by squared distance (float32, exact for
    8-bit pixels), the first of equals winning as ``argmin`` picks; computed once per distinct colour (a
    flat scene resampled holds a few hundred)."""
    packed = image.astype(np.int32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.int32)
    colours, where = np.unique(packed, return_inverse=True)
    rgb = np.stack([colours >> 16, (colours >> 8) & 255, colours & 255], axis=1).astype(np.float32)
    nearest = ((rgb[:, None, :] - PALETTE) ** 2).sum(-1).argmin(-1)
    return nearest[where.reshape(image.shape[:2])]


def naming_tokens(encode: Callable[[str], Sequence[int]]) -> dict[int, str]:
    """The token id of each colour and shape name as a question spells it (after a space), given the
    tokenizer's ``encode``; a name that is not one token is a ValueError (the fixtures' tokenizers make
    every vocabulary word one token)."""
    out = {}
    for name in (*COLOR_NAMES, *SHAPES):
        ids = list(encode(" " + name))
        if len(ids) != 1:
            raise ValueError(f"{name!r} after a space is {len(ids)} tokens, not one")
        out[ids[0]] = name
    return out


def grounding_targets(
    item: VqaItem, prompt: Sequence[int], names: Mapping[int, str], start: int
) -> list[tuple[int, int, int, int, int]]:
    """``(position, colour, shape, row, column)`` of each token of ``prompt`` from ``start`` on that names
    exactly one object of the item's shape scene (``names`` from ``naming_tokens``); none for text."""
    if item.signature[1] != "shapes":
        return []
    objects = _objects(item)
    out = []
    for position in range(start, len(prompt)):
        name = names.get(prompt[position])
        matches = [o for o in objects if name in (o[0], o[1])]
        if name is not None and len(matches) == 1:
            color, shape, (row, col) = matches[0]
            out.append((position, COLOR_NAMES.index(color), SHAPES.index(shape), row, col))
    return out


def _objects(item: VqaItem) -> list[tuple[str, str, tuple[int, int]]]:
    """``(colour, shape, (row, column))`` of each object of a shape scene's signature."""
    described: Sequence[tuple[str, str, tuple[int, int]]] = item.signature[2]  # type: ignore[assignment]
    return [(c, s, (int(cell[0]), int(cell[1]))) for c, s, cell in described]


class AuxiliaryHeads(nn.Module):
    """The two throw-away linear heads and their loss: per-patch targets on the image features ``[M, C]``
    and per-named-object targets on the LLM's hidden states ``[K, C]``."""

    def __init__(self, width: int, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.patch = nn.Linear(width, sum(PATCH_CLASSES))
        self.grounding = nn.Linear(width, sum(GROUNDING_CLASSES))
        with torch.no_grad():
            for head in (self.patch, self.grounding):
                head.weight.copy_(torch.randn(head.weight.shape, generator=gen) / width**0.5)
                head.bias.zero_()

    def loss(
        self, features: torch.Tensor, patches: torch.Tensor, hidden: torch.Tensor, named: torch.Tensor
    ) -> torch.Tensor:
        """Sum over target columns of the mean cross-entropy (``IGNORE`` skipped; an empty set adds 0)."""
        total = _grouped(self.patch(features), patches, PATCH_CLASSES)
        if len(named):
            total = total + _grouped(self.grounding(hidden), named, GROUNDING_CLASSES)
        return total


def _grouped(logits: torch.Tensor, targets: torch.Tensor, classes: Sequence[int]) -> torch.Tensor:
    total = logits.new_zeros(())
    start = 0
    for column, size in enumerate(classes):
        wanted = targets[:, column]
        if bool((wanted != IGNORE).any()):
            part = logits[:, start : start + size]
            total = total + nn.functional.cross_entropy(part, wanted, ignore_index=IGNORE)
        start += size
    return total
