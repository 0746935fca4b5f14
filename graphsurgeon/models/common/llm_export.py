"""The export source of the Qwen3 example: ``build(variables, checkpoint)`` returns the three sub-models
(``embed``, ``decoder``, ``lm_head``) of the checkpoint folder's model, each with its sequence dim dynamic.

A rule file names it ``path/to/graphsurgeon/models/common/llm_export.py:build``. Variables read:
``export_length`` (optional, default 8): the example sequence length the modules are traced at (pnnx's second
shape uses another; the exported graphs take any length); ``calibration_text`` (optional): a UTF-8 file
whose lines, tokenized by the checkpoint's ``tokenizer.json``, are the calibration prompts.

Each spec carries calibration samples (``llm_calibration.py``): the ``calibration_text`` prompts, or two
seeded prompts of random ids, through the reference, computed only if a storage policy calibrates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from graphsurgeon.export.errors import ExportError
from graphsurgeon.export.spec import ExportSpec

from .llm_calibration import Prompt, llm_samples, random_prompts, text_prompts
from .qwen3_llm_model import (
    DecoderPart,
    EmbedPart,
    LMHeadPart,
    Qwen3ForCausalLM,
    causal_mask,
    load_model,
    rope_tables,
)

DEFAULT_LENGTH = 8


def build(
    variables: Mapping[str, Any],
    checkpoint: Path | None,
    *,
    model: Qwen3ForCausalLM | None = None,
    prompts: Callable[[], Sequence[Prompt]] | None = None,
) -> Sequence[ExportSpec]:
    """The three sub-models of the checkpoint's model (or of ``model``, for a source that embeds a Qwen3
    LLM in a larger checkpoint and builds it itself), calibrated on ``prompts`` (default: seeded ids)."""
    if checkpoint is None and model is None:
        raise ExportError("the qwen3_llm source needs a checkpoint folder (config.json + safetensors)")
    length = variables.get("export_length", DEFAULT_LENGTH)
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise ExportError(f"the qwen3_llm source: export_length must be an integer >= 2, not {length!r}")
    if model is None:
        assert checkpoint is not None
        model = load_model(checkpoint)
    cfg = model.config
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (1, length), generator=gen, dtype=torch.int64)
    hidden = torch.randn(1, length, cfg.hidden_size, generator=gen)
    cos, sin = rope_tables(cfg, 0, length)
    seq = (0, 1)
    vocab = cfg.vocab_size
    text = variables.get("calibration_text", "")
    if not isinstance(text, str):
        raise ExportError(f"the qwen3_llm source: calibration_text must be a path, not {text!r}")
    if prompts is None and text and checkpoint is not None:
        text_path, tokenizer = Path(text), Path(checkpoint) / "tokenizer.json"

        def prompts() -> Sequence[Prompt]:
            return text_prompts(text_path, tokenizer)

    samples = llm_samples(model, prompts or (lambda: random_prompts(vocab)))
    return [
        ExportSpec("embed", EmbedPart(model).eval(), (ids,), {"seq": [seq]}, samples["embed"]),
        ExportSpec(
            "decoder",
            DecoderPart(model).eval(),
            (hidden, causal_mask(0, length), cos, sin),
            {"seq": [seq, (1, 1), (1, 2), (2, 1), (3, 1)]},
            samples["decoder"],
        ),
        ExportSpec("lm_head", LMHeadPart(model).eval(), (hidden,), {"seq": [seq]}, samples["lm_head"]),
    ]
