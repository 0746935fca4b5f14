"""A Qwen3 ``config.json`` as HF transformers writes it, read into the few numbers the reference needs.

The numbers and their checks are those of every Qwen3 text model (``graphsurgeon.models.common.qwen3_config``:
both config styles, ``rope_theta`` of transformers 4.x, the released Qwen3 checkpoints, or ``rope_parameters``
of 5.x; what this reference does not implement, attention bias, RoPE scaling, sliding-window layers, an
activation other than SiLU, is refused with an error naming the key, never ignored); the EOS ids come from
``generation_config.json``, ``config.json`` or the tokenizer files, or none
(``common.hf_config``). ``facts`` is what ``rules/llm-kv-cache.yaml`` reads as
``config.*``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from graphsurgeon.models.common.hf_config import eos_token_ids, read_json
from graphsurgeon.models.common.qwen3_config import TextConfig, llm_facts, text_fields

CONFIG_NAME = "config.json"


@dataclass(frozen=True)
class Qwen3Config(TextConfig):
    """The architecture numbers of a Qwen3 decoder-only model (``common.qwen3_config``) and its EOS ids."""

    eos_token_ids: tuple[int, ...] = ()  # empty: no file of the checkpoint names one


def config_from_dict(raw: Mapping[str, Any], where: str = CONFIG_NAME) -> Qwen3Config:
    """Validate a parsed ``config.json``; every error names ``where`` and the key."""
    return Qwen3Config(**text_fields(raw, where))


def load_config(folder: Path | str) -> Qwen3Config:
    """Read ``folder/config.json``, with the EOS ids from the folder's files (``common.hf_config``)."""
    folder = Path(folder)
    path = folder / CONFIG_NAME
    raw = read_json(path)
    cfg = config_from_dict(raw, str(path))
    return replace(cfg, eos_token_ids=eos_token_ids(folder, raw, cfg.vocab_size))


#: The tokenizer files a conversion copies beside its nets when the checkpoint has both (model.json then
#: names them, and a runtime takes text prompts).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def facts(folder: str) -> dict[str, Any]:
    """``source.config`` of ``rules/llm-kv-cache.yaml``: the checkpoint's config as this reference reads it,
    so the rule file and the reference never disagree about a config style; and ``tokenizer_files``, whether
    the folder holds both ``TOKENIZER_FILES``."""
    cfg = load_config(folder)
    has_tokenizer = all((Path(folder) / name).is_file() for name in TOKENIZER_FILES)
    return {**llm_facts(cfg, cfg.eos_token_ids), "tokenizer_files": has_tokenizer}
