"""gsurg's own files in an output folder: staging names, the per-run lock and the commit journal.

Every file a run writes before its commit lives in the destination folder under a name that starts with
``.gsurg-<token>``, where the token is 16 random hex digits drawn per group of outputs (per command run):

    .gsurg-<token>.lock            the run's lock in this folder (one per folder the group writes into)
    .gsurg-<token>-<i>.<name>      staging file i, the future <name> (<name> shortened to fit NAME_MAX)
    .gsurg-<token>.journal.new     the commit journal being written (in the group's commit folder)
    .gsurg-<token>.journal         the committed journal: the list of renames that make up the commit

**Who owns what.** A live run holds ``flock(LOCK_EX)`` on each of its lock files from before it creates
its first staging file until after its last rename. The kernel drops the lock when the process dies, by
any means, so "the lock can be taken" means "its run is over": unlike a pid (reused) or pid + start time
(Linux-only, wrong across NFS hosts) it cannot be fooled by reuse. A lock file's content is one JSON line
``{"gsurg": "lock", "version": 1, "pid": ..., "commit_dir": ...}``; ``commit_dir`` is the folder holding
the group's journal, relative to the lock's folder, so a run that finds a dead lock in a folder the
journal is not in can still find and complete the journal. A lock file is only recognised with exactly
this name and either that record or no content at all (a run killed between creating the lock and writing
it); anything else that merely looks like ours is left alone, and so are staging-like names without a
recognised dead lock.

**Journal.** ``{"gsurg": "journal", "version": 1, "token": ..., "renames": [[staging, target], ...]}``
with paths relative to the journal's folder. It is read back only if every pair renames one of this
token's staging files to a non-gsurg name in the same folder, so a damaged or foreign file cannot make a
later run rename arbitrary files.

**Only the user's own files.** Locks, journals and staging files are acted on only when they belong to the
user running gsurg (same uid), so files planted in a shared folder cannot steer a run into removing or
replacing someone else's files. On a filesystem without ``flock`` a run goes on without the protection of
its lock; its leftovers then look live to later runs and stay.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass

PREFIX = ".gsurg-"
_TOKEN = r"[0-9a-f]{16}"
LOCK_RE = re.compile(rf"\.gsurg-({_TOKEN})\.lock")
JOURNAL_RE = re.compile(rf"\.gsurg-({_TOKEN})\.journal")
_NAME_MAX = 255
_LOCK_BYTES_MAX = 4096
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS}


def is_own_name(name: str) -> bool:
    """Whether a file name is in gsurg's own namespace (locks, journals, staging files): an output may not
    take such a name, or a later run's recovery would read it as one of these (or remove it)."""
    return name.startswith(PREFIX)


def owned(st: os.stat_result) -> bool:
    """A regular file of the user running gsurg."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def new_token() -> str:
    return secrets.token_hex(8)


def lock_name(token: str) -> str:
    return f"{PREFIX}{token}.lock"


def journal_name(token: str) -> str:
    return f"{PREFIX}{token}.journal"


def journal_new_name(token: str) -> str:
    return f"{PREFIX}{token}.journal.new"


def staging_name(token: str, index: int, target_name: str) -> str:
    """``.gsurg-<token>-<index>.<target_name>``, the target's name cut (never the prefix) to fit NAME_MAX."""
    name = f"{PREFIX}{token}-{index}.{target_name}"
    while len(os.fsencode(name)) > _NAME_MAX:
        name = name[:-1]
    return name


def is_staging_of(token: str, name: str) -> bool:
    """Whether ``name`` is one of ``token``'s staging files (the journal being written counts)."""
    return (
        name == journal_new_name(token) or re.fullmatch(rf"\.gsurg-{token}-\d+\..*", name, re.S) is not None
    )


def fsync_dir(folder: str) -> None:
    """Make the folder's entries (creations, renames, removals) durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def create_new(path: str, data: bytes) -> None:
    """Create ``path`` (it must not exist) holding ``data``, fsynced; removed again if that fails."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


# ---- the per-run lock --------------------------------------------------------------------------------


@dataclass
class HeldLock:
    """A lock file this process created and holds; released by ``release`` (or by dying)."""

    path: str
    fd: int

    def release(self, *, remove: bool) -> None:
        """Close the lock; with ``remove`` first unlink it (a run that leaves a committed journal behind
        keeps its lock files, which is how the next run finds the journal)."""
        if remove:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        os.close(self.fd)


def hold_lock(folder: str, token: str, commit_dir: str) -> HeldLock:
    """Create ``.gsurg-<token>.lock`` in ``folder``, lock it and write its record (fsynced).

    Between the create and the flock a recovering run may find the file empty and unlocked, take it for a
    dead run's and remove it; the check after flocking notices and creates it again. Nothing else of this
    token exists in the folder yet, so that run had nothing else to remove."""
    path = os.path.join(folder, lock_name(token))
    record = {"gsurg": "lock", "version": 1, "pid": os.getpid(), "commit_dir": commit_dir}
    for _ in range(16):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            _flock(fd)
            if _same_file(fd, path):
                _write_all(fd, json.dumps(record).encode("utf-8") + b"\n")
                os.fsync(fd)
                return HeldLock(path, fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "its lock file keeps disappearing", path)


def _flock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as err:
        if err.errno not in _NO_FLOCK:
            raise


def _same_file(fd: int, path: str) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


@dataclass(frozen=True)
class DeadLock:
    """A lock file of a run that is over, held by this process while it cleans up after that run."""

    path: str
    commit_dir: str | None  # absolute; None when the record was never written


@contextlib.contextmanager
def take_dead_lock(folder: str, token: str) -> Iterator[DeadLock | None]:
    """Yield the token's lock in ``folder`` locked by this process if its run is over and it is gsurg's;
    ``None`` when it is missing, held by a live run, or not recognisably ours."""
    path = os.path.join(folder, lock_name(token))
    try:  # O_NONBLOCK: never hang on a FIFO someone named like a lock
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        yield _inspect_locked(fd, folder, path)
    finally:
        os.close(fd)


def _inspect_locked(fd: int, folder: str, path: str) -> DeadLock | None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return None  # a live run holds it
    if not owned(os.fstat(fd)) or not _same_file(fd, path):
        return None  # not the user's file, or already removed by whoever held it before us
    ours, commit_dir = read_lock_record(os.pread(fd, _LOCK_BYTES_MAX, 0), folder)
    return DeadLock(path, commit_dir) if ours else None


def read_lock_record(data: bytes, folder: str) -> tuple[bool, str | None]:
    """Whether ``data`` is a gsurg lock record (or empty: a lock whose run died before writing it), and
    the absolute commit folder it names (``None`` when empty)."""
    if not data:
        return True, None
    try:
        doc = json.loads(data)
    except ValueError:
        return False, None
    if not (isinstance(doc, dict) and doc.get("gsurg") == "lock" and isinstance(doc.get("commit_dir"), str)):
        return False, None
    return True, os.path.normpath(os.path.join(folder, doc["commit_dir"]))


def peek_lock(folder: str, token: str) -> str | None:
    """The commit folder named by a lock file, read without locking it (for readers' warnings)."""
    path = os.path.join(folder, lock_name(token))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not owned(os.fstat(fd)):
            return None
        _, commit_dir = read_lock_record(os.pread(fd, _LOCK_BYTES_MAX, 0), folder)
    finally:
        os.close(fd)
    return commit_dir


# ---- the journal -------------------------------------------------------------------------------------


def journal_bytes(token: str, folder: str, renames: list[tuple[str, str]]) -> bytes:
    """The journal for ``renames`` (absolute staging and target paths), relative to ``folder``."""
    pairs = [[os.path.relpath(s, folder), os.path.relpath(t, folder)] for s, t in renames]
    doc = {"gsurg": "journal", "version": 1, "token": token, "renames": pairs}
    return json.dumps(doc, indent=1).encode("utf-8") + b"\n"


def read_journal(path: str, token: str) -> list[tuple[str, str]] | None:
    """The journal's renames as absolute (staging, target) pairs, or ``None`` if it is not a journal of
    ``token`` whose every pair renames one of its staging files within one folder."""
    folder = os.path.dirname(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not owned(os.fstat(fd)):
            return None
        doc = json.loads(os.pread(fd, 1 << 20, 0))
    except ValueError:
        return None
    finally:
        os.close(fd)
    if not (isinstance(doc, dict) and doc.get("gsurg") == "journal" and doc.get("token") == token):
        return None
    renames = []
    for pair in doc.get("renames") or []:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            return None
        staging, target = (os.path.normpath(os.path.join(folder, p)) for p in pair)
        if os.path.dirname(staging) != os.path.dirname(target):
            return None
        if not is_staging_of(token, os.path.basename(staging)) or os.path.basename(target).startswith(PREFIX):
            return None
        renames.append((staging, target))
    return renames or None
