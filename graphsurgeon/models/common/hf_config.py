"""What a checkpoint folder saved by HF transformers says in its JSON files, read the same way for every
example: the RoPE base in either config style and the EOS ids from whichever file holds them.

* **RoPE**: transformers 4.x writes ``rope_theta`` and ``rope_scaling`` at the top of the config;
  transformers 5.x writes ``rope_parameters: {rope_type, rope_theta, ...}``. Both are read. A
  ``rope_type`` other than ``default`` (yarn, linear, dynamic, ...) is refused naming the key: the
  references and the C++ runtime compute plain RoPE tables from the base alone.
* **EOS**: ``generation_config.json``'s ``eos_token_id`` (what transformers' ``generate`` stops at), else
  ``config.json``'s (at the top, else in a nested ``text_config``, where a multimodal config saved by
  transformers 4.x keeps it), else the tokenizer's ``eos_token`` (``tokenizer_config.json``, its id from
  ``tokenizer.json``). An id or a list of ids; ``null``, ``[]`` or an absent key means "not set here".
  No EOS anywhere is allowed and gives ``()``: generation then stops at its token budget only.
* **Nested sections**: a multimodal config (Qwen3-VL's ``text_config`` / ``vision_config``) is read section
  by section with the same functions, ``where`` naming the file and the section; ``rope_settings`` gives
  a section's RoPE mapping in either style, for the keys a model adds to it (``mrope_section``).

``dtype`` (5.x) and ``torch_dtype`` (4.x) are not read: every tensor carries its own dtype in the
safetensors header. ``integer``, ``positive`` and ``boolean`` read one key of a config the same way for
every example. Every error is a ``CheckpointError`` (one line naming the file and key, exit 2).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, overload

from graphsurgeon.formats.safetensors import JSON_FILE_LIMIT, CheckpointError
from graphsurgeon.input_files import read_json_input

GENERATION_CONFIG = "generation_config.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"


INT_LIMIT = 2**31
"""Sizes and ids are below this: the C++ runtime and ncnn read them as 32-bit ints."""


@overload
def read_json(path: Path, *, required: Literal[True] = True) -> dict[str, Any]: ...
@overload
def read_json(path: Path, *, required: bool) -> dict[str, Any] | None: ...
def read_json(path: Path, *, required: bool = True) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` for a missing file when not ``required``. An unreadable or
    malformed file is one ``CheckpointError`` naming it."""
    if not os.path.lexists(path):
        if not required:
            return None
        raise CheckpointError(f"{path}: no such file (the checkpoint folder must hold it)")
    raw = read_json_input(path, limit=JSON_FILE_LIMIT, what="a checkpoint's JSON file", error=CheckpointError)
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return raw


def read_config_folder(folder: Path | str, what: str) -> tuple[Path, dict[str, Any]]:
    """``folder/config.json`` and its parsed object; a ``folder`` that is not a folder is a CheckpointError
    saying it must be one (``what``: the kind of checkpoint, e.g. "a Qwen3-VL checkpoint")."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder ({what} is a folder)")
    path = folder / "config.json"
    return path, read_json(path)


def integer(raw: Mapping[str, Any], key: str, where: str, minimum: int = 1) -> int:
    """``raw[key]`` as an int from ``minimum`` (default 1) to below ``INT_LIMIT`` (true and false are not
    integers here)."""
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value < INT_LIMIT:
        wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum} and"
        raise CheckpointError(f"{where}: {key} must be {wanted} below 2^31, not {value!r}")
    return value


def positive(raw: Mapping[str, Any], key: str, where: str) -> float:
    """``raw[key]`` as a float above 0 (an int is widened; true and false are refused)."""
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise CheckpointError(f"{where}: {key} must be a positive number, not {value!r}")
    return float(value)


def number_triple(raw: Mapping[str, Any], key: str, where: str) -> tuple[float, float, float]:
    """``raw[key]`` as three numbers (an image processor's per-channel mean or std); else an error naming
    ``where`` and ``key``."""
    value = raw.get(key)
    if not (
        isinstance(value, list)
        and len(value) == 3
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        raise CheckpointError(f"{where}: {key} must be three numbers, not {value!r}")
    return float(value[0]), float(value[1]), float(value[2])


def boolean(raw: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    """``raw[key]``, ``default`` when absent; anything but true or false is refused."""
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise CheckpointError(f"{where}: {key} must be true or false, not {value!r}")
    return value


def _theta(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise CheckpointError(f"{where}: {key} must be a positive finite number, not {value!r}")
    return float(value)


def _rope_kind(spec: Mapping[str, Any], key: str, where: str) -> None:
    """Refuse a scaled RoPE (4.x spells the type ``type`` or ``rope_type``)."""
    kind = spec.get("rope_type", spec.get("type", "default"))
    if kind != "default":
        raise CheckpointError(
            f"{where}: {key}.rope_type {kind!r} is not supported (only default: the runtime computes "
            "plain RoPE tables from rope_theta)"
        )


def rope_theta(raw: Mapping[str, Any], where: str) -> float:
    """The RoPE base of one config section (the top level, or a nested encoder config)."""
    params = raw.get("rope_parameters")
    if params is not None:
        if not isinstance(params, Mapping):
            raise CheckpointError(f"{where}: rope_parameters must be a mapping, not {params!r}")
        _rope_kind(params, "rope_parameters", where)
        return _theta(params.get("rope_theta"), "rope_parameters.rope_theta", where)
    scaling = raw.get("rope_scaling")
    if scaling is not None:
        if not isinstance(scaling, Mapping):
            raise CheckpointError(f"{where}: rope_scaling must be a mapping or null, not {scaling!r}")
        _rope_kind(scaling, "rope_scaling", where)
    if "rope_theta" not in raw:
        raise CheckpointError(
            f"{where}: no rope_theta or rope_parameters.rope_theta (the RoPE base; transformers would "
            "silently use a default)"
        )
    return _theta(raw["rope_theta"], "rope_theta", where)


def rope_settings(raw: Mapping[str, Any], where: str) -> tuple[str, Mapping[str, Any]] | None:
    """The RoPE mapping of one config section and the key that holds it, from the same place ``rope_theta``
    reads: ``rope_parameters`` (5.x) when set, else ``rope_scaling`` (4.x, with ``rope_theta`` beside
    it), else None. It does not check ``rope_type``: ``rope_theta`` does."""
    for key in ("rope_parameters", "rope_scaling"):
        value = raw.get(key)
        if value is not None:
            if not isinstance(value, Mapping):
                raise CheckpointError(f"{where}: {key} must be a mapping, not {value!r}")
            return key, value
    return None


def _ids(value: Any, key: str, where: str, vocab_size: int) -> tuple[int, ...]:
    values = value if isinstance(value, list) else [value]
    if any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < vocab_size for v in values):
        raise CheckpointError(
            f"{where}: {key} must be a token id below vocab_size {vocab_size} or a list of them, "
            f"not {value!r}"
        )
    return tuple(dict.fromkeys(values))


def token_content(value: Any) -> str | None:
    """A special token as ``tokenizer_config.json`` writes it: a string or ``{"content": ...}``."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def token_ids(folder: Path) -> dict[str, int]:
    """Every token string of ``folder/tokenizer.json`` with its id (added tokens override the vocab)."""
    tok = read_json(folder / TOKENIZER)
    ids: dict[str, int] = {}
    model = tok.get("model")
    if isinstance(model, Mapping) and isinstance(model.get("vocab"), Mapping):
        ids.update({k: v for k, v in model["vocab"].items() if isinstance(v, int)})
    for entry in tok.get("added_tokens") or []:
        if isinstance(entry, Mapping):
            content, token_id = entry.get("content"), entry.get("id")
            if isinstance(content, str) and isinstance(token_id, int):
                ids[content] = token_id
    return ids


def _tokenizer_eos(folder: Path, vocab_size: int) -> tuple[int, ...]:
    cfg_path = folder / TOKENIZER_CONFIG
    tok_cfg = read_json(cfg_path, required=False)
    eos = token_content(tok_cfg.get("eos_token")) if tok_cfg is not None else None
    if eos is None:
        return ()
    ids = token_ids(folder)  # a named eos_token without tokenizer.json to give its id is an error
    if eos not in ids:
        raise CheckpointError(f"{cfg_path}: eos_token {eos!r} is not in {folder / TOKENIZER}")
    return _ids(ids[eos], "eos_token", str(cfg_path), vocab_size)


def eos_token_ids(folder: Path, config: Mapping[str, Any], vocab_size: int) -> tuple[int, ...]:
    """The EOS ids of a checkpoint folder whose parsed ``config.json`` is ``config`` (see the module
    docstring for the order); ``()`` when no file sets one."""
    generation = read_json(folder / GENERATION_CONFIG, required=False)
    text = config.get("text_config")
    sources = [(generation, str(folder / GENERATION_CONFIG)), (config, str(folder / "config.json"))]
    if isinstance(text, Mapping):
        sources.append((text, f"{folder / 'config.json'}: text_config"))
    for raw, where in sources:
        value = None if raw is None else raw.get("eos_token_id")
        if value is not None and value != []:
            return _ids(value, "eos_token_id", where, vocab_size)
    return _tokenizer_eos(folder, vocab_size)
