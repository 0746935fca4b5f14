"""Where an output may go, and error lines that name it.

- ``check_output_name``: a rule file's output name is a relative path that stays inside the output folder
  (no ``..``, not absolute, no NUL, not empty); checked when the file loads, so the error names its line.
- ``ensure_folder``: ``mkdir -p`` the folder an output goes into. When a part of that path is a file (or
  anything but a folder) the error names that part and what it is, instead of ``mkdir``'s bare
  ``File exists`` / ``Not a directory`` about some other path.
- ``existing_mode``: an existing target must be a regular file (or a symbolic link to one). gsurg replaces
  outputs by rename, which would put a regular file where a FIFO, socket or device node was (``-o
  /dev/full`` would replace the device node itself), so anything else is refused. The returned permission
  bits are given to the new file, so an overwrite keeps the old mode; a symbolic link is replaced by the
  new file, as before.

Every refusal is an ``OutputError`` whose message starts with the output path as the user spelled it.
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

from graphsurgeon.errors import OutputError
from graphsurgeon.formats.staging import PREFIX, is_own_name
from graphsurgeon.input_files import kind_of


def check_output_name(name: str) -> str:
    """``name`` itself when it is a relative path that stays inside the output folder; else ValueError
    saying why (pydantic turns it into a ``file:line`` error)."""
    if not name:
        raise ValueError("an output path is empty")
    if "\0" in name:
        raise ValueError(f"the output path {name!r} holds a NUL character")
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or name.startswith("~"):
        raise ValueError(
            f"the output path {name!r} is absolute; outputs are paths inside the output folder (--out)"
        )
    if ".." in pure.parts:
        raise ValueError(f"the output path {name!r} leaves the output folder (..); outputs stay inside --out")
    if not pure.parts or pure.parts == (".",):
        raise ValueError(f"the output path {name!r} names the output folder itself, not a file")
    if is_own_name(pure.name):
        raise ValueError(
            f"the output path {name!r} starts with {PREFIX}, the names of gsurg's own locks, journals and "
            "staging files"
        )
    return name


def kind(path: str) -> str:
    """What ``path`` is, in words ("a file", "a FIFO", "a broken symbolic link", ...)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "a broken symbolic link" if os.path.islink(path) else "missing"
    except OSError as err:
        return f"unreadable ({err.strerror})"
    return kind_of(st.st_mode) or "a file"


def _blocking_part(folder: str) -> str | None:
    """The first part of ``folder`` (from the root down) that exists but is not a folder."""
    parts = []
    path = os.path.normpath(folder)
    while True:
        parts.append(path)
        parent = os.path.dirname(path)
        if parent in ("", path):
            break
        path = parent
    for part in reversed(parts):
        if os.path.lexists(part) and not os.path.isdir(part):
            return part
    return None


def ensure_folder(folder: str, output: str) -> None:
    """Create ``folder`` and its parents if missing; ``output`` (the file or folder being written) is what
    the error names."""
    if os.path.isdir(folder):
        return
    what = "the folder" if os.path.normpath(folder) == os.path.normpath(output) else f"its folder {folder}"
    blocker = _blocking_part(folder)
    if blocker is not None:
        raise OutputError(f"{output}: cannot create {what}: {blocker} is {kind(blocker)}, not a folder")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{output}: cannot create {what}: {err.strerror}") from None


def existing_mode(target: str, output: str) -> int | None:
    """The permission bits of the file ``target`` replaces, or None if there is none; refuses a target
    that is a folder or not a regular file."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return None  # nothing there (or a broken link, which the new file replaces)
    except OSError as err:
        raise OutputError(f"{output}: cannot write: {err.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{output}: is a folder; give a file path")
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(
            f"{output}: not a regular file ({kind(target)}); outputs are replaced by rename, "
            "which would put a file in its place"
        )
    return stat.S_IMODE(st.st_mode)
