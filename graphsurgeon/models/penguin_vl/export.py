"""The export source of ``rules/penguin_vl.yaml``: ``build(variables, checkpoint)`` returns Penguin-VL's six
sub-models, each with its length dynamic (the patch count for the vision parts, the sequence for the LLM):

* ``vision_embed_patch``: pixel patches ``[1, N, 3*14*14]`` -> ``[1, N, Cv]``;
* ``vision_encoder``: hidden ``[1, N, Cv]``, cos, sin ``[1, N, head_dim]`` (full-width per-patch 2-D RoPE
  tables) -> ``[1, N, Cv]`` after the final norm; variable ``rope``: ``fused`` (pnnx makes ``RotaryEmbed
  0=0``, right on ncnn >= 1.0.20261020) or ``explicit`` (Slice/BinaryOp/Concat, for older ncnn);
* ``vision_projector``: ``[1, N, Cv]`` -> ``[1, N, C]``;
* ``embed``, ``decoder`` (no cache: the rules add it), ``lm_head``: the LLM half, exported by the Qwen3
  example (``graphsurgeon/models/qwen3_llm``) from a Qwen3 model that shares this checkpoint's LLM parameters,
  so the LLM conversion of ``rules/llm-kv-cache.yaml`` applies unchanged.

The example grid is not square (3 x 5 patches) so rows and columns cannot be confused while tracing.

Every spec carries calibration samples (``calibration.py``): an image (variable ``calibration_image``, or a
synthetic one) and a prompt through the reference, computed only if a storage policy calibrates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from graphsurgeon.export.errors import ExportError
from graphsurgeon.export.spec import ExportSpec
from graphsurgeon.models.common.llm_export import build as build_llm
from graphsurgeon.models.common.qwen3_llm_model import Qwen3ForCausalLM

from .calibration import PenguinSamples, calibration_image
from .config import load_files
from .model import PenguinVL, load_model
from .parts import VisionEmbedPatch, VisionEncoder, VisionProjector, vision_rope_inputs
from .short_model import load_short_model

EXAMPLE_GRID = (3, 5)


def text_model(model: PenguinVL) -> Qwen3ForCausalLM:
    """A Qwen3 model whose parameters are the Penguin checkpoint's LLM parameters (shared, not copied)."""
    qwen = Qwen3ForCausalLM(model.config.text, device="meta")
    ours = dict(model.named_parameters())
    wanted = {name: ours[name] for name, _ in qwen.named_parameters()}
    qwen.load_state_dict(wanted, strict=True, assign=True)
    return qwen.eval().requires_grad_(False)


def _count(variables: Mapping[str, Any], name: str) -> int:
    value = variables.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ExportError(f"the penguin_vl source: {name} must be an integer >= 0, not {value!r}")
    return value


def build(variables: Mapping[str, Any], checkpoint: Path | None) -> Sequence[ExportSpec]:
    """The six parts; with ``export_llm_layers``, ``export_vision_layers`` and ``export_vocab_rows`` (0:
    everything, the default) a short model (``short_model``) that the rule file grows back, which then has
    no calibration samples (they come from the whole reference: a calibrated storage traces everything)."""
    if checkpoint is None:
        raise ExportError("the penguin_vl source needs a checkpoint folder")
    rope = variables.get("rope", "fused")
    if rope not in ("fused", "explicit"):
        raise ExportError(f"the penguin_vl source: rope must be 'fused' or 'explicit', not {rope!r}")
    files = load_files(checkpoint)
    cut = [_count(variables, f"export_{k}") for k in ("llm_layers", "vision_layers", "vocab_rows")]
    if any(cut):
        storage = variables.get("storage", "fp32")
        if storage not in ("fp32", "bf16"):  # calibrated: its samples come from the whole reference
            raise ExportError(
                f"the penguin_vl source: storage {storage} calibrates on the whole model's activations; "
                "trace it all (export_llm_layers, export_vision_layers and export_vocab_rows 0)"
            )
        big = 1 << 62  # 0 asks for all of them
        llm_layers, vision_layers, vocab_rows = (n or big for n in cut)
        model = load_short_model(checkpoint, llm_layers, vision_layers, vocab_rows, files=files)
        return _specs(model, rope, None, variables, checkpoint)
    model = load_model(checkpoint, files)
    return _specs(
        model, rope, PenguinSamples(model, files, calibration_image(variables)), variables, checkpoint
    )


def _specs(
    model: PenguinVL,
    rope: Literal["fused", "explicit"],
    samples: PenguinSamples | None,
    variables: Mapping[str, Any],
    checkpoint: Path,
) -> list[ExportSpec]:
    vcfg = model.config.vision
    n = EXAMPLE_GRID[0] * EXAMPLE_GRID[1]
    gen = torch.Generator().manual_seed(0)
    pixels = torch.rand(1, n, vcfg.patch_dim, generator=gen) * 2 - 1
    hidden = torch.randn(1, n, vcfg.hidden_size, generator=gen)
    cos, sin = vision_rope_inputs(model, EXAMPLE_GRID)
    patches = {"patches": [(0, 1)]}
    vision = [
        ExportSpec(
            "vision_embed_patch",
            VisionEmbedPatch(model).eval(),
            (pixels,),
            patches,
            samples.vision("vision_embed_patch") if samples else None,
        ),
        ExportSpec(
            "vision_encoder",
            VisionEncoder(model, rope).eval(),
            (hidden, cos, sin),
            {"patches": [(0, 1), (1, 1), (2, 1)]},
            samples.vision("vision_encoder") if samples else None,
        ),
        ExportSpec(
            "vision_projector",
            VisionProjector(model).eval(),
            (hidden,),
            patches,
            samples.vision("vision_projector") if samples else None,
        ),
    ]
    prompts = samples.prompts if samples else None
    llm = build_llm(variables, checkpoint, model=text_model(model), prompts=prompts)
    return [*vision, *llm]
