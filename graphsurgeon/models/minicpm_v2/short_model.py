"""The reference model cut to what the export traces, so a conversion holds a few layers in memory, never the
whole model: the first ``llm_layers`` LLM layers and ``vision_layers`` ViT blocks (the rule file's
``repeat`` grows each stack back to its depth, reading every other layer's tensors from the checkpoint
when it writes them), and the first ``vocab_rows`` rows of the embedding and the head (the rule file
resizes those nets and reads the whole matrices the same way). Everything else (the resampler, the
position table, the norms) is whole.

Every tensor of the checkpoint is still checked, names and shapes, as ``model.load_model`` checks them
(``checkpoint.load_tensors``): a short export of a broken checkpoint fails as the full one does.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from .checkpoint import load_tensors
from .config import MiniCPMV2Config, load_config
from .model import MiniCPMV2
from .prompt import IM_END, IM_START
from .special_tokens import special_ids

_LLM_LAYER = re.compile(r"llm\.model\.layers\.(\d+)\.")
_VISION_BLOCK = re.compile(r"vpm\.blocks\.(\d+)\.")
_VOCAB_MATRICES = ("llm.model.embed_tokens.weight", "llm.lm_head.weight")


def short_config(
    full: MiniCPMV2Config, llm_layers: int, vision_layers: int, vocab_rows: int
) -> MiniCPMV2Config:
    """``full`` with at most that many LLM layers, ViT blocks and vocabulary rows (each at least 1)."""
    text = replace(
        full.text,
        num_hidden_layers=max(1, min(llm_layers, full.text.num_hidden_layers)),
        vocab_size=max(1, min(vocab_rows, full.text.vocab_size)),
    )
    kept = max(1, min(vision_layers, full.vision.layers))
    arch = replace(full.vision.arch, depth=kept + (1 if full.vision.drop_last_layer else 0))
    return replace(full, text=text, vision=replace(full.vision, arch=arch))


def load_short_model(
    folder: Path | str, llm_layers: int, vision_layers: int, vocab_rows: int
) -> tuple[MiniCPMV2, MiniCPMV2Config]:
    """The short model (parameter names as the official state dict) and the checkpoint's full config."""
    full = load_config(folder)
    short = short_config(full, llm_layers, vision_layers, vocab_rows)

    def rows(name: str) -> int | None:
        for pattern, kept in (
            (_LLM_LAYER, short.text.num_hidden_layers),
            (_VISION_BLOCK, short.vision.layers),
        ):
            m = pattern.match(name)
            if m is not None:
                return None if int(m.group(1)) < kept else 0
        return short.text.vocab_size if name in _VOCAB_MATRICES else None

    ids = special_ids(folder)
    tensors = load_tensors(folder, full, rows)
    model = MiniCPMV2(short, (ids[IM_START], ids[IM_END]), device="meta")
    model.load_state_dict(tensors, strict=True, assign=True)
    return model.eval().requires_grad_(False), full
