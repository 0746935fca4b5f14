"""Checkpoint folders saved by the installed transformers (5.x) itself, so tests see the files as the
current ``save_pretrained`` writes them (``rope_parameters``, ``dtype``, ``generation_config.json``), not
as a test author remembers them. Tiny and seeded: two layers, widths of a few dozen, a second to save."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The tiny Qwen3 shapes (as graphsurgeon/models/qwen3_llm/make_tiny, so the test prompts fit the vocabulary).
TINY_QWEN3: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 300,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
}
ROPE_THETA = 250_000.0  # not a default of either version, so a fallback would show


def save_qwen3(folder: Path, *, seed: int = 0, **config: Any) -> Path:
    """``transformers.Qwen3ForCausalLM(...).save_pretrained(folder)`` with the tiny shapes, RoPE base
    ``ROPE_THETA`` and ``config`` overriding any Qwen3Config argument (``eos_token_id=None`` ...). The
    weights are the model's own initialisation under ``torch.manual_seed(seed)``, in fp32."""
    import torch
    import transformers

    args: dict[str, Any] = {
        **TINY_QWEN3,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "tie_word_embeddings": False,
        **config,
    }
    torch.manual_seed(seed)
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**args)).eval()
    with torch.no_grad():  # the default init is N(0, 0.02): too flat for greedy decoding to vary
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, param.shape[1] ** -0.5)
    model.save_pretrained(str(folder))
    return folder
