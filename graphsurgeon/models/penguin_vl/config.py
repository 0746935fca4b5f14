"""A Penguin-VL checkpoint folder's settings, read from its own files: ``config.json`` (the LLM numbers at
top level as in a Qwen3 config, the vision encoder inline under ``vision_encoder_config``, plus
``image_token_index``, ``eos_token_id``, ``vision_projector_type``, ``vision_hidden_size``),
``preprocessor_config.json`` (the image processor), ``tokenizer.json`` / ``tokenizer_config.json`` (the
special tokens and their ids) and, in the official layout, the encoder's own sub-folder (``vision_folder``:
its ``config.json`` and ``preprocessor_config.json`` must agree with the top level). The numbers of both
Qwen3 stacks are read as for any Qwen3 model (``graphsurgeon.models.common.qwen3_config``: the RoPE base in
both config styles), the EOS ids as for any HF checkpoint (``graphsurgeon.models.common.hf_config``: from
``generation_config.json``, ``config.json`` or the tokenizer, or none at all).

Nothing here is a constant of the real model: every id and size comes from the folder, and the files are
checked against each other (``image_token_index`` is the tokenizer's ``<image>``, the EOS of
``tokenizer_config.json``, when it names one, is one of the EOS ids, the vision width feeds the
projector, the patch size of the processor is the encoder's). What the reference does not implement
(attention bias, RoPE scaling, sliding-window layers, an activation other than SiLU, a projector other
than ``mlp2x_gelu``, a merge size other than 1 for images, the training-only ``use_reconstruct``) is
refused, naming the file and key, never ignored. Every error is a ``CheckpointError`` (a ``GsurgError``:
one line, exit 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from graphsurgeon.formats.safetensors import CheckpointError
from graphsurgeon.models.common.hf_config import (
    boolean,
    eos_token_ids,
    integer,
    number_triple,
    positive,
    read_config_folder,
    read_json,
    token_content,
    token_ids,
)
from graphsurgeon.models.common.qwen3_config import (
    StackConfig,
    TextConfig,
    llm_facts,
    stack_fields,
    text_config,
)

CONFIG = "config.json"
PREPROCESSOR = "preprocessor_config.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
IMAGE_TOKEN = "<image>"
"""The placeholder string the official processor adds to the tokenizer (its id comes from the files)."""


@dataclass(frozen=True)
class VisionConfig(StackConfig):
    patch_size: int
    num_channels: int

    @property
    def patch_dim(self) -> int:
        """Length of one flattened patch, ``channels * patch^2`` (588 for 3 x 14 x 14)."""
        return self.num_channels * self.patch_size * self.patch_size


@dataclass(frozen=True)
class PenguinConfig:
    text: TextConfig
    vision: VisionConfig
    image_token_index: int
    eos_token_ids: tuple[int, ...] = ()  # from any of the folder's files (load_files); empty: none named


@dataclass(frozen=True)
class ImageProcessorConfig:
    """``preprocessor_config.json``: the resize budget, resampling and normalisation."""

    patch_size: int
    merge_size: int
    min_tokens: int
    max_tokens: int
    resample: int  # a PIL resampling filter number (3 = BICUBIC)
    rescale_factor: float
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    do_convert_rgb: bool

    @property
    def factor(self) -> int:
        """The side lengths of a resized image are multiples of this (``patch * merge``)."""
        return self.patch_size * self.merge_size


@dataclass(frozen=True)
class SpecialTokens:
    """The tokens the reference needs, each with the id the checkpoint's tokenizer gives it."""

    image: str
    image_id: int
    eos: str | None  # None: tokenizer_config.json names no eos_token
    eos_id: int | None
    pad: str | None
    pad_id: int | None


@dataclass(frozen=True)
class CheckpointFiles:
    """Everything read from a checkpoint folder except the tensors."""

    folder: Path
    config: PenguinConfig
    processor: ImageProcessorConfig
    tokens: SpecialTokens
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)  # config.json as parsed


def vision_from_dict(raw: Mapping[str, Any], where: str) -> VisionConfig:
    return VisionConfig(
        patch_size=integer(raw, "patch_size", where),
        num_channels=integer(raw, "num_channels", where),
        **stack_fields(raw, where),
    )


def _check_vision_folder(folder: Path, raw: Mapping[str, Any], inline: VisionConfig) -> Path | None:
    """The official layout also has a sub-folder (``vision_folder``) with the encoder's own ``config.json``
    (and ``preprocessor_config.json``); when it is there, it must describe the same encoder as the inline
    copy. Returns the sub-folder, or None (the converter does not need it)."""
    sub = vision_folder(folder, raw)
    path = None if sub is None else sub / CONFIG
    if path is None or not path.is_file():
        return sub
    own = vision_from_dict(read_json(path), str(path))
    _same(path, own, inline, f"{folder / CONFIG} vision_encoder_config")
    return sub


def config_from_dict(raw: Mapping[str, Any], where: str = CONFIG) -> PenguinConfig:
    """Validate a parsed ``config.json``; every error names ``where`` and the key."""
    if raw.get("model_type") != "penguinvl_qwen3":
        raise CheckpointError(f"{where}: model_type is {raw.get('model_type')!r}, not 'penguinvl_qwen3'")
    kind = raw.get("vision_projector_type", "mlp2x_gelu")
    if kind != "mlp2x_gelu":
        raise CheckpointError(f"{where}: vision_projector_type {kind!r} is not supported (only mlp2x_gelu)")
    if raw.get("use_reconstruct", False):
        raise CheckpointError(f"{where}: use_reconstruct true is a training setting (not supported)")
    vraw = raw.get("vision_encoder_config")
    if not isinstance(vraw, Mapping):
        raise CheckpointError(
            f"{where}: vision_encoder_config must be the encoder's settings inline, not {vraw!r}"
        )
    vision = vision_from_dict(vraw, f"{where}: vision_encoder_config")
    text = text_config(raw, where)
    if "vision_hidden_size" in raw and integer(raw, "vision_hidden_size", where) != vision.hidden_size:
        raise CheckpointError(
            f"{where}: vision_hidden_size {raw['vision_hidden_size']} differs from "
            f"vision_encoder_config.hidden_size {vision.hidden_size}"
        )
    image_id = integer(raw, "image_token_index", where, minimum=0)
    if image_id >= text.vocab_size:
        raise CheckpointError(
            f"{where}: image_token_index {image_id} is outside vocab_size {text.vocab_size}"
        )
    return PenguinConfig(text=text, vision=vision, image_token_index=image_id)


def processor_from_dict(raw: Mapping[str, Any], where: str = PREPROCESSOR) -> ImageProcessorConfig:
    """Validate a parsed ``preprocessor_config.json`` (the official keys and defaults)."""
    for key in ("do_resize", "do_rescale", "do_normalize"):
        if not boolean(raw, key, where, True):
            raise CheckpointError(f"{where}: {key} false is not supported")
    merge = integer(raw, "merge_size", where) if "merge_size" in raw else 1
    if merge != 1:
        raise CheckpointError(f"{where}: merge_size {merge} is not supported for images (only 1)")
    triples: dict[str, tuple[float, float, float]] = {}
    for key in ("image_mean", "image_std"):
        triples[key] = number_triple(raw, key, where)
    if any(s <= 0 for s in triples["image_std"]):
        raise CheckpointError(f"{where}: image_std {list(triples['image_std'])} must be positive")
    resample = integer(raw, "resample", where, minimum=0)
    if resample != 3:
        raise CheckpointError(f"{where}: resample {resample} is not supported (only 3, PIL BICUBIC)")
    min_tokens, max_tokens = integer(raw, "min_tokens", where), integer(raw, "max_tokens", where)
    if min_tokens > max_tokens:
        raise CheckpointError(f"{where}: min_tokens {min_tokens} exceeds max_tokens {max_tokens}")
    return ImageProcessorConfig(
        patch_size=integer(raw, "patch_size", where),
        merge_size=merge,
        min_tokens=min_tokens,
        max_tokens=max_tokens,
        resample=resample,
        rescale_factor=positive(raw, "rescale_factor", where),
        image_mean=triples["image_mean"],
        image_std=triples["image_std"],
        do_convert_rgb=boolean(raw, "do_convert_rgb", where, True),
    )


def special_tokens(folder: Path) -> SpecialTokens:
    """``<image>``, EOS and pad with their ids, from ``tokenizer_config.json`` (which strings; EOS and pad
    may be absent) and ``tokenizer.json`` (their ids: added tokens first, then the BPE vocabulary)."""
    tok_path, cfg_path = folder / TOKENIZER, folder / TOKENIZER_CONFIG
    tok_cfg = read_json(cfg_path)
    ids = token_ids(folder)

    def lookup(token: str | None, what: str) -> int | None:
        if token is None:
            return None
        if token not in ids:
            raise CheckpointError(f"{tok_path}: {what} {token!r} is not in the tokenizer's vocabulary")
        return ids[token]

    image_id = lookup(IMAGE_TOKEN, "the image token")
    assert image_id is not None
    eos, pad = token_content(tok_cfg.get("eos_token")), token_content(tok_cfg.get("pad_token"))
    return SpecialTokens(
        image=IMAGE_TOKEN,
        image_id=image_id,
        eos=eos,
        eos_id=lookup(eos, "eos_token"),
        pad=pad,
        pad_id=lookup(pad, "pad_token"),
    )


def vision_folder(folder: Path, raw: Mapping[str, Any]) -> Path | None:
    """The encoder's own sub-folder, named by ``mm_vision_encoder`` or ``vision_encoder`` (the official
    loader reads that name: it must contain ``penguin``, and the folder holds the encoder's
    ``config.json`` and ``preprocessor_config.json``); None when the config names none or it is absent."""
    for key in ("mm_vision_encoder", "vision_encoder"):
        name = raw.get(key)
        if isinstance(name, str) and name and (folder / name).is_dir():
            return folder / name
    return None


def _same_processor(path: Path, top: ImageProcessorConfig, top_path: Path) -> None:
    """The encoder folder's image processor (what the official loader reads) must be the top level's."""
    _same(path, processor_from_dict(read_json(path), str(path)), top, str(top_path))


def _same(path: Path, own: Any, top: Any, top_where: str) -> None:
    """``own`` (read from ``path``) and ``top`` are the same dataclass value; else one error naming the
    fields that differ on both sides."""
    if own != top:
        keys = [k for k in own.__dataclass_fields__ if getattr(own, k) != getattr(top, k)]
        theirs = ", ".join(f"{k} {getattr(own, k)}" for k in keys)
        ours = ", ".join(f"{k} {getattr(top, k)}" for k in keys)
        raise CheckpointError(f"{path}: {theirs} differ from {top_where}: {ours}")


def load_files(folder: Path | str) -> CheckpointFiles:
    """Read and cross-check ``config.json``, ``preprocessor_config.json`` and the tokenizer files."""
    folder = Path(folder)
    cfg_path, raw = read_config_folder(folder, "a Penguin-VL checkpoint")
    config = config_from_dict(raw, str(cfg_path))
    config = replace(config, eos_token_ids=eos_token_ids(folder, raw, config.text.vocab_size))
    sub = _check_vision_folder(folder, raw, config.vision)
    pre_path = folder / PREPROCESSOR
    processor = processor_from_dict(read_json(pre_path), str(pre_path))
    tokens = special_tokens(folder)
    if processor.patch_size != config.vision.patch_size:
        raise CheckpointError(
            f"{pre_path}: patch_size {processor.patch_size} differs from {cfg_path} "
            f"vision_encoder_config.patch_size {config.vision.patch_size}"
        )
    if len(processor.image_mean) != config.vision.num_channels:
        raise CheckpointError(
            f"{pre_path}: image_mean has 3 channels, the encoder {config.vision.num_channels}"
        )
    if sub is not None and (sub / PREPROCESSOR).is_file():
        _same_processor(sub / PREPROCESSOR, processor, pre_path)
    if tokens.image_id != config.image_token_index:
        raise CheckpointError(
            f"{cfg_path}: image_token_index {config.image_token_index} is not the tokenizer's "
            f"{tokens.image!r} (id {tokens.image_id} in {folder / TOKENIZER})"
        )
    if tokens.eos_id is not None and tokens.eos_id not in config.eos_token_ids:
        raise CheckpointError(
            f"{cfg_path}: eos_token_id {list(config.eos_token_ids)} does not include the tokenizer's "
            f"eos_token {tokens.eos!r} (id {tokens.eos_id} in {folder / TOKENIZER})"
        )
    return CheckpointFiles(folder=folder, config=config, processor=processor, tokens=tokens, raw=raw)


def facts(folder: str) -> dict[str, Any]:
    """``source.config`` of ``rules/penguin_vl.yaml``: the LLM facts ``rules/llm-kv-cache.yaml`` reads, the
    encoder's under ``vision_encoder_config``, ``image_token_index``, ``pad_token_id`` (config.json's, null
    when it has none),
    and ``eos_token_id`` as a list (empty when none) — all from ``load_files``, never from raw JSON."""
    files = load_files(folder)
    text, vision = files.config.text, files.config.vision
    pad = files.raw.get("pad_token_id")  # optional: model.json records null without it
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int) or pad < 0):
        raise CheckpointError(f"{folder}/{CONFIG}: pad_token_id must be a token id or null, not {pad!r}")
    return {
        **llm_facts(text, files.config.eos_token_ids),
        "image_token_index": files.config.image_token_index,
        "pad_token_id": pad,
        "vision_encoder_config": {
            "num_hidden_layers": vision.num_hidden_layers,
            "head_dim": vision.head_dim,
            "rope_theta": vision.rope_theta,
        },
    }
