"""The export source of ``rules/minicpm_v2.yaml``: ``build(variables, checkpoint)`` loads the checkpoint
folder with the reference (``model.load_model``: the strict name and shape check first, one
``CheckpointError`` line naming the file and the tensor) and returns the sub-modules of ``parts.py``, in the
order the rule file converts them: ``vision``, ``pos_embed``, ``resampler``, ``embed``, ``decoder``,
``lm_head``.

Example inputs: a 3x5 patch grid for the vision half (the patch count is dynamic, so any slice runs), the
query ids ``0..Q-1`` (fixed), and ``export_length`` prompt rows (variable, default 8; dynamic) for the LLM
half, whose decoder takes the interface ``rules/llm-kv-cache.yaml`` gives a KV cache to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from graphsurgeon.export.errors import ExportError
from graphsurgeon.export.spec import ExportSpec
from graphsurgeon.models.common.qwen3_layers import causal_mask

from .llm import rope_tables
from .model import MiniCPMV2, load_model
from .parts import DecoderPart, EmbedPart, LMHeadPart, PosEmbedPart, ResamplerPart, VisionPart
from .resampler import sincos_2d
from .short_model import load_short_model

EXAMPLE_GRID = (3, 5)
DEFAULT_LENGTH = 8


def vision_specs(model: MiniCPMV2, grid: tuple[int, int] = EXAMPLE_GRID) -> list[ExportSpec]:
    """``vision``, ``pos_embed`` and ``resampler`` with seeded example inputs for a ``grid`` of patches."""
    vis, res = model.config.vision.arch, model.config.resampler
    gen = torch.Generator().manual_seed(0)
    patches = grid[0] * grid[1]
    rows = torch.randn(1, patches, 3 * vis.patch_size**2, generator=gen)
    pos = torch.randn(1, patches, vis.width, generator=gen)
    features = torch.randn(1, patches, vis.width, generator=gen)
    keys = sincos_2d(res.embed_dim, grid)[None]
    queries = torch.arange(res.query_num, dtype=torch.int64)[None]
    table_ids = torch.arange(min(6, vis.pos_grid**2), dtype=torch.int64)[None]
    n = [(0, 1), (1, 1)]
    return [
        ExportSpec("vision", VisionPart(model).eval(), (rows, pos), {"patches": n}),
        ExportSpec("pos_embed", PosEmbedPart(model).eval(), (table_ids,), {"taps": [(0, 1)]}),
        ExportSpec("resampler", ResamplerPart(model).eval(), (features, keys, queries), {"patches": n}),
    ]


def llm_specs(model: MiniCPMV2, length: int, residual_scale: float | None = None) -> list[ExportSpec]:
    """``embed``, ``decoder`` and ``lm_head`` traced at ``length`` rows (the row count is dynamic);
    ``residual_scale``: the full model's, for a short stack."""
    text = model.config.text
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, text.vocab_size, (1, length), generator=gen, dtype=torch.int64)
    hidden = torch.randn(1, length, text.hidden_size, generator=gen)
    cos, sin = rope_tables(text, 0, length)
    seq = (0, 1)
    return [
        ExportSpec("embed", EmbedPart(model).eval(), (ids,), {"seq": [seq]}),
        ExportSpec(
            "decoder",
            DecoderPart(model, residual_scale).eval(),
            (hidden, causal_mask(0, length), cos[None], sin[None]),
            {"seq": [seq, (1, 1), (1, 2), (2, 1), (3, 1)]},
        ),
        ExportSpec("lm_head", LMHeadPart(model).eval(), (hidden,), {"seq": [seq]}),
    ]


def _count(variables: Mapping[str, Any], name: str, default: int, least: int) -> int:
    value = variables.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ExportError(f"the minicpm_v2 source: {name} must be an integer >= {least}, not {value!r}")
    return value


def build(variables: Mapping[str, Any], checkpoint: Path | None) -> Sequence[ExportSpec]:
    """The six parts; with ``export_llm_layers``, ``export_vision_layers`` and ``export_vocab_rows`` (0:
    everything, the default) a short model of that many layers, blocks and vocabulary rows
    (``short_model``), which the rule file grows back (``repeat``, weight actions)."""
    if checkpoint is None:
        raise ExportError("the minicpm_v2 source needs a checkpoint folder (config.json + safetensors)")
    length = _count(variables, "export_length", DEFAULT_LENGTH, 2)
    llm_layers = _count(variables, "export_llm_layers", 0, 0)
    vision_layers = _count(variables, "export_vision_layers", 0, 0)
    vocab_rows = _count(variables, "export_vocab_rows", 0, 0)
    if not (llm_layers or vision_layers or vocab_rows):
        model = load_model(checkpoint)
        return [*vision_specs(model), *llm_specs(model, length)]
    big = 1 << 62  # 0 asks for all of them
    model, full = load_short_model(checkpoint, llm_layers or big, vision_layers or big, vocab_rows or big)
    return [*vision_specs(model), *llm_specs(model, length, full.text.residual_scale)]
