"""The MiniCPM-V-2 sub-modules pnnx exports, each sharing the reference's parameters (``model.MiniCPMV2``:
no copy, so every stored weight is a checkpoint tensor the weight map can pair) and computing what the
reference computes for one image or one prompt chunk. Every graph input has a leading batch dim 1.

* ``vision``: patch rows ``[1, N, 3*p*p]`` (``processor.patch_rows``: patches row-major, columns
  ``(channel, ky, kx)``) and the resampled position rows ``[1, N, C]`` -> the ViT output after its final
  LayerNorm ``[1, N, C]``. The patch convolution is one Linear on the rows (the Conv2d kernel viewed
  ``[C, 3*p*p]``); each block's fused qkv is one Linear whose output columns are split into q, k, v.
* ``pos_embed``: the learned ``g*g`` position table as an Embedding, ids ``[1, K]`` -> rows. The runtime
  reads the table from the ``.bin`` (``model.json`` gives its offset) and resamples it to every slice's
  grid itself (bicubic, antialiased: no ncnn layer does that).
* ``resampler``: the ViT output ``[1, N, Cv]``, the keys' 2-D sin-cos rows ``[1, N, C]`` for the image's
  grid (``resampler.sincos_2d``) and the query ids ``[1, Q]`` (``0..Q-1``) -> ``[1, Q, C]``. The learned
  queries and their fixed position table are read through Embeddings of the ids, so pnnx cannot fold the
  query branch into a constant the checkpoint does not hold; ``nn.MultiheadAttention``'s fused in-projection
  is three Linears on the three row ranges of ``in_proj_weight`` (q, k, v).
* ``embed``: ids ``[1, T]`` -> the token rows x ``scale_emb`` (muP: text rows only; image rows never pass
  through this net).
* ``decoder``: hidden, additive mask, cos, sin (the interface of ``rules/llm-kv-cache.yaml``) -> the
  final-normed hidden; each residual branch x ``scale_depth / sqrt(layers)`` as the official code writes it
  (a scalar multiply after ``o_proj`` and ``down_proj``, which the rule file folds into those Gemms).
* ``lm_head``: hidden ÷ ``hidden_size / dim_model_base`` (a scalar division the rule file folds into the
  head's Gemm), then the untied head.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from graphsurgeon.models.common.qwen3_layers import rope_fused

from .llm import DecoderLayer
from .model import MiniCPMV2
from .vision import Block


class VisionPart(nn.Module):
    def __init__(self, model: MiniCPMV2) -> None:
        super().__init__()
        vpm = model.vpm
        conv = vpm.patch_embed.proj
        width = int(conv.weight.shape[0])
        self.patch = nn.Linear(int(conv.weight[0].numel()), width, device="meta")
        self.patch.weight = nn.Parameter(conv.weight.detach().reshape(width, -1), requires_grad=False)
        assert conv.bias is not None  # timm's patch embedding has a bias
        self.patch.bias = nn.Parameter(conv.bias.detach(), requires_grad=False)
        self.blocks = vpm.blocks
        self.norm = vpm.norm

    def forward(self, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = self.patch(rows) + pos
        for block in self.blocks:
            x = _block(cast(Block, block), x)
        return self.norm(x)


def _block(block: Block, x: torch.Tensor) -> torch.Tensor:
    """One timm block: ``x + attn(norm1(x))``, then ``+ mlp(norm2(x))`` (erf GELU)."""
    attn = block.attn
    b, n, c = x.shape
    heads, d = attn.heads, attn.head_dim
    q, k, v = attn.qkv(block.norm1(x)).split(c, dim=-1)
    q, k, v = (t.reshape(b, n, heads, d).transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c)
    x = x + attn.proj(out)
    return x + block.mlp.fc2(F.gelu(block.mlp.fc1(block.norm2(x))))


class PosEmbedPart(nn.Module):
    def __init__(self, model: MiniCPMV2) -> None:
        super().__init__()
        table = model.vpm.pos_embed
        self.table = nn.Embedding(int(table.shape[1]), int(table.shape[2]), device="meta")
        self.table.weight = nn.Parameter(table.detach()[0], requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


def _embedding(table: torch.Tensor) -> nn.Embedding:
    emb = nn.Embedding(int(table.shape[0]), int(table.shape[1]), device="meta")
    emb.weight = nn.Parameter(table.detach(), requires_grad=False)
    return emb


def _linear(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(int(weight.shape[1]), int(weight.shape[0]), device="meta")
    lin.weight = nn.Parameter(weight.detach(), requires_grad=False)
    lin.bias = nn.Parameter(bias.detach(), requires_grad=False)
    return lin


class ResamplerPart(nn.Module):
    def __init__(self, model: MiniCPMV2) -> None:
        super().__init__()
        res = model.resampler
        self.heads, self.head_dim = res.attn.heads, res.attn.head_dim
        self.query = _embedding(res.query)
        self.query_pos = _embedding(res.pos_embed)
        self.kv_proj = res.kv_proj
        self.ln_q, self.ln_kv, self.ln_post = res.ln_q, res.ln_kv, res.ln_post
        w = res.attn.in_proj_weight.chunk(3)
        b = res.attn.in_proj_bias.chunk(3)
        self.q_proj, self.k_proj, self.v_proj = (_linear(wi, bi) for wi, bi in zip(w, b, strict=True))
        self.out_proj = res.attn.out_proj
        self.proj = res.proj

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        kv = self.ln_kv(self.kv_proj(x))
        query = self.ln_q(self.query(ids)) + self.query_pos(ids)
        q = self._heads(self.q_proj(query))
        k = self._heads(self.k_proj(kv + pos))
        v = self._heads(self.v_proj(kv))
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2)
        out = self.out_proj(out.reshape(out.shape[0], out.shape[1], -1))
        return torch.matmul(self.ln_post(out), self.proj)


class EmbedPart(nn.Module):
    def __init__(self, model: MiniCPMV2) -> None:
        super().__init__()
        self.embed_tokens = model.llm.model.embed_tokens
        self.scale = float(model.config.text.scale_emb)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(ids) * self.scale


class DecoderPart(nn.Module):
    def __init__(self, model: MiniCPMV2, residual_scale: float | None = None) -> None:
        """``residual_scale``: the full model's, when ``model`` is a short stack (its own layer count would
        give another ``scale_depth / sqrt(layers)``)."""
        super().__init__()
        text = model.config.text
        self.layers = model.llm.model.layers
        self.norm = model.llm.model.norm
        self.heads, self.kv_heads, self.head_dim = (
            text.num_attention_heads,
            text.num_key_value_heads,
            text.head_dim,
        )
        self.scale = float(text.residual_scale if residual_scale is None else residual_scale)

    def forward(
        self, hidden: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        for layer in self.layers:
            hidden = self._layer(cast(DecoderLayer, layer), hidden, mask, cos, sin)
        return self.norm(hidden)

    def _layer(
        self,
        layer: DecoderLayer,
        hidden: torch.Tensor,
        mask: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """One layer as the official code computes it, each residual branch x the muP residual scale."""
        b, t = hidden.shape[0], hidden.shape[1]
        attn = layer.self_attn
        x = layer.input_layernorm(hidden)
        q = attn.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rope_fused(q, cos, sin), rope_fused(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        out = out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        hidden = hidden + attn.o_proj(out) * self.scale
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden)) * self.scale


class LMHeadPart(nn.Module):
    def __init__(self, model: MiniCPMV2) -> None:
        super().__init__()
        self.lm_head = model.llm.lm_head
        self.divisor = float(model.config.text.logit_divisor)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden / self.divisor)
