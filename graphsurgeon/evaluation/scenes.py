"""Flat synthetic scenes for the VQA set: shapes on a 3x3 grid, or one large rendered text, on plain grey.

A scene is a value (``Scene``) placed from a numpy generator and drawn by Pillow without antialiasing, so
every pixel is either ``BACKGROUND`` or exactly one of ``COLORS``. Each shape lies inside its own grid cell,
shrunk by a margin, so shapes never touch: two shapes are at least two margins apart, and shapes in
different columns (rows) have disjoint horizontal (vertical) extents. Shapes are at least a fifth of the
image's shorter side, so they survive a resize down to ~56 px. Text is drawn with Pillow's built-in
FreeType font (``ImageFont.load_default(size=...)``, bundled with the pinned Pillow, so its pixels are
fixed by the Pillow version). ``Scene.signature`` is the scene's discrete description, read off what is
drawn; it decides which split the scene belongs to (``graphsurgeon.evaluation.vqa``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

Rgb = tuple[int, int, int]

#: The plain background: mid grey, far from every colour below.
BACKGROUND: Rgb = (128, 128, 128)
#: The palette, well apart in RGB (and from the background); a scene uses each colour at most once.
COLORS: dict[str, Rgb] = {
    "red": (230, 25, 25),
    "green": (25, 170, 40),
    "blue": (30, 70, 230),
    "yellow": (245, 215, 20),
    "white": (250, 250, 250),
    "black": (10, 10, 10),
}
SHAPES = ("circle", "square", "triangle")
#: Rows and columns of the placement grid.
GRID = 3
#: Pixel size of the text font, as fractions of the image's shorter side.
TEXT_SCALES = (0.36, 0.42, 0.48)
#: The smallest image side a scene can be drawn at.
MIN_SIDE = 64

Cell = tuple[int, int]  # (row, column) of the grid


@dataclass(frozen=True, slots=True)
class Shape:
    """One flat shape: its kind, colour name, grid cell and bounding square (left, top, side) in pixels."""

    shape: str
    color: str
    cell: Cell
    box: tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Text:
    """One rendered text: the string, colour name, font pixel size, drawing origin and position bin.

    ``bin`` is the (column, row) third of the range the origin could take, a function of ``origin``."""

    text: str
    color: str
    font_px: int
    origin: tuple[int, int]
    bin: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Scene:
    """What one image shows: ``size`` is (width, height); either shapes or one text (never both)."""

    size: tuple[int, int]
    shapes: tuple[Shape, ...] = ()
    text: Text | None = None

    def signature(self) -> tuple[object, ...]:
        """The discrete description: the size and, per shape, (shape, colour, cell) in colour order, or the
        text with its colour, font size and position bin. Equal images have equal signatures."""
        if self.text is not None:
            t = self.text
            return (self.size, "text", t.text, t.color, t.font_px, t.bin)
        return (self.size, "shapes", tuple(sorted((s.color, s.shape, s.cell) for s in self.shapes)))

    def draw(self) -> Image.Image:
        """The RGB image: background, then each shape or the text in its exact palette colour."""
        image = Image.new("RGB", self.size, BACKGROUND)
        draw = ImageDraw.Draw(image)
        draw.fontmode = "1"  # no antialiasing: text pixels are exactly the text's colour
        for shape in self.shapes:
            _draw_shape(draw, shape)
        if self.text is not None:
            t = self.text
            draw.text(t.origin, t.text, fill=COLORS[t.color], font=font(t.font_px))
        return image


def check_size(size: tuple[int, int]) -> None:
    """Reject an image size a scene cannot be drawn at (a side below ``MIN_SIDE``)."""
    if len(size) != 2 or min(size) < MIN_SIDE:
        raise ValueError(f"an image size is (width, height), each at least {MIN_SIDE}: got {size}")


@cache
def font(px: int) -> ImageFont.FreeTypeFont:
    """Pillow's built-in FreeType font at ``px`` pixels (without FreeType Pillow would ignore the size)."""
    loaded = ImageFont.load_default(size=px)
    if not isinstance(loaded, ImageFont.FreeTypeFont):
        raise RuntimeError("the VQA set's text needs Pillow built with FreeType")
    return loaded


def _draw_shape(draw: ImageDraw.ImageDraw, shape: Shape) -> None:
    x0, y0, side = shape.box
    x1, y1 = x0 + side - 1, y0 + side - 1
    fill = COLORS[shape.color]
    if shape.shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=fill)
    elif shape.shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=fill)
    else:  # an upright triangle on the box's bottom edge
        draw.polygon([(x0 + (side - 1) // 2, y0), (x0, y1), (x1, y1)], fill=fill)


def _cell_bounds(size: tuple[int, int], cell: Cell) -> tuple[int, int, int, int]:
    """The cell's (left, top, right, bottom) pixel bounds, right and bottom exclusive."""
    width, height = size
    row, col = cell
    return col * width // GRID, row * height // GRID, (col + 1) * width // GRID, (row + 1) * height // GRID


def place_shape(rng: np.random.Generator, size: tuple[int, int], shape: str, color: str, cell: Cell) -> Shape:
    """A shape of random side in [shorter side / 5, cell minus margins] at a random spot inside ``cell``
    shrunk by a margin of 6% of the cell's shorter side (at least one pixel)."""
    left, top, right, bottom = _cell_bounds(size, cell)
    margin = max(1, round(0.06 * min(right - left, bottom - top)))
    largest = min(right - left, bottom - top) - 2 * margin
    smallest = min(-(-min(size) // 5), largest)
    side = int(rng.integers(smallest, largest + 1))
    x0 = int(rng.integers(left + margin, right - margin - side + 1))
    y0 = int(rng.integers(top + margin, bottom - margin - side + 1))
    return Shape(shape, color, cell, (x0, y0, side))


def place_text(rng: np.random.Generator, size: tuple[int, int], text: str, color: str) -> Text:
    """``text`` at one of ``TEXT_SCALES`` (random), at a random origin keeping its ink a 5% margin inside."""
    width, height = size
    px = round(TEXT_SCALES[int(rng.integers(len(TEXT_SCALES)))] * min(size))
    left, top, right, bottom = font(px).getbbox(text)
    margin = round(0.05 * min(size))
    x_range = (margin - int(left), width - margin - int(right))
    y_range = (margin - int(top), height - margin - int(bottom))
    if x_range[1] < x_range[0] or y_range[1] < y_range[0]:
        raise ValueError(f"{text!r} at {px} px does not fit an image of {size}")
    x = int(rng.integers(x_range[0], x_range[1] + 1))
    y = int(rng.integers(y_range[0], y_range[1] + 1))
    return Text(text, color, px, (x, y), (_third(x, x_range), _third(y, y_range)))


def _third(value: int, bounds: tuple[int, int]) -> int:
    """Which third (0, 1, 2) of the inclusive range ``bounds`` holds ``value``."""
    return GRID * (value - bounds[0]) // (bounds[1] - bounds[0] + 1)
