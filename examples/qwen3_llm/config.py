"""A Qwen3 ``config.json`` as HF transformers writes it, read into the few numbers the reference needs.

Both config styles are read (``examples.hf_config``: ``rope_theta`` of transformers 4.x, the released Qwen3
checkpoints, or ``rope_parameters`` of 5.x; EOS ids from ``generation_config.json``, ``config.json`` or the
tokenizer files, or none). What this reference does not implement (attention bias, RoPE scaling,
sliding-window layers, an activation other than SiLU) is refused with an error naming the key, never
ignored. ``facts`` is what ``rules/llm-kv-cache.yaml`` reads as ``config.*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from examples.hf_config import eos_token_ids, read_json, rope_theta
from graphsurgeon.formats.safetensors import CheckpointError

CONFIG_NAME = "config.json"


@dataclass(frozen=True)
class Qwen3Config:
    """The architecture numbers of a Qwen3 decoder-only model (names as in ``config.json``)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...] = ()  # empty: no file of the checkpoint names one

    @property
    def q_width(self) -> int:
        """Width of the q projection (``heads * head_dim``; Qwen3 allows it to differ from hidden_size)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads per kv head (GQA)."""
        return self.num_attention_heads // self.num_key_value_heads


INT_LIMIT = 2**31  # the C++ runtime and ncnn read sizes as 32-bit ints
_INT_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
    "max_position_embeddings",
)


def _int(raw: Mapping[str, Any], key: str, where: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < INT_LIMIT:
        raise CheckpointError(f"{where}: {key} must be a positive integer below 2^31, not {value!r}")
    return value


def _float(key: str, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise CheckpointError(f"{where}: {key} must be a positive number, not {value!r}")
    return float(value)


def _refuse_unsupported(raw: Mapping[str, Any], where: str) -> None:
    if raw.get("attention_bias", False):
        raise CheckpointError(f"{where}: attention_bias true is not supported (Qwen3 has none)")
    if raw.get("use_sliding_window", False):
        raise CheckpointError(f"{where}: use_sliding_window true is not supported")
    layer_types = raw.get("layer_types") or []
    if any(kind != "full_attention" for kind in layer_types):
        raise CheckpointError(f"{where}: layer_types other than full_attention are not supported")
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{where}: hidden_act {act!r} is not supported (only silu)")


def config_from_dict(raw: Mapping[str, Any], where: str = CONFIG_NAME) -> Qwen3Config:
    """Validate a parsed ``config.json``; every error names ``where`` and the key."""
    _refuse_unsupported(raw, where)
    ints = {key: _int(raw, key, where) for key in _INT_KEYS}
    heads = ints["num_attention_heads"]
    kv_heads = _int(raw, "num_key_value_heads", where) if "num_key_value_heads" in raw else heads
    if heads % kv_heads:
        raise CheckpointError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    head_dim = _int(raw, "head_dim", where) if "head_dim" in raw else ints["hidden_size"] // heads
    if head_dim % 2:
        raise CheckpointError(f"{where}: head_dim {head_dim} must be even (RoPE rotates pairs)")
    tie = raw.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise CheckpointError(f"{where}: tie_word_embeddings must be true or false, not {tie!r}")
    return Qwen3Config(
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=_float("rms_norm_eps", raw.get("rms_norm_eps"), where),
        rope_theta=rope_theta(raw, where),
        tie_word_embeddings=tie,
        eos_token_ids=(),
        **ints,
    )


def load_config(folder: Path | str) -> Qwen3Config:
    """Read ``folder/config.json``, with the EOS ids from the folder's files (``examples.hf_config``)."""
    folder = Path(folder)
    path = folder / CONFIG_NAME
    raw = read_json(path)
    assert raw is not None
    cfg = config_from_dict(raw, str(path))
    return replace(cfg, eos_token_ids=eos_token_ids(folder, raw, cfg.vocab_size))


def llm_facts(cfg: Qwen3Config) -> dict[str, Any]:
    """The ``config.*`` facts ``rules/llm-kv-cache.yaml`` reads (``eos_token_id`` always a list, maybe
    empty), named as in a Qwen3 ``config.json``."""
    return {
        "num_hidden_layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "head_dim": cfg.head_dim,
        "rope_theta": cfg.rope_theta,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "eos_token_id": list(cfg.eos_token_ids),
    }


def facts(folder: str) -> dict[str, Any]:
    """``source.config`` of ``rules/llm-kv-cache.yaml``: the checkpoint's config as this reference reads it,
    so the rule file and the reference never disagree about a config style."""
    return llm_facts(load_config(folder))
