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


def _label(bits: set[int], floats: set[Storage]) -> str:
    if bits:
        return f"int{min(bits)}"
    if Storage.FP16 in floats:
        return "fp16"
    if Storage.BF16 in floats:
        return "bf16"
    return "fp32"


def _read(folder: Path, entry: dict[str, Any]) -> tuple[set[int], set[Storage]]:
    bits: set[int] = set()
    floats: set[Storage] = set()
    graph = read_param(folder / entry["param"])
    for rec in walk_bin(graph, folder / entry["bin"]):
        if rec.storage is Storage.BYTES and rec.load_type in (4, 6, 8):
            bits.add(rec.load_type)
        elif rec.storage in (Storage.FP16, Storage.BF16):
            floats.add(rec.storage)
    return bits, floats


def _nets(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: entry
        for name, entry in doc.get("nets", {}).items()
        if isinstance(entry, dict) and entry.get("bin")
    }


#: The layers whose weights every storage rounds (a storage quantizes their matrices): a net holding none
#: (an embedding table, which stays fp32 at the int storages) says nothing about how a conversion was stored.
_MATRIX_LAYERS = frozenset({"Gemm", "InnerProduct", "MatMul", "Convolution", "ConvolutionDepthWise"})


def net_storages(folder: Path, doc: dict[str, Any]) -> dict[str, str]:
    """The storage label of each net holding matrix weights, by the nets' names in ``doc``: a conversion
    whose halves were stored apart (a VLM's ``vision_storage``) shows here as two labels."""
    out = {}
    for name, entry in _nets(doc).items():
        graph = read_param(folder / entry["param"])
        records = list(walk_bin(graph, folder / entry["bin"]))
        if not any(r.layer_type in _MATRIX_LAYERS for r in records):
            continue
        bits = {r.load_type for r in records if r.storage is Storage.BYTES and r.load_type in (4, 6, 8)}
        floats: set[Storage] = {r.storage for r in records if r.storage in (Storage.FP16, Storage.BF16)}
        out[name] = _label(bits, floats)
    return out


def conversion_storage(folder: Path, doc: dict[str, Any]) -> str:
    """The storage label of the nets ``doc`` (a model.json) lists in ``folder``."""
    bits: set[int] = set()
    floats: set[Storage] = set()
    for entry in _nets(doc).values():
        b, f = _read(folder, entry)
        bits |= b
        floats |= f
    return _label(bits, floats)
