"""After a killed run: what the next gsurg run that writes into the folder does, and what readers say.

``recover_folder`` runs before a command writes into a folder (and before it reads its inputs, where the
outputs' folders are known that early). For every run whose lock file (or committed journal) is there and
whose lock can be taken — its process is gone, see staging.py — it:

- completes the run's commit when the run left a committed journal: renames the staging files that are
  still there over their targets (those already renamed are done), fsyncs, removes the journal and the
  run's lock files in every folder the journal names;
- otherwise (the run died before its commit point, so its targets were never touched) removes the run's
  staging files and lock, and reports how many and how large.

Each step is idempotent, so a kill during recovery is recovered by the run after. Files are removed only
when they carry the exact staging name of a token whose lock file is gsurg's and dead; the user's other
files, look-alikes and folders are never touched. Live runs are skipped: their locks are held.

Readers (``lint``, ``diff-bin``, the inputs of ``fmt``/``apply``/``synth-bin``) never write, so they do not
complete anything: ``pending_commit_notes`` tells them when a file they read is the target of a committed
journal whose renames are not all done, so the model's files may not belong together yet.
"""

from __future__ import annotations

import contextlib
import os
import sys

from graphsurgeon.formats.faults import fault_point
from graphsurgeon.formats.staging import (
    JOURNAL_RE,
    LOCK_RE,
    PREFIX,
    fsync_dir,
    is_staging_of,
    journal_name,
    lock_name,
    owned,
    peek_lock,
    read_journal,
    take_dead_lock,
)


def notice(message: str) -> None:
    print(f"gsurg: {message}", file=sys.stderr)


def _tokens(names: list[str]) -> list[str]:
    found = set()
    for name in names:
        if not name.startswith(PREFIX):  # the common case; folders may hold many files
            continue
        match = LOCK_RE.fullmatch(name) or JOURNAL_RE.fullmatch(name)
        if match:
            found.add(match.group(1))
    return sorted(found)


def recover_folder(folder: str, shown: str | None = None) -> None:
    """Complete or clean up every finished-but-interrupted run in ``folder`` (``shown``: how to name the
    folder in messages). A folder that does not exist or cannot be listed has nothing to recover."""
    real = os.path.realpath(folder)
    try:
        names = os.listdir(real)
    except OSError:
        return
    for token in _tokens(names):
        _recover(real, shown or folder, token, names)


def _recover(folder: str, shown: str, token: str, names: list[str]) -> None:
    if lock_name(token) in names:
        with take_dead_lock(folder, token) as dead:
            if dead is None:
                return  # a live run, or not ours
            fault_point("recover-begin")  # a lock that never got its record can only be in its commit folder
            _finish(folder, shown, token, os.path.join(dead.commit_dir or folder, journal_name(token)))
    elif journal_name(token) in names:  # a committed journal whose lock was removed: its run is over
        fault_point("recover-begin")
        _finish(folder, shown, token, os.path.join(folder, journal_name(token)))


def _finish(folder: str, shown: str, token: str, journal: str) -> None:
    if os.path.lexists(journal):
        renames = read_journal(journal, token)
        if renames is None:
            notice(f"warning: {journal}: not a journal gsurg can read; left it and run {token}'s files alone")
            return
        _roll_forward(journal, renames, folder, shown, token)
    elif not os.path.isdir(os.path.dirname(journal)):
        notice(
            f"warning: {shown}: run {token}'s files are left alone: its commit folder "
            f"{os.path.dirname(journal)} is gone (moved?), so it cannot be told whether it committed"
        )
        return
    _remove_staging(folder, shown, token)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(folder, lock_name(token)))
    fault_point("recover-unlocked")


def _roll_forward(journal: str, renames: list[tuple[str, str]], folder: str, shown: str, token: str) -> None:
    replaced = []
    for i, (staging, target) in enumerate(renames):
        try:
            os.replace(staging, target)
            replaced.append(target)
        except FileNotFoundError:
            pass  # renamed before the kill
        fault_point(f"recover-renamed:{i}")
    folders = sorted({os.path.dirname(target) for _, target in renames})
    for each in folders:
        fsync_dir(each)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(journal)
    fault_point("recover-journal-removed")
    for each in folders:
        if each != folder:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(each, lock_name(token)))
    if replaced:
        names = ", ".join(_show(target, folder, shown) for target in replaced)
        notice(f"completed the commit of an interrupted run in {shown}: replaced {names}")


def _show(path: str, folder: str, shown: str) -> str:
    return os.path.join(shown, os.path.basename(path)) if os.path.dirname(path) == folder else path


def _remove_staging(folder: str, shown: str, token: str) -> None:
    count = size = 0
    for name in sorted(os.listdir(folder)):
        if not is_staging_of(token, name):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
            if not owned(st):
                continue
            os.unlink(path)
        except FileNotFoundError:
            continue
        fault_point(f"recover-removed:{count}")
        count += 1
        size += st.st_size
    if count:
        megabytes = f"{size / 1e6:.1f} MB"
        notice(f"removed {count} stale staging file(s) ({megabytes}) left by an interrupted run in {shown}")


def pending_commit_notes(path: str) -> list[str]:
    """Warnings for a file about to be read: it is the target of a committed journal whose renames are
    not all done (a run was killed between them, or one is running)."""
    real = os.path.realpath(path)
    folder = os.path.dirname(real)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    notes = []
    for token in _tokens(names):
        commit_dir = peek_lock(folder, token) or folder
        journal = os.path.join(commit_dir, journal_name(token))
        renames = read_journal(journal, token) if os.path.lexists(journal) else None
        if not renames or real not in {target for _, target in renames}:
            continue
        if not any(os.path.lexists(staging) for staging, _ in renames):
            continue  # every rename done; only the journal's removal is left
        others = [os.path.basename(t) for _, t in renames if t != real]
        notes.append(
            f"{path}: pending gsurg commit ({journal}): a run replacing it together with "
            f"{', '.join(others)} was interrupted or is still running, so they may not match yet; "
            f"any gsurg command that writes into {os.path.dirname(path) or '.'} completes an interrupted one"
        )
    return notes


def warn_pending(*paths: str | None) -> None:
    """Print ``pending_commit_notes`` for each path given (None skipped) as gsurg warnings."""
    for path in paths:
        if path is not None:
            for note in pending_commit_notes(path):
                notice(f"warning: {note}")
