"""A Qwen3-VL checkpoint folder's settings, read from its own files in either config style transformers saves:

* **transformers 5** (what ``make_tiny`` writes): ``text_config.rope_parameters = {rope_type: default,
  rope_theta, mrope_section, mrope_interleaved}``, ``vision_config.rope_parameters = {rope_type: axial,
  rope_theta}``, ``dtype``;
* **transformers 4.57** (what the released Qwen3-VL-2B was saved with): ``text_config.rope_scaling =
  {rope_type: default, mrope_section, mrope_interleaved}`` with ``text_config.rope_theta`` beside it, no
  vision RoPE keys (the base is then 10000, transformers' default), ``torch_dtype``.

``load_config(DIR)`` returns a ``Qwen3VLConfig``:

* ``.text``: the LLM, an ``graphsurgeon.models.common.qwen3_config.TextConfig`` read from ``text_config`` by
  the shared Qwen3 reader (widths, heads, ``head_dim``, eps, ``rope_theta`` in both styles, ``vocab_size``,
  ``max_position_embeddings``), its ``tie_word_embeddings`` the top level's (the one transformers 5.24's
  ``Qwen3VLForConditionalGeneration`` ties by; a ``text_config`` copy must agree);
* ``.vision``: a ``VisionConfig`` (``vision_config``: depth, widths, heads, patch / temporal patch /
  merge sizes, the output width, the learned position table's rows and side, the DeepStack taps, the
  activation, the 2-D RoPE base);
* ``.mrope_section``: (time, height, width) frequency counts of the interleaved MRoPE; HF assigns slot i of
  the ``head_dim/2`` frequencies to height when ``i % 3 == 1`` and ``i < 3 * height``, to width when
  ``i % 3 == 2`` and ``i < 3 * width``, else to time (``mrope_interleaved`` must be true or absent: HF
  always interleaves);
* ``.image_token_id``, ``.video_token_id``, ``.vision_start_token_id``, ``.vision_end_token_id``: from
  ``config.json`` and, when the folder has ``tokenizer.json``, equal to the ids it gives
  ``<|image_pad|>``, ``<|video_pad|>``, ``<|vision_start|>``, ``<|vision_end|>``;
* ``.eos_ids``: from ``generation_config.json``, ``config.json`` (top or ``text_config``) or the tokenizer
  (``graphsurgeon.models.common.hf_config``), maybe empty.

Refused, each with one ``CheckpointError`` line (a ``GsurgError``, exit 2) naming ``config.json``, the
section and the key: a ``model_type`` other than ``qwen3_vl``; what the Qwen3 layers do not implement
(attention bias, sliding windows, an activation other than SiLU, a ``rope_type`` other than default); no
``mrope_section``, one that does not sum to ``head_dim/2`` or whose interleaved slots do not fit; a
non-interleaved MRoPE; a vision activation other than ``gelu_pytorch_tanh``; a vision RoPE type other
than axial; ``out_hidden_size`` other than the text hidden size; a position table that is not a square;
a DeepStack index outside ``[0, depth)``, repeated or out of order, or more taps than LLM layers (tap k
is added after LLM layer k); a ViT head size that is not a multiple of 4 (its RoPE splits each half into
rows and columns); a token id outside the vocabulary, or the tokenizer disagreeing.

Keys whose transformers default is the whole family's (``in_channels`` 3, ``patch_size`` 16,
``temporal_patch_size`` 2, ``spatial_merge_size`` 2, ``hidden_act``) may be absent; the sizes whose class
defaults belong to larger members (``depth``, ``hidden_size``, ... ``deepstack_visual_indexes``) and the
token ids must be present. The image processor's settings: ``processor_config``; what a rule file reads as
``config.*``: ``rule_facts``. No torch here.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from graphsurgeon.formats.safetensors import CheckpointError
from graphsurgeon.models.common.hf_config import (
    boolean,
    eos_token_ids,
    integer,
    positive,
    read_config_folder,
    rope_settings,
    token_ids,
)
from graphsurgeon.models.common.qwen3_config import TextConfig, text_fields

from .tiny_tokenizer import IMAGE_PAD, VIDEO_PAD, VISION_END, VISION_START

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
MODEL_TYPE = "qwen3_vl"
VISION_ACT = "gelu_pytorch_tanh"
"""The ViT blocks' activation (ncnn ``GELU 0=1``); the mergers' exact GELU is fixed in the model code."""
VISION_ROPE_THETA = 10000.0
"""transformers' default base of the ViT's 2-D RoPE, when the config names none (the 4.57 style)."""
TOKEN_KEYS = {
    "image_token_id": IMAGE_PAD,
    "video_token_id": VIDEO_PAD,
    "vision_start_token_id": VISION_START,
    "vision_end_token_id": VISION_END,
}
"""config.json's token-id keys and the token each names."""
_VISION_DEFAULTS = {"in_channels": 3, "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2}
_VISION_SIZES = (
    "depth",
    "hidden_size",
    "num_heads",
    "intermediate_size",
    "out_hidden_size",
    "num_position_embeddings",
)


@dataclass(frozen=True)
class VisionConfig:
    """``vision_config`` (names as there)."""

    depth: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    in_channels: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    out_hidden_size: int
    num_position_embeddings: int
    deepstack_visual_indexes: tuple[int, ...]
    hidden_act: str
    rope_theta: float

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def grid_side(self) -> int:
        """The learned position table is ``grid_side x grid_side`` (48 for 2304 rows)."""
        return math.isqrt(self.num_position_embeddings)

    @property
    def patch_dim(self) -> int:
        """One row of ``pixel_values``: ``in_channels * temporal_patch_size * patch_size^2`` (1536)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @property
    def merge_unit(self) -> int:
        """Patches per merged token, ``spatial_merge_size^2`` (4)."""
        return self.spatial_merge_size**2

    @property
    def merged_width(self) -> int:
        """A merger's input row: ``hidden_size * merge_unit`` (4096 for the 2B)."""
        return self.hidden_size * self.merge_unit

    @property
    def factor(self) -> int:
        """A resized image's sides are multiples of ``patch_size * spatial_merge_size`` (32)."""
        return self.patch_size * self.spatial_merge_size


@dataclass(frozen=True)
class Qwen3VLConfig:
    """Everything the converter and the runtime need from a Qwen3-VL ``config.json`` (see the module
    docstring); ``eos_ids`` is empty from ``config_from_dict`` and filled by ``load_config``."""

    text: TextConfig
    vision: VisionConfig
    mrope_section: tuple[int, int, int]
    image_token_id: int
    video_token_id: int
    vision_start_token_id: int
    vision_end_token_id: int
    eos_ids: tuple[int, ...] = ()

    @property
    def deepstack_layers(self) -> int:
        """How many LLM layers take a DeepStack feature (feature k after layer k, on prefill)."""
        return len(self.vision.deepstack_visual_indexes)


def _section(raw: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if not isinstance(value, Mapping):
        raise CheckpointError(f"{where}: {key} must be the sub-config's settings inline, not {value!r}")
    return value


def mrope_section(raw: Mapping[str, Any], where: str, head_dim: int) -> tuple[int, int, int]:
    """The interleaved MRoPE's (time, height, width) counts from a text section in either style."""
    found = rope_settings(raw, where)
    section = None if found is None else found[1].get("mrope_section")
    if found is None or section is None:
        raise CheckpointError(
            f"{where}: no rope_parameters.mrope_section or rope_scaling.mrope_section (transformers "
            "would silently use [24, 20, 20])"
        )
    key, spec = found
    name = f"{key}.mrope_section"
    if not (
        isinstance(section, list)
        and len(section) == 3
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in section)
    ):
        raise CheckpointError(
            f"{where}: {name} must be three positive integers (time, height, width), not {section!r}"
        )
    half = head_dim // 2
    if sum(section) != half:
        raise CheckpointError(f"{where}: {name} {section} sums to {sum(section)}, not head_dim/2 = {half}")
    for axis, offset, count in (("height", 1, section[1]), ("width", 2, section[2])):
        if offset + 3 * (count - 1) >= half:  # HF takes slots offset, offset+3, ... below 3 * count
            raise CheckpointError(
                f"{where}: {name} {section}: the {count} interleaved {axis} slots ({offset}, "
                f"{offset + 3}, ... {offset + 3 * (count - 1)}) do not fit in head_dim/2 = {half} frequencies"
            )
    interleaved = spec.get("mrope_interleaved", True)
    if interleaved is not True:
        shown = json.dumps(interleaved, default=repr)  # as the file spells it
        raise CheckpointError(
            f"{where}: {key}.mrope_interleaved {shown} is not supported (transformers' Qwen3-VL always "
            "interleaves the sections: only true)"
        )
    return section[0], section[1], section[2]


def _vision_rope_theta(raw: Mapping[str, Any], where: str) -> float:
    params = raw.get("rope_parameters")
    if params is not None:
        if not isinstance(params, Mapping):
            raise CheckpointError(f"{where}: rope_parameters must be a mapping, not {params!r}")
        kind = params.get("rope_type", "axial")
        if kind != "axial":
            raise CheckpointError(
                f"{where}: rope_parameters.rope_type {kind!r} is not supported (only axial, the ViT's 2-D "
                "RoPE)"
            )
        return positive(params, "rope_theta", f"{where}: rope_parameters")
    if "rope_theta" in raw:
        return positive(raw, "rope_theta", where)
    return VISION_ROPE_THETA


def _deepstack(raw: Mapping[str, Any], where: str, depth: int) -> tuple[int, ...]:
    value = raw.get("deepstack_visual_indexes")
    if not isinstance(value, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in value):
        raise CheckpointError(
            f"{where}: deepstack_visual_indexes must be a list of block indexes, not {value!r}"
        )
    for i in value:
        if not 0 <= i < depth:
            raise CheckpointError(
                f"{where}: deepstack_visual_indexes {value}: {i} is not a block index (depth {depth})"
            )
    if any(a >= b for a, b in itertools.pairwise(value)):
        raise CheckpointError(
            f"{where}: deepstack_visual_indexes {value} must be increasing (tap k feeds LLM layer k)"
        )
    return tuple(value)


def vision_from_dict(raw: Mapping[str, Any], where: str) -> VisionConfig:
    """Validate a ``vision_config`` section; errors name ``where`` and the key."""
    act = raw.get("hidden_act", VISION_ACT)
    if act != VISION_ACT:
        raise CheckpointError(
            f"{where}: hidden_act {act!r} is not supported (only {VISION_ACT}, the ViT's tanh GELU)"
        )
    sizes = {key: integer(raw, key, where) for key in _VISION_SIZES}
    sizes.update({k: integer(raw, k, where) if k in raw else v for k, v in _VISION_DEFAULTS.items()})
    hidden, heads = sizes["hidden_size"], sizes["num_heads"]
    if hidden % heads or (hidden // heads) % 4:
        raise CheckpointError(
            f"{where}: hidden_size {hidden} / num_heads {heads} must be a whole head size divisible by 4 "
            "(the 2-D RoPE splits each half of a head into rows and columns)"
        )
    rows = sizes["num_position_embeddings"]
    if math.isqrt(rows) ** 2 != rows:
        raise CheckpointError(
            f"{where}: num_position_embeddings {rows} is not a square (the learned position table is "
            "side x side)"
        )
    return VisionConfig(
        **sizes,
        deepstack_visual_indexes=_deepstack(raw, where, sizes["depth"]),
        hidden_act=act,
        rope_theta=_vision_rope_theta(raw, where),
    )


def _tied(raw: Mapping[str, Any], text_raw: Mapping[str, Any], where: str) -> bool:
    tied = boolean(raw, "tie_word_embeddings", where, False)  # Qwen3VLConfig's default
    if "tie_word_embeddings" in text_raw:
        inner = boolean(text_raw, "tie_word_embeddings", f"{where}: text_config", False)
        if inner != tied:
            raise CheckpointError(
                f"{where}: tie_word_embeddings {str(tied).lower()} (what transformers ties by) disagrees "
                f"with text_config.tie_word_embeddings {str(inner).lower()}"
            )
    return tied


def config_from_dict(raw: Mapping[str, Any], where: str = CONFIG) -> Qwen3VLConfig:
    """Validate a parsed ``config.json``; every error names ``where``, the section and the key."""
    if raw.get("model_type") != MODEL_TYPE:
        raise CheckpointError(f"{where}: model_type is {raw.get('model_type')!r}, not {MODEL_TYPE!r}")
    text_raw = _section(raw, "text_config", where)
    text_where = f"{where}: text_config"
    text = TextConfig(
        **{**text_fields(text_raw, text_where), "tie_word_embeddings": _tied(raw, text_raw, where)}
    )
    vision_where = f"{where}: vision_config"
    vision = vision_from_dict(_section(raw, "vision_config", where), vision_where)
    if vision.out_hidden_size != text.hidden_size:
        raise CheckpointError(
            f"{vision_where}: out_hidden_size {vision.out_hidden_size} differs from text_config.hidden_size "
            f"{text.hidden_size} (the mergers' rows replace token embeddings)"
        )
    if len(vision.deepstack_visual_indexes) > text.num_hidden_layers:
        raise CheckpointError(
            f"{vision_where}: deepstack_visual_indexes has {len(vision.deepstack_visual_indexes)} taps, more "
            f"than text_config.num_hidden_layers {text.num_hidden_layers} (tap k is added after LLM layer k)"
        )
    ids = {key: integer(raw, key, where, minimum=0) for key in TOKEN_KEYS}
    for key, value in ids.items():
        if value >= text.vocab_size:
            raise CheckpointError(
                f"{where}: {key} {value} is outside text_config.vocab_size {text.vocab_size}"
            )
    if len(set(ids.values())) < len(ids):
        raise CheckpointError(f"{where}: the token ids {ids} must differ")
    return Qwen3VLConfig(
        text=text,
        vision=vision,
        mrope_section=mrope_section(text_raw, text_where, text.head_dim),
        image_token_id=ids["image_token_id"],
        video_token_id=ids["video_token_id"],
        vision_start_token_id=ids["vision_start_token_id"],
        vision_end_token_id=ids["vision_end_token_id"],
    )


def _check_tokenizer(folder: Path, cfg: Qwen3VLConfig, cfg_path: Path) -> None:
    """The folder's ``tokenizer.json`` (when present) gives the config's ids to the vision tokens, and no
    id at or beyond ``vocab_size``."""
    if not (folder / TOKENIZER).is_file():
        return
    ids = token_ids(folder)
    for key, token in TOKEN_KEYS.items():
        if ids.get(token) != getattr(cfg, key):
            theirs = "does not have it" if token not in ids else f"gives it id {ids[token]}"
            raise CheckpointError(
                f"{cfg_path}: {key} {getattr(cfg, key)} is not the tokenizer's {token!r} "
                f"({folder / TOKENIZER} {theirs})"
            )
    top = max(ids.values(), default=-1)
    if top >= cfg.text.vocab_size:
        raise CheckpointError(
            f"{cfg_path}: text_config.vocab_size {cfg.text.vocab_size} does not cover the tokenizer's id "
            f"{top} ({folder / TOKENIZER})"
        )


def load_config(folder: Path | str) -> Qwen3VLConfig:
    """Read ``folder/config.json``, the EOS ids from the folder's files, and cross-check the tokenizer."""
    folder = Path(folder)
    cfg_path, raw = read_config_folder(folder, "a Qwen3-VL checkpoint")
    cfg = config_from_dict(raw, str(cfg_path))
    cfg = replace(cfg, eos_ids=eos_token_ids(folder, raw, cfg.text.vocab_size))
    _check_tokenizer(folder, cfg, cfg_path)
    return cfg
