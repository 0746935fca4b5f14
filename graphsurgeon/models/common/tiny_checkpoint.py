"""Writing the embedded tiny checkpoints: deterministic random tensors per name, the safetensors files (one,
or shards with the index transformers writes), JSON side files and tokenizer entries, byte for byte the same
on every run."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.models.common.checkpoint_tensors import INDEX_FILE, SINGLE_FILE


def write_json(path: Path, value: Any) -> None:
    """``value`` as indented UTF-8 JSON with a final newline (the form the tiny folders keep)."""
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def seeded_tensor(
    name: str, shape: tuple[int, ...], seed: int, scale: float, centre: float, *, fan_in_scaled: bool
) -> np.ndarray:
    """float32 ``centre + scale * N(0, 1)`` from ``numpy.random.default_rng`` seeded by (seed, sha256 of the
    name); with ``fan_in_scaled``, a matrix's scale is divided by the square root of its fan-in."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    rng = np.random.default_rng([seed, digest])
    if fan_in_scaled and len(shape) >= 2:
        scale /= math.sqrt(math.prod(shape[1:]))
    return (centre + scale * rng.standard_normal(shape)).astype(np.float32)


def write_weights(folder: Path, arrays: dict[str, np.ndarray], dtype: str, shards: int) -> None:
    """``arrays`` stored ``dtype`` (fp32 or bf16) as ``model.safetensors``, or as ``shards`` files cut
    where the running size passes each k/shards of the total, with ``model.safetensors.index.json``."""
    import torch
    from safetensors.torch import save_file

    target = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    tensors = {name: torch.from_numpy(a).to(target).contiguous() for name, a in arrays.items()}
    if shards == 1:
        save_file(tensors, str(folder / SINGLE_FILE), metadata={"format": "pt"})
        (folder / SINGLE_FILE).chmod(0o644)  # safetensors creates its files 0600
        return
    names = list(tensors)
    sizes = [tensors[n].numel() * tensors[n].element_size() for n in names]
    total, acc = sum(sizes), 0
    bounds: list[int] = []
    for i, size in enumerate(sizes):
        acc += size
        if len(bounds) < shards - 1 and acc >= total * (len(bounds) + 1) / shards:
            bounds.append(i + 1)
    weight_map = {}
    for k, (lo, hi) in enumerate(zip([0, *bounds], [*bounds, len(names)], strict=True)):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in names[lo:hi]}, str(folder / file), metadata={"format": "pt"})
        (folder / file).chmod(0o644)
        weight_map.update(dict.fromkeys(names[lo:hi], file))
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_json(folder / INDEX_FILE, index)


def token_entry(content: str, special: bool | None = None) -> dict[str, Any]:
    """A tokenizer file's added-token entry (``special`` written only when given)."""
    entry: dict[str, Any] = {
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
    }
    if special is not None:
        entry["special"] = special
    return entry
