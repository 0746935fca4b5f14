"""Write Qwen3 checkpoint folders as HF transformers writes them (``config.json`` + ``model.safetensors``, or
shards named by ``model.safetensors.index.json``) with deterministic random weights: the same arguments give
the same bytes on every run. numpy only (no torch), and streaming: one tensor at a time, in fixed-size
chunks, so the Qwen3-0.6B-sized folder (1.2 GB bf16) is written with a small, flat memory footprint.

Usage::

    python -m graphsurgeon.models.qwen3_llm.make_tiny OUT [--untied] [--bf16] [--shards N] [--layers N]
    [--seed N] python -m graphsurgeon.models.qwen3_llm.make_tiny OUT --qwen3-0.6b      # the real config,
    random bf16 weights

Each tensor's values depend only on the seed and the tensor's name (not on dtype, sharding or order), so a
bf16 or sharded folder holds the same model as the fp32 single-file one up to bf16 rounding. Scales
(standard deviations): q/k/v/gate/up ``1/sqrt(fan_in)`` (activations keep their size); o_proj and down_proj
``6/sqrt(fan_in)``, so each layer moves the residual stream more than the embedding (``0.3``, as the untied
lm_head) and greedy decoding does not just repeat the last token (seed 0, 2 layers: 12 distinct tokens in
32 tied, 23 untied, top-2 logit gaps >= 0.1); norm weights ``1 + 0.1 N(0,1)`` (not all ones, so a
misplaced norm weight shows).
"""

from __future__ import annotations

import argparse
import json
import math
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

DType = Literal["fp32", "bf16"]
CHUNK = 1 << 22  # elements generated and written at a time

QWEN3_0_6B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
"""Qwen/Qwen3-0.6B's config.json (the released values)."""


def tiny_config(
    *, layers: int = 2, tied: bool = True, dtype: DType = "fp32", vocab: int = 300, hidden: int = 64
) -> dict[str, Any]:
    """A small Qwen3 config with the real keys: 4 q heads, 2 kv heads (GQA), head_dim 32 (so the q width
    128 differs from hidden 64, as Qwen3 allows), intermediate 128."""
    cfg = dict(QWEN3_0_6B)
    cfg.update(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        max_window_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=vocab,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=tied,
        torch_dtype="bfloat16" if dtype == "bf16" else "float32",
    )
    return cfg


def tensor_shapes(cfg: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of a Qwen3 checkpoint with HF's names and shapes, in HF's order."""
    h, inter, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (cfg["vocab_size"], h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (h,)),
            (p + "mlp.down_proj.weight", (h, inter)),
            (p + "mlp.gate_proj.weight", (inter, h)),
            (p + "mlp.up_proj.weight", (inter, h)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "self_attn.k_norm.weight", (d,)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, q)),
            (p + "self_attn.q_norm.weight", (d,)),
            (p + "self_attn.q_proj.weight", (q, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
        ]
    out.append(("model.norm.weight", (h,)))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (cfg["vocab_size"], h)))
    return out


def _chunks(name: str, shape: tuple[int, ...], seed: int) -> Iterator[np.ndarray]:
    """The tensor's float32 values, CHUNK elements at a time, from a stream seeded by (seed, name)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if len(shape) == 1:
        scale, offset = 0.1, 1.0  # a norm weight
    elif name.endswith(("embed_tokens.weight", "lm_head.weight")):
        scale, offset = 0.3, 0.0
    elif name.endswith(("o_proj.weight", "down_proj.weight")):
        scale, offset = 6.0 / math.sqrt(shape[1]), 0.0
    else:
        scale, offset = 1.0 / math.sqrt(shape[1]), 0.0
    left = math.prod(shape)
    while left:
        n = min(left, CHUNK)
        left -= n
        yield (rng.standard_normal(n, dtype=np.float32) * np.float32(scale) + np.float32(offset)).astype(
            np.float32
        )


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(
        np.uint16
    )


def _write_shard(
    path: Path, tensors: Sequence[tuple[str, tuple[int, ...]]], dtype: DType, seed: int
) -> list[str]:
    itemsize = 2 if dtype == "bf16" else 4
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        size = math.prod(shape) * itemsize
        header[name] = {"dtype": "BF16" if dtype == "bf16" else "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}  # fmt: skip
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        for name, shape in tensors:
            for chunk in _chunks(name, shape, seed):
                fh.write((to_bf16_bits(chunk) if dtype == "bf16" else chunk).tobytes())
    return [name for name, _ in tensors]


def _split(
    tensors: list[tuple[str, tuple[int, ...]]], shards: int
) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Consecutive groups of about equal size (none empty)."""
    sizes = [math.prod(shape) for _, shape in tensors]
    groups: list[list[tuple[str, tuple[int, ...]]]] = [[] for _ in range(shards)]
    total, acc = sum(sizes), 0
    for tensor, size in zip(tensors, sizes, strict=True):
        groups[min(shards - 1, acc * shards // total)].append(tensor)
        acc += size
    return [g for g in groups if g]


def write_checkpoint(
    folder: Path, config: Mapping[str, Any], *, dtype: DType, shards: int = 1, seed: int = 0
) -> Path:
    """Write ``config.json`` and the weights into ``folder`` (created); returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tensors = tensor_shapes(config)
    if shards == 1:
        _write_shard(folder / "model.safetensors", tensors, dtype, seed)
        return folder
    groups = _split(tensors, shards)
    weight_map: dict[str, str] = {}
    for i, group in enumerate(groups):
        shard = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        for name in _write_shard(folder / shard, group, dtype, seed):
            weight_map[name] = shard
    total = sum(math.prod(shape) for _, shape in tensors) * (2 if dtype == "bf16" else 4)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return folder


def make_tiny(
    folder: Path, *, tied: bool = True, dtype: DType = "fp32", shards: int = 1, layers: int = 2, seed: int = 0
) -> Path:
    """A tiny Qwen3 checkpoint folder (see ``tiny_config``)."""
    return write_checkpoint(
        folder, tiny_config(layers=layers, tied=tied, dtype=dtype), dtype=dtype, shards=shards, seed=seed
    )


def make_qwen3_0_6b(folder: Path, *, seed: int = 0, shards: int = 3) -> Path:
    """The real Qwen3-0.6B config with random bf16 weights, sharded (for benchmarks)."""
    return write_checkpoint(folder, QWEN3_0_6B, dtype="bf16", shards=shards, seed=seed)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("out", type=Path)
    ap.add_argument("--qwen3-0.6b", dest="big", action="store_true", help="the real Qwen3-0.6B config, bf16")
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--shards", type=int, default=None, help="default: 1 (tiny), 3 (--qwen3-0.6b)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.big:
        make_qwen3_0_6b(args.out, seed=args.seed, shards=args.shards or 3)
    else:
        dtype: DType = "bf16" if args.bf16 else "fp32"
        make_tiny(
            args.out,
            tied=not args.untied,
            dtype=dtype,
            shards=args.shards or 1,
            layers=args.layers,
            seed=args.seed,
        )
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
