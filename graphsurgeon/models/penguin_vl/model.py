"""The Penguin-VL fp32 reference (eager, CPU): the official state-dict layout in plain PyTorch, every stage
exposed for a stage-by-stage comparison, and greedy generation with a KV cache.

Pipeline for one image of ``grid_h x grid_w`` patches (``N = grid_h*grid_w``): ``pixel_values [N, 588]`` ->
patch embed (the official Conv2d 14/14 with bias on each patch viewed as ``[3,14,14]``) -> the vision
layers (bidirectional, 2-D RoPE: ``vision_rope_tables``) -> the final RMSNorm (the encoder's output is
taken after it) -> merge (an identity for images: merge size 1) -> projector ``Linear -> GELU(erf) ->
Linear`` -> written over the rows of the ``<image>`` tokens of the embedded prompt, in order -> the Qwen3 LLM
(causal, 1-D RoPE over positions ``0..L-1``, image tokens included) -> lm_head (the embedding matrix when
tied) -> greedy tokens until an EOS id of ``config.json`` or the token budget. Several images are each
encoded on their own (attention stays within an image) and their features concatenated.

Both stacks are made of the Qwen3 layers every Qwen3 example shares
(``graphsurgeon.models.common.qwen3_layers``: the decoder layer, the 1-D RoPE tables of the LLM, the causal
mask, the KV cache), with the same ``model.layers.{i}`` names as a Qwen3 LLM, whose export
(``graphsurgeon/models/qwen3_llm``) this model's LLM reuses.

``parts.py`` holds the batch-1 sub-modules the export traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from graphsurgeon.errors import GsurgError
from graphsurgeon.models.common.qwen3_layers import (
    Device,
    KVCache,
    Qwen3Body,
    RMSNorm,
    inverse_frequencies,
    layer_stack,
    lm_head,
    rope_tables,
    run_layers,
    visible_keys,
)

from .checkpoint import load_tensors
from .config import CheckpointFiles, PenguinConfig, TextConfig, VisionConfig, load_files


class PenguinInputError(GsurgError):
    """Inputs the reference cannot run: image features that do not fill the ``<image>`` tokens, a bad grid."""


def vision_rope_tables(grid_h: int, grid_w: int, cfg: VisionConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D RoPE for a ``grid_h x grid_w`` grid of patches in raster order (patch ``p = r*grid_w + c``):
    cos and sin ``[grid_h*grid_w, head_dim]``, the first half of each row holding ``r * f_i`` and the second
    ``c * f_i``, the same ``head_dim/2`` frequencies (base: the vision ``rope_theta``) for both axes. Unlike
    the 1-D tables, whose halves are equal, the halves differ when row != column, so the map of a pair
    ``(x_i, x_{i+head_dim/2})`` is then not a rotation."""
    inv = inverse_frequencies(cfg.head_dim, cfg.rope_theta)[None, :]
    rows = torch.arange(grid_h, dtype=torch.int64).repeat_interleave(grid_w).to(torch.float32)[:, None]
    cols = torch.arange(grid_w, dtype=torch.int64).repeat(grid_h).to(torch.float32)[:, None]
    angles = torch.cat((rows * inv, cols * inv), dim=-1)
    return angles.cos(), angles.sin()


class VisionEmbeddings(nn.Module):
    """The official ``embeddings``: a Conv2d with kernel = stride = patch size, with bias."""

    def __init__(self, cfg: VisionConfig, device: Device = None) -> None:
        super().__init__()
        self.channels, self.patch = cfg.num_channels, cfg.patch_size
        self.patch_embedding = nn.Conv2d(
            cfg.num_channels, cfg.hidden_size, cfg.patch_size, stride=cfg.patch_size, device=device
        )

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``[N, channels*patch^2]`` (channel-major, then rows, then columns) -> ``[N, hidden]``."""
        patches = pixel_values.view(-1, self.channels, self.patch, self.patch)
        return self.patch_embedding(patches).view(patches.shape[0], -1)


class VisionStack(nn.Module):
    """The official ``encoder``: the bidirectional layers and the final norm."""

    def __init__(self, cfg: VisionConfig, device: Device = None) -> None:
        super().__init__()
        self.layers = layer_stack(cfg, device)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)


class VisionModel(nn.Module):
    def __init__(self, cfg: VisionConfig, device: Device = None) -> None:
        super().__init__()
        self.embeddings = VisionEmbeddings(cfg, device)
        self.encoder = VisionStack(cfg, device)


class VisionTower(nn.Module):
    """The official wrapper whose attribute ``vision_encoder`` holds the model (hence the doubled name)."""

    def __init__(self, cfg: VisionConfig, device: Device = None) -> None:
        super().__init__()
        self.vision_encoder = VisionModel(cfg, device)


class Projector(nn.Module):
    """``mlp2x_gelu``: ``readout = Linear(Cv, C) -> GELU (erf) -> Linear(C, C)``, both with bias."""

    def __init__(self, vision: int, text: int, device: Device = None) -> None:
        super().__init__()
        self.readout = nn.Sequential(
            nn.Linear(vision, text, device=device), nn.GELU(), nn.Linear(text, text, device=device)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.readout(x)


class PenguinBody(Qwen3Body):
    """The official ``model.*``: the LLM's embedding, layers and norm, the vision tower and projector."""

    def __init__(self, cfg: PenguinConfig, device: Device = None) -> None:
        super().__init__(cfg.text, device)
        self.vision_encoder = VisionTower(cfg.vision, device)
        self.vision_projector = Projector(cfg.vision.hidden_size, cfg.text.hidden_size, device)


@dataclass
class VisionStages:
    """One image through the vision half; every tensor is 2-D ``[N, width]``."""

    grid: tuple[int, int]
    patch_embed: torch.Tensor
    layers: list[torch.Tensor]  # the output of each encoder layer (before the final norm)
    encoder: torch.Tensor  # after the final norm (= after the merge, an identity for images)
    projector: torch.Tensor


@dataclass
class Trace:
    """Everything one generation computed, stage by stage."""

    input_ids: list[int]
    images: list[VisionStages]
    embeddings: torch.Tensor  # fused prompt embeddings [L, C]
    prefill_hidden: torch.Tensor  # the LLM's output after its final norm [L, C]
    prefill_logits: torch.Tensor  # logits at the last prompt position [V]
    decode_logits: list[torch.Tensor] = field(default_factory=list)  # step i fed tokens[i] -> [V]
    tokens: list[int] = field(default_factory=list)  # new tokens, the EOS included when reached


class PenguinVL(nn.Module):
    """The whole model, parameter names as the official state dict (``load_model`` fills them)."""

    def __init__(self, cfg: PenguinConfig, device: Device = None) -> None:
        super().__init__()
        self.config = cfg
        self.model = PenguinBody(cfg, device)
        self.lm_head = lm_head(cfg.text, device)

    @property
    def text_config(self) -> TextConfig:
        return self.config.text

    @property
    def vision(self) -> VisionModel:
        return self.model.vision_encoder.vision_encoder

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    # --- vision -------------------------------------------------------------------------------------
    def encode_image(self, pixel_values: torch.Tensor, grid: tuple[int, int]) -> VisionStages:
        """``pixel_values [grid_h*grid_w, patch_dim]`` in raster patch order -> every vision stage."""
        gh, gw = grid
        vcfg = self.config.vision
        if gh < 1 or gw < 1 or tuple(pixel_values.shape) != (gh * gw, vcfg.patch_dim):
            raise PenguinInputError(
                f"pixel_values of shape {list(pixel_values.shape)} do not fit a {gh}x{gw} grid of "
                f"{vcfg.patch_dim}-element patches"
            )
        patch = self.vision.embeddings(pixel_values.to(torch.float32))
        cos, sin = vision_rope_tables(gh, gw, vcfg)
        hidden, outputs = patch[None], []
        for layer in self.vision.encoder.layers:
            hidden, _ = layer(hidden, cos[None], sin[None])
            outputs.append(hidden[0])
        encoded = self.vision.encoder.norm(hidden)[0]
        return VisionStages(grid, patch, outputs, encoded, self.model.vision_projector(encoded))

    # --- LLM ----------------------------------------------------------------------------------------
    def fuse(self, input_ids: Sequence[int], features: Sequence[torch.Tensor]) -> torch.Tensor:
        """Embed ``input_ids`` and overwrite the rows of ``<image>`` tokens, in order, with the image
        features (projector outputs) -> ``[L, C]``."""
        ids = torch.tensor(list(input_ids), dtype=torch.int64)
        is_image = ids == self.config.image_token_index
        rows = sum(int(f.shape[0]) for f in features)
        if rows != int(is_image.sum()):
            raise PenguinInputError(
                f"the prompt has {int(is_image.sum())} image tokens (id {self.config.image_token_index}) "
                f"but the images give {rows} feature rows"
            )
        embeds = self.model.embed_tokens(torch.where(is_image, 0, ids))
        if rows:
            embeds[is_image] = torch.cat(list(features), dim=0)
        return embeds

    def decode(self, embeds: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, KVCache]:
        """``embeds [T, C]`` at positions ``cache.length ..`` -> hidden after the final norm ``[T, C]``."""
        start, length = cache.length, int(embeds.shape[0])
        cos, sin = rope_tables(self.config.text, start, length)
        mask = visible_keys(start, length)
        hidden, grown = run_layers(self.model.layers, embeds[None], cos, sin, mask, cache)
        return self.model.norm(hidden)[0], grown

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.lm_head_weight.T

    @torch.no_grad()
    def generate(
        self,
        input_ids: Sequence[int],
        images: Sequence[tuple[torch.Tensor, tuple[int, int]]] = (),
        max_new_tokens: int = 32,
    ) -> Trace:
        """Greedy decoding: prefill the whole prompt, then one token per step through the KV cache, until
        a token of ``config.eos_token_id`` (kept in ``tokens``) or ``max_new_tokens`` tokens."""
        stages = [self.encode_image(pixels, grid) for pixels, grid in images]
        embeds = self.fuse(input_ids, [s.projector for s in stages])
        hidden, cache = self.decode(embeds, KVCache())
        trace = Trace(list(input_ids), stages, embeds, hidden, self.logits(hidden[-1]))
        logits = trace.prefill_logits
        while len(trace.tokens) < max_new_tokens:
            token = int(logits.argmax())
            trace.tokens.append(token)
            if token in self.config.eos_token_ids or len(trace.tokens) == max_new_tokens:
                break
            step, cache = self.decode(self.model.embed_tokens(torch.tensor([token])), cache)
            logits = self.logits(step[-1])
            trace.decode_logits.append(logits)
        return trace


def load_model(folder: Path | str, files: CheckpointFiles | None = None) -> PenguinVL:
    """Build the model from ``folder/config.json`` and fill every parameter from the checkpoint (bf16, fp16
    or fp32, widened to fp32). Returns it in eval mode without gradients."""
    files = files or load_files(folder)
    tensors = load_tensors(folder, files.config)
    model = PenguinVL(files.config, device="meta")
    model.load_state_dict(tensors, strict=True, assign=True)
    return model.eval().requires_grad_(False)
