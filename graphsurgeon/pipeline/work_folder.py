"""The work folder of a run's pnnx exports, and the clearing of those a killed run left behind.

A run's work folder is ``.<out>.gsurg-work-<random>`` beside its ``--out`` folder (``gsurg-work-<random>`` in
the system's temporary folder without one). It holds ``.gsurg-work.lock``, which the live run keeps
``flock``-ed from creating the folder until removing it: the kernel drops the lock when the process dies,
by any means (kill -9 included), so a lock that can be taken means its run is over. Before making its own,
a run removes every sibling work folder of its kind whose lock it can take: folders of this user, not
symbolic links, whose lock file is a regular file. A folder kept with ``--keep-work`` has its lock file
removed when its run ends, so no later run takes it for a dead one; a folder with no lock file at all (a run
killed between making the folder and its lock, a window of one system call) is left alone too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = ".gsurg-work.lock"
_SUFFIX = ".gsurg-work-"


@dataclass
class WorkFolder:
    """A live run's work folder and the descriptor holding its lock."""

    path: Path
    fd: int

    def close(self, *, keep: bool) -> None:
        """Remove the folder, or with ``keep`` leave it without its lock (so no later run clears it)."""
        try:
            if keep:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path / LOCK_NAME)
            else:
                shutil.rmtree(self.path, ignore_errors=True)
        finally:
            os.close(self.fd)


def _prefix_and_parent(out: str | None) -> tuple[str, Path]:
    if out is None:
        return "gsurg-work-", Path(tempfile.gettempdir())
    base = Path(out).resolve()
    return f".{base.name}{_SUFFIX}", base.parent


def _dead(folder: Path) -> bool:
    """Whether ``folder``'s lock file is this user's regular file and can be locked: its run died."""
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: a live run's
        return True
    finally:
        os.close(fd)


def clear_dead(out: str | None) -> list[Path]:
    """Remove the work folders of ``out``'s kind whose runs died; returns them."""
    prefix, parent = _prefix_and_parent(out)
    cleared = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        folder = Path(entry.path)
        if _dead(folder):
            shutil.rmtree(folder, ignore_errors=True)
            cleared.append(folder)
    return cleared


def make_work_folder(out: str | None) -> WorkFolder:
    """Clear the dead runs' folders, then make this run's, locked."""
    clear_dead(out)
    prefix, parent = _prefix_and_parent(out)
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return WorkFolder(path, fd)
