"""Multimodal RoPE (MRoPE) of a prompt, model-agnostic: the 3-D position (t, h, w) of every token, the axis
each rotary frequency slot reads under a layout, and the angles (how two layouts differ is
``mrope_compare``).

A *slot* is one of the ``head_dim/2`` rotary frequencies ``inv[i] = theta^(-2i/head_dim)`` (the float32
values HF computes); its angle for a token is ``pos[axis(i)] * inv[i]`` in float32, and cos/sin of it fill
columns ``i`` and ``i + head_dim/2``. Layouts, for ``mrope_section = [T, H, W]`` (summing to head_dim/2):

- ``interleaved`` (transformers 5.24's interleaved ``recomposition_frequencies``):
  slot i reads H if ``i % 3 == 1 and i < 3*H``, W if ``i % 3 == 2 and i < 3*W``, else T. ``T`` itself is
  never read; with [24, 20, 20] this gives T 24, H 20, W 20 slots;
- ``block`` (contiguous sections): the first T slots read T, the next H read H, the last W read W;
- ``1d``: every slot reads T, i.e. each image collapses to one position (that of its first token).

Positions (HF's ``get_rope_index`` counter of the MRoPE models): a counter p starts at 0; a text token
is (p, p, p) and p += 1; an image of patch grid 1×h×w with spatial merge m has h' = h/m rows and w' = w/m
columns of tokens, token j is (p, p + j // w', p + j % w'), then p += max(h', w'). Tokens after the prompt
(decode steps) continue as text tokens.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.verify.rope import cos_sin as rope_cos_sin
from graphsurgeon.verify.rope import rope_inv_freq

LAYOUTS = ("interleaved", "block", "1d")
AXES = "THW"
#: The most tokens a layout may hold (2^18, above the contexts these models declare); it bounds the tables.
MAX_TOKENS = 1 << 18


class MropeError(GsurgError):
    """Bad RoPE settings or a bad prompt layout; the message names the key, flag or layout item."""


@dataclass(frozen=True)
class RopeSettings:
    """What the angles depend on. ``where`` spells, per field, where its value came from (a file's key or a
    flag), for errors; ``layout`` is the model's own layout if its source says (``None`` if unknown)."""

    theta: float
    head_dim: int
    mrope_section: tuple[int, int, int]
    merge: int = 2
    layout: str | None = None
    source: str = "flags"
    where: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def spelled(self, name: str) -> str:
        return self.where.get(name, name)

    @property
    def slots(self) -> int:
        return self.head_dim // 2

    def validate(self) -> RopeSettings:
        """``self``, or MropeError naming the key or flag of the first bad value."""
        theta = self.theta
        if isinstance(theta, bool) or not isinstance(theta, int | float) or not float(theta) > 0:
            raise MropeError(f"{self.spelled('theta')}: must be a number > 0, got {theta!r}")
        if not float(theta) < float("inf"):
            raise MropeError(f"{self.spelled('theta')}: must be finite, got {theta!r}")
        hd = self.head_dim
        if isinstance(hd, bool) or not isinstance(hd, int) or hd < 2 or hd % 2:
            raise MropeError(f"{self.spelled('head_dim')}: must be an even integer >= 2, got {hd!r}")
        sec = self.mrope_section
        if (
            not isinstance(sec, tuple | list)
            or len(sec) != 3
            or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sec)
        ):
            raise MropeError(
                f"{self.spelled('mrope_section')}: must be three integers >= 1 [T, H, W], got {_show(sec)}"
            )
        if sum(sec) != hd // 2:
            raise MropeError(
                f"{self.spelled('mrope_section')}: {_show(list(sec))} sums to {sum(sec)}, "
                f"not head_dim/2 = {hd // 2} (head_dim {hd} from {self.spelled('head_dim')})"
            )
        m = self.merge
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise MropeError(f"{self.spelled('merge')}: must be an integer >= 1, got {m!r}")
        if self.layout is not None and self.layout not in LAYOUTS[:2]:
            raise MropeError(f"{self.spelled('layout')}: must be interleaved or block, got {self.layout!r}")
        return self

    def inv_freq(self) -> np.ndarray:
        """float32 ``[head_dim/2]``, as HF's default ``compute_default_rope_parameters``."""
        return rope_inv_freq(self.head_dim, float(self.theta))

    def to_json(self) -> dict[str, Any]:
        return {
            "theta": float(self.theta),
            "head_dim": self.head_dim,
            "slots": self.slots,
            "mrope_section": list(self.mrope_section),
            "merge": self.merge,
            "model_layout": self.layout,
            "source": self.source,
        }


def _show(value: object) -> str:
    return str(value).replace(" ", "")


@dataclass(frozen=True)
class Segment:
    """One item of a prompt layout: ``text`` with ``count`` tokens, or an image of patch grid ``grid``."""

    kind: str  # "text" or "image"
    count: int
    grid: tuple[int, int, int] | None = None


_ITEM = re.compile(r"^(?P<kind>[a-z_]+)\s*:\s*(?P<value>.+)$")
_GRID = re.compile(r"^(\d+)x(\d+)x(\d+)$")


def parse_layout(text: str, merge: int, *, flag: str = "layout") -> list[Segment]:
    """``"text:3,image:1x8x6,text:2"`` → segments. An image is its patch grid t×h×w (as HF's
    ``image_grid_thw``): t must be 1, h and w multiples of ``merge``. MropeError names ``flag``, the item
    and its position."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip():
        raise MropeError(f"{flag}: empty; give items like text:3,image:1x8x6,text:2")
    segments: list[Segment] = []
    total = 0
    for n, item in enumerate(items, start=1):
        where = f"{flag} item {n} {item!r}"
        found = _ITEM.match(item)
        if not found:
            raise MropeError(f"{where}: expected KIND:VALUE (text:N or image:TxHxW)")
        kind, value = found["kind"], found["value"].strip()
        if kind == "text":
            if not value.isdigit() or int(value) < 1:
                raise MropeError(f"{where}: text takes a token count >= 1")
            segments.append(Segment("text", int(value)))
        elif kind == "image":
            grid = _GRID.match(value.lower())
            if not grid:
                raise MropeError(f"{where}: image takes a patch grid TxHxW (as image_grid_thw), e.g. 1x8x6")
            t, h, w = (int(g) for g in grid.groups())
            if t != 1:
                raise MropeError(
                    f"{where}: t={t}; a still image has t=1 (HF splits a video into t=1 frames, each after "
                    f"its timestamp text: give each frame as text:N,image:1x{h}x{w})"
                )
            for axis, size in (("h", h), ("w", w)):
                if size < merge or size % merge:
                    raise MropeError(
                        f"{where}: {axis}={size} is not a positive multiple of the spatial merge {merge}"
                    )
            segments.append(Segment("image", (h // merge) * (w // merge), (t, h, w)))
        elif kind == "video":
            raise MropeError(
                f"{where}: videos are not supported; HF places each frame (t=1) like an image after its "
                "timestamp text: give each frame as text:N,image:1xHxW"
            )
        else:
            raise MropeError(f"{where}: unknown token kind {kind!r} (known: text, image)")
        total += segments[-1].count
        if total > MAX_TOKENS:
            raise MropeError(f"{where}: the layout reaches {total} tokens; at most {MAX_TOKENS} are accepted")
    return segments


def layout_notes(segments: Sequence[Segment]) -> list[str]:
    """Images with no text between them: a real prompt has ``<|vision_end|><|vision_start|>`` there, and
    HF's ``get_rope_index`` groups adjacent image tokens into one run (and then fails on the count)."""
    notes = []
    image = -1
    for prev, seg in zip([None, *segments], segments, strict=False):
        if seg.grid is None:
            continue
        image += 1
        if prev is not None and prev.grid is not None:
            notes.append(
                f"images {image - 1} and {image} are adjacent with no text between; a prompt has "
                "<|vision_end|><|vision_start|> there (text:2); HF's get_rope_index reads adjacent image "
                "tokens as one image and fails"
            )
    return notes


@dataclass(frozen=True)
class Token:
    index: int
    kind: str  # "text" or "image"
    position: tuple[int, int, int]  # (t, h, w)
    image: int | None = None  # which image, counted from 0
    j: int | None = None  # the token's index inside its image (row-major over h' x w')

    def label(self) -> str:
        return "text" if self.image is None else f"image {self.image}"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.label(),
            "position": list(self.position),
            "image": self.image,
            "j": self.j,
        }


@dataclass(frozen=True)
class Image:
    image: int
    grid: tuple[int, int, int]  # patches
    tokens: tuple[int, int, int]  # merged token grid (t, h', w')
    first: int  # index of its first token
    count: int


@dataclass(frozen=True)
class Prompt:
    tokens: tuple[Token, ...]
    images: tuple[Image, ...]
    next_position: int  # the position of the first decode step (all three axes)

    @property
    def rope_delta(self) -> int:
        """HF's ``rope_deltas``: the first decode step's position minus the prompt length."""
        return self.next_position - len(self.tokens)

    def positions(self) -> np.ndarray:
        """int64 ``[3, L]``: the T, H and W coordinate of every token."""
        return np.array([tok.position for tok in self.tokens], dtype=np.int64).reshape(-1, 3).T


def positions(segments: Sequence[Segment], merge: int) -> Prompt:
    """The MRoPE position counter over ``segments`` (module docstring)."""
    tokens: list[Token] = []
    images: list[Image] = []
    p = 0
    for seg in segments:
        if seg.grid is None:
            for _ in range(seg.count):
                tokens.append(Token(len(tokens), "text", (p, p, p)))
                p += 1
            continue
        _, gh, gw = seg.grid
        rows, cols = gh // merge, gw // merge
        k = len(images)
        images.append(Image(k, seg.grid, (1, rows, cols), len(tokens), rows * cols))
        for j in range(rows * cols):
            tokens.append(Token(len(tokens), "image", (p, p + j // cols, p + j % cols), k, j))
        p += max(rows, cols)
    return Prompt(tuple(tokens), tuple(images), p)


def slot_axes(layout: str, mrope_section: Sequence[int], slots: int) -> np.ndarray:
    """int ``[slots]``: 0 (T), 1 (H) or 2 (W), the axis each slot reads under ``layout``."""
    t_sec, h_sec, w_sec = (int(s) for s in mrope_section)
    i = np.arange(slots)
    if layout == "interleaved":
        axes = np.zeros(slots, dtype=np.int64)
        axes[(i % 3 == 1) & (i < 3 * h_sec)] = 1
        axes[(i % 3 == 2) & (i < 3 * w_sec)] = 2
        return axes
    if layout == "block":
        return np.where(i < t_sec, 0, np.where(i < t_sec + h_sec, 1, 2)).astype(np.int64)
    if layout == "1d":
        return np.zeros(slots, dtype=np.int64)
    raise MropeError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")


def interleave_notes(settings: RopeSettings) -> list[str]:
    """Where HF's interleave rule gives other slot counts than ``mrope_section`` says."""
    t_sec, h_sec, w_sec = settings.mrope_section
    counts = np.bincount(slot_axes("interleaved", settings.mrope_section, settings.slots), minlength=3)
    if tuple(int(c) for c in counts) == (t_sec, h_sec, w_sec):
        return []
    return [
        f"interleaved with mrope_section {_show(list(settings.mrope_section))} gives T {counts[0]}, "
        f"H {counts[1]}, W {counts[2]} slots (HF puts H on slots i%3==1 below 3*{h_sec} and W on "
        f"i%3==2 below 3*{w_sec}; the T section is never read)"
    ]


@dataclass(frozen=True)
class LayoutTable:
    """One layout over a prompt: ``axes [S]``, ``coords [L, S]`` (the coordinate each slot reads) and
    ``angles [L, S]`` (float32 ``coord * inv``, as HF computes them)."""

    name: str
    axes: np.ndarray
    coords: np.ndarray
    angles: np.ndarray

    def axis_counts(self) -> dict[str, int]:
        counts = np.bincount(self.axes, minlength=3)
        return {AXES[a]: int(counts[a]) for a in range(3)}


def layout_table(name: str, settings: RopeSettings, prompt: Prompt) -> LayoutTable:
    axes = slot_axes(name, settings.mrope_section, settings.slots)
    pos = prompt.positions()  # [3, L]
    coords = pos[axes, :].T  # [L, S]
    angles = coords.astype(np.float32) * settings.inv_freq().reshape(1, -1)
    return LayoutTable(name, axes, coords, angles.astype(np.float32))


def cos_sin(table: LayoutTable) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``[L, head_dim]`` cos and sin rows (the angles repeated over both halves), HF's layout."""
    full = np.concatenate([table.angles, table.angles], axis=1)
    return rope_cos_sin(full)
