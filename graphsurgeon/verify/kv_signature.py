"""Discover the blob roles of a KV-cache decoder graph (hidden, mask, cos/sin, past and updated caches,
output) from layer types and bottom positions, never from blob names.

The convention (e.g. the corpus ``llm/*_decoder.ncnn.param`` files):

* a **hidden** Input ``[T, hidden]`` (2D Mat ``h=T, w=hidden``) read by ordinary layers;
* an additive **mask** Input ``[T, past+T]`` read as the mask bottom of every attention layer;
* **cos** / **sin** Inputs read as bottoms 1 and 2 of every ``RotaryEmbed``;
* the **past caches**: Input tops read as the last two bottoms of every ``SDPA`` / ``MultiHeadAttention``
  with ``7=1``; the updated caches are that layer's tops 1 and 2;
* one remaining leaf blob, the **output** hidden states ``[T, hidden]``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.ir.graph import Blob, Graph, Layer
from graphsurgeon.verify.errors import KVDecoderError

ATTENTION_TYPES = ("SDPA", "MultiHeadAttention")
PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class CacheSlot:
    """One past-cache input and the top of the same attention layer that returns it updated."""

    input: str  # the Input top fed with the previous step's cache (empty Mat at the first step)
    output: str  # the attention layer's top 1 (k) or 2 (v)
    layer: str  # the attention layer
    kind: Literal["k", "v"]


@dataclass(frozen=True)
class DecoderSignature:
    """The blob roles of a KV-cache decoder graph, found from layer types and bottom positions."""

    param: str
    hidden: str
    mask: str | None  # None when no attention layer has 5=1 (then only 1-token steps are causal)
    cos: str
    sin: str
    output: str
    caches: tuple[CacheSlot, ...]  # in Input-top order (cache_k0, cache_v0, cache_k1, ...)
    attention_layers: tuple[str, ...]
    head_dim: int  # the width of the q/k rows RotaryEmbed rotates
    hidden_size: int | None  # the width the hidden input's first readers expect (None: not found)
    rope_interleaved: bool

    @property
    def num_layers(self) -> int:
        return len(self.attention_layers)


def _source(blob: Blob) -> Blob:
    """The blob a Split chain copies (ncnn Splits share data, so roles pass through them)."""
    while blob.producer is not None and blob.producer.type == "Split":
        blob = blob.producer.inputs[0]
    return blob


def _readers(graph: Graph) -> dict[str, list[tuple[Layer, int]]]:
    """For every Input top: the (layer, bottom slot) pairs that read it, looking through Splits."""
    readers: dict[str, list[tuple[Layer, int]]] = {b.name: [] for b in graph.input_blobs()}
    for layer in graph.layers:
        if layer.type in ("Split", "Input"):
            continue
        for slot, blob in enumerate(layer.inputs):
            src = _source(blob)
            if src.name in readers and src.producer is not None and src.producer.type == "Input":
                readers[src.name].append((layer, slot))
    return readers


def _head_dim_of(layer: Layer) -> int | None:
    """The row width of a RotaryEmbed's x: walk up one-bottom layers (Permute, RMSNorm, ...) to a Reshape."""
    blob = layer.inputs[0]
    for _ in range(16):
        producer = _source(blob).producer
        if producer is None or len(producer.inputs) != 1:
            return None
        if producer.type == "Reshape":
            w = producer.get("w")
            return int(w) if isinstance(w, int) and w > 0 else None
        if producer.type not in ("Permute", "RMSNorm", "LayerNorm", "Noop", "Swish", "BatchNorm"):
            return None
        blob = producer.inputs[0]
    return None


def _width_read_by(layer: Layer) -> int | None:
    """The input width a hidden-state reader expects, if its params say so."""
    if layer.type in ("RMSNorm", "LayerNorm"):
        size = layer.get("affine_size")
        return int(size) if size else None
    if layer.type == "Gemm" and layer.get("constantB") and layer.get("constantK"):
        return int(layer.get("constantK"))
    if layer.type == "InnerProduct" and layer.get("num_output"):
        return int(layer.get("weight_data_size")) // int(layer.get("num_output"))
    return None


def inspect_decoder(
    param: PathLike | Graph, *, head_dim: int | None = None, output: str | None = None
) -> DecoderSignature:
    """Find the blob roles of a KV-cache decoder (see the module docstring). ``head_dim`` and ``output``
    override what the graph says (needed only when a Reshape uses ``6=`` or several leaves remain)."""
    graph = param if isinstance(param, Graph) else read_param_text(param)
    where = graph.source or str(param)
    readers = _readers(graph)

    attention = [
        layer for layer in graph.layers if layer.type in ATTENTION_TYPES and layer.get("kv_cache") == 1
    ]
    if not attention:
        raise KVDecoderError(f"{where}: no SDPA/MultiHeadAttention layer with 7=1 (kv_cache)")
    ropes = [layer for layer in graph.layers if layer.type == "RotaryEmbed"]
    if not ropes:
        raise KVDecoderError(f"{where}: no RotaryEmbed layer (cos/sin inputs cannot be identified)")

    roles: dict[str, set[str]] = {name: set() for name in readers}
    cache_of: dict[str, CacheSlot] = {}
    for name, uses in readers.items():
        for layer, slot in uses:
            n = len(layer.inputs)
            if layer in attention and slot >= n - 2:
                kind: Literal["k", "v"] = "k" if slot == n - 2 else "v"
                if len(layer.outputs) != 3:
                    raise KVDecoderError(
                        f"{where}: {layer.name} has 7=1 but {len(layer.outputs)} tops, not 3"
                    )
                out = layer.outputs[1 if kind == "k" else 2].name
                if name in cache_of:
                    raise KVDecoderError(f"{where}: cache input {name!r} is read by two attention slots")
                cache_of[name] = CacheSlot(input=name, output=out, layer=layer.name, kind=kind)
                roles[name].add("cache")
            elif layer in attention and layer.get("attn_mask") == 1 and slot == n - 3:
                roles[name].add("mask")
            elif layer.type == "RotaryEmbed" and slot in (1, 2):
                roles[name].add("cos" if slot == 1 else "sin")
            else:
                roles[name].add("hidden")

    def only(role: str, required: bool = True) -> str | None:
        names = [name for name, r in roles.items() if role in r]
        if len(names) > 1 or (required and not names):
            raise KVDecoderError(f"{where}: expected one {role} input, found {names}")
        return names[0] if names else None

    for name, r in roles.items():
        if len(r) > 1:
            raise KVDecoderError(f"{where}: input {name!r} plays several roles: {sorted(r)}")
    hidden, cos, sin = only("hidden"), only("cos"), only("sin")
    assert hidden is not None and cos is not None and sin is not None
    mask = only("mask", required=False)

    for layer in attention:
        fed = [_source(b).name for b in layer.inputs[-2:]]
        if any(name not in cache_of for name in fed):
            raise KVDecoderError(f"{where}: {layer.name}'s past caches {fed} are not graph inputs")
    caches = tuple(cache_of[b.name] for b in graph.input_blobs() if b.name in cache_of)

    cache_outputs = {slot.output for slot in caches}
    leaves = [b.name for b in graph.output_blobs() if b.name not in cache_outputs]
    if output is None:
        if len(leaves) != 1:
            raise KVDecoderError(f"{where}: expected one output besides the caches, found {leaves}")
        output = leaves[0]
    elif output not in graph.blobs:
        raise KVDecoderError(f"{where}: no blob named {output!r}")

    interleaved = {int(layer.get("interleaved")) for layer in ropes}
    if len(interleaved) != 1:
        raise KVDecoderError(f"{where}: RotaryEmbed layers mix interleaved 0 and 1")
    if head_dim is None:
        dims = {_head_dim_of(layer) for layer in ropes}
        if len(dims) != 1 or None in dims:
            raise KVDecoderError(f"{where}: cannot tell the head dim from the graph ({dims}); pass head_dim=")
        head_dim = dims.pop()
    assert head_dim is not None

    widths = [_width_read_by(layer) for layer, _ in readers[hidden]]
    hidden_size = next((w for w in widths if w), None)

    return DecoderSignature(
        param=where,
        hidden=hidden,
        mask=mask,
        cos=cos,
        sin=sin,
        output=output,
        caches=caches,
        attention_layers=tuple(layer.name for layer in attention),
        head_dim=head_dim,
        hidden_size=hidden_size,
        rope_interleaved=interleaved.pop() == 1,
    )
