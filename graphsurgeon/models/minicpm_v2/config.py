"""A MiniCPM-V-2 checkpoint folder's settings, read from its ``config.json`` with the real model's keys
(docs/minicpm-v-2.md §1) and its ``generation_config.json`` (the EOS ids, as for any HF checkpoint).

* **LLM** (MiniCPM-2.4B): the Llama-style numbers plus the three muP constants ``scale_emb`` (text
  embeddings x it), ``scale_depth`` (each residual branch x ``scale_depth / sqrt(num_hidden_layers)``) and
  ``dim_model_base`` (the final-normed hidden ÷ ``hidden_size / dim_model_base`` before ``lm_head``).
* **Vision**: ``config.json`` holds no vision numbers, only ``vision_encoder``, the timm model name the
  official code passes to ``timm.create_model``, and ``drop_vision_last_layer``. The numbers are the timm
  architecture's, looked up in ``VISION_ENCODERS``; another name is refused, naming it.
* **Resampler**: ``query_num`` learned queries (a square: the official code builds ``int(sqrt(query_num))^2``
  of them but writes ``query_num`` placeholders), width = the LLM's ``hidden_size``, ``hidden_size // 128``
  heads (the official ``init_resampler``), keys and values from the vision width.
* **Slicing**: ``slice_mode``, ``max_slice_nums``, ``scale_resolution``, ``patch_size``.

What the reference does not implement is refused, naming the file and key, never ignored: an activation
other than SiLU, attention bias, RoPE scaling, ``pretraining_tp`` above 1 (its ``lm_head`` branch skips the
muP division), tied embeddings (MiniCPM-V-2's head is its own tensor), ``slice_mode`` false (images fed
unresized). ``image_size`` and ``mm_use_im_start_end`` are read by no inference code (§1) and are not read
here. Every error is a ``CheckpointError`` (one line, exit 2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphsurgeon.formats.safetensors import CheckpointError
from graphsurgeon.models.common.hf_config import (
    boolean,
    eos_token_ids,
    integer,
    positive,
    read_config_folder,
    rope_theta,
)

from .slicing import SliceConfig
from .special_tokens import check_tokenizer_json, special_ids

CONFIG = "config.json"
MODEL_TYPE = "minicpmv"
RESAMPLER_HEAD_DIM = 128
"""The official ``init_resampler`` gives the resampler ``hidden_size // 128`` heads."""


@dataclass(frozen=True)
class VisionArch:
    """A timm SigLIP ``VisionTransformer`` as ``timm.create_model(name, num_classes=0, dynamic_img_size=True,
    dynamic_img_pad=True)`` builds it: no class token, fused qkv with bias, exact-erf GELU, pre-norm blocks,
    LayerNorm ``eps`` everywhere, the final ``norm`` kept; ``depth`` blocks before MiniCPM drops the last."""

    width: int
    depth: int
    heads: int
    mlp_hidden: int  # int(width * mlp_ratio)
    patch_size: int
    image_size: int  # the pretrained cfg's input size: the position table is (image_size // patch)^2
    eps: float = 1e-6

    @property
    def pos_grid(self) -> int:
        return self.image_size // self.patch_size


VISION_ENCODERS: dict[str, VisionArch] = {
    # timm 0.9.10 vision_transformer.py: vit_so400m_patch14_siglip_384 (patch 14, 1152 wide, 27 deep, 16
    # heads, mlp_ratio 3.7362 -> 4304), its only pretrained tag .webli at 384x384 (a 27x27 table,
    # §4.1). The bare name resolves to the same (default) tag.
    "vit_so400m_patch14_siglip_384.webli": VisionArch(1152, 27, 16, 4304, 14, 384),
    "vit_so400m_patch14_siglip_384": VisionArch(1152, 27, 16, 4304, 14, 384),
    # The embedded tiny checkpoint's encoder (make_tiny.py): the same timm class and kwargs at tiny sizes,
    # registered under this name with timm by tests/goldens/minicpm_v2/make_model_goldens.py to run the
    # official code on it. 32 wide, 3 blocks (2 kept), 2 heads, mlp_ratio 3.7362 -> 119, a 4x4 table.
    "gsurg_tiny_patch14_siglip_56": VisionArch(32, 3, 2, 119, 14, 56),
    # The VQA fixture's encoder (train.py): 96 wide, 4 blocks (3 kept), 3 heads of 32, MLP 256, an 8x8
    # table. Not a timm model: no official run checks it, the reference and the conversion read it.
    "gsurg_vqa_patch14_siglip_112": VisionArch(96, 4, 3, 256, 14, 112),
}


@dataclass(frozen=True)
class TextConfig:
    """The MiniCPM LLM (``llm.*``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    scale_emb: float
    scale_depth: float
    dim_model_base: float

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def residual_scale(self) -> float:
        """Each residual branch's factor, ``scale_depth / sqrt(num_hidden_layers)`` in double."""
        return self.scale_depth / math.sqrt(self.num_hidden_layers)

    @property
    def logit_divisor(self) -> float:
        """The final-normed hidden is divided by this before ``lm_head`` (2304/256 = 9 for the real model)."""
        return self.hidden_size / self.dim_model_base


@dataclass(frozen=True)
class VisionConfig:
    """The ViT as MiniCPM-V-2 runs it: ``layers`` is the timm depth, less one if the last is dropped."""

    name: str
    arch: VisionArch
    drop_last_layer: bool

    @property
    def layers(self) -> int:
        return self.arch.depth - 1 if self.drop_last_layer else self.arch.depth


@dataclass(frozen=True)
class ResamplerConfig:
    query_num: int
    embed_dim: int  # the LLM's hidden_size
    kv_dim: int  # the ViT's width
    eps: float = 1e-6

    @property
    def grid(self) -> int:
        return math.isqrt(self.query_num)

    @property
    def heads(self) -> int:
        return self.embed_dim // RESAMPLER_HEAD_DIM


@dataclass(frozen=True)
class MiniCPMV2Config:
    text: TextConfig
    vision: VisionConfig
    resampler: ResamplerConfig
    slicing: SliceConfig
    bos_token_id: int
    eos_token_ids: tuple[int, ...] = ()  # from generation_config.json or config.json; empty: none named


def _refuse(raw: Mapping[str, Any], key: str, where: str, allowed: Any, why: str) -> None:
    """``raw[key]`` (absent: ``allowed``) must be ``allowed``."""
    value = raw.get(key, allowed)
    if value != allowed or type(value) is not type(allowed):
        raise CheckpointError(f"{where}: {key} {value!r} is not supported ({why})")


def text_from_dict(raw: Mapping[str, Any], where: str) -> TextConfig:
    _refuse(raw, "hidden_act", where, "silu", "the MLP is SiLU-gated")
    _refuse(raw, "attention_bias", where, False, "q/k/v/o have no bias")
    _refuse(raw, "pretraining_tp", where, 1, "its lm_head branch skips the muP logit division")
    _refuse(raw, "tie_word_embeddings", where, False, "MiniCPM-V-2's lm_head is its own tensor")
    text = TextConfig(
        vocab_size=integer(raw, "vocab_size", where),
        hidden_size=integer(raw, "hidden_size", where),
        intermediate_size=integer(raw, "intermediate_size", where),
        num_hidden_layers=integer(raw, "num_hidden_layers", where),
        num_attention_heads=integer(raw, "num_attention_heads", where),
        num_key_value_heads=integer(raw, "num_key_value_heads", where),
        rms_norm_eps=positive(raw, "rms_norm_eps", where),
        rope_theta=rope_theta(raw, where),
        max_position_embeddings=integer(raw, "max_position_embeddings", where),
        scale_emb=positive(raw, "scale_emb", where),
        scale_depth=positive(raw, "scale_depth", where),
        dim_model_base=positive(raw, "dim_model_base", where),
    )
    if text.hidden_size % text.num_attention_heads or text.head_dim % 2:
        raise CheckpointError(
            f"{where}: hidden_size {text.hidden_size} is not num_attention_heads "
            f"{text.num_attention_heads} heads of an even width"
        )
    if text.num_attention_heads % text.num_key_value_heads:
        raise CheckpointError(
            f"{where}: num_attention_heads {text.num_attention_heads} is not a multiple of "
            f"num_key_value_heads {text.num_key_value_heads}"
        )
    if text.hidden_size % RESAMPLER_HEAD_DIM:
        raise CheckpointError(
            f"{where}: hidden_size {text.hidden_size} is not a multiple of {RESAMPLER_HEAD_DIM} (the "
            f"resampler has hidden_size // {RESAMPLER_HEAD_DIM} heads)"
        )
    return text


def vision_from_dict(raw: Mapping[str, Any], where: str) -> VisionConfig:
    name = raw.get("vision_encoder")
    if not isinstance(name, str) or name not in VISION_ENCODERS:
        known = ", ".join(sorted(VISION_ENCODERS))
        raise CheckpointError(f"{where}: vision_encoder {name!r} is not a known timm encoder ({known})")
    drop = boolean(raw, "drop_vision_last_layer", where, True)
    vision = VisionConfig(name, VISION_ENCODERS[name], drop)
    if vision.layers < 1:
        raise CheckpointError(f"{where}: drop_vision_last_layer leaves {name} with no block")
    return vision


def slicing_from_dict(raw: Mapping[str, Any], where: str, vision: VisionConfig) -> SliceConfig:
    if not boolean(raw, "slice_mode", where, True):
        raise CheckpointError(
            f"{where}: slice_mode false is not supported (the official chat then feeds the image unresized)"
        )
    cfg = SliceConfig(
        scale_resolution=integer(raw, "scale_resolution", where),
        max_slice_nums=integer(raw, "max_slice_nums", where),
        patch_size=integer(raw, "patch_size", where),
    )
    if cfg.patch_size != vision.arch.patch_size:
        raise CheckpointError(
            f"{where}: patch_size {cfg.patch_size} differs from vision_encoder {vision.name}'s "
            f"{vision.arch.patch_size}"
        )
    return cfg


def config_from_dict(raw: Mapping[str, Any], where: str = CONFIG) -> MiniCPMV2Config:
    """Validate a parsed ``config.json``; every error names ``where`` and the key."""
    if raw.get("model_type") != MODEL_TYPE:
        raise CheckpointError(f"{where}: model_type is {raw.get('model_type')!r}, not {MODEL_TYPE!r}")
    text = text_from_dict(raw, where)
    vision = vision_from_dict(raw, where)
    query_num = integer(raw, "query_num", where)
    if math.isqrt(query_num) ** 2 != query_num:
        raise CheckpointError(
            f"{where}: query_num {query_num} is not a square (the official resampler makes "
            f"{math.isqrt(query_num) ** 2} queries but the prompt holds {query_num} placeholders)"
        )
    resampler = ResamplerConfig(query_num, text.hidden_size, vision.arch.width)
    bos = integer(raw, "bos_token_id", where, minimum=0)
    if bos >= text.vocab_size:
        raise CheckpointError(f"{where}: bos_token_id {bos} is outside vocab_size {text.vocab_size}")
    return MiniCPMV2Config(text, vision, resampler, slicing_from_dict(raw, where, vision), bos)


def load_config(folder: Path | str) -> MiniCPMV2Config:
    """``folder/config.json`` validated, with the EOS ids of ``generation_config.json`` or ``config.json``."""
    folder = Path(folder)
    path, raw = read_config_folder(folder, "a MiniCPM-V-2 checkpoint")
    cfg = config_from_dict(raw, str(path))
    eos = eos_token_ids(folder, raw, cfg.text.vocab_size)
    return MiniCPMV2Config(cfg.text, cfg.vision, cfg.resampler, cfg.slicing, cfg.bos_token_id, eos)


def facts(folder: str) -> dict[str, Any]:
    """``source.config`` of a future ``rules/minicpm_v2.yaml``: the LLM numbers (named as in ``config.json``;
    ``eos_token_id`` a list, maybe empty), the muP constants and the factors they give, the resampler's and
    the slicing settings, and the vision encoder's numbers under ``vision_encoder`` — all from
    ``load_config``, never from raw JSON."""
    cfg = load_config(folder)
    ids = special_ids(folder)
    check_tokenizer_json(folder, ids)
    text, vision, res, sl = cfg.text, cfg.vision, cfg.resampler, cfg.slicing
    return {
        "num_hidden_layers": text.num_hidden_layers,
        "hidden_size": text.hidden_size,
        "intermediate_size": text.intermediate_size,
        "num_attention_heads": text.num_attention_heads,
        "num_key_value_heads": text.num_key_value_heads,
        "head_dim": text.head_dim,
        "rms_norm_eps": text.rms_norm_eps,
        "rope_theta": text.rope_theta,
        "vocab_size": text.vocab_size,
        "max_position_embeddings": text.max_position_embeddings,
        "tie_word_embeddings": False,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": list(cfg.eos_token_ids),
        "scale_emb": text.scale_emb,
        "scale_depth": text.scale_depth,
        "dim_model_base": text.dim_model_base,
        "residual_scale": text.residual_scale,
        "logit_divisor": text.logit_divisor,
        "token_ids": ids,
        "query_num": res.query_num,
        "resampler": {
            "num_heads": res.heads,
            "head_dim": RESAMPLER_HEAD_DIM,
            "grid": res.grid,
            "eps": res.eps,
        },
        "slice_mode": True,
        "max_slice_nums": sl.max_slice_nums,
        "scale_resolution": sl.scale_resolution,
        "patch_size": sl.patch_size,
        "vision_encoder": {
            "name": vision.name,
            "hidden_size": vision.arch.width,
            "num_hidden_layers": vision.layers,
            "num_attention_heads": vision.arch.heads,
            "head_dim": vision.arch.width // vision.arch.heads,
            "intermediate_size": vision.arch.mlp_hidden,
            "pos_grid": vision.arch.pos_grid,
            "layer_norm_eps": vision.arch.eps,
        },
    }
