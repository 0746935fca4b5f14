"""The numbers of a Qwen3 text model in a ``config.json`` as HF transformers writes it, read the same way for
every example built on Qwen3 layers (the Qwen3 LLM, Penguin-VL's LLM and its vision encoder).

* ``StackConfig``: one stack of Qwen3 layers (widths, heads, ``head_dim``, eps, the RoPE base), read by
  ``stack_fields``;
* ``TextConfig``: a stack with a vocabulary (``vocab_size``, ``tie_word_embeddings``,
  ``max_position_embeddings``), read by ``text_fields``; an example adds its own keys in a subclass;
* ``llm_facts``: the ``config.*`` facts ``rules/llm-kv-cache.yaml`` reads, from a ``TextConfig``.

``num_key_value_heads`` defaults to the head count and ``head_dim`` to ``hidden_size / heads``, as in
transformers; the RoPE base is read in either config style
(``graphsurgeon.models.common.hf_config.rope_theta``). What the Qwen3 layers of
``graphsurgeon.models.common.qwen3_layers`` do not implement (attention bias, sliding-window or other
non-full-attention layers, an activation other than SiLU, RoPE scaling) is refused naming the key, never
ignored. Every error is a ``CheckpointError`` naming ``where`` (the file, and the section of a nested config)
and the key. No torch here: a config is read without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphsurgeon.formats.safetensors import CheckpointError
from graphsurgeon.models.common.hf_config import boolean, integer, positive, rope_theta


@dataclass(frozen=True)
class StackConfig:
    """One stack of Qwen3 layers (names as in ``config.json``)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float

    @property
    def q_width(self) -> int:
        """``heads * head_dim``; independent of hidden_size (Qwen3 allows it to differ: Penguin-VL's vision
        encoder has 16 * 128 = 2048 > 1024)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads per kv head (GQA)."""
        return self.num_attention_heads // self.num_key_value_heads


@dataclass(frozen=True)
class TextConfig(StackConfig):
    """A Qwen3 text model: a layer stack with the token embedding and the LM head."""

    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int


def refuse_unsupported(raw: Mapping[str, Any], where: str) -> None:
    """A ``CheckpointError`` for a setting the Qwen3 layers here do not implement."""
    if raw.get("attention_bias", False):
        raise CheckpointError(f"{where}: attention_bias true is not supported (Qwen3 layers have none)")
    if raw.get("use_sliding_window", False):
        raise CheckpointError(f"{where}: use_sliding_window true is not supported")
    layer_types = raw.get("layer_types") or []
    if any(kind != "full_attention" for kind in layer_types):
        raise CheckpointError(f"{where}: layer_types other than full_attention are not supported")
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{where}: hidden_act {act!r} is not supported (only silu)")


_STACK_INTS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def stack_fields(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ``StackConfig`` fields of one config section (the top level, or a nested encoder config), with
    what the layers do not implement refused."""
    refuse_unsupported(raw, where)
    out: dict[str, Any] = {key: integer(raw, key, where) for key in _STACK_INTS}
    heads = out["num_attention_heads"]
    kv_heads = integer(raw, "num_key_value_heads", where) if "num_key_value_heads" in raw else heads
    if heads % kv_heads:
        raise CheckpointError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    head_dim = integer(raw, "head_dim", where) if "head_dim" in raw else out["hidden_size"] // heads
    if head_dim % 2:
        raise CheckpointError(f"{where}: head_dim {head_dim} must be even (RoPE rotates pairs)")
    out.update(
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=positive(raw, "rms_norm_eps", where),
        rope_theta=rope_theta(raw, where),
    )
    return out


def text_fields(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ``TextConfig`` fields of a config section: ``stack_fields`` and the vocabulary's."""
    return {
        **stack_fields(raw, where),
        "vocab_size": integer(raw, "vocab_size", where),
        "max_position_embeddings": integer(raw, "max_position_embeddings", where),
        "tie_word_embeddings": boolean(raw, "tie_word_embeddings", where, False),
    }


def text_config(raw: Mapping[str, Any], where: str) -> TextConfig:
    return TextConfig(**text_fields(raw, where))


def llm_facts(cfg: TextConfig, eos_token_ids: Sequence[int]) -> dict[str, Any]:
    """The ``config.*`` facts ``rules/llm-kv-cache.yaml`` reads, named as in a Qwen3 ``config.json``
    (``eos_token_id`` always a list, maybe empty)."""
    return {
        "num_hidden_layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "head_dim": cfg.head_dim,
        "rope_theta": cfg.rope_theta,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "eos_token_id": list(eos_token_ids),
    }
