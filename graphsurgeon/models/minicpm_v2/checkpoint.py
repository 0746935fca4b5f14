"""The tensors of a MiniCPM-V-2 checkpoint: their official names and shapes for a given config
(``model.safetensors.index.json`` of the real model, docs/minicpm-v-2.md §2), and reading them from a single
``model.safetensors`` or a sharded ``model.safetensors.index.json`` (bf16, fp16 or fp32, widened to fp32).

* LLM ``llm.model.embed_tokens.weight``, ``llm.model.layers.{i}.{input_layernorm,self_attn.{q,k,v,o}_proj,
  post_attention_layernorm,mlp.{gate,up,down}_proj}.weight``, ``llm.model.norm.weight``,
  ``llm.lm_head.weight`` (untied), no biases;
* vision ``vpm.*``, timm's ``VisionTransformer`` names: ``patch_embed.proj.{weight,bias}``, ``pos_embed``
  ``[1, grid^2, width]``, ``blocks.{b}.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}.{weight,bias}`` for
  the kept blocks, ``norm.{weight,bias}``; no ``cls_token``, no ``attn_pool.*``, no dropped block;
* resampler ``resampler.{query,pos_embed,kv_proj.weight,ln_q.*,ln_kv.*,attn.in_proj_{weight,bias},
  attn.out_proj.{weight,bias},ln_post.*,proj}``; ``proj`` is ``[in, out]`` (used as ``x @ proj``).

Non-persistent ``rotary_emb.inv_freq`` buffers, if a checkpoint carries them, are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from graphsurgeon.models.common.checkpoint_tensors import (
    load_checked_tensors,
)

from .config import MiniCPMV2Config

if TYPE_CHECKING:
    import torch


def llm_shapes(cfg: MiniCPMV2Config) -> dict[str, tuple[int, ...]]:
    t = cfg.text
    h, i, kv = t.hidden_size, t.intermediate_size, t.num_key_value_heads * t.head_dim
    shapes: dict[str, tuple[int, ...]] = {"llm.model.embed_tokens.weight": (t.vocab_size, h)}
    for n in range(t.num_hidden_layers):
        p = f"llm.model.layers.{n}."
        shapes.update(
            {
                f"{p}input_layernorm.weight": (h,),
                f"{p}self_attn.q_proj.weight": (h, h),
                f"{p}self_attn.k_proj.weight": (kv, h),
                f"{p}self_attn.v_proj.weight": (kv, h),
                f"{p}self_attn.o_proj.weight": (h, h),
                f"{p}post_attention_layernorm.weight": (h,),
                f"{p}mlp.gate_proj.weight": (i, h),
                f"{p}mlp.up_proj.weight": (i, h),
                f"{p}mlp.down_proj.weight": (h, i),
            }
        )
    shapes["llm.model.norm.weight"] = (h,)
    shapes["llm.lm_head.weight"] = (t.vocab_size, h)
    return shapes


def vision_shapes(cfg: MiniCPMV2Config) -> dict[str, tuple[int, ...]]:
    a = cfg.vision.arch
    w, p, m = a.width, a.patch_size, a.mlp_hidden
    shapes: dict[str, tuple[int, ...]] = {
        "vpm.patch_embed.proj.weight": (w, 3, p, p),
        "vpm.patch_embed.proj.bias": (w,),
        "vpm.pos_embed": (1, a.pos_grid * a.pos_grid, w),
    }
    for b in range(cfg.vision.layers):
        q = f"vpm.blocks.{b}."
        shapes.update(
            {
                f"{q}norm1.weight": (w,),
                f"{q}norm1.bias": (w,),
                f"{q}attn.qkv.weight": (3 * w, w),
                f"{q}attn.qkv.bias": (3 * w,),
                f"{q}attn.proj.weight": (w, w),
                f"{q}attn.proj.bias": (w,),
                f"{q}norm2.weight": (w,),
                f"{q}norm2.bias": (w,),
                f"{q}mlp.fc1.weight": (m, w),
                f"{q}mlp.fc1.bias": (m,),
                f"{q}mlp.fc2.weight": (w, m),
                f"{q}mlp.fc2.bias": (w,),
            }
        )
    shapes["vpm.norm.weight"] = (w,)
    shapes["vpm.norm.bias"] = (w,)
    return shapes


def resampler_shapes(cfg: MiniCPMV2Config) -> dict[str, tuple[int, ...]]:
    r = cfg.resampler
    d, q = r.embed_dim, r.query_num
    shapes: dict[str, tuple[int, ...]] = {"resampler.query": (q, d), "resampler.pos_embed": (q, d)}
    if r.kv_dim != d:  # the official kv_proj is an Identity (no tensor) when the widths agree
        shapes["resampler.kv_proj.weight"] = (d, r.kv_dim)
    for ln in ("ln_q", "ln_kv"):
        shapes[f"resampler.{ln}.weight"] = (d,)
        shapes[f"resampler.{ln}.bias"] = (d,)
    shapes.update(
        {
            "resampler.attn.in_proj_weight": (3 * d, d),
            "resampler.attn.in_proj_bias": (3 * d,),
            "resampler.attn.out_proj.weight": (d, d),
            "resampler.attn.out_proj.bias": (d,),
            "resampler.ln_post.weight": (d,),
            "resampler.ln_post.bias": (d,),
            "resampler.proj": (d, d),
        }
    )
    return shapes


def tensor_shapes(cfg: MiniCPMV2Config) -> dict[str, tuple[int, ...]]:
    """Every tensor the checkpoint must hold, in the official state-dict order (``llm``, ``vpm``,
    ``resampler``), with its shape."""
    return {**llm_shapes(cfg), **vision_shapes(cfg), **resampler_shapes(cfg)}


def load_tensors(
    folder: Path | str, cfg: MiniCPMV2Config, rows: Callable[[str], int | None] = lambda name: None
) -> dict[str, torch.Tensor]:
    """Every tensor of ``tensor_shapes(cfg)`` as fp32 torch tensors (``common.checkpoint_tensors``: a
    missing, unexpected or misshapen tensor, or one that is not a float, is a ``CheckpointError`` naming its
    file and the tensor); ``rows(name)``: read only that many first rows (0: leave the tensor out), every
    tensor still checked."""
    vision = f"vision_encoder {cfg.vision.name} (drop_vision_last_layer {cfg.vision.drop_last_layer})"
    return load_checked_tensors(
        Path(folder),
        lambda: tensor_shapes(cfg),
        model="MiniCPM-V-2",
        layer_counts=(
            ("llm.model.layers.", cfg.text.num_hidden_layers, "num_hidden_layers"),
            ("vpm.blocks.", cfg.vision.layers, vision),
        ),
        ignorable=lambda name: name.endswith("rotary_emb.inv_freq"),
        rows=rows,
    )


def parameter_count(cfg: MiniCPMV2Config) -> int:
    return sum(math.prod(shape) for shape in tensor_shapes(cfg).values())
