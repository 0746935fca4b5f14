"""MiniCPM-V-2's vision tower (``vpm.*``) in plain fp32 PyTorch, written from what timm's
``VisionTransformer`` computes for the official ``timm.create_model(config.vision_encoder, pretrained=False,
num_classes=0, dynamic_img_size=True, dynamic_img_pad=True)`` with ``attn_pool`` replaced by an Identity and
the last block dropped (docs/minicpm-v-2.md §4), for one image of batch 1:

1. ``patch_embed``: zeros padded right and bottom to a multiple of the patch size (never needed for the
   official slices, whose sides are multiples of 14), ``Conv2d(3, width, patch, stride=patch)`` with bias ->
   a ``h x w`` grid of patches, row-major;
2. the position table ``pos_embed [1, g*g, width]`` (no class-token slot) resampled to ``h x w`` as timm's
   ``resample_abs_pos_embed``: ``F.interpolate(mode="bicubic", antialias=True, align_corners=False)`` of the
   ``[1, width, g, g]`` table in fp32 (PIL-style antialiased bicubic, a = -0.5, even when upsampling),
   skipped only when the grid is ``g x g``; added;
3. the kept pre-norm blocks: ``x + proj(attn(norm1(x)))`` (fused qkv with bias, rows q|k|v, heads
   ``width / heads`` wide, softmax over every patch, no mask), ``x + fc2(gelu_erf(fc1(norm2(x))))``;
   LayerNorm eps 1e-6;
4. the final ``norm`` (kept and applied) -> ``[h*w, width]``, all of it to the resampler.

The names are timm's (``patch_embed.proj``, ``blocks.{b}.attn.qkv``, ``mlp.fc1`` ...), so ``vpm.*`` of the
checkpoint load into it as they are. ``tests/test_minicpm_v2_reference.py`` checks it against the official
timm 0.9.10 run (goldens made by ``tests/goldens/minicpm_v2/make_model_goldens.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import VisionArch, VisionConfig

Device = torch.device | str | None


def resample_pos_table(table: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """``table [1, g*g, C]`` -> ``[1, h*w, C]`` for the patch grid ``(h, w)``, as timm's
    ``resample_abs_pos_embed`` (no prefix tokens): unchanged for ``h == w == g``, else antialiased bicubic."""
    h, w = grid
    tokens, width = int(table.shape[1]), int(table.shape[2])
    side = int(tokens**0.5)
    if h * w == tokens and h == w:
        return table
    square = table.reshape(1, side, side, width).permute(0, 3, 1, 2).to(torch.float32)
    resized = F.interpolate(square, size=(h, w), mode="bicubic", antialias=True, align_corners=False)
    return resized.permute(0, 2, 3, 1).reshape(1, h * w, width).to(table.dtype)


class PatchEmbed(nn.Module):
    def __init__(self, arch: VisionArch, device: Device = None) -> None:
        super().__init__()
        self.patch = arch.patch_size
        self.proj = nn.Conv2d(3, arch.width, arch.patch_size, stride=arch.patch_size, device=device)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[1, 3, H, W]`` -> ``[1, h, w, width]``."""
        pad_h = (self.patch - pixels.shape[-2] % self.patch) % self.patch
        pad_w = (self.patch - pixels.shape[-1] % self.patch) % self.patch
        x = F.pad(pixels, (0, pad_w, 0, pad_h))
        return self.proj(x).permute(0, 2, 3, 1)


class Attention(nn.Module):
    def __init__(self, arch: VisionArch, device: Device = None) -> None:
        super().__init__()
        self.heads, self.head_dim = arch.heads, arch.width // arch.heads
        self.qkv = nn.Linear(arch.width, 3 * arch.width, device=device)
        self.proj = nn.Linear(arch.width, arch.width, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        scores = (q * self.head_dim**-0.5) @ k.transpose(-2, -1)
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    def __init__(self, arch: VisionArch, device: Device = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(arch.width, arch.mlp_hidden, device=device)
        self.fc2 = nn.Linear(arch.mlp_hidden, arch.width, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))  # exact erf GELU (timm's nn.GELU default)


class Block(nn.Module):
    def __init__(self, arch: VisionArch, device: Device = None) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(arch.width, eps=arch.eps, device=device)
        self.attn = Attention(arch, device)
        self.norm2 = nn.LayerNorm(arch.width, eps=arch.eps, device=device)
        self.mlp = Mlp(arch, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTower(nn.Module):
    """The official ``vpm`` after MiniCPM's changes (no ``attn_pool``, ``cfg.layers`` blocks)."""

    def __init__(self, cfg: VisionConfig, device: Device = None) -> None:
        super().__init__()
        arch = cfg.arch
        self.patch_embed = PatchEmbed(arch, device)
        self.pos_embed = nn.Parameter(torch.zeros(1, arch.pos_grid**2, arch.width, device=device))
        self.blocks = nn.ModuleList(Block(arch, device) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(arch.width, eps=arch.eps, device=device)

    def forward(self, pixels: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """``pixels [3, H, W]`` -> ``[h*w, width]`` after the final norm, and the patch grid ``(h, w)``."""
        x = self.patch_embed(pixels[None].to(torch.float32))
        grid = (int(x.shape[1]), int(x.shape[2]))
        x = x.reshape(1, grid[0] * grid[1], -1) + resample_pos_table(self.pos_embed, grid)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)[0], grid
