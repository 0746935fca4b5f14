"""A Qwen3-VL checkpoint folder's image processor settings.

``load_image_processor(DIR)`` reads ``preprocessor_config.json`` (``ImageProcessorConfig``: the resize
budget, ``min_pixels`` / ``max_pixels`` when present, else ``size.shortest_edge`` / ``size.longest_edge``,
as ``Qwen2VLImageProcessorPil`` takes them; patch, temporal patch and merge sizes, which must be the
vision config's; mean, std, rescale factor, bicubic resampling). Its class defaults are Qwen2-VL's (patch
14, CLIP mean and std, another budget), so those keys must be present.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphsurgeon.formats.safetensors import CheckpointError
from graphsurgeon.models.common.hf_config import boolean, integer, number_triple, positive, read_json

from .config import CONFIG, VisionConfig

PREPROCESSOR = "preprocessor_config.json"


@dataclass(frozen=True)
class ImageProcessorConfig:
    """``preprocessor_config.json`` as ``Qwen2VLImageProcessorPil`` reads it."""

    patch_size: int
    temporal_patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    rescale_factor: float
    resample: int  # a PIL filter number: 3, BICUBIC
    do_convert_rgb: bool

    @property
    def factor(self) -> int:
        """Resized sides are multiples of ``patch_size * merge_size`` (smart_resize's factor)."""
        return self.patch_size * self.merge_size


def _budget(raw: Mapping[str, Any], where: str, key: str, size_key: str) -> int:
    """``min_pixels`` / ``max_pixels`` win over ``size`` (as ``Qwen2VLImageProcessorPil.__init__`` has it)."""
    if key in raw:
        return integer(raw, key, where)
    size = raw.get("size")
    if not isinstance(size, Mapping) or size_key not in size:
        raise CheckpointError(
            f"{where}: no {key} or size.{size_key} (transformers would silently use Qwen2-VL's budget)"
        )
    return integer(size, size_key, f"{where}: size")


def image_processor_from_dict(
    raw: Mapping[str, Any], where: str = PREPROCESSOR, vision: VisionConfig | None = None
) -> ImageProcessorConfig:
    """Validate a parsed ``preprocessor_config.json``; with ``vision``, its sizes must be that config's."""
    for key in ("do_resize", "do_rescale", "do_normalize"):
        if not boolean(raw, key, where, True):
            raise CheckpointError(f"{where}: {key} false is not supported")
    resample = integer(raw, "resample", where, minimum=0) if "resample" in raw else 3
    if resample != 3:
        raise CheckpointError(f"{where}: resample {resample} is not supported (only 3, PIL BICUBIC)")
    std = number_triple(raw, "image_std", where)
    if any(v <= 0 for v in std):
        raise CheckpointError(f"{where}: image_std {list(std)} must be positive")
    cfg = ImageProcessorConfig(
        patch_size=integer(raw, "patch_size", where),
        temporal_patch_size=integer(raw, "temporal_patch_size", where) if "temporal_patch_size" in raw else 2,
        merge_size=integer(raw, "merge_size", where) if "merge_size" in raw else 2,
        min_pixels=_budget(raw, where, "min_pixels", "shortest_edge"),
        max_pixels=_budget(raw, where, "max_pixels", "longest_edge"),
        image_mean=number_triple(raw, "image_mean", where),
        image_std=std,
        rescale_factor=positive(raw, "rescale_factor", where) if "rescale_factor" in raw else 1 / 255,
        resample=resample,
        do_convert_rgb=boolean(raw, "do_convert_rgb", where, True),
    )
    if cfg.min_pixels > cfg.max_pixels:
        raise CheckpointError(f"{where}: min_pixels {cfg.min_pixels} exceeds max_pixels {cfg.max_pixels}")
    if vision is not None:
        for key, theirs in (
            ("patch_size", "patch_size"),
            ("temporal_patch_size", "temporal_patch_size"),
            ("merge_size", "spatial_merge_size"),
        ):
            if getattr(cfg, key) != getattr(vision, theirs):
                raise CheckpointError(
                    f"{where}: {key} {getattr(cfg, key)} differs from {CONFIG} vision_config.{theirs} "
                    f"{getattr(vision, theirs)}"
                )
    return cfg


def load_image_processor(folder: Path | str, vision: VisionConfig | None = None) -> ImageProcessorConfig:
    """Read ``folder/preprocessor_config.json`` (checked against ``vision`` when given)."""
    path = Path(folder) / PREPROCESSOR
    return image_processor_from_dict(read_json(path), str(path), vision)
