"""MiniCPM-V-2's resampler (``resampler.*``, official ``resampler.py`` with ``adaptive=True``;
docs/minicpm-v-2.md §5) in plain fp32 PyTorch: one cross-attention of ``query_num`` learned queries over
the patches of one image (the overview or a slice), batch 1, no mask.

* keys/values: ``kv = ln_kv(kv_proj(x))`` (``kv_proj`` a Linear without bias from the ViT width; the official
  code makes it an Identity, with no tensor, when the widths agree); the keys add the 2-D sin-cos table of
  the image's own patch grid ``(h, w)``, recomputed per image (``sincos_2d``); the values add nothing;
* queries: ``ln_q(query) + pos_embed``, ``pos_embed`` the fixed ``grid x grid`` sin-cos table stored in the
  checkpoint (loaded, not recomputed);
* ``nn.MultiheadAttention`` math with its fused ``in_proj_weight`` (rows q | k | v) and bias, heads of 128
  (``hidden_size // 128`` of them), ``q`` scaled by ``1/sqrt(128)`` before ``q.k`` as torch does, softmax,
  ``out_proj``;
* ``ln_post``, then ``x @ proj`` (``proj`` is ``[in, out]``); LayerNorm eps 1e-6 -> ``[query_num, hidden]``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import ResamplerConfig

Device = torch.device | str | None


def _sincos_1d(dim: int, positions: np.ndarray) -> np.ndarray:
    omega = np.arange(dim // 2, dtype=np.float32)
    omega /= np.float32(dim / 2.0)
    omega = np.float32(1.0) / np.float32(10000) ** omega
    out = np.einsum("m,d->md", positions.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def sincos_2d(dim: int, grid: tuple[int, int]) -> torch.Tensor:
    """The official ``get_2d_sincos_pos_embed(dim, (h, w))`` in numpy float32: ``[h*w, dim]``, patches
    row-major; channels ``[0, dim/2)`` encode the **column** (sin then cos), ``[dim/2, dim)`` the row."""
    h, w = grid
    cols, rows = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    emb = np.concatenate([_sincos_1d(dim // 2, cols), _sincos_1d(dim // 2, rows)], axis=1)
    return torch.from_numpy(np.ascontiguousarray(emb, dtype=np.float32))


class MultiheadAttention(nn.Module):
    """The parameters of ``nn.MultiheadAttention(dim, heads)`` (one fused in-projection) and its math for
    one unbatched query/key/value set."""

    def __init__(self, dim: int, heads: int, device: Device = None) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.in_proj_weight = nn.Parameter(torch.zeros(3 * dim, dim, device=device))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim, device=device))
        self.out_proj = nn.Linear(dim, dim, device=device)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``query [Q, dim]``, ``key`` and ``value [L, dim]`` -> ``[Q, dim]``."""
        wq, wk, wv = self.in_proj_weight.chunk(3)
        bq, bk, bv = self.in_proj_bias.chunk(3)
        q = F.linear(query, wq, bq).view(query.shape[0], self.heads, self.head_dim).transpose(0, 1)
        k = F.linear(key, wk, bk).view(key.shape[0], self.heads, self.head_dim).transpose(0, 1)
        v = F.linear(value, wv, bv).view(value.shape[0], self.heads, self.head_dim).transpose(0, 1)
        weights = torch.bmm(q * (1.0 / self.head_dim) ** 0.5, k.transpose(1, 2)).softmax(dim=-1)
        out = torch.bmm(weights, v).transpose(0, 1).reshape(query.shape[0], -1)
        return self.out_proj(out)


class Resampler(nn.Module):
    def __init__(self, cfg: ResamplerConfig, device: Device = None) -> None:
        super().__init__()
        d = cfg.embed_dim
        self.dim = d
        self.query = nn.Parameter(torch.zeros(cfg.query_num, d, device=device))
        self.pos_embed = nn.Parameter(torch.zeros(cfg.query_num, d, device=device))
        self.kv_proj: nn.Module = (
            nn.Linear(cfg.kv_dim, d, bias=False, device=device) if cfg.kv_dim != d else nn.Identity()
        )
        self.attn = MultiheadAttention(d, cfg.heads, device)
        self.ln_q = nn.LayerNorm(d, eps=cfg.eps, device=device)
        self.ln_kv = nn.LayerNorm(d, eps=cfg.eps, device=device)
        self.ln_post = nn.LayerNorm(d, eps=cfg.eps, device=device)
        self.proj = nn.Parameter(torch.zeros(d, d, device=device))

    def forward(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """``x [h*w, kv_dim]`` (the ViT output of one image) -> ``[query_num, dim]``."""
        kv = self.ln_kv(self.kv_proj(x))
        out = self.attn(self.ln_q(self.query) + self.pos_embed, kv + sincos_2d(self.dim, grid), kv)
        return self.ln_post(out) @ self.proj
