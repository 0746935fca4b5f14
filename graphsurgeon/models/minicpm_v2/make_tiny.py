"""A deterministic tiny MiniCPM-V-2 checkpoint folder in the official layout: the real ``config.json`` keys
(docs/minicpm-v-2.md §1), the real tensor names (§2), the real muP constants and slicing settings, random
weights, and a SentencePiece tokenizer (``tiny_tokenizer.py``).

``python -m graphsurgeon.models.minicpm_v2.make_tiny DIR [--dtype fp32] [--shards 2]`` writes:

* ``config.json``: every key of the real one, in its order, with tiny sizes — LLM hidden 128, 2 layers, 4
  heads of 32 (MHA), MLP 320, the tokenizer's vocabulary — and the real values for the rest: ``scale_emb``
  12, ``scale_depth`` 1.4, ``dim_model_base`` 256, ``rms_norm_eps`` 1e-5, ``rope_theta`` 10000,
  ``slice_mode`` true, ``max_slice_nums`` 9, ``scale_resolution`` 448, ``patch_size`` 14,
  ``drop_vision_last_layer`` true, ``tie_word_embeddings`` false. ``query_num`` is 4 (a 2x2 query grid;
  it must be a square). ``vision_encoder`` names the tiny timm encoder of ``config.VISION_ENCODERS`` (32 wide,
  3 blocks of which 2 are kept, 2 heads, MLP 119, a 4x4 position table): the real name would make the
  official code build the 400M-parameter encoder.

  Why hidden 128: the official resampler has ``hidden_size // 128`` heads, so the LLM width must be a
  multiple of 128. 256 (two heads) would make ``hidden_size / dim_model_base`` exactly 1, and the logit
  division could not be told from its absence; 384 and up would not fit the 2 MB budget. With 128 the
  official formula divides by 0.5 (logits x 2), as the real model divides by 9: a factor that matters. The
  residual factor is ``1.4 / sqrt(2)`` = 0.99 (0.22 in the real 40-layer model).
* ``generation_config.json``, ``special_tokens_map.json`` and ``tokenizer_config.json`` as the real ones
  (``LlamaTokenizerWrapper``, ``legacy`` true, BOS added), the ids in ``added_tokens_decoder`` the tiny
  tokenizer's; ``tokenizer.model`` (``tiny_tokenizer.model_proto``). Not ``tokenizer.json``: the shipped one
  is HF transformers' conversion of ``tokenizer.model``, made by
  ``tests/goldens/minicpm_v2/make_tokenizer_goldens.py`` (an existing one is left in place);
* ``model.safetensors`` or ``model-0000k-of-0000n.safetensors`` + ``model.safetensors.index.json``, **bf16**
  by default: every tensor of the real checkpoint is bf16, and bf16 keeps the folder under 2 MB; the values
  are bf16-rounded draws, exactly representable in the fp32 the reference computes in.

Weights are normal draws from a generator seeded by the seed and the tensor name, ``1/sqrt(fan_in)`` for
matrices, norms around 1; the embedding at 0.1 so that x ``scale_emb`` its rows are about as large as the
resampler's unscaled image rows; ``resampler.pos_embed`` is the official init, the 2-D sin-cos table of the
query grid. The same arguments give the same bytes on every run (``tests/test_minicpm_v2_checkpoint.py``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.models.common.tiny_checkpoint import seeded_tensor, token_entry, write_json, write_weights

from . import tiny_tokenizer
from .checkpoint import tensor_shapes
from .config import config_from_dict
from .resampler import sincos_2d

SHIPPED = Path(__file__).resolve().parent / "tiny"
"""The embedded default: ``make_tiny(SHIPPED)`` with the default arguments."""
TINY_ENCODER = "gsurg_tiny_patch14_siglip_56"


def model_config(vocab: int, dtype: str) -> dict[str, Any]:
    """``config.json`` with the real keys in the real order."""
    return {
        "_name_or_path": "openbmb/MiniCPM-V-2",
        "architectures": ["MiniCPMV"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {
            "AutoConfig": "configuration_minicpm.MiniCPMVConfig",
            "AutoModel": "modeling_minicpmv.MiniCPMV",
            "AutoModelForCausalLM": "modeling_minicpmv.MiniCPMV",
        },
        "bos_token_id": 1,
        "dim_model_base": 256,
        "drop_vision_last_layer": True,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 128,
        "image_size": 448,
        "initializer_range": 0.1,
        "intermediate_size": 320,
        "max_position_embeddings": 4096,
        "max_slice_nums": 9,
        "mm_use_im_start_end": True,
        "model_type": "minicpmv",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 4,
        "patch_size": 14,
        "pretraining_tp": 1,
        "query_num": 4,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "scale_depth": 1.4,
        "scale_emb": 12,
        "scale_resolution": 448,
        "slice_mode": True,
        "tie_word_embeddings": False,
        "torch_dtype": {"fp32": "float32", "bf16": "bfloat16"}[dtype],
        "transformers_version": "4.36.0",
        "use_cache": True,
        "vision_encoder": TINY_ENCODER,
        "vocab_size": vocab,
    }


def tokenizer_config(ids: dict[str, int]) -> dict[str, Any]:
    entry = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    decoder = {str(ids[t]): {"content": t, **entry} for t in tiny_tokenizer.ADDED_TOKENS}
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": dict(sorted(decoder.items(), key=lambda kv: int(kv[0]))),
        "additional_special_tokens": tiny_tokenizer.ADDED_TOKENS[3:],
        "auto_map": {"AutoTokenizer": ["modeling_minicpmv.LlamaTokenizerWrapper", None]},
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "legacy": True,
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<unk>",
        "padding_side": "right",
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizerWrapper",
        "truncation_side": "right",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }


def special_tokens_map() -> dict[str, Any]:
    return {
        "additional_special_tokens": tiny_tokenizer.ADDED_TOKENS[3:],
        "bos_token": token_entry("<s>"),
        "eos_token": token_entry("</s>"),
        "pad_token": "<unk>",
        "unk_token": token_entry("<unk>"),
    }


GENERATION_CONFIG = {
    "_from_model_config": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "transformers_version": "4.36.0",
}


def _gain(name: str) -> tuple[float, float]:
    """(scale of the draws, centre) per tensor kind; matrices are further divided by sqrt(fan_in)."""
    norm = name.endswith(("norm.weight", "norm1.weight", "norm2.weight"))
    if norm or (".ln_" in name and name.endswith(".weight")):
        return 0.2, 1.0
    if name.endswith((".bias", "_bias")):
        return 0.2, 0.0
    if name == "llm.model.embed_tokens.weight":
        return 0.1, 0.0
    if name == "vpm.pos_embed":
        return 0.5, 0.0
    if name == "resampler.query":
        return 1.0, 0.0
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return 2.0, 0.0
    return 1.0, 0.0


def random_tensors(shapes: dict[str, tuple[int, ...]], seed: int, query_grid: int) -> dict[str, np.ndarray]:
    """float32 draws per tensor from ``numpy.random.default_rng`` seeded by (seed, sha256 of the name)."""
    out = {}
    for name, shape in shapes.items():
        if name == "resampler.pos_embed":
            out[name] = sincos_2d(shape[1], (query_grid, query_grid)).numpy()
            continue
        fan_in = name not in ("llm.model.embed_tokens.weight", "vpm.pos_embed", "resampler.query")
        out[name] = seeded_tensor(name, shape, seed, *_gain(name), fan_in_scaled=fan_in)
    return out


def make_tiny(folder: Path | str, *, dtype: str = "bf16", shards: int = 1, seed: int = 0) -> Path:
    """Write the tiny checkpoint into ``folder`` (created; existing files of the same names replaced)."""
    if dtype not in ("fp32", "bf16") or shards < 1:
        raise ValueError(f"dtype must be fp32 or bf16 and shards >= 1, not {dtype!r}, {shards}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.model").write_bytes(tiny_tokenizer.model_proto())
    ids = tiny_tokenizer.ids()
    write_json(folder / "tokenizer_config.json", tokenizer_config(ids))
    write_json(folder / "special_tokens_map.json", special_tokens_map())
    write_json(folder / "generation_config.json", GENERATION_CONFIG)
    raw = model_config(len(ids), dtype)
    write_json(folder / "config.json", raw)
    cfg = config_from_dict(raw)
    arrays = random_tensors(tensor_shapes(cfg), seed, cfg.resampler.grid)
    write_weights(folder, arrays, dtype, shards)
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    make_tiny(args.folder, dtype=args.dtype, shards=args.shards, seed=args.seed)


if __name__ == "__main__":
    main()
