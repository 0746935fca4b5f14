"""RoPE settings for ``verify.mrope`` from a file: a converted model's ``model.json`` or a checkpoint's
``config.json`` (a folder holding one, or the file), in either transformers style.

``model.json`` (``"format": "gsurg-model"``): ``decoder.rope.theta``, ``decoder.rope.head_dim`` and
``decoder.rope.mrope_section`` are required; ``decoder.rope.layout`` (``interleaved`` or ``block``) and
``vision.merge_size`` (default 2) are optional.

``config.json``: the text settings are in ``text_config`` (or at the top level for a text-only config),
the RoPE dict in ``rope_parameters`` (transformers 5) or ``rope_scaling`` (4.x, with ``rope_theta`` beside
it), ``head_dim`` or ``hidden_size / num_attention_heads``, the spatial merge in
``vision_config.spatial_merge_size`` (default 2). The model's layout: the one a model family declares for
the config's ``model_type`` (``family.yaml`` ``mrope_layouts``, through ``graphsurgeon.registry``: a
family whose HF class ignores the ``mrope_interleaved`` flag says so there), else ``mrope_interleaved`` if
it is given.

Every error is one MropeError line naming the file and the key.
"""

from __future__ import annotations

import os
from typing import Any

from graphsurgeon.input_files import read_json_input
from graphsurgeon.registry import mrope_layout
from graphsurgeon.verify.mrope import MropeError, RopeSettings

#: ``rope_type`` values whose inv_freq is the plain ``theta^(-2i/d)`` (some 4.x configs say "mrope").
DEFAULT_ROPE_TYPES = ("default", "mrope")
#: A config.json is a few KB; this bounds what is read.
SETTINGS_LIMIT = 16 << 20


def load_settings(path: str) -> RopeSettings:
    """The settings in ``path``: a model.json, a config.json, or a folder with one of them (config.json
    first). Not yet validated: the caller applies overrides, then ``validate()``."""
    file = path
    if os.path.isdir(path):
        for name in ("config.json", "model.json"):
            if os.path.isfile(os.path.join(path, name)):
                file = os.path.join(path, name)
                break
        else:
            raise MropeError(f"{path}: a folder with neither config.json nor model.json")
    data = read_json_input(file, limit=SETTINGS_LIMIT, what="a settings file", error=MropeError)
    if not isinstance(data, dict):
        raise MropeError(f"{file}: expected a JSON object, got {type(data).__name__}")
    if data.get("format") == "gsurg-model":
        return _from_model_json(file, data)
    return _from_config(file, data)


def _get(obj: dict[str, Any], key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def _from_model_json(file: str, data: dict[str, Any]) -> RopeSettings:
    decoder = data.get("decoder")
    rope = _get(decoder, "rope") if isinstance(decoder, dict) else None
    if not isinstance(rope, dict):
        raise MropeError(f"{file}: decoder.rope: missing or not an object")
    base = "decoder.rope"
    values: dict[str, Any] = {}
    for key in ("theta", "head_dim", "mrope_section"):
        if key not in rope:
            hint = " (not an MRoPE model?)" if key == "mrope_section" else ""
            raise MropeError(f"{file}: {base}.{key}: missing{hint}")
        values[key] = rope[key]
    merge = _get(data.get("vision", {}), "merge_size")
    where = {k: f"{file}: {base}.{k}" for k in ("theta", "head_dim", "mrope_section", "layout")}
    where["merge"] = f"{file}: vision.merge_size"
    return RopeSettings(
        theta=values["theta"],
        head_dim=values["head_dim"],
        mrope_section=_section(values["mrope_section"]),
        merge=2 if merge is None else merge,
        layout=rope.get("layout"),
        source=f"{file} (model.json)",
        where=where,
    )


def _section(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _from_config(file: str, data: dict[str, Any]) -> RopeSettings:
    text = data.get("text_config")
    tprefix = "text_config."
    if text is None:
        text, tprefix = data, ""
    if not isinstance(text, dict):
        raise MropeError(f"{file}: text_config: expected an object")
    rope: dict[str, Any] | None = None
    rprefix = ""
    for owner, prefix in ((text, tprefix), (data, "")):
        for key in ("rope_parameters", "rope_scaling"):
            found = owner.get(key)
            if isinstance(found, dict) and found:
                rope, rprefix = found, f"{prefix}{key}."
                break
        if rope is not None:
            break
    if rope is None:
        raise MropeError(
            f"{file}: {tprefix}rope_parameters (transformers 5) or {tprefix}rope_scaling (4.x): missing; "
            "not an MRoPE checkpoint?"
        )
    where: dict[str, str] = {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in DEFAULT_ROPE_TYPES:
        raise MropeError(
            f"{file}: {rprefix}rope_type: {rope_type!r} is not supported (only the default inv_freq)"
        )
    if "rope_theta" in rope:
        theta, where["theta"] = rope["rope_theta"], f"{file}: {rprefix}rope_theta"
    elif "rope_theta" in text:
        theta, where["theta"] = text["rope_theta"], f"{file}: {tprefix}rope_theta"
    elif "rope_theta" in data:
        theta, where["theta"] = data["rope_theta"], f"{file}: rope_theta"
    else:
        raise MropeError(f"{file}: {rprefix}rope_theta: missing (nor {tprefix}rope_theta)")
    if "mrope_section" not in rope:
        raise MropeError(f"{file}: {rprefix}mrope_section: missing (not an MRoPE model?)")
    where["mrope_section"] = f"{file}: {rprefix}mrope_section"
    head_dim = text.get("head_dim")
    if head_dim is not None:
        where["head_dim"] = f"{file}: {tprefix}head_dim"
    else:
        hidden, heads = text.get("hidden_size"), text.get("num_attention_heads")
        if not (isinstance(hidden, int) and isinstance(heads, int) and heads > 0):
            raise MropeError(f"{file}: {tprefix}head_dim: missing (nor hidden_size and num_attention_heads)")
        head_dim = hidden // heads
        where["head_dim"] = f"{file}: {tprefix}hidden_size/{tprefix}num_attention_heads"
    vision = data.get("vision_config")
    merge = _get(vision, "spatial_merge_size") if isinstance(vision, dict) else None
    where["merge"] = f"{file}: vision_config.spatial_merge_size"
    model_type = str(data.get("model_type", ""))
    notes: list[str] = []
    flag = rope.get("mrope_interleaved")
    declared = mrope_layout(model_type)
    if declared is not None:
        layout: str | None = declared
        if isinstance(flag, bool) and flag != (declared == "interleaved"):
            notes.append(
                f"{rprefix}mrope_interleaved is {str(flag).lower()}, but HF's {model_type} is always "
                f"{declared} (its family declares it): {declared}"
            )
    elif isinstance(flag, bool):
        layout = "interleaved" if flag else "block"
    else:
        layout = None
    return RopeSettings(
        theta=theta,
        head_dim=head_dim,
        mrope_section=_section(rope["mrope_section"]),
        merge=2 if merge is None else merge,
        layout=layout,
        source=f"{file} (config.json{', ' + model_type if model_type else ''})",
        where=where,
        notes=tuple(notes),
    )
