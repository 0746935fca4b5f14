"""A Qwen3-style decoder-only LLM in plain PyTorch (fp32, eager, CPU): the reference a rule file's
conversion is checked against, and the three sub-modules that are exported to ncnn through pnnx.

Parameter names are HF transformers' Qwen3 names (``model.layers.{i}.self_attn.q_proj.weight``, ...), so a
checkpoint folder as transformers writes it loads by name (``load_model``). The math is HF's:
RMSNorm with the config's eps (also over ``head_dim`` on q and k before RoPE), RoPE as
``x*cos + rotate_half(x)*sin`` with ``cos/sin = cos/sin(cat(freqs, freqs))``, causal attention through an
explicit additive mask (0 visible, -1e38 hidden), GQA with k/v kept at the kv-head count, SwiGLU MLP.

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

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from examples.layer_count import check_layer_count
from graphsurgeon.formats.safetensors import Checkpoint, CheckpointError

from .config import Qwen3Config, load_config

MASKED = -1e38
"""Additive mask value of a hidden key: large and finite (with -inf a fully hidden row gives NaN in ncnn)."""


Device = torch.device | str | None
"""Where parameters are made: ``"meta"`` builds a model without allocating or initializing weights."""


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim."""

    def __init__(self, width: int, eps: float, device: Device = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, device=device))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.weight.shape[0],), self.weight, self.eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


Cache = tuple[torch.Tensor, torch.Tensor]
"""One layer's k and v after RoPE, ``[1, kv_heads, tokens, head_dim]``."""


class Attention(nn.Module):
    def __init__(self, cfg: Qwen3Config, device: Device = None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.q_width, bias=False, device=device)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.kv_width, bias=False, device=device)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.kv_width, bias=False, device=device)
        self.o_proj = nn.Linear(cfg.q_width, cfg.hidden_size, bias=False, device=device)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, device)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, device)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, past: Cache | None
    ) -> tuple[torch.Tensor, Cache]:
        """``x [1,T,H]``, ``mask [1,T,past+T]``, ``cos/sin [1,T,D]`` -> ``[1,T,H]`` and the updated cache.

        cos/sin and the mask broadcast over the heads through their batch dim 1 (HF unsqueezes them to
        ``[1,1,T,·]``: same numbers, but pnnx then writes an ExpandDims before every RotaryEmbed and SDPA)."""
        b, t = x.shape[0], x.shape[1]
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = torch.cat((past[0], k), dim=2)
            v = torch.cat((past[1], v), dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        out = out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        return self.o_proj(out), (k, v)


class MLP(nn.Module):
    def __init__(self, cfg: Qwen3Config, device: Device = None) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False, device=device)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False, device=device)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen3Config, device: Device = None) -> None:
        super().__init__()
        self.self_attn = Attention(cfg, device)
        self.mlp = MLP(cfg, device)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, past: Cache | None
    ) -> tuple[torch.Tensor, Cache]:
        attn, cache = self.self_attn(self.input_layernorm(x), mask, cos, sin, past)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), cache


class Qwen3Body(nn.Module):
    """HF's ``model.*``: the embedding, the layers and the final norm."""

    def __init__(self, cfg: Qwen3Config, device: Device = None) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, device=device)
        self.layers = nn.ModuleList(DecoderLayer(cfg, device) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)


@dataclass
class KVCache:
    """Every layer's k and v so far (empty before the first step)."""

    layers: list[Cache] = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.layers[0][0].shape[2]) if self.layers else 0


def rope_tables(cfg: Qwen3Config, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[1, length, head_dim]`` for positions ``start..start+length-1``, computed in float32
    as HF does (``inv_freq = 1 / theta^(2j/D)``, ``cat(freqs, freqs)``)."""
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    positions = torch.arange(start, start + length, dtype=torch.int64).float()
    freqs = positions[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)[None]
    return emb.cos(), emb.sin()


def causal_mask(start: int, length: int) -> torch.Tensor:
    """The additive mask ``[1, length, start+length]``: query ``start+i`` sees key ``j`` iff
    ``j <= start+i``."""
    q = torch.arange(start, start + length)[:, None]
    k = torch.arange(start + length)[None, :]
    return torch.where(k <= q, 0.0, MASKED).to(torch.float32)[None]


class Qwen3ForCausalLM(nn.Module):
    """The whole model: ``forward(ids, cache)`` gives logits and the grown cache."""

    def __init__(self, cfg: Qwen3Config, device: Device = None) -> None:
        super().__init__()
        self.config = cfg
        self.model = Qwen3Body(cfg, device)
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, device=device)
        )

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def decode(
        self, hidden: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache
    ) -> tuple[torch.Tensor, KVCache]:
        """The decoder stack with a cache: ``hidden [1,T,H]`` -> normed hidden ``[1,T,H]``."""
        grown = KVCache()
        for i, layer in enumerate(self.model.layers):
            past = cache.layers[i] if cache.layers else None
            hidden, kv = layer(hidden, mask, cos, sin, past)
            grown.layers.append(kv)
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
            hidden, _ = layer(hidden, mask, cos, sin, None)
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
