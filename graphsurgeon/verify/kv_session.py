"""Run a KV-cache decoder (.param/.bin) in the ``ncnn`` wheel step by step, with exact fp32 options.

The graph's blob roles come from ``kv_signature.inspect_decoder``; cos/sin and the mask from ``rope``.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

import ncnn
import numpy as np

from graphsurgeon.formats.model_bin import walk_bin
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.verify.errors import KVDecoderError
from graphsurgeon.verify.kv_signature import CacheSlot, PathLike, inspect_decoder
from graphsurgeon.verify.ncnn_fp32 import Precision, load_net
from graphsurgeon.verify.rope import RopeWidth, causal_mask, rope_inv_freq, rope_tables

CacheBytesKind = Literal["logical", "allocated"]


def _as_rows(hidden: np.ndarray, width: int | None, what: str) -> np.ndarray:
    x = np.asarray(hidden, dtype=np.float32)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.ndim != 2 or x.shape[0] < 1:
        raise KVDecoderError(f"{what}: hidden states must be [T, hidden] with T >= 1, got shape {x.shape}")
    if width is not None and x.shape[1] != width:
        raise KVDecoderError(f"{what}: hidden width {x.shape[1]} but the graph reads {width}")
    return np.ascontiguousarray(x)


def _mat_2d(arr: np.ndarray) -> ncnn.Mat:
    """A freshly allocated 2D Mat ``h=rows, w=cols`` holding a copy of ``arr`` (never wraps numpy memory)."""
    rows, cols = arr.shape
    mat = ncnn.Mat(cols, rows)
    np.asarray(mat)[...] = arr
    return mat


# ---- loading and running ----------------------------------------------------------------------------------


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
        precision: Precision = "fp32",
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
        self._net: ncnn.Net | None = load_net(
            self.param, self.model, num_threads=num_threads, precision=precision
        )

    @property
    def net(self) -> ncnn.Net:
        if self._net is None:
            raise KVDecoderError(f"{self.param}: the decoder is closed")
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
            raise KVDecoderError(f"prefill on a session already at position {self._position}")
        return self.append(hidden)

    def decode_step(self, hidden: np.ndarray) -> StepResult:
        """One token ``hidden [1, H]`` (or ``[H]``) at the current position, after a prefill."""
        x = np.asarray(hidden)
        if self._position == 0:
            raise KVDecoderError("decode_step before prefill")
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
            raise KVDecoderError(f"decode_step takes one token [1, H], got shape {x.shape}")
        return self.append(x)

    def append(self, hidden: np.ndarray) -> StepResult:
        """Any number of tokens at the current position (chunked prefill); the caches grow by T."""
        if self._allocator is None:
            raise KVDecoderError("the session is closed")
        if self._broken is not None:
            raise KVDecoderError(f"the session failed earlier and its caches are unusable: {self._broken}")
        decoder, sig = self.decoder, self.decoder.signature
        net = decoder.net
        feeds = decoder.step_inputs(hidden, self._position)
        t = feeds[sig.hidden].shape[0]
        if sig.mask is None and t > 1:
            raise KVDecoderError(f"{decoder.param}: no mask input, so a {t}-token step would not be causal")
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
                raise KVDecoderError(
                    f"{decoder.param}: {sig.output!r} is {result.shape}, expected {expected}"
                )
            for slot in sig.caches:
                mat = new[slot.input]
                if mat.dims != 3 or mat.h != self._position + t:
                    raise KVDecoderError(
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
            raise KVDecoderError(f"{self.decoder.param}: {call}({blob!r}) returned {ret}")

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
