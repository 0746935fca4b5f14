"""The ids of MiniCPM-V-2's marker tokens, from the checkpoint's ``tokenizer_config.json``
(``added_tokens_decoder``: the official tokenizer's own table), without loading the tokenizer."""

from __future__ import annotations

from pathlib import Path

from graphsurgeon.formats.safetensors import CheckpointError
from graphsurgeon.models.common.hf_config import read_json

from .prompt import IM_END, IM_START, SLICE_END, SLICE_START, UNK

TOKENIZER_CONFIG = "tokenizer_config.json"


def special_ids(folder: Path | str) -> dict[str, int]:
    """The ids of ``<unk>``, ``<s>``, ``</s>``, ``<image>``, ``</image>``, ``<slice>``, ``</slice>`` from
    ``tokenizer_config.json``'s ``added_tokens_decoder`` (the official tokenizer's own table)."""
    path = Path(folder) / TOKENIZER_CONFIG
    table = read_json(path).get("added_tokens_decoder")
    if not isinstance(table, dict):
        raise CheckpointError(f"{path}: no added_tokens_decoder (the special tokens' ids)")
    ids: dict[str, int] = {}
    for key, entry in table.items():
        content = entry.get("content") if isinstance(entry, dict) else None
        if isinstance(content, str) and key.isdigit():
            ids[content] = int(key)
    for token in (UNK, "<s>", "</s>", IM_START, IM_END, SLICE_START, SLICE_END):
        if token not in ids:
            raise CheckpointError(f"{path}: added_tokens_decoder has no {token!r}")
    return ids


TOKENIZER_JSON = "tokenizer.json"
MARKERS = (IM_START, IM_END, SLICE_START, SLICE_END, UNK)


def check_tokenizer_json(folder: Path | str, ids: dict[str, int]) -> None:
    """The fast ``tokenizer.json`` the runtime reads holds every image marker as an added token with the id
    ``tokenizer_config.json`` gives it (else the runtime would split ``<image>`` into text pieces and the
    image rows would land nowhere); ``CheckpointError`` naming the file and the marker otherwise."""
    path = Path(folder) / TOKENIZER_JSON
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file (the runtime's tokenizer; the conversion copies it)")
    added = read_json(path).get("added_tokens")
    if not isinstance(added, list):
        raise CheckpointError(f"{path}: no added_tokens list (the image markers must be added tokens)")
    table = {t.get("content"): t.get("id") for t in added if isinstance(t, dict)}
    for marker in MARKERS:
        if marker not in table:
            raise CheckpointError(f"{path}: added_tokens has no {marker!r} (an image marker)")
        if table[marker] != ids[marker]:
            raise CheckpointError(
                f"{path}: added token {marker!r} has id {table[marker]}, but {TOKENIZER_CONFIG} gives "
                f"{ids[marker]}"
            )
