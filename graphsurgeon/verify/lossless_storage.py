"""Whether a conversion's fp16/bf16 weights are the checkpoint's own values, so that storing them in two bytes
lost nothing and an fp32 run of the conversion computes with exactly the reference's weights.

Rounding a value to the format it already has is the identity: a bf16 checkpoint stored ``storage=bf16``
(or an fp16 one stored ``storage=fp16``) holds every weight bit for bit, and ncnn (or the runner) widens
each back to the fp32 the PyTorch reference computes with. ``gsurg verify`` then holds such a conversion at
fp32 precision to the exact criteria (equal tokens) instead of its storage's approximate ones.

**What is read.** The conversion's own files, not claims: every net of ``model.json`` with a ``.bin`` is
walked with its ``.param``; each record stored fp16 or bf16 must be named in the weight map ``apply``
wrote beside it (``X.weights.yaml`` for ``X.ncnn.bin``), and the tensor it names must be stored in the
checkpoint in that same format (``F16`` / ``BF16`` in its safetensors header). fp32 records lose nothing
whatever the checkpoint holds. Nothing is read beyond headers, the maps and the .param files.

**Why trusting the map is safe here.** The map only tightens what verify demands: if it were stale or
wrong, the conversion would be held to equal tokens and exact stage cosines, which a lossy weight fails.
``gsurg diff-bin X.ncnn.bin CHECKPOINT --map X.weights.yaml`` is what proves the map itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphsurgeon.check.weight_map import load_map
from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.model_bin import walk_bin
from graphsurgeon.formats.param_any import read_param
from graphsurgeon.formats.safetensors import Checkpoint, checkpoint_path
from graphsurgeon.ir.weights import Storage

#: The safetensors dtype a record stored this way must come from to be stored without rounding.
_SAME_FORMAT = {Storage.FP16: "F16", Storage.BF16: "BF16"}


@dataclass(frozen=True)
class Lossless:
    """The answer: ``holds`` and, either way, why (for the report's criteria line)."""

    holds: bool
    reason: str


def map_path(folder: Path, bin_name: str) -> Path:
    """The weight map ``apply`` writes for ``bin_name``: ``X.weights.yaml`` beside ``X.ncnn.bin``."""
    stem = bin_name.removesuffix(".bin").removesuffix(".ncnn")
    return folder / f"{stem}.weights.yaml"


def lossless_float_storage(folder: Path, doc: dict[str, Any], checkpoint: Path | None) -> Lossless:
    """Whether every fp16/bf16 weight of the nets ``doc`` (a model.json) lists in ``folder`` holds a
    checkpoint tensor stored in that same format. Never raises for a missing or unreadable map or
    checkpoint: the answer is then ``holds=False`` with the reason."""
    if checkpoint is None:
        return Lossless(False, "no reference checkpoint to compare the weights' formats with")
    try:
        ckpt = Checkpoint(checkpoint_path(str(checkpoint)))
    except GsurgError as err:
        return Lossless(False, str(err))
    rounded = 0
    try:
        for entry in doc.get("nets", {}).values():
            if not isinstance(entry, dict) or not entry.get("bin"):
                continue
            records = [
                r
                for r in walk_bin(read_param(folder / entry["param"]), folder / entry["bin"])
                if r.storage in _SAME_FORMAT
            ]
            if not records:
                continue
            path = map_path(folder, entry["bin"])
            if not path.is_file():
                return Lossless(False, f"{path.name} is missing: the weights' sources are unknown")
            tensors = {(e.layer, e.slot): e.tensor for e in load_map(str(path))}
            for r in records:
                tensor = tensors.get((r.layer, r.slot))
                where = f"{entry['bin']}: {r.layer}.{r.slot} ({r.storage.value})"
                if tensor is None:
                    return Lossless(False, f"{where} is not in {path.name}")
                info = ckpt.tensors.get(tensor)
                if info is None:
                    return Lossless(False, f"{where}: {path.name} names {tensor!r}, not in the checkpoint")
                if info.dtype != _SAME_FORMAT[r.storage]:
                    return Lossless(False, f"{where} was rounded from {tensor!r}, stored {info.dtype}")
                rounded += 1
    except GsurgError as err:
        return Lossless(False, str(err))
    finally:
        ckpt.close()
    if not rounded:
        return Lossless(False, "no weight is stored fp16 or bf16")
    return Lossless(True, f"each of the {rounded} fp16/bf16 weights is a checkpoint tensor stored so (maps)")
