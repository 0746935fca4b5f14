"""Reading a checkpoint's tensors by the names and shapes a family's config gives, with a strict check:
from a single ``model.safetensors`` or a sharded ``model.safetensors.index.json`` (bf16, fp16 or fp32,
widened to fp32). The layer counts are checked against the stored names before the shape table is built,
so a config claiming 10^9 layers is one error line. Every refusal is a ``CheckpointError`` naming the file
and the tensor."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from graphsurgeon.formats.safetensors import Checkpoint, CheckpointError
from graphsurgeon.models.common.layer_count import check_layer_count

if TYPE_CHECKING:
    import torch

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
FLOAT_DTYPES = ("F32", "F16", "BF16")


def checkpoint_file(folder: Path) -> Path:
    """``model.safetensors`` if present, else the sharded index."""
    for name in (SINGLE_FILE, INDEX_FILE):
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(f"{folder}: no {SINGLE_FILE} or {INDEX_FILE} (the checkpoint's weights)")


def listing(names: set[str]) -> str:
    """The first three names (sorted) and how many more."""
    listed = sorted(names)
    more = f" and {len(listed) - 3} more" if len(listed) > 3 else ""
    return ", ".join(listed[:3]) + more


def load_checked_tensors(
    folder: Path,
    shapes: Callable[[], Mapping[str, tuple[int, ...]]],
    *,
    model: str,
    layer_counts: Sequence[tuple[str, int, str]] = (),
    ignorable: Callable[[str], bool] = lambda name: False,
    rows: Callable[[str], int | None] = lambda name: None,
) -> dict[str, torch.Tensor]:
    """Every tensor of ``shapes()`` as fp32 torch tensors. ``layer_counts``: (name prefix of the layers,
    the count the config claims, the config key that claims it), checked first; ``ignorable``: stored names
    that are not an error when ``shapes`` lacks them (non-persistent buffers, a tied head); ``model`` names
    the architecture in the hint of an unexpected tensor; ``rows``: for a tensor, how many of its first rows
    to read (0: none, so it is left out of the result; None: all) — every tensor is checked all the same, so
    a caller that needs a few layers (a short stack to export) holds only those in memory. A missing,
    unexpected or misshapen tensor, or one that is not a float, is a ``CheckpointError`` naming its file and
    the tensor."""
    import torch
    from safetensors import safe_open

    path = checkpoint_file(folder)
    config = str(folder / "config.json")
    ckpt = Checkpoint(str(path))  # reads the headers only (and the index of a sharded one)
    try:
        stored = set(ckpt.tensors)
        for prefix, count, key in layer_counts:
            check_layer_count(stored, prefix, count, key, config, str(path))
        wanted = shapes()
        if missing := set(wanted) - stored:
            raise CheckpointError(f"{path}: missing tensor(s) {listing(missing)}")
        if unexpected := {n for n in stored - set(wanted) if not ignorable(n)}:
            raise CheckpointError(f"{path}: unexpected tensor(s) {listing(unexpected)} (not {model}?)")
        by_file: dict[str, list[str]] = {}
        for name, shape in wanted.items():
            info = ckpt.tensors[name]
            if info.shape != shape:
                raise CheckpointError(
                    f"{info.file}: tensor {name!r} has shape {list(info.shape)}, but {config} gives "
                    f"{list(shape)}"
                )
            if info.dtype not in FLOAT_DTYPES:
                raise CheckpointError(f"{info.file}: tensor {name!r} is {info.dtype}, not bf16, fp16 or fp32")
            by_file.setdefault(info.file, []).append(name)
    finally:
        ckpt.close()
    out: dict[str, torch.Tensor] = {}
    for file, names in by_file.items():
        with safe_open(file, framework="pt") as fh:
            for name in names:
                first = rows(name)
                if first is None:
                    out[name] = fh.get_tensor(name).to(torch.float32)
                elif first > 0:
                    out[name] = fh.get_slice(name)[:first].to(torch.float32)
    return out
