"""Shared by the benchmark scripts: drop files from the page cache so a read case starts cold."""

from __future__ import annotations

import os


def drop_from_page_cache(*paths: str | os.PathLike[str]) -> None:
    """Flush and drop the files' pages (POSIX_FADV_DONTNEED; no privileges needed)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
