"""How a conversion stores its weights, read from its files (not from what a rule file or model.json
claims): ``int4``/``int6``/``int8`` when any Gemm weight is block-quantized (the fewest bits present),
else ``fp16`` or ``bf16`` when any weight record is stored so, else ``fp32``. ``gsurg verify`` picks its
criteria by it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphsurgeon.formats.model_bin import walk_bin
from graphsurgeon.formats.param_any import read_param
from graphsurgeon.ir.weights import Storage


def conversion_storage(folder: Path, doc: dict[str, Any]) -> str:
    """The storage label of the nets ``doc`` (a model.json) lists in ``folder``."""
    bits: set[int] = set()
    floats: set[Storage] = set()
    for entry in doc.get("nets", {}).values():
        if not isinstance(entry, dict) or not entry.get("bin"):
            continue
        graph = read_param(folder / entry["param"])
        for rec in walk_bin(graph, folder / entry["bin"]):
            if rec.storage is Storage.BYTES and rec.load_type in (4, 6, 8):
                bits.add(rec.load_type)
            elif rec.storage in (Storage.FP16, Storage.BF16):
                floats.add(rec.storage)
    if bits:
        return f"int{min(bits)}"
    if Storage.FP16 in floats:
        return "fp16"
    if Storage.BF16 in floats:
        return "bf16"
    return "fp32"
