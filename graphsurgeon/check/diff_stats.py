"""Streaming comparison of two weights: chunked reads, float64 statistics, Polygraphy-style tolerances.

Each side is a ``ValueSource`` (``formats.chunked``) that yields its elements as float32 in C order, a chunk
at a time, so one pair costs a few chunk-sized buffers however large the weight. Chunks that are bit for bit
equal cost a byte comparison and one dot; the others are folded in float64 by ``diff_fold``, cut into parts
for worker threads when large and when cores are idle.

The check is Polygraphy's ``|a - b| <= atol + rtol * |b|`` with ``b`` the reference (second) side. Two NaNs
at the same place, or two equal infinities, count as equal; any other pair involving a NaN or an infinity
differs by +inf, so it fails every tolerance.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from graphsurgeon.check.diff_fold import Accumulator, PairStats, Scratch, Tolerance
from graphsurgeon.formats.chunked import ValueSource

__all__ = ["CHUNK_ELEMS", "MAX_CHUNK_ELEMS", "MAX_JOBS", "Comparator", "PairStats", "Tolerance", "idle_cores"]

#: Elements per chunk read from each side: 256 Ki keeps the scratch (at most 4 × 2 MiB float64 per thread) in
#: the L3 cache; on a 2-core EPYC 128-256 Ki were fastest among 32 Ki..512 Ki (smaller chunks pay numpy's
#: per-call cost; benchmarks/bench_diff_bin.py).
CHUNK_ELEMS = 1 << 18
MAX_CHUNK_ELEMS = 8 << 20
#: Worker threads for differing chunks (numpy's loops release the GIL), and the smallest part worth one.
MAX_JOBS = 4
MIN_PART = 1 << 16


def idle_cores() -> int:
    """The default thread count: the cores the last minute's load average leaves idle (at least 1).

    A worker thread helps only on a core nobody else wants: on a busy machine it waits for a time slice at
    every chunk and adds work (measured on a loaded 2-core machine: the same diff took about 1.4x the CPU
    time with 2 threads as with 1, and as long in wall time)."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        return cores
    return max(1, min(cores, int(cores - load + 0.5)))


def _same_bytes(x: bytes | memoryview, y: bytes | memoryview) -> bool:
    """Bit-for-bit equality: a prefix first (differing chunks usually differ there), then 8 bytes a step."""
    if len(x) != len(y):
        return False
    head = min(len(x), 64)
    if bytes(x[:head]) != bytes(y[:head]):
        return False
    wide = len(x) - len(x) % 8
    body = np.array_equal(np.frombuffer(x, np.uint64, wide // 8), np.frombuffer(y, np.uint64, wide // 8))
    return bool(body) and bytes(x[wide:]) == bytes(y[wide:])


def _first_byte(x: bytes | memoryview, y: bytes | memoryview) -> int | None:
    """The first index where ``x`` and ``y`` differ (``y`` may be shorter), or None."""
    if _same_bytes(x, y):
        return None
    n = min(len(x), len(y))
    neq = np.frombuffer(x, np.uint8, n) != np.frombuffer(y, np.uint8, n)
    return int(np.argmax(neq)) if neq.any() else n


class Comparator:
    """Compares pairs of sources with shared scratch buffers."""

    def __init__(self, tol: Tolerance, chunk: int = CHUNK_ELEMS, jobs: int | None = None) -> None:
        if not 1 <= chunk <= MAX_CHUNK_ELEMS:
            raise ValueError(f"chunk must be in 1..{MAX_CHUNK_ELEMS} elements")
        self.tol = tol
        self.chunk = chunk
        self.jobs = max(1, min(MAX_JOBS, jobs if jobs is not None else idle_cores()))
        self.scratch = [Scratch() for _ in range(self.jobs)]
        self._pool: ThreadPoolExecutor | None = None
        self.bytes_read = 0

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _add(self, acc: Accumulator, start: int, va: np.ndarray, vb: np.ndarray, same: bool) -> None:
        """Fold one chunk into ``acc``; large differing chunks are cut into ``jobs`` parts, the first computed
        here and the others in worker threads (numpy releases the GIL in its loops), merged in order. Each
        part starts from the ratio maxima so far, which bound its pruning."""
        n = va.size
        if self.jobs == 1 or same or n < 2 * MIN_PART:
            acc.add(start, va, vb, same)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.jobs - 1, thread_name_prefix="diff-bin")
        cuts = [n * k // self.jobs for k in range(self.jobs + 1)]
        parts = [Accumulator(self.tol, scratch) for scratch in self.scratch]
        for part in parts:
            part.max_rel, part.req_rtol = acc.max_rel, acc.req_rtol
        futures = [
            self._pool.submit(part.add, start + lo, va[lo:hi], vb[lo:hi], same)
            for part, lo, hi in zip(parts[1:], cuts[1:-1], cuts[2:], strict=True)
        ]
        parts[0].add(start, va[: cuts[1]], vb[: cuts[1]], same)
        for future in futures:
            future.result()
        for part in parts:
            acc.merge(part)

    def compare(self, a: ValueSource, b: ValueSource) -> PairStats:
        """Stream both sources (equal ``count``) chunk by chunk."""
        if a.count != b.count:
            raise ValueError("sources of different sizes")
        acc = Accumulator(self.tol, self.scratch[0])
        by_bytes = bool(a.encoding) and a.encoding == b.encoding
        first: tuple[int, int] | None = None
        first_at: int | None = None
        if by_bytes:
            (ha, hx), (hb, hy) = a.header(), b.header()
            j = _first_byte(hx, hy)
            if j is not None:
                first = (ha + j, hb + j)
        for start in range(0, a.count, self.chunk):
            stop = min(a.count, start + self.chunk)
            va, ra = a.read(start, stop)
            vb, rb = b.read(start, stop)
            self.bytes_read += (len(ra) if ra is not None else va.nbytes) + (
                len(rb) if rb is not None else vb.nbytes
            )
            if by_bytes and ra is not None and rb is not None:
                same = _same_bytes(ra, rb)
                j = None if same or first is not None else _first_byte(ra, rb)
                if j is not None:
                    size = len(ra) // (stop - start)
                    first_at = start + j // size
                    first = (a.element_offset(start) + j, b.element_offset(start) + j)
            else:
                same = bool(np.array_equal(va.view(np.uint32), vb.view(np.uint32)))
                if not same and first is None:
                    neq = (va != vb) & ~(np.isnan(va) & np.isnan(vb))
                    if neq.any():
                        first_at = start + int(np.argmax(neq))
                        first = (a.element_offset(first_at), b.element_offset(first_at))
            self._add(acc, start, va, vb, same)
        if by_bytes and first is None:
            (ta, tx), (tb, ty) = a.trailer(), b.trailer()
            j = _first_byte(tx, ty)
            if j is not None:
                first = (ta + j, tb + j)
        return acc.finish(a.count, first, first_at)
