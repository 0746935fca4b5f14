"""The Penguin-VL reference cut to what the export traces, so a conversion holds a few layers in memory,
never the whole model: the first ``llm_layers`` LLM layers and ``vision_layers`` encoder layers (the rule
file's ``repeat`` grows each stack back, reading every other layer's tensors from the checkpoint as it
writes them) and the first ``vocab_rows`` rows of the embedding (and of an untied head; the rule file
resizes those nets and reads the whole matrices the same way). The patch embedding, the final norms and the
projector are whole.

Every tensor of the checkpoint is still checked, names and shapes, as ``model.load_model`` checks them.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from .checkpoint import VISION_PREFIX, load_tensors
from .config import CheckpointFiles, PenguinConfig, load_files
from .model import PenguinVL

_LLM_LAYER = re.compile(r"model\.layers\.(\d+)\.")
_VISION_LAYER = re.compile(re.escape(VISION_PREFIX) + r"encoder\.layers\.(\d+)\.")
_VOCAB_MATRICES = ("model.embed_tokens.weight", "lm_head.weight")


def short_config(full: PenguinConfig, llm_layers: int, vision_layers: int, vocab_rows: int) -> PenguinConfig:
    """``full`` with at most that many LLM layers, encoder layers and vocabulary rows (each at least 1)."""
    text = replace(
        full.text,
        num_hidden_layers=max(1, min(llm_layers, full.text.num_hidden_layers)),
        vocab_size=max(1, min(vocab_rows, full.text.vocab_size)),
    )
    vision = replace(full.vision, num_hidden_layers=max(1, min(vision_layers, full.vision.num_hidden_layers)))
    return replace(full, text=text, vision=vision)


def load_short_model(
    folder: Path | str,
    llm_layers: int,
    vision_layers: int,
    vocab_rows: int,
    files: CheckpointFiles | None = None,
) -> PenguinVL:
    """The short model, its parameter names the official state dict's."""
    files = files or load_files(folder)
    short = short_config(files.config, llm_layers, vision_layers, vocab_rows)

    def rows(name: str) -> int | None:
        for pattern, kept in (
            (_LLM_LAYER, short.text.num_hidden_layers),
            (_VISION_LAYER, short.vision.num_hidden_layers),
        ):
            m = pattern.match(name)
            if m is not None:
                return None if int(m.group(1)) < kept else 0
        return short.text.vocab_size if name in _VOCAB_MATRICES else None

    tensors = load_tensors(folder, files.config, rows)
    model = PenguinVL(short, device="meta")
    model.load_state_dict(tensors, strict=True, assign=True)
    return model.eval().requires_grad_(False)
