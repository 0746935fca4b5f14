"""A deterministic tiny Penguin-VL checkpoint folder with the real architecture, config keys, file names and
tensor names, and a byte-level BPE tokenizer trained here.

``python -m graphsurgeon.models.penguin_vl.make_tiny DIR [--untied] [--dtype bf16] [--shards 3]`` writes:

* ``config.json``: the official keys (``model_type penguinvl_qwen3``, ``vision_encoder_config`` inline,
  ``image_token_index`` and ``eos_token_id`` from the tokenizer, ``tie_word_embeddings``, …) with small
  sizes: vision hidden 64, 2 layers, 4 heads / 2 kv heads, head_dim 32 (so the q width 128 differs from
  the hidden width, as 2048 vs 1024 in the real encoder), LLM hidden 64, 2 layers, 4 / 2 heads, head_dim 32;
* ``penguinvl_vision_encoder/``, the folder ``vision_encoder`` / ``mm_vision_encoder`` name, as the official
  layout has it: the encoder's own ``config.json`` and ``preprocessor_config.json``. The official
  ``build_vision_encoder`` accepts only a name containing ``penguin`` and reads both files from it (it
  opens the name as given, so run the official code from inside this folder);
* ``preprocessor_config.json`` (also in the encoder folder): the official processor settings, except
  ``max_tokens`` (256 instead of 16384) so the corpus images give a few hundred patches and tests stay
  fast;
* ``tokenizer.json`` (Qwen2's split regex + ByteLevel, BPE trained on text generated in ``corpus_lines``),
  with ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ``<think>``, ``</think>`` and ``<image>`` added
  after the BPE vocabulary in that order (as in the real vocabulary), ``tokenizer_config.json`` and
  ``special_tokens_map.json`` as transformers writes them;
* ``vocab.json`` + ``merges.txt``, the same BPE model in the files a Qwen release also ships: the official
  loader opens the tokenizer with ``use_fast=False``, and transformers 4.x's slow ``Qwen2Tokenizer`` reads
  only these two (plus ``tokenizer_config.json`` for the added tokens), never ``tokenizer.json``;
* ``model.safetensors`` or ``model-0000k-of-0000n.safetensors`` + ``model.safetensors.index.json``, fp32
  or bf16 (rounded to nearest even by torch).

Weights are normal draws from a generator seeded by the seed and the tensor name (so a tensor does not
depend on the others), scaled by ``1/sqrt(fan_in)`` with gains chosen so activations stay near unit size
and the greedy output depends on the prompt and the image instead of repeating one token. The same
arguments give the same bytes on every run (``tests/test_penguin_tiny.py`` checks it against the shipped
``graphsurgeon/models/penguin_vl/tiny``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.models.common.tiny_checkpoint import seeded_tensor, write_json, write_weights

from .checkpoint import tensor_shapes
from .config import IMAGE_TOKEN, config_from_dict
from .tiny_tokenizer import (
    BPE_VOCAB,
    END_THINK,
    ENDOFTEXT,
    IM_END,
    IM_START,
    THINK,
    build_tokenizer,
    special_tokens_map,
    tokenizer_config,
    write_slow_tokenizer_files,
)

SHIPPED = Path(__file__).resolve().parent / "tiny"
"""The embedded default: ``make_tiny(SHIPPED)`` with the default arguments."""
VISION_FOLDER = "penguinvl_vision_encoder"
"""The encoder's sub-folder; the official ``build_vision_encoder`` requires ``penguin`` in its name."""


def _stack(
    hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, head_dim: int
) -> dict[str, Any]:
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": intermediate,
        "max_position_embeddings": 40960,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "use_cache": True,
        "use_sliding_window": False,
    }


def vision_config() -> dict[str, Any]:
    cfg = _stack(64, 128, 2, 4, 2, 32)
    cfg.update(model_type="penguinvl_vision_encoder", num_channels=3, patch_size=14, layer_norm_eps=1e-06)
    cfg["architectures"] = ["PenguinVLVisionEncoderModel"]
    return dict(sorted(cfg.items()))


def model_config(ids: dict[str, int], tied: bool, dtype: str) -> dict[str, Any]:
    """``config.json`` with the official keys; the ids are the tokenizer's."""
    cfg = _stack(64, 160, 2, 4, 2, 32)
    cfg.update(
        architectures=["PenguinVLQwen3ForCausalLM"],
        model_type="penguinvl_qwen3",
        bos_token_id=ids[ENDOFTEXT],
        eos_token_id=ids[IM_END],
        pad_token_id=ids[ENDOFTEXT],
        image_token_index=ids[IMAGE_TOKEN],
        vocab_size=len(ids),
        tie_word_embeddings=tied,
        torch_dtype={"fp32": "float32", "bf16": "bfloat16"}[dtype],
        vision_encoder=VISION_FOLDER,
        mm_vision_encoder=VISION_FOLDER,
        vision_encoder_config=vision_config(),
        vision_projector_type="mlp2x_gelu",
        vision_hidden_size=64,
        mm_vision_select_layer=-1,
        mm_vision_select_feature="patch",
        use_reconstruct=False,
        max_window_layers=2,
        transformers_version="4.51.3",
    )
    return dict(sorted(cfg.items()))


def preprocessor_config() -> dict[str, Any]:
    return {
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_processor_type": "PenguinVLImageProcessor",
        "image_std": [0.5, 0.5, 0.5],
        "max_tokens": 256,
        "min_tokens": 16,
        "patch_size": 14,
        "processor_class": "PenguinVLQwen3Processor",
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
    }


def _gain(name: str, *, sharp_attention: bool = True) -> tuple[float, float]:
    """(scale of the draws, centre) per tensor kind; Linear and Conv weights are further divided by
    sqrt(fan_in). q/k norms centred on 4 make attention sharp (with unit norms it averages every position
    and greedy decoding repeats one token); output projections at gain 2 and embeddings at 0.5 let the
    layers, not the current token's own embedding, decide the next token. Measured on the corpus images and
    three prompts: every (image, prompt) pair gives a different 32-token output, each with >= 15 distinct
    tokens.

    ``sharp_attention=False`` draws the q/k norms like every other norm (centre 1): what a deep stack needs.
    With centre 4 the attention logits have a standard deviation of about 16 whatever ``head_dim``, so the
    best keys of a row are near-ties that any rounding difference reorders; each layer multiplies an input
    change by 3-12 (``tests/test_penguin_conditioning.py``), harmless over the tiny model's 2 layers but
    ~1e4 over the real 28: at Penguin-VL-2B's dims an fp32 reference disagreed with fp64 at cosine 0.9985
    on a 1900-token prompt, and a 2e-6 change of its input embeddings moved the logits to cosine 0.576, so
    no fp32 implementation could match it."""
    if name.endswith(("q_norm.weight", "k_norm.weight")) and sharp_attention:
        return 0.8, 4.0
    if name.endswith("norm.weight"):
        return 0.2, 1.0
    if name.endswith(".bias"):
        return 0.2, 0.0
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return 0.5, 0.0
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return 2.0, 0.0
    return 1.0, 0.0


def real_dims_tensor(
    name: str, shape: tuple[int, ...], index: int, seed: int = 0, *, sharp_attention: bool = False
) -> np.ndarray:
    """One float32 tensor of the real-dimension benchmark checkpoint (``benchmarks/bench_penguin_vl.py``):
    ``index`` is its position in ``tensor_shapes``, the generator is seeded by ``(seed, index)``, and the
    gains are ``_gain``'s, by default without sharp attention (28 layers deep; see ``_gain``)."""
    rng = np.random.default_rng([seed, index])
    scale, centre = _gain(name, sharp_attention=sharp_attention)
    if len(shape) >= 2 and not name.endswith(("embed_tokens.weight", "lm_head.weight")):
        scale /= math.sqrt(math.prod(shape[1:]))
    return (centre + scale * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def random_tensors(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """float32 draws per tensor from ``numpy.random.default_rng`` seeded by (seed, sha256 of the name)."""
    unscaled = ("embed_tokens.weight", "lm_head.weight")
    return {
        name: seeded_tensor(name, shape, seed, *_gain(name), fan_in_scaled=not name.endswith(unscaled))
        for name, shape in shapes.items()
    }


def make_tiny(
    folder: Path | str,
    *,
    tied: bool = True,
    dtype: str = "fp32",
    shards: int = 1,
    seed: int = 0,
    bpe_vocab: int = BPE_VOCAB,
) -> Path:
    """Write the tiny checkpoint into ``folder`` (created; existing files of the same names replaced).
    ``bpe_vocab`` sizes the trained vocabulary, and so moves every added token's id."""
    if dtype not in ("fp32", "bf16") or shards < 1:
        raise ValueError(f"dtype must be fp32 or bf16 and shards >= 1, not {dtype!r}, {shards}")
    tok = build_tokenizer(bpe_vocab)
    raw = model_config(dict(tok.get_vocab(with_added_tokens=True)), tied, dtype)
    shapes = tensor_shapes(config_from_dict(raw))
    return write_folder(folder, tok, raw, preprocessor_config(), random_tensors(shapes, seed), dtype, shards)


def write_folder(
    folder: Path | str,
    tok: Any,
    raw: dict[str, Any],
    preprocessor: dict[str, Any],
    tensors: dict[str, np.ndarray],
    dtype: str = "fp32",
    shards: int = 1,
) -> Path:
    """A checkpoint folder in the official layout: the tokenizer ``tok`` (``build_tokenizer``'s kind) and its
    side files, ``config.json`` ``raw`` (``model_config``'s keys), the encoder's sub-folder with
    ``raw["vision_encoder_config"]``, ``preprocessor`` in both places, and the float32 ``tensors`` stored
    ``dtype``. Also what ``train.py`` writes its trained checkpoint with."""
    folder = Path(folder)
    (folder / VISION_FOLDER).mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    write_slow_tokenizer_files(folder, folder / "tokenizer.json")
    ids = dict(tok.get_vocab(with_added_tokens=True))
    added = {t: ids[t] for t in (ENDOFTEXT, IM_START, IM_END, THINK, END_THINK, IMAGE_TOKEN)}
    write_json(folder / "tokenizer_config.json", tokenizer_config(added))
    write_json(folder / "special_tokens_map.json", special_tokens_map())
    write_json(folder / "config.json", raw)
    write_json(folder / VISION_FOLDER / "config.json", raw["vision_encoder_config"])
    for where in (folder, folder / VISION_FOLDER):
        write_json(where / "preprocessor_config.json", preprocessor)
    write_weights(folder, tensors, dtype, shards)
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--untied", action="store_true", help="write a separate lm_head.weight")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    make_tiny(args.folder, tied=not args.untied, dtype=args.dtype, shards=args.shards, seed=args.seed)


if __name__ == "__main__":
    main()
