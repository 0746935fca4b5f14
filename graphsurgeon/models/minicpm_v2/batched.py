"""``model.MiniCPMV2``'s computation on a batch, from its own modules and parameters (the reference runs one
prompt and one sub-image at a time): the training forward of ``train.py``.

* **Vision**: the sub-images (overviews and slices) of a batch grouped by patch grid; each group one ViT
  batch — the patch embedding as a product with the patch rows (``processor.patch_rows``: the
  ``Conv2d`` kernel viewed ``[width, 3*p*p]``), the position table resampled to the grid
  (``vision.resample_pos_table``), ``vpm.blocks`` and ``vpm.norm`` as they are (they take a batch) —
  then the resampler batched (``resampler.Resampler``'s math with the keys' sin-cos table of the grid).
* **Fusion**: every token row embedded x ``scale_emb``, the rows strictly inside each
  ``<image>`` ... ``</image>`` span overwritten by the sub-images' resampler rows in order
  (``MiniCPMV2.fuse``).
* **LLM**: right-padded ``[B, T]``, positions ``0..T-1``, causal attention (padding lies after every
  counted position), the muP residual factor, the final norm (``llm.MiniCPMModel``'s layers' weights).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from graphsurgeon.models.common.qwen3_layers import rotate_half

from .llm import DecoderLayer, rope_tables
from .model import MiniCPMV2
from .resampler import Resampler, sincos_2d
from .vision import resample_pos_table


def vision(model: MiniCPMV2, rows: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """``rows [B, h*w, 3*p*p]`` of sub-images of one patch ``grid`` -> the ViT output ``[B, h*w, width]``."""
    vpm = model.vpm
    proj = vpm.patch_embed.proj
    x = F.linear(rows, proj.weight.reshape(proj.weight.shape[0], -1), proj.bias)
    x = x + resample_pos_table(vpm.pos_embed, grid)
    for block in vpm.blocks:
        x = block(x)
    out: torch.Tensor = vpm.norm(x)
    return out


def resample(res: Resampler, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """``x [B, h*w, width]`` -> ``[B, query_num, hidden]``: ``Resampler.forward`` on each sub-image."""
    kv = res.ln_kv(res.kv_proj(x))
    query = res.ln_q(res.query) + res.pos_embed
    attn = res.attn
    wq, wk, wv = attn.in_proj_weight.chunk(3)
    bq, bk, bv = attn.in_proj_bias.chunk(3)
    b, heads, hd = x.shape[0], attn.heads, attn.head_dim
    q = F.linear(query, wq, bq).view(1, -1, heads, hd).transpose(1, 2)
    k = F.linear(kv + sincos_2d(res.dim, grid), wk, bk).view(b, -1, heads, hd).transpose(1, 2)
    v = F.linear(kv, wv, bv).view(b, -1, heads, hd).transpose(1, 2)
    weights = (q * (1.0 / hd) ** 0.5 @ k.transpose(-2, -1)).softmax(dim=-1)
    out = attn.out_proj((weights @ v).transpose(1, 2).reshape(b, -1, heads * hd))
    result: torch.Tensor = res.ln_post(out) @ res.proj
    return result


def image_features(
    model: MiniCPMV2, images: Sequence[Sequence[np.ndarray]], grids: Sequence[Sequence[tuple[int, int]]]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each sample's sub-images (patch rows ``[h*w, 3*p*p]``, the overview first) of ``grids`` -> per
    sample the resampler rows of all its sub-images in order ``[n_sub * query_num, hidden]``, and the ViT
    output of all its sub-images in order ``[sum(h*w), width]``."""
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for s, sample_grids in enumerate(grids):
        for k, grid in enumerate(sample_grids):
            groups.setdefault(grid, []).append((s, k))
    resampled: dict[tuple[int, int], torch.Tensor] = {}
    encoded: dict[tuple[int, int], torch.Tensor] = {}
    for grid, where in groups.items():
        rows = torch.from_numpy(np.stack([images[s][k] for s, k in where]))
        out = vision(model, rows, grid)
        queries = resample(model.resampler, out, grid)
        for n, (s, k) in enumerate(where):
            resampled[(s, k)] = queries[n]
            encoded[(s, k)] = out[n]
    features = [torch.cat([resampled[(s, k)] for k in range(len(g))]) for s, g in enumerate(grids)]
    return features, [torch.cat([encoded[(s, k)] for k in range(len(g))]) for s, g in enumerate(grids)]


def image_rows(ids: torch.Tensor, start_id: int, end_id: int) -> torch.Tensor:
    """``[B, T]`` bool: the positions strictly inside an ``<image>`` ... ``</image>`` span."""
    depth = torch.cumsum((ids == start_id).to(torch.int64) - (ids == end_id).to(torch.int64), dim=1)
    inside: torch.Tensor = (depth > 0) & (ids != start_id)
    return inside


def attention_layer(
    layer: DecoderLayer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """One ``llm.DecoderLayer`` on ``x [B, T, hidden]`` at positions ``0..T-1``, causal."""
    attn = layer.self_attn
    b, t, _ = x.shape
    h = layer.input_layernorm(x)
    q = attn.q_proj(h).view(b, t, attn.heads, attn.head_dim).transpose(1, 2)
    k = attn.k_proj(h).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
    v = attn.v_proj(h).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    group = attn.heads // attn.kv_heads
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + attn.o_proj(out.transpose(1, 2).reshape(b, t, -1)) * layer.residual_scale
    result: torch.Tensor = x + layer.mlp(layer.post_attention_layernorm(x)) * layer.residual_scale
    return result


def forward(
    model: MiniCPMV2, ids: torch.Tensor, features: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``ids [B, T]`` right-padded, ``features[b]`` the rows of sample ``b``'s image spans in order -> the
    LLM's final-normed hidden state ``[B, T, hidden]`` and every layer's output, the embeddings first (as
    transformers' ``hidden_states``, with the last entry before the final norm)."""
    llm = model.llm
    embeds = llm.embed_text(ids)
    inside = image_rows(ids, *model.image_ids)
    embeds = embeds.masked_scatter(inside[..., None], torch.cat(list(features)))
    cos, sin = rope_tables(llm.config, 0, ids.shape[1])
    layers = [embeds]
    for layer in llm.model.layers:
        assert isinstance(layer, DecoderLayer)
        layers.append(attention_layer(layer, layers[-1], cos, sin))
    hidden: torch.Tensor = llm.model.norm(layers[-1])
    return hidden, layers
