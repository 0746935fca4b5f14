"""Atomic output: write a temporary file in the destination folder, fsync, then rename over the target.

An interrupted run leaves the old file or none, never half a file. Inputs are never opened for writing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import BinaryIO

from graphsurgeon.errors import GsurgError


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike[str], check: Callable[[str], None] | None = None
) -> Iterator[BinaryIO]:
    """Yield a binary handle on a temporary file beside ``path``. On a clean exit the file is fsynced,
    ``check(temp_path)`` runs on the finished bytes, and only then is it renamed over ``path``. On any error
    the temporary file is removed and ``path`` is untouched."""
    target = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise GsurgError(f"{target}: cannot create output: {err.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if check is not None:
            check(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    with atomic_output(path) as fh:
        fh.write(data)
