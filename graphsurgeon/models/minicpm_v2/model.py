"""The MiniCPM-V-2 fp32 reference (eager, CPU, batch 1): the official state-dict layout (``llm.*``, ``vpm.*``,
``resampler.*``) in plain PyTorch, every stage exposed, and greedy generation as the official ``chat`` runs
it (docs/minicpm-v-2.md §3.5, §7).

Pipeline for one prompt: every image (the overview, then the slices row-major, each ``[3, H, W]`` as
``processor.preprocess`` gives them) through the ViT (``vision.py``) and the resampler (``resampler.py``) on
its own -> ``[query_num, hidden]`` each; the prompt ids embedded x ``scale_emb``; the rows strictly between
each ``<image>`` and the next ``</image>`` **overwritten** by the resampler outputs, in order, unscaled
(the official ``get_vllm_embedding``: ``embed * scale_emb``, then ``scatter_``); the LLM (``llm.py``) over
positions ``0..L-1``; logits of the last position from the final-normed hidden ÷ ``hidden_size /
dim_model_base``; then one token at a time through the KV cache (each new token embedded x ``scale_emb``, as
the official ``MiniCPMModel.forward`` does for ``input_ids``), the argmax each step, until an EOS id or the
token budget. The prompt ids come from the official tokenizer (``tokenizer.model``; not read here yet: the
caller passes ids); ``<image>`` / ``</image>`` ids from ``tokenizer_config.json`` (``special_ids``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from graphsurgeon.errors import GsurgError

from .checkpoint import load_tensors
from .config import MiniCPMV2Config, load_config
from .llm import Device, KVCache, MiniCPMForCausalLM
from .prompt import IM_END, IM_START
from .resampler import Resampler
from .special_tokens import special_ids
from .vision import VisionTower


class MiniCPMInputError(GsurgError):
    """Inputs the reference cannot run: image spans that do not match the images given."""


def image_bounds(input_ids: Sequence[int], start_id: int, end_id: int) -> list[tuple[int, int]]:
    """``[begin, end)`` of every image span: after each ``<image>``, up to the ``</image>`` that follows."""
    starts = [i + 1 for i, t in enumerate(input_ids) if t == start_id]
    ends = [i for i, t in enumerate(input_ids) if t == end_id]
    if len(starts) != len(ends) or any(not s <= e for s, e in zip(starts, ends, strict=True)):
        raise MiniCPMInputError(
            f"the prompt's {len(starts)} <image> (id {start_id}) and {len(ends)} </image> (id {end_id}) "
            "do not pair up"
        )
    return list(zip(starts, ends, strict=True))


@dataclass
class ImageStages:
    """One image (overview or slice) through the vision half."""

    grid: tuple[int, int]  # patch rows, columns
    vision: torch.Tensor  # the ViT output after its final norm [h*w, width]
    resampler: torch.Tensor  # [query_num, hidden]


@dataclass
class Trace:
    input_ids: list[int]
    images: list[ImageStages]
    embeddings: torch.Tensor  # fused prompt embeddings [L, hidden]
    prefill_hidden: torch.Tensor  # final-normed [L, hidden]
    prefill_logits: torch.Tensor  # logits of every prompt position [L, vocab]
    decode_logits: list[torch.Tensor] = field(default_factory=list)  # step i fed tokens[i] -> [vocab]
    tokens: list[int] = field(default_factory=list)  # new tokens, the EOS included when reached


class MiniCPMV2(nn.Module):
    """The whole model, parameter names as the official state dict (``load_model`` fills them)."""

    def __init__(self, cfg: MiniCPMV2Config, image_ids: tuple[int, int], device: Device = None) -> None:
        super().__init__()
        self.config = cfg
        self.image_ids = image_ids  # (<image>, </image>)
        self.llm = MiniCPMForCausalLM(cfg.text, device)
        self.vpm = VisionTower(cfg.vision, device)
        self.resampler = Resampler(cfg.resampler, device)

    def encode_image(self, pixels: torch.Tensor | np.ndarray) -> ImageStages:
        """One ``[3, H, W]`` float image -> its ViT and resampler outputs."""
        x = torch.as_tensor(pixels, dtype=torch.float32)
        if x.ndim != 3 or x.shape[0] != 3 or x.shape[1] < 1 or x.shape[2] < 1:
            raise MiniCPMInputError(f"an image must be [3, H, W] floats, not {list(x.shape)}")
        vision, grid = self.vpm(x)
        return ImageStages(grid, vision, self.resampler(vision, grid))

    def fuse(self, input_ids: Sequence[int], features: Sequence[torch.Tensor]) -> torch.Tensor:
        """Every token row x ``scale_emb``, then the rows of each image span overwritten, in order, by the
        image features (unscaled) -> ``[L, hidden]``."""
        ids = torch.tensor(list(input_ids), dtype=torch.int64)
        embeds = self.llm.embed_text(ids)
        bounds = image_bounds(input_ids, *self.image_ids) if features else []
        if len(bounds) != len(features):
            raise MiniCPMInputError(f"the prompt has {len(bounds)} image spans but {len(features)} images")
        for (begin, end), feat in zip(bounds, features, strict=True):
            if end - begin != feat.shape[0]:
                raise MiniCPMInputError(
                    f"the image span at tokens {begin}..{end - 1} holds {end - begin} rows, the image "
                    f"{feat.shape[0]}"
                )
            embeds[begin:end] = feat
        return embeds

    @torch.no_grad()
    def generate(
        self,
        input_ids: Sequence[int],
        images: Sequence[torch.Tensor | np.ndarray] = (),
        max_new_tokens: int = 16,
    ) -> Trace:
        """Greedy decoding: prefill the whole prompt, then one token per step through the KV cache, until
        a token of ``config.eos_token_ids`` (kept in ``tokens``) or ``max_new_tokens`` tokens."""
        stages = [self.encode_image(p) for p in images]
        embeds = self.fuse(input_ids, [s.resampler for s in stages])
        hidden, cache = self.llm.model(embeds, KVCache())
        trace = Trace(list(input_ids), stages, embeds, hidden, self.llm.logits(hidden))
        logits = trace.prefill_logits[-1]
        while len(trace.tokens) < max_new_tokens:
            token = int(logits.argmax())
            trace.tokens.append(token)
            if token in self.config.eos_token_ids or len(trace.tokens) == max_new_tokens:
                break
            step, cache = self.llm.model(self.llm.embed_text(torch.tensor([token])), cache)
            logits = self.llm.logits(step[-1])
            trace.decode_logits.append(logits)
        return trace


def load_model(folder: Path | str) -> MiniCPMV2:
    """Build the model from ``folder/config.json`` and fill every parameter from the checkpoint (bf16, fp16
    or fp32, widened to fp32) after the strict name and shape check. Eval mode, no gradients."""
    cfg = load_config(folder)
    ids = special_ids(folder)
    tensors = load_tensors(folder, cfg)
    model = MiniCPMV2(cfg, (ids[IM_START], ids[IM_END]), device="meta")
    model.load_state_dict(tensors, strict=True, assign=True)
    return model.eval().requires_grad_(False)
