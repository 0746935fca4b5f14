"""The export source of ``rules/qwen3_vl.yaml``: ``build(variables, checkpoint)`` loads the checkpoint folder
with HF transformers' own ``Qwen3VLForConditionalGeneration`` (fp32, CPU; HF is the oracle, the parts wrap
its modules) and returns every part ``parts.part_specs`` gives, plus ``pos_embed``:

* ``patch_embed``, ``vision`` (hidden, pos, cos, sin -> final + DeepStack taps), ``merger``,
  ``deepstack_merger{k}``, ``embed``, ``decoder`` (hidden, mask, cos, sin, ds0..), ``lm_head``: see
  ``parts.py``;
* ``pos_embed``: HF's learned position table (``model.visual.pos_embed``, an ``nn.Embedding`` of
  ``num_position_embeddings`` rows) as a one-layer net, ids ``[1, K]`` -> rows ``[1, K, C]``. The runtime
  resamples the table to every image grid (bilinear, aligned corners, ``vision_tables.
  interpolated_pos_embed``); carrying it as a net's weight puts it in the conversion's own ``.bin``, where
  a weight map proves it equal to the checkpoint tensor and ``model.json`` gives its offset and shape, so a
  runtime reads the table straight from the file (or looks up its four taps with the net).

Variables read: ``export_length`` (default 8, the traced sequence length) and ``deepstack_mergers`` (the
number of DeepStack merger graphs the rule file declares; a config with another tap count is refused).

Before HF loads anything, the checkpoint's safetensors header must hold every tensor HF's model has (the
DeepStack mergers included): HF would initialise a missing weight at random and say so only in a log
line. A missing tensor is one ``CheckpointError`` line naming it and the file (exit 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from graphsurgeon.export.errors import ExportError
from graphsurgeon.export.spec import ExportSpec
from graphsurgeon.formats.safetensors import Checkpoint, CheckpointError

from .config import load_config
from .parts import EXAMPLE_GRID, EXAMPLE_LENGTH, part_specs

if TYPE_CHECKING:
    from transformers import Qwen3VLForConditionalGeneration

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
POS_EMBED_TENSOR = "model.visual.pos_embed.weight"
EMBED_TENSOR = "model.language_model.embed_tokens.weight"
HEAD_TENSOR = "lm_head.weight"


class PosEmbedPart(nn.Module):
    """HF's ``pos_embed`` table: ids ``[1, K]`` -> rows ``[1, K, C]`` (the module itself, no copy)."""

    def __init__(self, hf: Qwen3VLForConditionalGeneration) -> None:
        super().__init__()
        self.table = hf.model.visual.pos_embed

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


def checkpoint_file(folder: Path) -> Path:
    """``model.safetensors`` if present, else the sharded index."""
    for name in (SINGLE_FILE, INDEX_FILE):
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(f"{folder}: no {SINGLE_FILE} or {INDEX_FILE} (the checkpoint's weights)")


def expected_tensors(folder: Path) -> tuple[list[str], bool]:
    """The tensor names HF's ``Qwen3VLForConditionalGeneration`` for the folder's config holds (built on
    the meta device: no memory), and whether ``lm_head`` is tied to the embeddings."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(folder))
    with torch.device("meta"):
        model = transformers.Qwen3VLForConditionalGeneration(config)
    tied = bool(config.tie_word_embeddings)
    names = [n for n in model.state_dict() if not (tied and n == "lm_head.weight")]
    return names, tied


def check_tensors(folder: Path) -> None:
    """Every tensor HF's model needs is in the checkpoint's header; else one line naming the first
    missing one (DeepStack mergers first: HF would random-initialise them silently)."""
    path = checkpoint_file(folder)
    ckpt = Checkpoint(str(path))  # headers only
    try:
        stored = set(ckpt.tensors)
    finally:
        ckpt.close()
    names, _ = expected_tensors(folder)
    missing = [n for n in names if n not in stored]
    if not missing:
        return
    missing.sort(key=lambda n: (".deepstack_merger_list." not in n, names.index(n)))
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    what = "DeepStack merger tensor" if ".deepstack_merger_list." in missing[0] else "tensor"
    raise CheckpointError(f"{path}: missing {what} {missing[0]!r}{more}")


def load_hf(folder: Path) -> Qwen3VLForConditionalGeneration:
    """HF's model of the folder, fp32, eval mode, after ``check_tensors``."""
    import transformers

    check_tensors(folder)
    model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32)
    return model.eval().requires_grad_(False)


def load_short_hf(
    folder: Path, llm_layers: int, vision_layers: int, vocab_rows: int
) -> Qwen3VLForConditionalGeneration:
    """HF's model of the folder cut to what a short export traces (after ``check_tensors``, every tensor of
    the whole model): the first ``llm_layers`` text layers and ``vision_layers`` ViT blocks (0: all), and
    the first ``vocab_rows`` rows of the embedding (and of an untied head). Only those tensors are read."""
    import transformers
    from safetensors import safe_open

    from graphsurgeon.formats.safetensors import Checkpoint

    check_tensors(folder)
    config = transformers.AutoConfig.from_pretrained(str(folder))
    text, vision = config.text_config, config.vision_config
    if llm_layers:
        text.num_hidden_layers = min(llm_layers, int(text.num_hidden_layers))
        if getattr(text, "layer_types", None):
            text.layer_types = text.layer_types[: text.num_hidden_layers]
    if vision_layers:
        vision.depth = min(vision_layers, int(vision.depth))
    rows = min(vocab_rows, int(text.vocab_size)) if vocab_rows else 0
    if rows:
        text.vocab_size = rows
    model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(
        str(folder), config=config, dtype=torch.float32, ignore_mismatched_sizes=bool(rows)
    )
    if rows:  # the mismatched matrices were initialised at random: their first rows, from the checkpoint
        ckpt = Checkpoint(str(checkpoint_file(folder)))
        try:
            files = {
                name: ckpt.tensors[name].file for name in (EMBED_TENSOR, HEAD_TENSOR) if name in ckpt.tensors
            }
        finally:
            ckpt.close()
        targets = {EMBED_TENSOR: model.model.language_model.embed_tokens.weight}
        if not config.tie_word_embeddings:
            targets[HEAD_TENSOR] = model.lm_head.weight
        with torch.no_grad():
            for name, param in targets.items():
                with safe_open(files[name], framework="pt") as fh:
                    param.copy_(fh.get_slice(name)[:rows].to(torch.float32))
    return model.eval().requires_grad_(False)


def _count(variables: Mapping[str, Any], name: str) -> int:
    value = variables.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ExportError(f"the qwen3_vl source: {name} must be an integer >= 0, not {value!r}")
    return value


def build(variables: Mapping[str, Any], checkpoint: Path | None) -> Sequence[ExportSpec]:
    """Every part; with ``export_llm_layers``, ``export_vision_layers`` and ``export_vocab_rows`` (0: all,
    the default) a short model (``load_short_hf``) that the rule file grows back. The short stacks must
    hold the DeepStack wiring: the text layers the features are added after plus one, the ViT blocks up to
    the last tap plus two (the copied block must not be a tap's nor feed one)."""
    if checkpoint is None:
        raise ExportError("the qwen3_vl source needs a checkpoint folder (config.json + safetensors)")
    length = variables.get("export_length", EXAMPLE_LENGTH)
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise ExportError(f"the qwen3_vl source: export_length must be an integer >= 2, not {length!r}")
    cfg = load_config(checkpoint)  # the config's refusals (one line naming config.json and the key) first
    declared = variables.get("deepstack_mergers")
    if declared is not None and declared != cfg.deepstack_layers:
        raise ExportError(
            f"{checkpoint / 'config.json'}: vision_config.deepstack_visual_indexes has "
            f"{cfg.deepstack_layers} taps, but the rule file converts {declared} DeepStack mergers (its "
            "graphs deepstack_merger0..)"
        )
    llm_layers, vision_layers, vocab_rows = (
        _count(variables, f"export_{k}") for k in ("llm_layers", "vision_layers", "vocab_rows")
    )
    taps = cfg.deepstack_layers
    last = max(cfg.vision.deepstack_visual_indexes, default=-1)
    if llm_layers and llm_layers < taps + 1:
        raise ExportError(
            f"the qwen3_vl source: export_llm_layers must be at least {taps + 1} (0: all), not {llm_layers}"
        )
    if vision_layers and vision_layers < last + 2:
        raise ExportError(
            f"the qwen3_vl source: export_vision_layers must be at least {last + 2} (0: all), not "
            f"{vision_layers}"
        )
    if llm_layers or vision_layers or vocab_rows:
        hf = load_short_hf(checkpoint, llm_layers, vision_layers, vocab_rows)
    else:
        hf = load_hf(checkpoint)
    specs = part_specs(hf, EXAMPLE_GRID, length)
    rows = int(hf.model.visual.pos_embed.num_embeddings)
    ids = torch.arange(min(rows, 6), dtype=torch.int64)[None]
    pos = ExportSpec("pos_embed", PosEmbedPart(hf).eval(), (ids,), {"taps": [(0, 1)]})
    return [specs[0], pos, *specs[1:]]
