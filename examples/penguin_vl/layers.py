"""The Qwen3 layer both Penguin-VL stacks are made of, in plain PyTorch (fp32, eager, CPU), and the RoPE
tables each stack uses.

A layer is pre-norm: ``x + o_proj(attn(RMSNorm(x)))`` then ``x + down(silu(gate(h)) * up(h))`` with
``h = RMSNorm(x)``. q and k get an RMSNorm over ``head_dim`` before RoPE; attention is
``F.scaled_dot_product_attention`` with scale ``1/sqrt(head_dim)`` and GQA native (query head ``h`` reads kv
head ``h // group``; k/v are never repeated). The vision encoder runs it without a mask (bidirectional),
the LLM with a causal mask and a KV cache.

RoPE is ``x*cos + rotate_half(x)*sin`` on full-width ``[.., T, head_dim]`` tables (``rope_fused``), or the
same numbers with the halves written out (``rope_explicit``: ``y[:h] = x[:h]*cos[:h] - x[h:]*sin[:h]``,
``y[h:] = x[h:]*cos[h:] + x[:h]*sin[h:]``), which pnnx does not fuse into ``RotaryEmbed``. With the 1-D
tables of the LLM both halves of a row are equal; with the 2-D vision tables the first half holds the row
angle and the second the column angle, so the pair map is not a rotation when row != column.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import StackConfig

Device = torch.device | str | None
"""Where parameters are made: ``"meta"`` builds a model without allocating or initialising weights."""

Cache = tuple[torch.Tensor, torch.Tensor]
"""One layer's k (after RoPE) and v, ``[1, kv_heads, tokens, head_dim]``."""

Rope = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim."""

    def __init__(self, width: int, eps: float, device: Device = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, device=device))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.weight.shape[0],), self.weight, self.eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dim."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_fused(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The form pnnx fuses into ``RotaryEmbed 0=0``."""
    return x * cos + rotate_half(x) * sin


def rope_explicit(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The same numbers with each half computed from its own half of the tables (slice/mul/sub/add/cat)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    first = x1 * cos[..., :half] - x2 * sin[..., :half]
    second = x2 * cos[..., half:] + x1 * sin[..., half:]
    return torch.cat((first, second), dim=-1)


def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """``f_i = theta^(-2i/head_dim)`` for ``i < head_dim/2``, in float32 as HF computes them."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim
    return 1.0 / (theta**exponents)


def text_rope_tables(cfg: StackConfig, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """1-D RoPE: cos and sin ``[1, length, head_dim]`` for positions ``start..start+length-1``; both halves
    of a row hold the same angles ``pos * f_i``."""
    freqs = torch.arange(start, start + length, dtype=torch.int64).to(torch.float32)[:, None]
    angles = freqs * inverse_frequencies(cfg.head_dim, cfg.rope_theta)[None, :]
    emb = torch.cat((angles, angles), dim=-1)[None]
    return emb.cos(), emb.sin()


def vision_rope_tables(grid_h: int, grid_w: int, cfg: StackConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D RoPE for a ``grid_h x grid_w`` grid of patches in raster order (patch ``p = r*grid_w + c``):
    cos and sin ``[grid_h*grid_w, head_dim]``, the first half of each row holding ``r * f_i`` and the second
    ``c * f_i``, the same ``head_dim/2`` frequencies (base: the vision ``rope_theta``) for both axes."""
    inv = inverse_frequencies(cfg.head_dim, cfg.rope_theta)[None, :]
    rows = torch.arange(grid_h, dtype=torch.int64).repeat_interleave(grid_w).to(torch.float32)[:, None]
    cols = torch.arange(grid_w, dtype=torch.int64).repeat(grid_h).to(torch.float32)[:, None]
    angles = torch.cat((rows * inv, cols * inv), dim=-1)
    return angles.cos(), angles.sin()


class Attention(nn.Module):
    def __init__(self, cfg: StackConfig, device: Device = None) -> None:
        super().__init__()
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.q_width, bias=False, device=device)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.kv_width, bias=False, device=device)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.kv_width, bias=False, device=device)
        self.o_proj = nn.Linear(cfg.q_width, cfg.hidden_size, bias=False, device=device)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, device)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, device)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        past: Cache | None,
        rope: Rope,
    ) -> tuple[torch.Tensor, Cache]:
        """``x [1,T,H]``, ``cos/sin [1,T,D]`` (broadcast over the heads), ``mask`` None (every key visible)
        or boolean ``[1,T,past+T]`` (True: visible) -> ``[1,T,H]`` and this layer's grown cache."""
        b, t = x.shape[0], x.shape[1]
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        out = out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        return self.o_proj(out), (k, v)


class MLP(nn.Module):
    def __init__(self, cfg: StackConfig, device: Device = None) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False, device=device)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False, device=device)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    """One Qwen3 decoder layer (parameter names as HF's)."""

    def __init__(self, cfg: StackConfig, device: Device = None) -> None:
        super().__init__()
        self.self_attn = Attention(cfg, device)
        self.mlp = MLP(cfg, device)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
        past: Cache | None = None,
        rope: Rope = rope_fused,
    ) -> tuple[torch.Tensor, Cache]:
        attn, cache = self.self_attn(self.input_layernorm(x), cos, sin, mask, past, rope)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), cache


def causal_mask(start: int, length: int) -> torch.Tensor:
    """Boolean ``[1, length, start+length]``: the query at ``start+i`` sees key ``j`` iff ``j <= start+i``."""
    queries = torch.arange(start, start + length)[:, None]
    keys = torch.arange(start + length)[None, :]
    return (keys <= queries)[None]
