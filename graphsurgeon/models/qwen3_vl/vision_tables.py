"""The grid-dependent tables of Qwen3-VL's vision encoder, computed outside the exported graphs (HF
transformers 5.24 computes them in its "untraceable" helpers of ``vision_utils``; the C++ runtime mirrors
these functions). All are for one image (one frame) of ``gh x gw`` patches, ``N = gh*gw``, in HF's patch
order, the merge-block order of ``pixel_values``:

* ``merge_block_positions``: the (row, column) of every patch. Patch ``j`` lies in 2x2 block
  ``j // 4`` (blocks in raster order over the ``gh/2 x gw/2`` block grid) at ``(j//2 % 2, j % 2)`` inside it:
  ``(0,0), (0,1), (1,0), (1,1), (0,2), ...``;
* ``vision_rope_tables``: the ViT's 2-D RoPE cos/sin ``[N, head_dim]``: a quarter of the head per axis,
  ``[r*f, c*f, r*f, c*f]`` with ``f_k = theta^(-2k/(head_dim/2))``, ``k < head_dim/4``. The two halves of a
  row are equal, so ``x*cos + rotate_half(x)*sin`` rotates pairs ``(d, d + head_dim/2)`` by one angle each
  (what ncnn's ``RotaryEmbed 0=0`` computes, reading the first half of the table);
* ``interpolated_pos_embed``: the learned ``S x S`` position table (``S = sqrt(num_position_embeddings)``)
  resampled to ``gh x gw`` by bilinear interpolation with ``align_corners=True`` (the source coordinate of
  row ``r`` is ``r*(S-1)/(gh-1)``, 0 when ``gh == 1``; taps ``floor`` and ``min(floor+1, S-1)``), in patch
  order; it is added to the patch embedding before the first block.

Every product and quotient is in float32, the precision HF computes them in.
"""

from __future__ import annotations

import math

import torch

from graphsurgeon.models.common.qwen3_layers import inverse_frequencies


def merge_block_positions(gh: int, gw: int, merge: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column (int64 ``[gh*gw]``) of each patch in merge-block order."""
    if gh < 1 or gw < 1 or gh % merge or gw % merge:
        raise ValueError(f"a {gh}x{gw} patch grid does not split into {merge}x{merge} merge blocks")
    rows = torch.arange(gh, dtype=torch.int64)[:, None].expand(gh, gw)
    cols = torch.arange(gw, dtype=torch.int64)[None, :].expand(gh, gw)

    def blocks(grid: torch.Tensor) -> torch.Tensor:
        # (block row, row in block, block column, column in block) -> blocks outermost, raster inside
        return grid.reshape(gh // merge, merge, gw // merge, merge).permute(0, 2, 1, 3).reshape(-1)

    return blocks(rows), blocks(cols)


def vision_rope_angles(gh: int, gw: int, head_dim: int, theta: float, merge: int = 2) -> torch.Tensor:
    """The float32 angles ``[gh*gw, head_dim]`` of the ViT's axial 2-D RoPE, in patch order."""
    if head_dim % 4:
        raise ValueError(f"the ViT head_dim {head_dim} must be a multiple of 4 (a quarter per axis and half)")
    inv = inverse_frequencies(head_dim // 2, theta)[None, :]  # head_dim/4 frequencies
    rows, cols = merge_block_positions(gh, gw, merge)
    half = torch.cat((rows.to(torch.float32)[:, None] * inv, cols.to(torch.float32)[:, None] * inv), dim=-1)
    return torch.cat((half, half), dim=-1)


def vision_rope_tables(
    gh: int, gw: int, head_dim: int, theta: float, merge: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[gh*gw, head_dim]`` of the ViT's axial 2-D RoPE, in patch order (torch's float32)."""
    angles = vision_rope_angles(gh, gw, head_dim, theta, merge)
    return angles.cos(), angles.sin()


def _axis_taps(index: torch.Tensor, size: int, side: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bilinear taps along one axis with aligned corners: the lower and upper table index and the upper
    tap's weight, for target positions ``index`` on an axis of ``size`` onto one of ``side`` entries."""
    src = index.to(torch.float32) * float(side - 1) / float(max(size - 1, 1))
    low = src.floor()
    frac = src - low
    lower = low.to(torch.int64)
    upper = (lower + 1).clamp(max=side - 1)
    return lower, upper, frac


def interpolated_pos_embed(table: torch.Tensor, gh: int, gw: int, merge: int = 2) -> torch.Tensor:
    """The ``[S*S, C]`` learned position table (row-major ``S x S``) resampled to ``[gh*gw, C]``."""
    side = math.isqrt(int(table.shape[0]))
    if table.dim() != 2 or side * side != table.shape[0]:
        raise ValueError(f"the position table {list(table.shape)} is not a square grid of embeddings")
    rows, cols = merge_block_positions(gh, gw, merge)
    y0, y1, fy = _axis_taps(rows, gh, side)
    x0, x1, fx = _axis_taps(cols, gw, side)
    gy, gx = 1 - fy, 1 - fx
    out = table[y0 * side + x0] * (gy * gx)[:, None]
    out = out + table[y0 * side + x1] * (gy * fx)[:, None]
    out = out + table[y1 * side + x0] * (fy * gx)[:, None]
    return out + table[y1 * side + x1] * (fy * fx)[:, None]
