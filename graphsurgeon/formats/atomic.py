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


class AtomicGroup:
    """Outputs that must appear together (a .param and its .bin): each is written, fsynced and checked as a
    temporary file, and only when the whole group succeeded are they all renamed into place. If anything
    fails, every temporary file is removed and every target is left as it was."""

    def __init__(self) -> None:
        self._pending: list[tuple[str, str]] = []

    def __enter__(self) -> AtomicGroup:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        pending, self._pending = self._pending, []
        if exc_type is not None:
            for tmp, _ in pending:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return
        for tmp, target in pending:
            os.replace(tmp, target)
        for folder in {os.path.dirname(target) for _, target in pending}:
            _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    with contextlib.suppress(OSError):  # make renames durable
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike[str],
    check: Callable[[str], None] | None = None,
    group: AtomicGroup | None = None,
) -> Iterator[BinaryIO]:
    """Yield a binary handle on a temporary file beside ``path``. On a clean exit the file is fsynced,
    ``check(temp_path)`` runs on the finished bytes, and only then is it renamed over ``path`` (or, within a
    ``group``, handed to the group to rename with the others). On any error the temporary file is removed
    and ``path`` is untouched."""
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
        if group is not None:
            group._pending.append((tmp, target))
            return
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, group: AtomicGroup | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (with the rest of ``group``, when given)."""
    with atomic_output(path, group=group) as fh:
        fh.write(data)
