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
from typing import Any

import torch

from graphsurgeon.export.errors import ExportError
from graphsurgeon.export.spec import ExportSpec
from graphsurgeon.models.common.llm_export import build as build_llm
from graphsurgeon.models.common.qwen3_llm_model import Qwen3ForCausalLM

from .calibration import PenguinSamples, calibration_image
from .config import load_files
from .model import PenguinVL, load_model
from .parts import VisionEmbedPatch, VisionEncoder, VisionProjector, vision_rope_inputs

EXAMPLE_GRID = (3, 5)


def text_model(model: PenguinVL) -> Qwen3ForCausalLM:
    """A Qwen3 model whose parameters are the Penguin checkpoint's LLM parameters (shared, not copied)."""
    qwen = Qwen3ForCausalLM(model.config.text, device="meta")
    ours = dict(model.named_parameters())
    wanted = {name: ours[name] for name, _ in qwen.named_parameters()}
    qwen.load_state_dict(wanted, strict=True, assign=True)
    return qwen.eval().requires_grad_(False)


def build(variables: Mapping[str, Any], checkpoint: Path | None) -> Sequence[ExportSpec]:
    if checkpoint is None:
        raise ExportError("the penguin_vl source needs a checkpoint folder")
    rope = variables.get("rope", "fused")
    if rope not in ("fused", "explicit"):
        raise ExportError(f"the penguin_vl source: rope must be 'fused' or 'explicit', not {rope!r}")
    files = load_files(checkpoint)
    model = load_model(checkpoint, files)
    samples = PenguinSamples(model, files, calibration_image(variables))
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
            samples.vision("vision_embed_patch"),
        ),
        ExportSpec(
            "vision_encoder",
            VisionEncoder(model, rope).eval(),
            (hidden, cos, sin),
            {"patches": [(0, 1), (1, 1), (2, 1)]},
            samples.vision("vision_encoder"),
        ),
        ExportSpec(
            "vision_projector",
            VisionProjector(model).eval(),
            (hidden,),
            patches,
            samples.vision("vision_projector"),
        ),
    ]
    llm = build_llm(variables, checkpoint, model=text_model(model), prompts=samples.prompts)
    return [*vision, *llm]
