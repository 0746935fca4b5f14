"""What a Qwen3-VL rule file reads as ``config.*`` (``source.config``): ``facts(DIR)``, from ``load_config``
and ``load_image_processor``, never from raw JSON."""

from __future__ import annotations

from typing import Any

from graphsurgeon.models.common.qwen3_config import llm_facts

from .config import TOKEN_KEYS, VisionConfig, load_config
from .processor_config import load_image_processor


def vision_facts(vision: VisionConfig) -> dict[str, Any]:
    """``config.vision_config.*``: the fields of ``VisionConfig`` and its derived sizes."""
    return {
        "depth": vision.depth,
        "hidden_size": vision.hidden_size,
        "num_heads": vision.num_heads,
        "head_dim": vision.head_dim,
        "intermediate_size": vision.intermediate_size,
        "in_channels": vision.in_channels,
        "patch_size": vision.patch_size,
        "temporal_patch_size": vision.temporal_patch_size,
        "spatial_merge_size": vision.spatial_merge_size,
        "patch_dim": vision.patch_dim,
        "merged_width": vision.merged_width,
        "out_hidden_size": vision.out_hidden_size,
        "num_position_embeddings": vision.num_position_embeddings,
        "grid_side": vision.grid_side,
        "deepstack_visual_indexes": list(vision.deepstack_visual_indexes),
        "last_deepstack_block": max(vision.deepstack_visual_indexes, default=-1),
        "hidden_act": vision.hidden_act,
        "rope_theta": vision.rope_theta,
    }


def facts(folder: str) -> dict[str, Any]:
    """``source.config`` of a Qwen3-VL rule file: the LLM's facts at the top as ``rules/llm-kv-cache.yaml``
    reads them (``graphsurgeon.models.common.qwen3_config.llm_facts``: ``num_hidden_layers``, ``hidden_size``,
    ``head_dim``, ``rope_theta``, ``vocab_size``, ``max_position_embeddings``, ``tie_word_embeddings``,
    ``eos_token_id`` as a list), plus ``num_attention_heads``, ``num_key_value_heads``, ``mrope_section`` (a
    list), the four token ids, ``vision_config`` (``vision_facts``) and ``image_processor``
    (``ImageProcessorConfig``'s fields, lists for the triples), all from ``load_config`` and
    ``load_image_processor``, never from raw JSON."""
    cfg = load_config(folder)
    pre = load_image_processor(folder, cfg.vision)
    return {
        **llm_facts(cfg.text, cfg.eos_ids),
        "num_attention_heads": cfg.text.num_attention_heads,
        "num_key_value_heads": cfg.text.num_key_value_heads,
        "mrope_section": list(cfg.mrope_section),
        **{key: getattr(cfg, key) for key in TOKEN_KEYS},
        "vision_config": vision_facts(cfg.vision),
        "image_processor": {
            **{k: getattr(pre, k) for k in pre.__dataclass_fields__},
            "image_mean": list(pre.image_mean),
            "image_std": list(pre.image_std),
        },
    }
