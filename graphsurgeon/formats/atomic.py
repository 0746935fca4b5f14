"""Atomic outputs: a group of files (a .param and its .bin, a provenance sidecar, several graphs' files) is
replaced as one, and a kill at any instant leaves the old set or the new set.

The protocol of one group (each step is a ``fault_point`` the tests kill at):

1. The first time the group writes into a folder it completes or cleans up what interrupted runs left there
   (recovery.py), then creates and flocks its lock file there (staging.py: the lock tells later runs
   whether this run is alive, pids being reused). The first such folder is the group's commit folder.
2. Each output is written to a staging file beside its target, flushed, fsynced and checked (write_bin
   re-walks its .bin). The staging file is created with mode 0666 and the kernel applies the umask (and
   any default ACL) itself, exactly as for a plain ``open()``; nothing reads the umask, so there is no race
   with other threads changing it. An overwritten target's permission bits are copied instead.
3. Commit point. The staging folders other than the commit folder are fsynced (their staging names are
   durable); a journal listing every (staging, target) rename is written into the commit folder as
   ``.journal.new``, fsynced, and renamed to ``.journal``; the commit folder is fsynced (which makes its
   staging names durable too). Before that rename a kill leaves the old set; from it on the new set is
   decided. A group of one file has no journal: its own rename is the commit point.
4. The renames run, their folders are fsynced, the journal is removed, then the lock files are removed and
   released.

A kill before 3 leaves the old set plus hidden staging and lock files, which the next gsurg run writing
into the folder removes (reporting the count and size). A kill during 4 leaves some targets new and some
old, and the committed journal: the next gsurg run writing into any of the group's folders completes the
renames. Readers never complete anything (inputs are never modified); they warn when a file they read is
the target of a pending journal.

Why a journal rather than a staging folder published with ``renameat2(RENAME_EXCHANGE)``, which would hide
even the window in step 4? The exchange covers one folder, but ``fmt -o a/x.param --out-bin b/x.bin`` spans
two; the swapped-in folder would have to carry every other file the user keeps there (hard links; subfolders
cannot be hard-linked and would have to be moved); anything written into the folder by someone else during
the run would vanish with the old folder; and the folder's inode would change under every process that has
it open or as its working directory. The journal touches only its own targets, works on any POSIX
filesystem and across folders, and its window (a few renames) is repaired by the next run.

Errors: an OSError while writing or committing becomes an ``OutputError`` that names the output as the
caller spelled it and the system's reason (``out/m.bin: cannot write: No space left on device``); the old
files stay and the group's own files are removed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from graphsurgeon.errors import GsurgError, OutputError
from graphsurgeon.formats.faults import fault_point
from graphsurgeon.formats.outpaths import ensure_folder, existing_mode
from graphsurgeon.formats.recovery import recover_folder
from graphsurgeon.formats.staging import (
    PREFIX,
    HeldLock,
    create_new,
    fsync_dir,
    hold_lock,
    is_own_name,
    journal_bytes,
    journal_name,
    journal_new_name,
    new_token,
    staging_name,
)


@dataclass(frozen=True)
class _Staged:
    index: int
    shown: str  # the output as the caller spelled it (for messages)
    folder: str  # the real path of its folder
    target: str
    staging: str


class AtomicGroup:
    """Outputs that must appear together. Each ``atomic_output(..., group=g)`` writes, fsyncs and checks a
    staging file; when the ``with`` block ends cleanly they are all committed at one instant (see the
    module docstring); if it raises, every staging file is removed and every target is left as it was."""

    def __init__(self) -> None:
        self._token = new_token()
        self._locks: dict[str, HeldLock] = {}
        self._shown_folders: dict[str, str] = {}
        self._staged: list[_Staged] = []
        self._count = 0
        self._committed = False  # a journal is committed: on a later error, keep the locks that lead to it

    def __enter__(self) -> AtomicGroup:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self._abort()
            return
        staged, self._staged = self._staged, []
        try:
            if len(staged) == 1:
                self._rename_one(staged[0])
            elif staged:
                self._commit(staged)
        except BaseException:
            self._release(remove=not self._committed)
            raise
        self._release(remove=True)

    # ---- staging ------------------------------------------------------------------------------------

    def _stage(self, path: str | os.PathLike[str]) -> tuple[int, _Staged]:
        shown = os.fspath(path)
        refuse_own_name(shown)
        folder = os.path.realpath(os.path.dirname(os.path.abspath(shown)))
        target = os.path.join(folder, os.path.basename(shown))
        if not os.path.isdir(folder):
            raise OutputError(f"{shown}: cannot write: its folder {os.path.dirname(shown)} does not exist")
        mode = existing_mode(target, shown)
        self._enter(folder, shown)
        staged = _Staged(
            self._count,
            shown,
            folder,
            target,
            os.path.join(folder, staging_name(self._token, self._count, os.path.basename(target))),
        )
        self._count += 1
        try:
            fd = os.open(staged.staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except OSError as err:
            raise OutputError(f"{shown}: cannot create: {err.strerror}") from None
        try:
            if mode is not None:
                os.fchmod(fd, mode)
        except OSError as err:
            os.close(fd)
            _unlink(staged.staging)
            raise OutputError(
                f"{shown}: cannot give the new file the old mode {mode:o}: {err.strerror}"
            ) from None
        return fd, staged

    def _enter(self, folder: str, shown: str) -> None:
        if folder in self._locks:
            return
        shown_folder = os.path.dirname(shown) or "."
        recover_folder(folder, shown_folder)
        commit_folder = next(iter(self._locks), folder)
        try:
            self._locks[folder] = hold_lock(folder, self._token, os.path.relpath(commit_folder, folder))
        except OSError as err:
            raise OutputError(f"{shown}: cannot create a file in its folder: {err.strerror}") from None
        self._shown_folders[folder] = shown_folder
        fault_point(f"locked:{len(self._locks) - 1}")

    # ---- commit ------------------------------------------------------------------------------------

    def _rename_one(self, staged: _Staged) -> None:
        try:
            os.replace(staged.staging, staged.target)
        except OSError as err:
            _unlink(staged.staging)
            raise OutputError(f"{staged.shown}: cannot replace: {err.strerror}") from None
        fault_point("renamed:0")
        with contextlib.suppress(OSError):
            fsync_dir(staged.folder)

    def _commit(self, staged: list[_Staged]) -> None:
        commit_folder = next(iter(self._locks))
        folders = list(dict.fromkeys(s.folder for s in staged))
        journal = os.path.join(commit_folder, journal_name(self._token))
        journal_new = os.path.join(commit_folder, journal_new_name(self._token))
        try:
            for folder in folders:  # the commit folder's own fsync below covers its staging names
                if folder != commit_folder:
                    fsync_dir(folder)
            fault_point("synced")
            renames = [(s.staging, s.target) for s in staged]
            create_new(journal_new, journal_bytes(self._token, commit_folder, renames))
            fault_point("journal-written")
            os.replace(journal_new, journal)
            fsync_dir(commit_folder)
        except OSError as err:
            for s in staged:
                _unlink(s.staging)
            _unlink(journal_new)
            shown = self._shown_folders[commit_folder]
            raise OutputError(f"{shown}: cannot write the commit journal: {err.strerror}") from None
        self._committed = True
        fault_point("committed")
        for i, s in enumerate(staged):
            try:
                os.replace(s.staging, s.target)
            except OSError as err:
                raise OutputError(
                    f"{s.shown}: cannot replace: {err.strerror}; the commit is recorded in {journal}, and "
                    f"the next gsurg run that writes into {self._shown_folders[s.folder]} completes it"
                ) from None
            fault_point(f"renamed:{i}")
        with contextlib.suppress(
            OSError
        ):  # the journal stays valid until removed, so durability is best effort
            for folder in folders:
                fsync_dir(folder)
        _unlink(journal)
        fault_point("journal-removed")

    def _abort(self) -> None:
        staged, self._staged = self._staged, []
        for s in staged:
            _unlink(s.staging)
        self._release(remove=True)

    def _release(self, *, remove: bool) -> None:
        locks, self._locks = self._locks, {}
        for k, lock in enumerate(locks.values()):
            lock.release(remove=remove)
            fault_point(f"unlocked:{k}")


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _write_error(err: OSError, staged: _Staged) -> GsurgError:
    filename = None if err.filename is None else os.fsdecode(err.filename)
    reason = err.strerror or str(err)
    if filename is not None and filename != staged.staging:
        return GsurgError(f"{filename}: {reason} (while writing {staged.shown})")
    return OutputError(f"{staged.shown}: cannot write: {reason}")


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike[str],
    check: Callable[[str], None] | None = None,
    group: AtomicGroup | None = None,
) -> Iterator[BinaryIO]:
    """Yield a binary handle on a staging file beside ``path``. On a clean exit the file is flushed and
    fsynced, ``check(staging_path)`` runs on the finished bytes, and the file is handed to ``group`` to
    commit with the others (without a group, it replaces ``path`` at once, as a group of one). On any
    error the staging file is removed and ``path`` is untouched; OSErrors become errors naming ``path``."""
    if group is None:
        with AtomicGroup() as own, atomic_output(path, check, own) as fh:
            yield fh
        return
    fd, staged = group._stage(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fault_point(f"created:{staged.index}")
            yield fh
            fh.flush()
            fault_point(f"written:{staged.index}")
            os.fsync(fh.fileno())
        if check is not None:
            check(staged.staging)
    except OSError as err:
        _unlink(staged.staging)
        raise _write_error(err, staged) from None
    except BaseException:
        _unlink(staged.staging)
        raise
    group._staged.append(staged)
    fault_point(f"staged:{staged.index}")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, group: AtomicGroup | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (with the rest of ``group``, when given)."""
    with atomic_output(path, group=group) as fh:
        fh.write(data)


def refuse_own_name(path: str) -> None:
    """An output named like gsurg's own lock, journal or staging files (``.gsurg-…``) is refused."""
    if is_own_name(os.path.basename(path)):
        raise OutputError(
            f"{path}: cannot write: names starting with {PREFIX} are gsurg's own (its locks, journals and "
            "staging files); choose another name"
        )


def prepare_output(path: str) -> None:
    """Before a command reads its inputs: create the output's folder, refuse a target that is a folder or
    not a regular file, and complete or clean up interrupted runs in that folder (so an input kept there is
    read whole). Errors name ``path``."""
    refuse_own_name(path)
    folder = os.path.dirname(path) or "."
    ensure_folder(folder, path)
    existing_mode(path, path)
    recover_folder(folder, folder)
