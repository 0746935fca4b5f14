"""The Qwen3 decoder layer in plain PyTorch (fp32, eager, CPU), shared by every example built on it: the
Qwen3 LLM (``graphsurgeon/models/qwen3_llm``) and both stacks of Penguin-VL (its LLM, and its vision encoder
run without a mask). Parameter names are HF transformers' (``self_attn.q_proj``, ``mlp.gate_proj``,
``input_layernorm``, ...), so a checkpoint loads by name.

A layer is pre-norm: ``x + o_proj(attn(RMSNorm(x)))`` then ``x + down(silu(gate(h)) * up(h))`` with
``h = RMSNorm(x)``. q and k get an RMSNorm over ``head_dim`` before RoPE; attention is
``F.scaled_dot_product_attention`` with scale ``1/sqrt(head_dim)`` and GQA native (query head ``h`` reads
kv head ``h // group``; k/v are never repeated).

The layer takes the RoPE tables as inputs, ``cos``/``sin`` full-width ``[.., T, head_dim]``, and never
computes positions itself: the 1-D tables of a text model (``rope_tables``), 2-D tables of image patches,
or per-section mRoPE tables are all just tables. RoPE is ``x*cos + rotate_half(x)*sin`` (``rope_fused``,
what pnnx fuses into ``RotaryEmbed 0=0``), or the same numbers with the halves written out
(``rope_explicit``: ``y[:h] = x[:h]*cos[:h] - x[h:]*sin[:h]``, ``y[h:] = x[h:]*cos[h:] + x[:h]*sin[h:]``),
which pnnx leaves as Slice/BinaryOp/Concat.

The mask is None (every key visible), boolean (True: visible; ``visible_keys``) or additive
(``causal_mask``: 0 visible, ``MASKED`` hidden, what an exported decoder takes as an input). A layer
returns its k (after RoPE) and v with the ``past`` ones in front (``Cache``); ``KVCache`` and
``run_layers`` carry them across the layers of a stack.

What pnnx makes of these layers is in ``graphsurgeon/models/common/qwen3_llm_model.py``'s docstring; the rule
files match on it, so the order of the ops here is part of the exported graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from graphsurgeon.models.common.qwen3_config import StackConfig, TextConfig

Device = torch.device | str | None
"""Where parameters are made: ``"meta"`` builds a model without allocating or initialising weights."""

Cache = tuple[torch.Tensor, torch.Tensor]
"""One layer's k (after RoPE) and v, ``[1, kv_heads, tokens, head_dim]``."""

Rope = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``rope(x, cos, sin)``: ``rope_fused`` or ``rope_explicit``."""

MASKED = -1e38
"""Additive mask value of a hidden key: large and finite (with -inf a fully hidden row gives NaN in ncnn)."""


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


def rope_tables(cfg: StackConfig, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """1-D RoPE: cos and sin ``[1, length, head_dim]`` for positions ``start..start+length-1``, in float32 as
    HF computes them; both halves of a row hold the same angles ``pos * f_i`` (HF's ``cat(freqs, freqs)``)."""
    positions = torch.arange(start, start + length, dtype=torch.int64).to(torch.float32)[:, None]
    angles = positions * inverse_frequencies(cfg.head_dim, cfg.rope_theta)[None, :]
    emb = torch.cat((angles, angles), dim=-1)[None]
    return emb.cos(), emb.sin()


def visible_keys(start: int, length: int) -> torch.Tensor:
    """The boolean causal mask ``[1, length, start+length]``: the query at ``start+i`` sees key ``j`` iff
    ``j <= start+i``."""
    queries = torch.arange(start, start + length)[:, None]
    keys = torch.arange(start + length)[None, :]
    return (keys <= queries)[None]


def causal_mask(start: int, length: int) -> torch.Tensor:
    """``visible_keys`` as an additive float32 mask: 0 where visible, ``MASKED`` where hidden."""
    return torch.where(visible_keys(start, length), 0.0, MASKED).to(torch.float32)


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
        """``x [1,T,H]``, ``cos/sin [1,T,D]``, ``mask`` None or ``[1,T,past+T]`` -> ``[1,T,H]`` and this
        layer's grown cache.

        cos/sin and the mask broadcast over the heads through their batch dim 1 (HF unsqueezes them to
        ``[1,1,T,·]``: same numbers, but pnnx then writes an ExpandDims before every RotaryEmbed and SDPA)."""
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


class DecoderLayer(nn.Module):
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


def layer_stack(cfg: StackConfig, device: Device = None) -> nn.ModuleList:
    """``cfg.num_hidden_layers`` decoder layers (HF's ``layers.{i}``)."""
    return nn.ModuleList(DecoderLayer(cfg, device) for _ in range(cfg.num_hidden_layers))


class Qwen3Body(nn.Module):
    """HF's ``model.*`` of a Qwen3 text model: the embedding, the layers and the final norm."""

    def __init__(self, cfg: TextConfig, device: Device = None) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, device=device)
        self.layers = layer_stack(cfg, device)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)


def lm_head(cfg: TextConfig, device: Device = None) -> nn.Linear | None:
    """HF's bias-free ``lm_head``; None when ``tie_word_embeddings`` (the embedding matrix is the head)."""
    if cfg.tie_word_embeddings:
        return None
    return nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, device=device)


@dataclass
class KVCache:
    """Every layer's k and v so far (empty before the first step)."""

    layers: list[Cache] = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.layers[0][0].shape[2]) if self.layers else 0


def run_layers(
    layers: Iterable[nn.Module],
    hidden: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mask: torch.Tensor | None,
    cache: KVCache,
) -> tuple[torch.Tensor, KVCache]:
    """``hidden [1,T,H]`` at positions ``cache.length ..`` through every layer, each reading its part of
    ``cache`` -> the last layer's output (no final norm) and the grown cache."""
    grown = KVCache()
    for i, layer in enumerate(layers):
        hidden, kv = layer(hidden, cos, sin, mask, cache.layers[i] if cache.layers else None)
        grown.layers.append(kv)
    return hidden, grown
