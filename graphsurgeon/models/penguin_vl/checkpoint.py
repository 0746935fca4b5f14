"""The tensors of a Penguin-VL checkpoint: their official names and shapes for a given config, and reading
them from a single ``model.safetensors`` or a sharded ``model.safetensors.index.json`` (bf16, fp16 or fp32,
widened to fp32).

Names are those of the official ``PenguinVLQwen3ForCausalLM`` state dict: the LLM as in Qwen3
(``model.embed_tokens.weight``, ``model.layers.{i}.…``, ``model.norm.weight``, ``lm_head.weight`` unless the
embeddings are tied), the encoder nested under ``model.vision_encoder.vision_encoder.`` (``embeddings.
patch_embedding.{weight,bias}`` as a Conv2d, ``encoder.layers.{i}.…`` with the Qwen3 layer names,
``encoder.norm.weight``) and the projector under ``model.vision_projector.readout.{0,2}.{weight,bias}``.
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
from graphsurgeon.models.common.qwen3_config import StackConfig

from .config import PenguinConfig

if TYPE_CHECKING:
    import torch

VISION_PREFIX = "model.vision_encoder.vision_encoder."
PROJECTOR_PREFIX = "model.vision_projector.readout."


def layer_shapes(prefix: str, cfg: StackConfig) -> dict[str, tuple[int, ...]]:
    """One Qwen3 layer's tensors under ``prefix`` (``…layers.{i}.``)."""
    h, d, i = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    return {
        f"{prefix}input_layernorm.weight": (h,),
        f"{prefix}post_attention_layernorm.weight": (h,),
        f"{prefix}self_attn.q_proj.weight": (cfg.q_width, h),
        f"{prefix}self_attn.k_proj.weight": (cfg.kv_width, h),
        f"{prefix}self_attn.v_proj.weight": (cfg.kv_width, h),
        f"{prefix}self_attn.o_proj.weight": (h, cfg.q_width),
        f"{prefix}self_attn.q_norm.weight": (d,),
        f"{prefix}self_attn.k_norm.weight": (d,),
        f"{prefix}mlp.gate_proj.weight": (i, h),
        f"{prefix}mlp.up_proj.weight": (i, h),
        f"{prefix}mlp.down_proj.weight": (h, i),
    }


def tensor_shapes(cfg: PenguinConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the checkpoint must hold, in state-dict order, with its shape."""
    text, vision = cfg.text, cfg.vision
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (text.vocab_size, text.hidden_size)}
    for n in range(text.num_hidden_layers):
        shapes.update(layer_shapes(f"model.layers.{n}.", text))
    shapes["model.norm.weight"] = (text.hidden_size,)
    p, c = vision.patch_size, vision.num_channels
    shapes[f"{VISION_PREFIX}embeddings.patch_embedding.weight"] = (vision.hidden_size, c, p, p)
    shapes[f"{VISION_PREFIX}embeddings.patch_embedding.bias"] = (vision.hidden_size,)
    for n in range(vision.num_hidden_layers):
        shapes.update(layer_shapes(f"{VISION_PREFIX}encoder.layers.{n}.", vision))
    shapes[f"{VISION_PREFIX}encoder.norm.weight"] = (vision.hidden_size,)
    shapes[f"{PROJECTOR_PREFIX}0.weight"] = (text.hidden_size, vision.hidden_size)
    shapes[f"{PROJECTOR_PREFIX}0.bias"] = (text.hidden_size,)
    shapes[f"{PROJECTOR_PREFIX}2.weight"] = (text.hidden_size, text.hidden_size)
    shapes[f"{PROJECTOR_PREFIX}2.bias"] = (text.hidden_size,)
    if not text.tie_word_embeddings:
        shapes["lm_head.weight"] = (text.vocab_size, text.hidden_size)
    return shapes


def _ignorable(name: str, tied: bool) -> bool:
    return name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight")


def load_tensors(
    folder: Path | str, cfg: PenguinConfig, rows: Callable[[str], int | None] = lambda name: None
) -> dict[str, torch.Tensor]:
    """Every tensor of ``tensor_shapes(cfg)`` as fp32 torch tensors (``common.checkpoint_tensors``: a
    missing, unexpected or misshapen tensor, or one that is not a float, is a ``CheckpointError`` naming its
    file and the tensor); ``rows(name)``: read only that many first rows (0: leave the tensor out), every
    tensor still checked."""
    tied = cfg.text.tie_word_embeddings
    return load_checked_tensors(
        Path(folder),
        lambda: tensor_shapes(cfg),
        model="Penguin-VL",
        layer_counts=(
            ("model.layers.", cfg.text.num_hidden_layers, "num_hidden_layers"),
            (
                f"{VISION_PREFIX}encoder.layers.",
                cfg.vision.num_hidden_layers,
                "vision_encoder_config.num_hidden_layers",
            ),
        ),
        ignorable=lambda name: _ignorable(name, tied),
        rows=rows,
    )


def parameter_count(cfg: PenguinConfig) -> int:
    return sum(math.prod(shape) for shape in tensor_shapes(cfg).values())
