"""A Qwen3-style decoder-only LLM in plain PyTorch (fp32, eager, CPU): the reference a rule file's
conversion is checked against, and the three sub-modules that are exported to ncnn through pnnx.

Parameter names are HF transformers' Qwen3 names (``model.layers.{i}.self_attn.q_proj.weight``, ...), so a
checkpoint folder as transformers writes it loads by name (``load_model``). The math is HF's, in the
layers every Qwen3 example shares (``graphsurgeon.models.common.qwen3_layers``): RMSNorm with the config's eps
(also over ``head_dim`` on q and k before RoPE), RoPE as ``x*cos + rotate_half(x)*sin`` with ``cos/sin =
cos/sin(cat(freqs, freqs))`` (``rope_tables``), causal attention through an explicit additive mask
(``causal_mask``: 0 visible, -1e38 hidden), GQA with k/v kept at the kv-head count, SwiGLU MLP.

Exportable sub-modules (every graph input has a leading batch dim 1):

* ``EmbedPart``: ids ``[1,T]`` int64 -> hidden ``[1,T,H]`` (an ``nn.Embedding``);
* ``DecoderPart``: hidden ``[1,T,H]``, mask ``[1,T,T]``, cos ``[1,T,D]``, sin ``[1,T,D]`` -> hidden
  ``[1,T,H]`` after the final norm, with no cache;
* ``LMHeadPart``: hidden ``[1,T,H]`` -> logits ``[1,T,V]`` (bias-free; tied: the embedding matrix).

What pnnx 20261020 makes of them (``fp16=0``, the sequence length dynamic through ``inputshape2``; seen on
the tiny checkpoints of ``make_tiny``: 2 layers, 4 q heads, 2 kv heads, head_dim 32, hidden 64):

* embed: ``Input`` -> ``Embed 0=H 1=V 2=0 3=V*H`` (the int64 ids become an int32 input ``[T]``);
* decoder: inputs ``in0`` hidden ``[T,H]``, ``in1`` mask ``[T,T]``, ``in2`` cos, ``in3`` sin ``[T,D]``
  (the batch dim dropped); per layer ``RMSNorm 0=H 1=eps``, seven ``Gemm 7=0 ... 5=1`` projections (M free,
  so any length runs), head splits as ``Reshape 6="D,heads,0h"`` (a shape expression on the input's
  height, not ``0=D 1=heads 2=-1`` as in the corpus decoder) and ``Permute 0=2``, ``RMSNorm 0=D`` on q and
  k, ``RotaryEmbed 0=0`` reading the cos/sin inputs directly, one ``SDPA 5=1`` (no ``6=``: scale
  ``1/sqrt(D)`` at runtime) whose fourth bottom is the mask input and whose k/v stay at the kv-head count
  (native GQA: no ExpandDims/Tile/Reshape repeating heads), ``Permute`` + ``Reshape 6="q_width,0c"``,
  ``BinaryOp 0=0`` residual adds, ``Swish`` and ``BinaryOp 0=2`` for SwiGLU; then the final ``RMSNorm`` to
  ``out0``. No cache: a rule adds it (``SDPA 7=1``, cache inputs and outputs).
* lm_head: ``Reshape 6="0w,-1"`` -> ``Gemm 7=0`` -> ``Reshape 6="0w,1h,1c"``: pnnx does not know where the
  batch of a graph input is when a Linear reads it directly, so ``out0`` is 3-D ``[1,T,V]`` (c=1) while the
  decoder's Gemms, behind an RMSNorm, work on 2-D ``[T,H]``.

(``tests/test_qwen3_export.py`` checks these facts and the numbers on every run.)
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from graphsurgeon.formats.safetensors import Checkpoint, CheckpointError
from graphsurgeon.models.common.layer_count import check_layer_count
from graphsurgeon.models.common.qwen3_config import TextConfig
from graphsurgeon.models.common.qwen3_layers import (
    Device,
    KVCache,
    Qwen3Body,
    causal_mask,
    lm_head,
    rope_tables,
    run_layers,
)

from .qwen3_llm_config import load_config


class Qwen3ForCausalLM(nn.Module):
    """The whole model: ``forward(ids, cache)`` gives logits and the grown cache."""

    def __init__(self, cfg: TextConfig, device: Device = None) -> None:
        super().__init__()
        self.config = cfg
        self.model = Qwen3Body(cfg, device)
        self.lm_head = lm_head(cfg, device)

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def decode(
        self, hidden: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache
    ) -> tuple[torch.Tensor, KVCache]:
        """The decoder stack with a cache: ``hidden [1,T,H]`` -> normed hidden ``[1,T,H]``."""
        hidden, grown = run_layers(self.model.layers, hidden, cos, sin, mask, cache)
        return self.model.norm(hidden), grown

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None) -> tuple[torch.Tensor, KVCache]:
        """``ids [1,T]`` at positions ``cache.length ..`` -> logits ``[1,T,V]`` and the grown cache."""
        cache = cache or KVCache()
        start, length = cache.length, int(ids.shape[1])
        cos, sin = rope_tables(self.config, start, length)
        hidden, grown = self.decode(self.model.embed_tokens(ids), causal_mask(start, length), cos, sin, cache)
        return F.linear(hidden, self.lm_head_weight), grown

    @torch.no_grad()
    def generate(self, prompt: list[int], new_tokens: int) -> list[int]:
        """Greedy decoding: a prefill of ``prompt``, then one token per step through the cache."""
        logits, cache = self(torch.tensor([prompt], dtype=torch.int64))
        out: list[int] = []
        while len(out) < new_tokens:
            out.append(int(logits[0, -1].argmax()))
            logits, cache = self(torch.tensor([[out[-1]]], dtype=torch.int64), cache)
        return out


class EmbedPart(nn.Module):
    """ids ``[1,T]`` -> hidden ``[1,T,H]`` (shares the model's embedding)."""

    def __init__(self, model: Qwen3ForCausalLM) -> None:
        super().__init__()
        self.embed_tokens = model.model.embed_tokens

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(ids)


class DecoderPart(nn.Module):
    """(hidden, mask, cos, sin) -> hidden after the final norm, without a cache (shares the layers)."""

    def __init__(self, model: Qwen3ForCausalLM) -> None:
        super().__init__()
        self.layers = model.model.layers
        self.norm = model.model.norm

    def forward(
        self, hidden: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        for layer in self.layers:
            hidden, _ = layer(hidden, cos, sin, mask, None)
        return self.norm(hidden)


class LMHeadPart(nn.Module):
    """hidden ``[1,T,H]`` -> logits ``[1,T,V]`` (shares lm_head, or the embedding when tied)."""

    def __init__(self, model: Qwen3ForCausalLM) -> None:
        super().__init__()
        self.lm_head = nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=False, device="meta")
        self.lm_head.weight = model.lm_head_weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)


SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def checkpoint_file(folder: Path) -> Path:
    """``model.safetensors`` if present (transformers' choice too), else the sharded index."""
    for name in (SINGLE_FILE, INDEX_FILE):
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(
        f"{folder}: no {SINGLE_FILE} or {INDEX_FILE} (not a transformers checkpoint folder)"
    )


def _names(names: set[str]) -> str:
    listed = sorted(names)
    more = f" and {len(listed) - 5} more" if len(listed) > 5 else ""
    return ", ".join(listed[:5]) + more


def load_model(folder: Path | str) -> Qwen3ForCausalLM:
    """Build the model from ``folder/config.json`` and fill every parameter from the checkpoint (bf16, fp16
    or fp32, widened to fp32 by torch), one tensor at a time. A missing, unexpected or misshapen tensor is a
    ``CheckpointError`` naming the file and the tensor. Returns the model in eval mode without gradients."""
    from safetensors import safe_open

    folder = Path(folder)
    cfg = load_config(folder)
    path = checkpoint_file(folder)
    ckpt = Checkpoint(str(path))  # headers only: names, shapes, shards
    stored = set(ckpt.tensors)
    config = str(folder / "config.json")
    check_layer_count(stored, "model.layers.", cfg.num_hidden_layers, "num_hidden_layers", config, str(path))
    model = Qwen3ForCausalLM(cfg, device="meta").to_empty(device="cpu")  # no init: every weight is read
    params = dict(model.named_parameters())
    ignored = {"lm_head.weight"} if cfg.tie_word_embeddings else set()  # transformers ignores it too
    if missing := set(params) - stored:
        raise CheckpointError(f"{path}: missing tensor(s) {_names(missing)}")
    if unexpected := stored - set(params) - ignored:
        raise CheckpointError(f"{path}: unexpected tensor(s) {_names(unexpected)} (not a Qwen3 model?)")
    by_file: dict[str, list[str]] = {}
    for name, param in params.items():
        info = ckpt.tensors[name]
        if info.shape != tuple(param.shape):
            raise CheckpointError(
                f"{info.file}: tensor {name!r} has shape {list(info.shape)} but {folder / 'config.json'} "
                f"gives {list(param.shape)}"
            )
        if info.dtype not in ("F32", "F16", "BF16"):
            raise CheckpointError(f"{info.file}: tensor {name!r} is {info.dtype}, not bf16, fp16 or fp32")
        by_file.setdefault(info.file, []).append(name)
    with torch.no_grad():
        for file, names in by_file.items():
            with safe_open(file, framework="pt") as fh:
                for name in names:
                    params[name].copy_(fh.get_tensor(name))
    return model.eval().requires_grad_(False)
