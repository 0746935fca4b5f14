"""Copying unchanged .bin records into an output file in the kernel, one copy per run of adjacent records.

Records that follow each other in the same source file are merged into one run and copied with
``copy_file_range`` from the source's already-open descriptor (explicit offsets, so no file position is
shared), falling back to ``pread`` + ``write`` in bounded chunks where the kernel refuses. An unchanged model
is therefore one copy of the whole file, as ``shutil.copyfile`` makes, instead of one per weight; neither path
touches the memory map, so the copy adds nothing to RSS.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from graphsurgeon.errors import BinFormatError
from graphsurgeon.ir.weights import BinRegion, MappedBin

#: Bytes per pread in the fallback path.
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
    done, in_kernel = 0, hasattr(os, "copy_file_range")
    while done < nbytes:
        n = 0
        if in_kernel:
            try:
                n = os.copy_file_range(in_fd, out_fd, nbytes - done, offset + done)
            except OSError:
                in_kernel = False  # e.g. EXDEV or EOPNOTSUPP on some filesystems: copy through user space
        if not in_kernel:
            chunk = os.pread(in_fd, min(FALLBACK_CHUNK, nbytes - done), offset + done)
            n = len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(out_fd, view) :]
        if n == 0:
            raise BinFormatError("source .bin shrank while it was being copied", path=source.path)
        done += n
