"""Copying unchanged .bin records into an output file in the kernel, one copy per run of adjacent records.

Records that follow each other in the same source file are merged into one run, so an unchanged model is one
sequential copy of the whole file, as ``shutil.copyfile`` makes, instead of one per weight. A run is copied
with ``copy_file_range`` from the source's already-open descriptor (explicit offsets, so no file position is
shared) in pieces of ``PIECE`` bytes, and before each piece the next one is announced to the kernel with
``POSIX_FADV_WILLNEED``, so reading it from disk overlaps copying this one. Without that hint a copy from a
cold page cache depends on the kernel's own readahead keeping up, which it did or not depending on what the
disk had just been doing (measured in benchmarks/README.md). Where the kernel refuses ``copy_file_range``,
a piece goes through ``pread`` + ``write``. Neither path touches the memory map, so copying adds nothing to
RSS.
"""

from __future__ import annotations

import contextlib
import os
from typing import BinaryIO

from graphsurgeon.errors import BinFormatError
from graphsurgeon.ir.weights import BinRegion, MappedBin

#: Bytes per copy; the next piece is prefetched while one is copied.
PIECE = 32 << 20
#: Bytes per pread in the fallback path (bounds the buffer it holds).
FALLBACK_CHUNK = 8 << 20


class RecordCopier:
    """Collects unchanged records in file order and copies each run of adjacent ones at once.

    Call ``add`` for every unchanged record in output order and ``flush`` before writing anything else to
    ``out`` (and at the end); ``copies`` counts the copies made, one per run.
    """

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._run: tuple[MappedBin, int, int] | None = None  # source, first byte, length
        self.copies = 0

    def add(self, region: BinRegion) -> None:
        run = self._run
        if run is not None and run[0] is region.file and run[1] + run[2] == region.offset:
            self._run = (run[0], run[1], run[2] + region.nbytes)
            return
        self.flush()
        self._run = (region.file, region.offset, region.nbytes)

    def flush(self) -> None:
        if self._run is None:
            return
        source, offset, nbytes = self._run
        self._run = None
        self._out.flush()  # the kernel writes at the descriptor's position: buffered bytes go first
        _copy_range(source, offset, nbytes, self._out.fileno())
        self.copies += 1


def _copy_range(source: MappedBin, offset: int, nbytes: int, out_fd: int) -> None:
    in_fd = source.fileno()
    in_kernel = hasattr(os, "copy_file_range")
    end = offset + nbytes
    _prefetch(in_fd, offset, min(PIECE, nbytes))
    pos = offset
    while pos < end:
        piece = min(PIECE, end - pos)
        _prefetch(in_fd, pos + piece, min(PIECE, end - pos - piece))
        stop = pos + piece
        while pos < stop:
            n = 0
            if in_kernel:
                try:
                    n = os.copy_file_range(in_fd, out_fd, stop - pos, pos)
                except OSError:
                    in_kernel = False  # e.g. EXDEV or EOPNOTSUPP on some filesystems: through user space
            if not in_kernel:
                chunk = os.pread(in_fd, min(FALLBACK_CHUNK, stop - pos), pos)
                n = len(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out_fd, view) :]
            if n == 0:
                raise BinFormatError("source .bin shrank while it was being copied", path=source.path)
            pos += n


def _prefetch(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start reading ``[offset, offset + nbytes)`` now (a hint: errors are ignored)."""
    if nbytes > 0 and hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_WILLNEED)
