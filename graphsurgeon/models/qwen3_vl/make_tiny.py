"""A deterministic tiny Qwen3-VL checkpoint folder, written by transformers' own classes: the real
architecture (``Qwen3VLForConditionalGeneration``) at small widths, in the config style transformers 5
saves (``text_config`` / ``vision_config``, ``rope_parameters`` with ``mrope_section``, ``dtype``).

``python -m graphsurgeon.models.qwen3_vl.make_tiny DIR [--transformers-4-style]`` writes
(``graphsurgeon/models/qwen3_vl/tiny`` is the default run; the flag then rewrites ``config.json`` as
``transformers_4_style`` says):

* ``config.json`` and ``generation_config.json`` by ``save_pretrained``; ``TEXT_CONFIG`` / ``VISION_CONFIG``
  below give the sizes. What the real 2B has and the tiny one keeps: GQA (4 query heads on 2 kv heads),
  q/k RMSNorm, a query width (128) that differs from the hidden width (64), interleaved MRoPE whose
  ``mrope_section`` [6, 5, 5] has the 2B's proportions ([24, 20, 20] of 64 frequencies: the time axis
  gets every third slot and the tail), a ViT of several blocks with fused qkv (2 heads, so the head axis
  never has the qkv axis's length 3), three DeepStack taps at irregular blocks [1, 3, 4] of 6 (neither
  the first nor the last block, as 5, 11, 17 of 24), more LLM layers (4) than taps so the last injected
  feature still reaches the logits, tied embeddings, patch 16, temporal patch 2, merge 2, and a learned
  position table of 4x4 (16 rows): every corpus image's grid is larger, so the bilinear resampling
  always runs;
* ``model.safetensors``, fp32, no ``lm_head.weight`` (tied);
* ``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja`` (``tiny_tokenizer``);
* ``preprocessor_config.json`` by ``Qwen2VLImageProcessorPil.save_pretrained`` (the image processor
  transformers 5.24 maps ``qwen3_vl`` to without torchvision): patch 16, merge 2, temporal 2, mean/std
  0.5, ``size`` {shortest_edge 65536, longest_edge 262144}: 64 to 256 merged tokens an image (the 2B's
  budget is 64 to 16384), so the corpus images give a few hundred patches and tests stay fast. No
  ``video_preprocessor_config.json``: every video processor of transformers 5.24 needs torchvision.

Weights: each tensor is drawn from ``numpy.random.default_rng`` seeded by the seed and the sha256 of its
name (a tensor does not depend on the others or on transformers' init order), then copied into the
model before ``save_pretrained``. Norm weights are 1 + 0.2 N(0,1) (the LLM's q/k norms 3 + 0.45 N(0,1))
and biases 0.2 N(0,1), so neither can be dropped unnoticed; matrices N(0,1)/sqrt(fan_in) with the gains
of ``_gain``, chosen so activations stay near unit size and greedy decoding depends on the image and the
prompt (checked by ``tests/test_qwen3_vl_checkpoint.py``). Same arguments, same bytes, on every run.
"""

from __future__ import annotations

import argparse
import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np

from .tiny_tokenizer import (
    ENDOFTEXT,
    IM_END,
    IMAGE_PAD,
    MAX_LENGTH,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    write_tokenizer,
)

SHIPPED = Path(__file__).resolve().parent / "tiny"
"""The embedded default: ``make_tiny(SHIPPED)``."""

TEXT_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": MAX_LENGTH,
    "attention_bias": False,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [6, 5, 5],
        "mrope_interleaved": True,
    },
    "tie_word_embeddings": True,
}
VISION_CONFIG: dict[str, Any] = {
    "depth": 6,
    "hidden_size": 32,
    "intermediate_size": 96,
    "num_heads": 2,
    "hidden_act": "gelu_pytorch_tanh",
    "in_channels": 3,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": 64,
    "num_position_embeddings": 16,
    "deepstack_visual_indexes": [1, 3, 4],
}
MIN_PIXELS, MAX_PIXELS = 64 * 32 * 32, 256 * 32 * 32
"""The image processor's ``size`` (shortest_edge, longest_edge): 64 to 256 tokens of 32x32 pixels."""


def hf_config(ids: dict[str, int]) -> Any:
    """The ``transformers.Qwen3VLConfig``; ``ids`` maps the special tokens to the tokenizer's ids."""
    import transformers

    return transformers.Qwen3VLConfig(
        text_config={**TEXT_CONFIG, "vocab_size": max(ids.values()) + 1},
        vision_config=dict(VISION_CONFIG),
        image_token_id=ids[IMAGE_PAD],
        video_token_id=ids[VIDEO_PAD],
        vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=True,
    )


def _gain(name: str) -> tuple[float, float]:
    """(scale, centre) of a tensor's draws; matrices are further divided by sqrt(fan_in). The output
    projections at gain 2 and the token embedding at 0.5 let the layers, not the current token's own
    embedding, decide the next token; the q/k norms centred on 3 make the LLM's attention selective.
    Measured over 32 greedy tokens on the three corpus images x two prompts: with centre 1 (or gain 1)
    every output repeats one token; with these gains each has 21-27 distinct tokens, no token repeats
    more than 7 times in a row, and the smallest top-1 - top-2 logit gap of the 192 steps is 0.027 (the
    logits' spread is about 4), far above fp32 rounding, so a converted model can match HF's tokens."""
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return 0.45, 3.0
    if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", "layernorm.weight")):
        return 0.2, 1.0
    if name.endswith(".bias"):
        return 0.2, 0.0
    if name.endswith(("embed_tokens.weight", "pos_embed.weight")):
        return 0.5, 0.0
    if name.endswith(("o_proj.weight", "down_proj.weight", "attn.proj.weight", "linear_fc2.weight")):
        return 2.0, 0.0
    return 1.0, 0.0


def draw(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """One float32 tensor: ``default_rng([seed, first 8 bytes of sha256(name)])``, scaled by ``_gain``."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    rng = np.random.default_rng([seed, digest])
    scale, centre = _gain(name)
    if len(shape) >= 2 and not name.endswith(("embed_tokens.weight", "pos_embed.weight")):
        scale /= math.sqrt(math.prod(shape[1:]))
    return (centre + scale * rng.standard_normal(shape)).astype(np.float32)


def image_processor(min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS) -> Any:
    """The image processor the checkpoint saves: ``VISION_CONFIG``'s patching, mean/std 0.5, and the pixel
    budget ``size`` {shortest_edge: ``min_pixels``, longest_edge: ``max_pixels``}."""
    from transformers import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(
        patch_size=VISION_CONFIG["patch_size"],
        temporal_patch_size=VISION_CONFIG["temporal_patch_size"],
        merge_size=VISION_CONFIG["spatial_merge_size"],
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
    )


def make_tiny(folder: Path | str, *, seed: int = 0) -> Path:
    """Write the tiny checkpoint into ``folder`` (created; files of the same names replaced)."""
    import torch
    import transformers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(folder)
    image_processor().save_pretrained(str(folder))
    config = hf_config(ids)
    model = transformers.Qwen3VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):  # the tied lm_head is embed_tokens itself
            param.copy_(torch.from_numpy(draw(name, tuple(param.shape), seed)))
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=ids[ENDOFTEXT], eos_token_id=[ids[IM_END], ids[ENDOFTEXT]], pad_token_id=ids[ENDOFTEXT]
    )
    model.save_pretrained(str(folder))
    (folder / "model.safetensors").chmod(0o644)  # safetensors creates its files 0600
    return folder


def transformers_4_style(raw: dict[str, Any], eos_token_id: int, bos_token_id: int) -> dict[str, Any]:
    """``config.json`` (as ``make_tiny`` writes it) in the style transformers 4.57 saved the released
    Qwen3-VL-2B with: ``text_config.rope_scaling = {rope_type: default, mrope_section, mrope_interleaved}``
    with ``rope_theta`` beside it instead of ``rope_parameters``; ``bos_token_id`` / ``eos_token_id`` in
    ``text_config``; no vision RoPE keys; the vision section's ``model_type`` ``qwen3_vl`` (the old
    checkpoints' value that transformers 5.24's ``Qwen3VLConfig.__post_init__`` corrects); ``torch_dtype``
    for ``dtype``. The numbers are unchanged."""
    out = {k: v for k, v in raw.items() if k != "dtype"}
    text = {k: v for k, v in raw["text_config"].items() if k != "rope_parameters"}
    rope = raw["text_config"]["rope_parameters"]
    text["rope_scaling"] = {k: v for k, v in sorted(rope.items()) if k != "rope_theta"}
    text["rope_theta"] = rope["rope_theta"]
    text.update(bos_token_id=bos_token_id, eos_token_id=eos_token_id)
    vision = {k: v for k, v in raw["vision_config"].items() if k != "rope_parameters"}
    vision["model_type"] = "qwen3_vl"
    out.update(
        text_config=dict(sorted(text.items())),
        vision_config=dict(sorted(vision.items())),
        torch_dtype=raw.get("dtype", "float32"),
        transformers_version="4.57.0",
    )
    return dict(sorted(out.items()))


def write_transformers_4_style(folder: Path | str) -> Path:
    """Rewrite ``folder/config.json`` (a ``make_tiny`` folder) with ``transformers_4_style``, the ids of
    ``<|im_end|>`` and ``<|endoftext|>`` from the folder's tokenizer."""
    import json

    folder = Path(folder)
    path = folder / "config.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    tokens = {
        t["content"]: t["id"] for t in json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    }
    new = transformers_4_style(raw, eos_token_id=tokens[IM_END], bos_token_id=tokens[ENDOFTEXT])
    path.write_text(json.dumps(new, indent=2) + "\n", encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--transformers-4-style",
        action="store_true",
        help="write config.json as transformers 4.57 saved Qwen3-VL-2B (rope_scaling, rope_theta beside it)",
    )
    args = parser.parse_args(argv)
    make_tiny(args.folder, seed=args.seed)
    if args.transformers_4_style:
        write_transformers_4_style(args.folder)


if __name__ == "__main__":
    main()
