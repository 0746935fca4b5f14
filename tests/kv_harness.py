"""Run a KV-cache decoder (.param/.bin) in the ``ncnn`` wheel step by step, with exact fp32 options.

The graph convention (the corpus ``llm/*_decoder.ncnn.param`` files, ``docs/ncnn-format.md`` §6 "KV-cache
recipe") is discovered from the graph through gsurg's IR, never from blob names:

* a **hidden** Input ``[T, hidden]`` (2D Mat ``h=T, w=hidden``) read by ordinary layers;
* an additive **mask** Input ``[T, past+T]`` read as the mask bottom of every attention layer (0 = visible,
  ``MASKED`` = -1e38 = masked; a finite value, as nihui/ncnn_llm does, never ``-inf``);
* **cos** / **sin** Inputs read as bottoms 1 and 2 of every ``RotaryEmbed``: one row per query position,
  ``[T, D]`` as HF builds them (``cat(freqs, freqs)``) or ``[T, D/2]``; ``[T, D/2]`` for ``0=1`` interleaved;
* the **past caches**: Input tops read as the last two bottoms of every ``SDPA`` / ``MultiHeadAttention``
  with ``7=1`` (one multi-top ``Input kv_cache`` in the corpus); the updated caches are that layer's tops
  1 and 2 (``out_cache_k*`` / ``out_cache_v*``);
* one remaining leaf blob, the **output** hidden states ``[T, hidden]``.

How the caches are kept (``src/layer/x86/sdpa_kvcache.h``, ``src/net.cpp`` and ``python/src/main.cpp`` of
R1020): the first step feeds an empty Mat for every past cache (past length 0). The SDPA layer allocates each
updated cache from the extractor's kv-cache allocator as an **opaque panel-packed** 3D Mat ``w=D,
h=tokens so far, c=cache heads`` whose ``cstep`` holds spare capacity (``capacity = cstep / w`` rows). The
next step must receive exactly that Mat: it is read with ``ex.extract(name, 1)`` (the default Python
``extract`` clones, which drops the layout) and fed back unchanged, and every step uses the same
``ncnn.UnlockedPoolAllocator`` (a cache is appended in place only when it came from the current kv-cache
allocator; otherwise it is re-copied assuming the packed layout). The allocator must outlive every cache Mat
(otherwise ncnn logs "destroyed too early" and the Mats later free into a deleted pool), so
``KVSession.close`` drops the Mats first. Because caches are
appended in place, a session cannot be forked: run a second session to branch.

Typical use, two graphs side by side (e.g. before and after a rewrite; the .bin may be shared)::

    with KVDecoder(param_a, bin_) as a, KVDecoder(param_b, bin_) as b:
        ta, tb = lockstep([a, b], hidden, schedule=(5, 1, 1, 1))
        assert max_abs_diff(ta, tb) < 1e-5
        print(ta.cache_bytes[-1], tb.cache_bytes[-1])
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

import ncnn
import numpy as np

from graphsurgeon.formats.model_bin import walk_bin
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.ir.graph import Blob, Graph, Layer
from tests.oracle import fp32_net

__all__ = [
    "MASKED",
    "CacheInfo",
    "CacheSlot",
    "DecoderSignature",
    "KVDecoder",
    "KVHarnessError",
    "KVSession",
    "StepResult",
    "Trace",
    "causal_mask",
    "inspect_decoder",
    "llama3_inv_freq",
    "load_fp32_net",
    "lockstep",
    "max_abs_diff",
    "rope_inv_freq",
    "rope_tables",
]

MASKED = np.float32(-1e38)
"""Additive mask value for a hidden key: large and finite, as nihui/ncnn_llm uses (a fully masked row then
gives uniform weights; with ``-inf`` ncnn's softmax would compute 0/0 = NaN)."""

ATTENTION_TYPES = ("SDPA", "MultiHeadAttention")
CacheBytesKind = Literal["logical", "allocated"]
RopeWidth = Literal["full", "half"]
PathLike = str | os.PathLike[str]


class KVHarnessError(RuntimeError):
    """A graph that does not follow the convention, a load failure, or a nonzero ncnn return code."""


# ---- graph discovery ---------------------------------------------------------------------------------------


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
        raise KVHarnessError(f"{where}: no SDPA/MultiHeadAttention layer with 7=1 (kv_cache)")
    ropes = [layer for layer in graph.layers if layer.type == "RotaryEmbed"]
    if not ropes:
        raise KVHarnessError(f"{where}: no RotaryEmbed layer (cos/sin inputs cannot be identified)")

    roles: dict[str, set[str]] = {name: set() for name in readers}
    cache_of: dict[str, CacheSlot] = {}
    for name, uses in readers.items():
        for layer, slot in uses:
            n = len(layer.inputs)
            if layer in attention and slot >= n - 2:
                kind: Literal["k", "v"] = "k" if slot == n - 2 else "v"
                if len(layer.outputs) != 3:
                    raise KVHarnessError(
                        f"{where}: {layer.name} has 7=1 but {len(layer.outputs)} tops, not 3"
                    )
                out = layer.outputs[1 if kind == "k" else 2].name
                if name in cache_of:
                    raise KVHarnessError(f"{where}: cache input {name!r} is read by two attention slots")
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
            raise KVHarnessError(f"{where}: expected one {role} input, found {names}")
        return names[0] if names else None

    for name, r in roles.items():
        if len(r) > 1:
            raise KVHarnessError(f"{where}: input {name!r} plays several roles: {sorted(r)}")
    hidden, cos, sin = only("hidden"), only("cos"), only("sin")
    assert hidden is not None and cos is not None and sin is not None
    mask = only("mask", required=False)

    for layer in attention:
        fed = [_source(b).name for b in layer.inputs[-2:]]
        if any(name not in cache_of for name in fed):
            raise KVHarnessError(f"{where}: {layer.name}'s past caches {fed} are not graph inputs")
    caches = tuple(cache_of[b.name] for b in graph.input_blobs() if b.name in cache_of)

    cache_outputs = {slot.output for slot in caches}
    leaves = [b.name for b in graph.output_blobs() if b.name not in cache_outputs]
    if output is None:
        if len(leaves) != 1:
            raise KVHarnessError(f"{where}: expected one output besides the caches, found {leaves}")
        output = leaves[0]
    elif output not in graph.blobs:
        raise KVHarnessError(f"{where}: no blob named {output!r}")

    interleaved = {int(layer.get("interleaved")) for layer in ropes}
    if len(interleaved) != 1:
        raise KVHarnessError(f"{where}: RotaryEmbed layers mix interleaved 0 and 1")
    if head_dim is None:
        dims = {_head_dim_of(layer) for layer in ropes}
        if len(dims) != 1 or None in dims:
            raise KVHarnessError(f"{where}: cannot tell the head dim from the graph ({dims}); pass head_dim=")
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


# ---- per-position inputs -----------------------------------------------------------------------------------


def rope_inv_freq(head_dim: int, theta: float = 1_000_000.0) -> np.ndarray:
    """HF's default ``inv_freq`` (float32, ``head_dim/2`` values): ``1 / theta^(2j/D)``."""
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    return (1.0 / (np.float32(theta) ** exponent)).astype(np.float32)


def llama3_inv_freq(
    head_dim: int,
    theta: float = 500_000.0,
    factor: float = 32.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position: int = 8192,
) -> np.ndarray:
    """``inv_freq`` with HF's ``rope_type="llama3"`` scaling (Llama 3.2 1B: the defaults)."""
    inv = rope_inv_freq(head_dim, theta).astype(np.float64)
    low_wavelen = original_max_position / low_freq_factor
    high_wavelen = original_max_position / high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(is_mid, mid, scaled).astype(np.float32)


def rope_tables(
    positions: Sequence[int] | np.ndarray, inv_freq: np.ndarray, *, width: RopeWidth = "full"
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin rows for absolute ``positions`` (float32, computed as HF does in float32).

    ``full``: ``[T, D]`` = ``cat(freqs, freqs)`` (HF layout; R1020 RotaryEmbed also accepts a full row whose
    halves differ). ``half``: ``[T, D/2]`` (also the only layout ``0=1`` interleaved reads)."""
    pos = np.asarray(positions, dtype=np.float32).reshape(-1, 1)
    freqs = pos * np.asarray(inv_freq, dtype=np.float32).reshape(1, -1)
    if width == "full":
        freqs = np.concatenate([freqs, freqs], axis=1)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


def causal_mask(start: int, length: int) -> np.ndarray:
    """The additive mask ``[length, start+length]`` for query positions ``start..start+length-1``:
    key ``j`` is visible to query ``start+i`` iff ``j <= start+i`` (0), else ``MASKED``."""
    q = np.arange(start, start + length).reshape(-1, 1)
    k = np.arange(start + length).reshape(1, -1)
    return np.where(k <= q, np.float32(0.0), MASKED).astype(np.float32)


def _as_rows(hidden: np.ndarray, width: int | None, what: str) -> np.ndarray:
    x = np.asarray(hidden, dtype=np.float32)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"{what}: hidden states must be [T, hidden] with T >= 1, got shape {x.shape}")
    if width is not None and x.shape[1] != width:
        raise ValueError(f"{what}: hidden width {x.shape[1]} but the graph reads {width}")
    return np.ascontiguousarray(x)


def _mat_2d(arr: np.ndarray) -> ncnn.Mat:
    """A freshly allocated 2D Mat ``h=rows, w=cols`` holding a copy of ``arr`` (never wraps numpy memory)."""
    rows, cols = arr.shape
    mat = ncnn.Mat(cols, rows)
    np.asarray(mat)[...] = arr
    return mat


# ---- loading and running ----------------------------------------------------------------------------------


def load_fp32_net(param: PathLike, model: PathLike, *, num_threads: int = 1) -> ncnn.Net:
    """``tests/oracle.fp32_net`` (exact fp32 options, threads set before loading), failing with
    KVHarnessError."""
    try:
        return fp32_net(Path(param), Path(model), num_threads=num_threads)
    except RuntimeError as err:
        raise KVHarnessError(str(err)) from None


@dataclass(frozen=True)
class CacheInfo:
    """The geometry of one cache Mat after a step (the data itself is opaque: panel-packed on x86)."""

    input: str
    output: str
    dims: int
    w: int
    h: int  # tokens held
    d: int
    c: int  # cache heads (query heads when k/v are expanded before SDPA, kv heads with native GQA)
    elemsize: int
    elempack: int
    cstep: int

    @property
    def logical_bytes(self) -> int:
        """``w*h*d*c*elemsize``: the bytes of the tokens held. Exactly linear in the token count."""
        return self.w * self.h * self.d * self.c * self.elemsize

    @property
    def allocated_bytes(self) -> int:
        """``cstep*c*elemsize``: the bytes reserved, spare capacity included (``cstep/w`` rows per head)."""
        return self.cstep * self.c * self.elemsize

    @property
    def capacity(self) -> int:
        return self.cstep // (self.w * self.d) if self.w else 0


def _cache_info(slot: CacheSlot, mat: ncnn.Mat) -> CacheInfo:
    return CacheInfo(
        input=slot.input,
        output=slot.output,
        dims=int(mat.dims),
        w=int(mat.w),
        h=int(mat.h),
        d=int(mat.d),
        c=int(mat.c),
        elemsize=int(mat.elemsize),
        elempack=int(mat.elempack),
        cstep=int(mat.cstep),
    )


def _total(caches: Iterable[CacheInfo], kind: CacheBytesKind) -> int:
    if kind == "logical":
        return sum(info.logical_bytes for info in caches)
    if kind == "allocated":
        return sum(info.allocated_bytes for info in caches)
    raise ValueError(f"cache byte kind is 'logical' or 'allocated', not {kind!r}")


@dataclass(frozen=True)
class StepResult:
    """One step: the output hidden states for positions ``start .. start+T-1`` and the caches after it."""

    start: int
    hidden: np.ndarray  # [T, hidden], float32, a copy
    caches: tuple[CacheInfo, ...]

    @property
    def last(self) -> np.ndarray:
        """The last position's hidden state ``[hidden]`` (what a sampler reads)."""
        return self.hidden[-1]

    @property
    def positions(self) -> range:
        return range(self.start, self.start + self.hidden.shape[0])

    def cache_bytes(self, kind: CacheBytesKind = "logical") -> int:
        return _total(self.caches, kind)


class KVDecoder:
    """A loaded decoder graph and its discovered signature; opens independent ``KVSession``s.

    ``inv_freq`` (``head_dim/2`` values) defaults to ``rope_inv_freq(head_dim, rope_theta)``; use
    ``llama3_inv_freq`` for Llama 3. ``rope_width`` picks the cos/sin layout for non-interleaved RoPE.
    ``verify_bin`` walks the .bin against the .param with gsurg first (ncnn accepts some mismatched files).
    """

    def __init__(
        self,
        param: PathLike,
        model: PathLike,
        *,
        num_threads: int = 1,
        rope_theta: float = 1_000_000.0,
        inv_freq: np.ndarray | None = None,
        rope_width: RopeWidth = "full",
        head_dim: int | None = None,
        output: str | None = None,
        verify_bin: bool = True,
    ) -> None:
        self.param = Path(param)
        self.model = Path(model)
        self.num_threads = num_threads
        graph = read_param_text(self.param)
        self.signature = inspect_decoder(graph, head_dim=head_dim, output=output)
        d = self.signature.head_dim
        self.inv_freq = rope_inv_freq(d, rope_theta) if inv_freq is None else np.asarray(inv_freq, np.float32)
        if self.inv_freq.shape != (d // 2,):
            raise ValueError(f"inv_freq must have head_dim/2 = {d // 2} values, got {self.inv_freq.shape}")
        self.rope_width: RopeWidth = "half" if self.signature.rope_interleaved else rope_width
        if verify_bin:
            walk_bin(graph, self.model)  # raises BinFormatError naming the first bad record
        self._net: ncnn.Net | None = load_fp32_net(self.param, self.model, num_threads=num_threads)

    @property
    def net(self) -> ncnn.Net:
        if self._net is None:
            raise KVHarnessError(f"{self.param}: the decoder is closed")
        return self._net

    def step_inputs(self, hidden: np.ndarray, start: int) -> dict[str, np.ndarray]:
        """The non-cache inputs of one step: hidden ``[T, H]``, mask ``[T, start+T]``, cos/sin ``[T, D]``
        (or ``[T, D/2]``) for absolute positions ``start .. start+T-1``."""
        sig = self.signature
        x = _as_rows(hidden, sig.hidden_size, str(self.param))
        t = x.shape[0]
        cos, sin = rope_tables(np.arange(start, start + t), self.inv_freq, width=self.rope_width)
        feeds = {sig.hidden: x, sig.cos: cos, sig.sin: sin}
        if sig.mask is not None:
            feeds[sig.mask] = causal_mask(start, t)
        return feeds

    def session(self, *, max_seqlen_hint: int = 0) -> KVSession:
        return KVSession(self, max_seqlen_hint=max_seqlen_hint)

    def run(self, hidden: np.ndarray, schedule: Sequence[int], *, max_seqlen_hint: int = 0) -> Trace:
        """One fresh session over ``hidden`` (``[sum(schedule), H]``) in chunks of ``schedule`` tokens."""
        return lockstep([self], hidden, schedule, max_seqlen_hint=max_seqlen_hint)[0]

    def close(self) -> None:
        if self._net is not None:
            self._net.clear()
            self._net = None

    def __enter__(self) -> KVDecoder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class KVSession:
    """One sequence: the cache Mats between steps and the kv-cache allocator that owns them."""

    def __init__(self, decoder: KVDecoder, *, max_seqlen_hint: int = 0) -> None:
        decoder.net  # noqa: B018 - raises if the decoder is closed (never extract on an unloaded net)
        self.decoder = decoder
        self.max_seqlen_hint = max_seqlen_hint
        self._allocator: ncnn.UnlockedPoolAllocator | None = ncnn.UnlockedPoolAllocator()
        self._caches: dict[str, ncnn.Mat] = {}
        self._position = 0
        self._broken: str | None = None

    @property
    def position(self) -> int:
        """Tokens held in the caches: the absolute position of the next token."""
        return self._position

    def prefill(self, hidden: np.ndarray) -> StepResult:
        """The first step: ``hidden [T, H]`` for positions ``0..T-1``, empty past caches."""
        if self._position != 0:
            raise KVHarnessError(f"prefill on a session already at position {self._position}")
        return self.append(hidden)

    def decode_step(self, hidden: np.ndarray) -> StepResult:
        """One token ``hidden [1, H]`` (or ``[H]``) at the current position, after a prefill."""
        x = np.asarray(hidden)
        if self._position == 0:
            raise KVHarnessError("decode_step before prefill")
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
            raise ValueError(f"decode_step takes one token [1, H], got shape {x.shape}")
        return self.append(x)

    def append(self, hidden: np.ndarray) -> StepResult:
        """Any number of tokens at the current position (chunked prefill); the caches grow by T."""
        if self._allocator is None:
            raise KVHarnessError("the session is closed")
        if self._broken is not None:
            raise KVHarnessError(f"the session failed earlier and its caches are unusable: {self._broken}")
        decoder, sig = self.decoder, self.decoder.signature
        net = decoder.net
        feeds = decoder.step_inputs(hidden, self._position)
        t = feeds[sig.hidden].shape[0]
        if sig.mask is None and t > 1:
            raise KVHarnessError(f"{decoder.param}: no mask input, so a {t}-token step would not be causal")
        mats = {name: _mat_2d(arr) for name, arr in feeds.items()}
        new: dict[str, ncnn.Mat] = {}
        try:
            with net.create_extractor() as ex:
                ex.set_kvcache_allocator(self._allocator)
                if self.max_seqlen_hint > 0:
                    ex.set_kvcache_max_seqlen_hint(self.max_seqlen_hint)
                for name, mat in mats.items():
                    self._check(ex.input(name, mat), "ex.input", name)
                for slot in sig.caches:  # an empty Mat means past length 0
                    self._check(
                        ex.input(slot.input, self._caches.get(slot.input, ncnn.Mat())), "ex.input", slot.input
                    )
                ret, out = ex.extract(sig.output)
                self._check(ret, "ex.extract", sig.output)
                result = np.array(out, dtype=np.float32)
                for slot in sig.caches:  # type 1 keeps the opaque cache layout and capacity
                    ret, mat = ex.extract(slot.output, 1)
                    self._check(ret, "ex.extract", slot.output)
                    new[slot.input] = mat
            expected = (t, sig.hidden_size) if sig.hidden_size else (t, result.shape[-1])
            if result.shape != expected:
                raise KVHarnessError(
                    f"{decoder.param}: {sig.output!r} is {result.shape}, expected {expected}"
                )
            for slot in sig.caches:
                mat = new[slot.input]
                if mat.dims != 3 or mat.h != self._position + t:
                    raise KVHarnessError(
                        f"{decoder.param}: cache {slot.output!r} holds {mat.h} tokens (dims {mat.dims}), "
                        f"expected {self._position + t}"
                    )
        except BaseException as err:
            new.clear()
            self._broken = str(err)
            raise
        self._caches = new  # the previous Mats may share data with these (appended in place)
        start = self._position
        self._position += t
        return StepResult(start=start, hidden=result, caches=self.cache_infos())

    def _check(self, ret: int, call: str, blob: str) -> None:
        if ret != 0:
            raise KVHarnessError(f"{self.decoder.param}: {call}({blob!r}) returned {ret}")

    def cache_infos(self) -> tuple[CacheInfo, ...]:
        """The current cache Mats' geometry, in the signature's cache order (empty before the first step)."""
        sig = self.decoder.signature
        return tuple(_cache_info(s, self._caches[s.input]) for s in sig.caches if s.input in self._caches)

    def cache_bytes(self, kind: CacheBytesKind = "logical") -> int:
        """KV-cache bytes held now. ``logical`` sums ``w*h*d*c*elemsize`` (the tokens actually held: linear
        in the token count and comparable across graphs); ``allocated`` sums ``cstep*c*elemsize`` (memory
        reserved by SDPA's growth policy, a step function of the token count)."""
        return _total(self.cache_infos(), kind)

    def close(self) -> None:
        """Release the cache Mats, then the allocator they came from (the order ncnn requires)."""
        caches: dict[str, ncnn.Mat] | None = getattr(self, "_caches", None)
        if caches is not None:
            caches.clear()
        allocator: ncnn.UnlockedPoolAllocator | None = getattr(self, "_allocator", None)
        if allocator is not None:
            allocator.clear()
            self._allocator = None

    def __enter__(self) -> KVSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


# ---- schedules and side-by-side runs ----------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    """The steps of one session over a schedule."""

    steps: tuple[StepResult, ...]

    @property
    def hidden(self) -> np.ndarray:
        """All output hidden states ``[N, H]`` in position order."""
        return np.concatenate([s.hidden for s in self.steps], axis=0)

    @property
    def cache_bytes(self) -> list[int]:
        """Logical cache bytes after each step."""
        return [s.cache_bytes("logical") for s in self.steps]

    @property
    def allocated_bytes(self) -> list[int]:
        return [s.cache_bytes("allocated") for s in self.steps]


def _chunks(hidden: np.ndarray, schedule: Sequence[int]) -> list[np.ndarray]:
    x = np.asarray(hidden, dtype=np.float32)
    if any(n < 1 for n in schedule) or sum(schedule) != x.shape[0]:
        raise ValueError(f"schedule {list(schedule)} must be positive and sum to {x.shape[0]} tokens")
    bounds = np.cumsum([0, *schedule])
    return [x[a:b] for a, b in itertools.pairwise(bounds)]


def lockstep(
    decoders: Sequence[KVDecoder],
    hidden: np.ndarray | Mapping[KVDecoder, np.ndarray],
    schedule: Sequence[int],
    *,
    max_seqlen_hint: int = 0,
) -> list[Trace]:
    """Run one fresh session per decoder, interleaving them step by step over the same ``schedule``
    (first chunk = prefill). ``hidden`` is shared, or given per decoder (e.g. different hidden sizes)."""
    sessions = [d.session(max_seqlen_hint=max_seqlen_hint) for d in decoders]
    inputs = [hidden[d] if isinstance(hidden, Mapping) else hidden for d in decoders]
    chunks = [_chunks(x, schedule) for x in inputs]
    steps: list[list[StepResult]] = [[] for _ in decoders]
    try:
        for i in range(len(schedule)):
            for k, session in enumerate(sessions):
                steps[k].append(session.prefill(chunks[k][i]) if i == 0 else session.append(chunks[k][i]))
    finally:
        for session in sessions:
            session.close()
    return [Trace(tuple(s)) for s in steps]


def max_abs_diff(a: Trace | StepResult | np.ndarray, b: Trace | StepResult | np.ndarray) -> float:
    """The largest absolute difference between two runs' hidden states (same shapes required)."""
    xa = a.hidden if isinstance(a, Trace | StepResult) else np.asarray(a)
    xb = b.hidden if isinstance(b, Trace | StepResult) else np.asarray(b)
    if xa.shape != xb.shape:
        raise ValueError(f"shapes differ: {xa.shape} vs {xb.shape}")
    return float(np.max(np.abs(xa.astype(np.float64) - xb.astype(np.float64)))) if xa.size else 0.0
