"""The MiniCPM LLM of MiniCPM-V-2 (``llm.*``, official ``modeling_minicpm.py``; docs/minicpm-v-2.md §3) in
plain fp32 PyTorch, eager, batch 1, with a KV cache.

A Llama-style decoder with muP scalings:

* RMSNorm ``x * rsqrt(mean(x^2) + eps) * weight`` (no ``1 + weight`` offset);
* multi-head attention (grouped when ``num_key_value_heads`` is smaller; MiniCPM-V-2 is MHA), q/k/v/o
  without bias, RoPE in the rotate-half layout over the whole head with base ``rope_theta``, positions
  ``0..L-1`` over the whole prompt (image rows included), scores ``q.k / sqrt(head_dim)``, causal;
* the SiLU-gated MLP ``down(silu(gate(x)) * up(x))``;
* **muP**: each residual branch x ``scale_depth / sqrt(num_hidden_layers)``; text rows of the input x
  ``scale_emb`` (the caller embeds: image rows go in unscaled, ``MiniCPMV2.fuse``); the final-normed hidden
  ÷ ``hidden_size / dim_model_base`` before the untied ``lm_head``.

RoPE: the official SDPA path (the default under transformers 4.36) rounds cos/sin to the activation dtype
(bf16 in the official run); this reference is fp32 throughout, so its tables are the exact fp32 ones the
eager path uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from graphsurgeon.models.common.qwen3_layers import inverse_frequencies, rotate_half, visible_keys

from .config import TextConfig

Device = torch.device | str | None


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float, device: Device = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


def rope_tables(cfg: TextConfig, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[length, head_dim]`` for positions ``start..start+length-1``: ``cat(freqs, freqs)`` with
    ``freqs = pos * inv_freq`` in fp32, as the official ``MiniCPMRotaryEmbedding`` caches them."""
    positions = torch.arange(start, start + length, dtype=torch.int64).to(torch.float32)
    freqs = torch.outer(positions, inverse_frequencies(cfg.head_dim, cfg.rope_theta))
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


@dataclass
class LayerCache:
    keys: torch.Tensor  # [kv_heads, T, head_dim], after RoPE
    values: torch.Tensor


@dataclass
class KVCache:
    layers: list[LayerCache] = field(default_factory=list)

    @property
    def length(self) -> int:
        return 0 if not self.layers else int(self.layers[0].keys.shape[1])


class Attention(nn.Module):
    def __init__(self, cfg: TextConfig, device: Device = None) -> None:
        super().__init__()
        h, kv = cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        self.q_proj = nn.Linear(h, h, bias=False, device=device)
        self.k_proj = nn.Linear(h, kv, bias=False, device=device)
        self.v_proj = nn.Linear(h, kv, bias=False, device=device)
        self.o_proj = nn.Linear(h, h, bias=False, device=device)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        past: LayerCache | None,
    ) -> tuple[torch.Tensor, LayerCache]:
        """``x [T, hidden]`` -> ``[T, hidden]`` and this layer's grown cache."""
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.heads, self.head_dim).transpose(0, 1)
        k = self.k_proj(x).view(t, self.kv_heads, self.head_dim).transpose(0, 1)
        v = self.v_proj(x).view(t, self.kv_heads, self.head_dim).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = torch.cat((past.keys, k), dim=1)
            v = torch.cat((past.values, v), dim=1)
        grown = LayerCache(k, v)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        scores = torch.matmul(q, k.transpose(1, 2)) / (self.head_dim**0.5)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        out = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.o_proj(out.transpose(0, 1).reshape(t, -1)), grown


class MLP(nn.Module):
    def __init__(self, cfg: TextConfig, device: Device = None) -> None:
        super().__init__()
        h, i = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False, device=device)
        self.up_proj = nn.Linear(h, i, bias=False, device=device)
        self.down_proj = nn.Linear(i, h, bias=False, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TextConfig, device: Device = None) -> None:
        super().__init__()
        self.residual_scale = cfg.residual_scale
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)
        self.self_attn = Attention(cfg, device)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)
        self.mlp = MLP(cfg, device)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        past: LayerCache | None,
    ) -> tuple[torch.Tensor, LayerCache]:
        attn, grown = self.self_attn(self.input_layernorm(x), cos, sin, mask, past)
        x = x + attn * self.residual_scale
        x = x + self.mlp(self.post_attention_layernorm(x)) * self.residual_scale
        return x, grown


class MiniCPMModel(nn.Module):
    """The official ``llm.model``: the embedding, the layers and the final norm."""

    def __init__(self, cfg: TextConfig, device: Device = None) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, device=device)
        self.layers = nn.ModuleList(DecoderLayer(cfg, device) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)

    def forward(self, embeds: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, KVCache]:
        """``embeds [T, hidden]`` (already scaled) at positions ``cache.length ..`` -> the final-normed hidden
        ``[T, hidden]`` and the grown cache."""
        start, length = cache.length, int(embeds.shape[0])
        cos, sin = rope_tables(self.config, start, length)
        mask = visible_keys(start, length)
        grown = KVCache()
        x = embeds
        for n, layer in enumerate(self.layers):
            x, layer_cache = layer(x, cos, sin, mask, cache.layers[n] if cache.layers else None)
            grown.layers.append(layer_cache)
        return self.norm(x), grown


class MiniCPMForCausalLM(nn.Module):
    """The official ``llm``: ``model`` and the untied ``lm_head``."""

    def __init__(self, cfg: TextConfig, device: Device = None) -> None:
        super().__init__()
        self.config = cfg
        self.model = MiniCPMModel(cfg, device)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, device=device)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """Token rows x ``scale_emb``, as the official code embeds every prompt and generated token."""
        return self.model.embed_tokens(ids) * self.config.scale_emb

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``lm_head(h / (hidden_size / dim_model_base))`` of the final-normed hidden."""
        return self.lm_head(hidden / self.config.logit_divisor)
