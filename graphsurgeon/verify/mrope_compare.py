"""How two MRoPE layouts of one prompt differ (``gsurg rope --compare``): per image, the slots whose
coordinate varies across its tokens under each layout; between two layouts, the slots that read another
axis, the tokens and angles that change, and the largest |Δangle| with its token, slot and 3-D position;
and the whole report the command prints. The positions and tables are ``mrope``'s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsurgeon.verify.mrope import (
    AXES,
    Image,
    LayoutTable,
    MropeError,
    Prompt,
    RopeSettings,
    Segment,
    Token,
    interleave_notes,
    layout_notes,
    layout_table,
    positions,
)


@dataclass(frozen=True)
class ImageVariation:
    """How much of one image's position a layout can see: the slots whose coordinate varies across the
    image's tokens, per axis, and per axis the largest angle span (max - min over the tokens) of a slot."""

    varying_slots: int
    by_axis: dict[str, int]
    span: dict[str, float]
    span_slot: dict[str, int | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "varying_slots": self.varying_slots,
            "varying_dims": 2 * self.varying_slots,
            "by_axis": self.by_axis,
            "max_span": self.span,
            "max_span_slot": self.span_slot,
        }


def image_variation(table: LayoutTable, image: Image) -> ImageVariation:
    rows = slice(image.first, image.first + image.count)
    coords = table.coords[rows]
    angles = table.angles[rows].astype(np.float64)
    varies = coords.max(axis=0) != coords.min(axis=0)
    spans = angles.max(axis=0) - angles.min(axis=0)
    by_axis: dict[str, int] = {}
    span: dict[str, float] = {}
    span_slot: dict[str, int | None] = {}
    for a, name in enumerate(AXES):
        mine = varies & (table.axes == a)
        by_axis[name] = int(mine.sum())
        if mine.any():
            best = int(np.flatnonzero(mine)[np.argmax(spans[mine])])
            span[name], span_slot[name] = float(spans[best]), best
        else:
            span[name], span_slot[name] = 0.0, None
    return ImageVariation(int(varies.sum()), by_axis, span, span_slot)


@dataclass(frozen=True)
class Difference:
    token: Token
    slot: int
    axis_a: str
    axis_b: str
    coord_a: int
    coord_b: int
    angle_a: float
    angle_b: float

    @property
    def delta(self) -> float:
        """``angle_b - angle_a`` in radians, unwrapped."""
        return self.angle_b - self.angle_a

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token.index,
            "kind": self.token.label(),
            "position": list(self.token.position),
            "slot": self.slot,
            "axis": [self.axis_a, self.axis_b],
            "coordinate": [self.coord_a, self.coord_b],
            "angle": [self.angle_a, self.angle_b],
            "delta": self.delta,
            "abs_delta": abs(self.delta),
            "wrapped_delta": float(np.angle(np.exp(1j * self.delta))),
        }


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    slots_other_axis: int  # slots whose axis differs between the layouts
    tokens_changed: int  # tokens with at least one different angle
    angles_changed: int  # (token, slot) pairs with a different angle
    top: tuple[Difference, ...]  # largest |delta| first; ties by token, then slot

    @property
    def largest(self) -> Difference | None:
        return self.top[0] if self.top else None

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "slots_other_axis": self.slots_other_axis,
            "tokens_changed": self.tokens_changed,
            "angles_changed": self.angles_changed,
            "largest": None if self.largest is None else self.largest.to_json(),
            "top": [d.to_json() for d in self.top],
        }


def compare(a: LayoutTable, b: LayoutTable, prompt: Prompt, *, top: int = 5) -> Comparison:
    """Where ``b``'s angles differ from ``a``'s: counts and the ``top`` largest |Δangle|."""
    delta = b.angles.astype(np.float64) - a.angles.astype(np.float64)
    mag = np.abs(delta).ravel()
    changed = mag > 0
    slots = a.axes.size
    # largest first; a stable sort over the flat (token, slot) order keeps the earliest of equal values
    order = np.argsort(-mag, kind="stable")[: max(top, 0)]
    found = []
    for flat in order:
        if not changed[flat]:
            break
        t, s = divmod(int(flat), slots)
        found.append(
            Difference(
                prompt.tokens[t],
                s,
                AXES[a.axes[s]],
                AXES[b.axes[s]],
                int(a.coords[t, s]),
                int(b.coords[t, s]),
                float(a.angles[t, s]),
                float(b.angles[t, s]),
            )
        )
    return Comparison(
        a.name,
        b.name,
        int((a.axes != b.axes).sum()),
        int(changed.reshape(-1, slots).any(axis=1).sum()),
        int(changed.sum()),
        tuple(found),
    )


@dataclass(frozen=True)
class RopeReport:
    settings: RopeSettings
    prompt: Prompt
    inv_freq: np.ndarray
    tables: tuple[LayoutTable, ...]
    variations: dict[str, tuple[ImageVariation, ...]]
    comparisons: tuple[Comparison, ...]
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        names = [t.name for t in self.tables]
        return {
            "settings": self.settings.to_json(),
            "layouts": names,
            "notes": list(self.notes),
            "prompt": {
                "tokens": len(self.prompt.tokens),
                "next_position": self.prompt.next_position,
                "rope_delta": self.prompt.rope_delta,
            },
            "slots": [
                {
                    "slot": i,
                    "inv_freq": float(self.inv_freq[i]),
                    "axis": {t.name: AXES[t.axes[i]] for t in self.tables},
                }
                for i in range(self.settings.slots)
            ],
            "axis_counts": {t.name: t.axis_counts() for t in self.tables},
            "images": [
                {
                    "image": img.image,
                    "grid": list(img.grid),
                    "token_grid": list(img.tokens),
                    "first_token": img.first,
                    "tokens": img.count,
                    "variation": {name: self.variations[name][img.image].to_json() for name in names},
                }
                for img in self.prompt.images
            ],
            "comparisons": [c.to_json() for c in self.comparisons],
            "tokens": [
                {
                    **tok.to_json(),
                    "coordinates": {t.name: t.coords[tok.index].tolist() for t in self.tables},
                    "angles": {t.name: [float(x) for x in t.angles[tok.index]] for t in self.tables},
                }
                for tok in self.prompt.tokens
            ],
        }


def rope_report(
    settings: RopeSettings, segments: Sequence[Segment], layouts: Sequence[str], *, top: int = 5
) -> RopeReport:
    """Positions, one table per layout, each image's variation per layout, and the comparison of the first
    layout with each other one."""
    settings.validate()
    if not layouts:
        raise MropeError("no layout to show")
    prompt = positions(segments, settings.merge)
    tables = tuple(layout_table(name, settings, prompt) for name in layouts)
    variations = {t.name: tuple(image_variation(t, img) for img in prompt.images) for t in tables}
    comparisons = tuple(compare(tables[0], other, prompt, top=top) for other in tables[1:])
    notes = (
        *settings.notes,
        *(interleave_notes(settings) if "interleaved" in layouts else []),
        *layout_notes(segments),
    )
    return RopeReport(settings, prompt, settings.inv_freq(), tables, variations, comparisons, notes)
