"""The vision sub-models the export traces, as plain ``nn.Module``s with batch-1 inputs, sharing the
reference's parameters (no copies):

* ``VisionEmbedPatch``: ``[1, N, patch_dim] -> [1, N, Cv]``, the Conv2d written as a Linear whose weight is
  the OIHW kernel viewed as ``[Cv, channels*patch^2]`` (the patch flattening order is also c, ky, kx);
* ``VisionEncoder``: hidden ``[1, N, Cv]`` and the 2-D RoPE tables cos, sin ``[1, N, head_dim]`` (full width,
  one row per patch: ``vision_rope_inputs``) -> ``[1, N, Cv]`` after the final norm. ``rope="fused"`` writes
  ``x*cos + rotate_half(x)*sin`` (pnnx fuses it into ``RotaryEmbed 0=0``, right on ncnn >= 1.0.20261020);
  ``rope="explicit"`` computes each half from its own half of the tables with slices, so pnnx leaves
  Slice/BinaryOp/Concat (for older ncnn, whose RotaryEmbed reads only the first half of a table);
* ``VisionProjector``: ``[1, N, Cv] -> [1, N, C]``.

N is free: nothing here depends on the grid except the tables, which the caller computes.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from graphsurgeon.models.common.qwen3_layers import rope_explicit, rope_fused

from .model import PenguinVL, vision_rope_tables

RopeForm = Literal["fused", "explicit"]


class VisionEmbedPatch(nn.Module):
    def __init__(self, model: PenguinVL) -> None:
        super().__init__()
        conv = model.vision.embeddings.patch_embedding
        self.proj = nn.Linear(conv.weight[0].numel(), conv.out_channels, device="meta")  # weights set below
        self.proj.weight = nn.Parameter(conv.weight.reshape(conv.out_channels, -1), requires_grad=False)
        bias = conv.bias
        if not isinstance(bias, nn.Parameter):
            raise ValueError("the patch embedding has no bias (the official Conv2d has one)")
        self.proj.bias = bias

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.proj(pixel_values)


class VisionEncoder(nn.Module):
    def __init__(self, model: PenguinVL, rope: RopeForm = "fused") -> None:
        super().__init__()
        if rope not in ("fused", "explicit"):
            raise ValueError(f"rope must be 'fused' or 'explicit', not {rope!r}")
        self.layers = model.vision.encoder.layers
        self.norm = model.vision.encoder.norm
        self.rope = rope_fused if rope == "fused" else rope_explicit

    def forward(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.rope is rope_explicit:
            # [1, N, D] -> [1, 1, N, D], the rank of q and k: pnnx drops the batch dim of a graph input and
            # then writes a last-dim slice of a 3-D [1, N, D] table as ncnn Slice axis 2 of the 2-D blob
            # it made (wrong); sliced at rank 4 it becomes axis 2 of a 3-D blob [1, N, D] (right).
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        for layer in self.layers:
            hidden, _ = layer(hidden, cos, sin, rope=self.rope)
        return self.norm(hidden)


class VisionProjector(nn.Module):
    def __init__(self, model: PenguinVL) -> None:
        super().__init__()
        self.readout = model.model.vision_projector.readout

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.readout(features)


def vision_rope_inputs(model: PenguinVL, grid: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's cos and sin inputs ``[1, grid_h*grid_w, head_dim]`` for a grid."""
    cos, sin = vision_rope_tables(grid[0], grid[1], model.config.vision)
    return cos[None], sin[None]
