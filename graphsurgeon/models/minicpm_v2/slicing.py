"""MiniCPM-V-2's slice geometry (LLaVA-UHD), as the official remote code computes it: which grid an image is
cut into, the size of its overview ("source") image, of the refine image the slices are cropped from, and of
each slice. Sizes only; no pixels (``processor`` resizes and crops).

The official arithmetic (``modeling_minicpmv.py`` at 1878519, ``slice_image`` and its helpers; see
docs/minicpm-v-2.md §6), reproduced operation for operation in Python floats (IEEE double):

- ``multiple = min(ceil(W*H / S^2), max_slice_nums)``; ``multiple <= 1`` (W*H <= S^2) means no slices: the
  whole image is resized, up or down, to about S^2 area (``best_resize`` with upscaling allowed);
- otherwise the candidate slice counts are ``multiple-1, multiple, multiple+1`` without 1 and above
  ``max_slice_nums``; each count n gives the grids ``(m, n // m)`` (columns, rows) for m = 1..n dividing n,
  in that order; the grid whose ``abs(log(W/H) - log(cols/rows))`` is smallest wins, the first one on a tie
  (a strict ``<``). The tie is one of doubles, not of exact logarithms: for a square image with 6 or 7
  slices wanted, ``abs(log(2/3))`` is one ulp above ``abs(log(3/2))``, so [3, 2] wins over the earlier
  [2, 3] (the logarithm of the quotient, not a difference of logarithms, and in double precision);
- ``best_resize``: ``r = w/h``, ``h' = int(S/sqrt(r))``, ``w' = int(h'*r)`` (truncation, ``w'`` from the
  truncated ``h'``), each side then ``ensure_divide``'d to a multiple of the patch size;
- ``ensure_divide(x, p) = max(round(x/p)*p, p)``: Python's ``round``, ties to even (35 -> 28 for p = 14);
- the refine size: each side of the image ``ensure_divide``'d to a multiple of its grid count, the cell
  (a float) ``best_resize``'d with upscaling, times the grid; the slices are its ``cols x rows`` equal cells,
  row-major.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from graphsurgeon.errors import GsurgError


class SliceError(GsurgError):
    """An image size the slicing cannot handle (no pixels)."""


@dataclass(frozen=True)
class SliceConfig:
    """The slicing settings; the defaults are MiniCPM-V-2's ``config.json`` (``scale_resolution``,
    ``max_slice_nums``, ``patch_size``)."""

    scale_resolution: int = 448
    max_slice_nums: int = 9
    patch_size: int = 14


def ensure_divide(length: float, multiple: int) -> int:
    """``length`` rounded to a multiple of ``multiple`` (ties to even, Python's ``round``), at least one."""
    return max(round(length / multiple) * multiple, multiple)


def best_resize(
    size: tuple[float, float], scale_resolution: int, patch_size: int, allow_upscale: bool = False
) -> tuple[int, int]:
    """``(width, height)`` of about ``scale_resolution^2`` area and the aspect of ``size``, both multiples of
    ``patch_size``; a size already within the area keeps its sides (rounded) unless ``allow_upscale``."""
    width, height = size
    if width * height > scale_resolution * scale_resolution or allow_upscale:
        ratio = width / height
        height = int(scale_resolution / math.sqrt(ratio))
        width = int(height * ratio)
    return ensure_divide(width, patch_size), ensure_divide(height, patch_size)


def refine_size(
    size: tuple[int, int], grid: tuple[int, int], scale_resolution: int, patch_size: int
) -> tuple[int, int]:
    """The size of the image the slices of ``grid`` (columns, rows) are cropped from: each cell about
    ``scale_resolution^2`` (upscaled if need be), both of its sides multiples of ``patch_size``."""
    width, height = size
    cols, rows = grid
    cell_width = ensure_divide(width, cols) / cols
    cell_height = ensure_divide(height, rows) / rows
    cell = best_resize((cell_width, cell_height), scale_resolution, patch_size, allow_upscale=True)
    return cell[0] * cols, cell[1] * rows


def candidate_grids(multiple: int, max_slice_nums: int) -> list[tuple[int, int]]:
    """The grids tried for ``multiple``, in the official order: by slice count ``multiple-1, multiple,
    multiple+1`` (1 and counts above ``max_slice_nums`` left out), then by the number of columns."""
    counts = [n for n in (multiple - 1, multiple, multiple + 1) if n != 1 and n <= max_slice_nums]
    return [(m, n // m) for n in counts for m in range(1, n + 1) if n % m == 0]


def choose_grid(width: int, height: int, cfg: SliceConfig) -> tuple[int, int] | None:
    """The grid ``(columns, rows)`` an image is sliced into, or None when it is not sliced."""
    log_ratio = math.log(width / height)
    multiple = min(
        math.ceil(width * height / (cfg.scale_resolution * cfg.scale_resolution)), cfg.max_slice_nums
    )
    if multiple <= 1:
        return None
    best, best_error = (1, 1), math.inf
    for grid in candidate_grids(multiple, cfg.max_slice_nums):
        error = abs(log_ratio - math.log(grid[0] / grid[1]))
        if error < best_error:
            best, best_error = grid, error
    return best


@dataclass(frozen=True)
class SlicePlan:
    """Where an image of ``size`` goes: the overview size, and for a sliced image the grid (columns, rows),
    the refine size and the size of each slice. Sizes are (width, height), as Pillow gives them."""

    size: tuple[int, int]
    overview: tuple[int, int]
    grid: tuple[int, int] | None
    refine: tuple[int, int] | None

    @property
    def slice_size(self) -> tuple[int, int] | None:
        if self.grid is None or self.refine is None:
            return None
        return self.refine[0] // self.grid[0], self.refine[1] // self.grid[1]

    def slice_boxes(self) -> list[tuple[int, int, int, int]]:
        """The crop boxes ``(left, top, right, bottom)`` of the slices in the refine image, row-major."""
        cell = self.slice_size
        if cell is None or self.refine is None:
            return []
        cw, ch = cell
        return [
            (x, y, x + cw, y + ch) for y in range(0, self.refine[1], ch) for x in range(0, self.refine[0], cw)
        ]

    @property
    def image_sizes(self) -> list[tuple[int, int]]:
        """The (width, height) of every image the vision model gets, the overview first."""
        cell = self.slice_size
        slices = [] if cell is None or self.grid is None else [cell] * (self.grid[0] * self.grid[1])
        return [self.overview, *slices]


def plan_slices(width: int, height: int, cfg: SliceConfig | None = None) -> SlicePlan:
    """The official slicing of a ``width x height`` image."""
    cfg = cfg or SliceConfig()
    if width < 1 or height < 1:
        raise SliceError(f"an image of {width}x{height} pixels has nothing to slice")
    grid = choose_grid(width, height, cfg)
    size = (width, height)
    if grid is None:
        overview = best_resize(size, cfg.scale_resolution, cfg.patch_size, allow_upscale=True)
        return SlicePlan(size, overview, None, None)
    overview = best_resize(size, cfg.scale_resolution, cfg.patch_size)
    return SlicePlan(size, overview, grid, refine_size(size, grid, cfg.scale_resolution, cfg.patch_size))
