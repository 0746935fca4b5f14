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
from pathlib import Path
from typing import TYPE_CHECKING

from graphsurgeon.formats.safetensors import Checkpoint, CheckpointError
from graphsurgeon.models.common.layer_count import check_layer_count
from graphsurgeon.models.common.qwen3_config import StackConfig

from .config import PenguinConfig

if TYPE_CHECKING:
    import torch

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
VISION_PREFIX = "model.vision_encoder.vision_encoder."
PROJECTOR_PREFIX = "model.vision_projector.readout."
_FLOAT_DTYPES = ("F32", "F16", "BF16")


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


def checkpoint_file(folder: Path) -> Path:
    """``model.safetensors`` if present, else the sharded index."""
    for name in (SINGLE_FILE, INDEX_FILE):
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(f"{folder}: no {SINGLE_FILE} or {INDEX_FILE} (the checkpoint's weights)")


def _listing(names: set[str]) -> str:
    listed = sorted(names)
    more = f" and {len(listed) - 3} more" if len(listed) > 3 else ""
    return ", ".join(listed[:3]) + more


def _ignorable(name: str, tied: bool) -> bool:
    return name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight")


def load_tensors(folder: Path | str, cfg: PenguinConfig) -> dict[str, torch.Tensor]:
    """Every tensor of ``tensor_shapes(cfg)`` as fp32 torch tensors. A missing, unexpected or misshapen
    tensor, or one that is not a float, is a ``CheckpointError`` naming its file and the tensor."""
    import torch
    from safetensors import safe_open

    folder = Path(folder)
    path = checkpoint_file(folder)
    ckpt = Checkpoint(str(path))  # reads the headers only (and the index of a sharded one)
    try:
        stored = set(ckpt.tensors)
        config = str(folder / "config.json")
        layers = cfg.text.num_hidden_layers
        check_layer_count(stored, "model.layers.", layers, "num_hidden_layers", config, str(path))
        layers = cfg.vision.num_hidden_layers
        key = "vision_encoder_config.num_hidden_layers"
        check_layer_count(stored, f"{VISION_PREFIX}encoder.layers.", layers, key, config, str(path))
        shapes = tensor_shapes(cfg)
        if missing := set(shapes) - stored:
            raise CheckpointError(f"{path}: missing tensor(s) {_listing(missing)}")
        tied = cfg.text.tie_word_embeddings
        if unexpected := {n for n in stored - set(shapes) if not _ignorable(n, tied)}:
            raise CheckpointError(f"{path}: unexpected tensor(s) {_listing(unexpected)} (not Penguin-VL?)")
        by_file: dict[str, list[str]] = {}
        for name, shape in shapes.items():
            info = ckpt.tensors[name]
            if info.shape != shape:
                raise CheckpointError(
                    f"{info.file}: tensor {name!r} has shape {list(info.shape)}, but "
                    f"{folder / 'config.json'} gives {list(shape)}"
                )
            if info.dtype not in _FLOAT_DTYPES:
                raise CheckpointError(f"{info.file}: tensor {name!r} is {info.dtype}, not bf16, fp16 or fp32")
            by_file.setdefault(info.file, []).append(name)
    finally:
        ckpt.close()
    out: dict[str, torch.Tensor] = {}
    for file, names in by_file.items():
        with safe_open(file, framework="pt") as fh:
            for name in names:
                out[name] = fh.get_tensor(name).to(torch.float32)
    return out


def parameter_count(cfg: PenguinConfig) -> int:
    return sum(math.prod(shape) for shape in tensor_shapes(cfg).values())
