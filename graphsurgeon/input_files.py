"""Opening the files a user names, for reading: regular files only, never blocking, and within a size bound.

Every reader of a user's path goes through here, so that no input makes gsurg wait or read without end:

- a FIFO, a device, a socket or a folder is refused, naming the path and what it is, before it is opened
  (opening a FIFO for reading waits for a writer; ``/dev/zero`` reads until memory runs out);
- the file is opened ``O_RDONLY | O_NONBLOCK`` and checked again on the open descriptor, so a FIFO swapped
  in after the first check is opened without waiting and then refused;
- what is read whole (a .param, a weight map, a JSON file) is refused past a limit named in the error,
  and read no further than that limit even if the file grows while it is read.

Inputs are never opened for writing. Errors are one line (exit 2), ``PATH: is a FIFO (named pipe), not a
regular file``, raised as ``InputFileError`` or as the reader's own error class (``error``: called with the
message).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from typing import Any

from graphsurgeon.errors import GsurgError

MiB = 1 << 20
#: What a text or binary .param, a weight map or a JSON side file may hold: the .param of a real 2B model
#: is a few MB, so this is generous and still bounds the work.
TEXT_LIMIT = 256 * MiB

_READ_CHUNK = 16 * MiB

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputFileError(GsurgError):
    """An input path that is not a readable regular file, or that is larger than its reader accepts."""


def size_text(nbytes: int) -> str:
    """``268435456`` → ``256 MiB`` (whole MiB), else the byte count."""
    return f"{nbytes // MiB} MiB" if nbytes % MiB == 0 and nbytes else f"{nbytes} bytes"


Raise = Callable[[str], GsurgError]


def kind_of(mode: int) -> str | None:
    """What a file of ``mode`` is, in words (``a FIFO (named pipe)``), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _refuse_kind(path: str, mode: int, error: Raise) -> None:
    kind = kind_of(mode)
    if kind is not None:
        raise error(f"{path}: is {kind}, not a regular file")


def check_input(path: str | os.PathLike[str], *, error: Raise = InputFileError) -> os.stat_result:
    """The status of ``path`` if it is a regular file (symbolic links followed); InputFileError if it is
    missing, unreadable or of another kind. For paths handed to another library to open."""
    name = os.fspath(path)
    try:
        info = os.stat(name)
    except OSError as err:
        raise error(f"{name}: cannot read: {err.strerror}") from None
    _refuse_kind(name, info.st_mode, error)
    return info


def open_input(path: str | os.PathLike[str], *, error: Raise = InputFileError) -> int:
    """A read-only, blocking descriptor of regular file ``path`` (the caller closes it); InputFileError as
    ``check_input``, also when the file was replaced by another kind between the check and the open."""
    name = os.fspath(path)
    check_input(name, error=error)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise error(f"{name}: cannot read: {err.strerror}") from None
    try:
        _refuse_kind(name, os.fstat(fd).st_mode, error)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_input(
    path: str | os.PathLike[str],
    *,
    limit: int = TEXT_LIMIT,
    what: str = "an input",
    error: Raise = InputFileError,
) -> bytes:
    """The whole of regular file ``path``; InputFileError (naming ``what`` and the limit) if it holds more
    than ``limit`` bytes, as its size says or as reading finds."""
    name = os.fspath(path)
    fd = open_input(name, error=error)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise error(f"{name}: is {size} bytes; {_refusal(what, limit)}")
        chunks: list[bytes] = []
        got = 0
        while got <= limit:  # the size may have changed since fstat: read to the end, or one past the limit
            chunk = os.read(fd, min(_READ_CHUNK, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise error(f"{name}: grew while being read; {_refusal(what, limit)}")
    except OSError as err:
        raise error(f"{name}: cannot read: {err.strerror}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def parse_json(raw: bytes, where: str, *, error: Raise = InputFileError) -> Any:
    """The JSON value in ``raw``; bad syntax, bytes that are not UTF-8 or nesting past the interpreter's
    recursion limit are one ``error`` starting with ``where``."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise error(f"{where}: not valid JSON: nested too deeply") from None
    except ValueError as err:  # a UnicodeDecodeError too
        raise error(f"{where}: not valid JSON: {err}") from None


def read_json_input(
    path: str | os.PathLike[str],
    *,
    limit: int = TEXT_LIMIT,
    what: str = "an input",
    error: Raise = InputFileError,
) -> Any:
    """The JSON value in regular file ``path`` (``read_input``'s checks, then ``parse_json``'s)."""
    return parse_json(read_input(path, limit=limit, what=what, error=error), os.fspath(path), error=error)


def _refusal(what: str, limit: int) -> str:
    return f"{what} larger than {size_text(limit)} is refused"
