"""Is a file a .bin weight file at all? What it cannot be, from its metadata and first bytes only.

A .bin has no header or magic, so nothing proves a file is one; but some files are certainly not one, and
comparing them as weights gives a meaningless answer (two copies of a text .param compared as flat float32
"pass"). ``not_a_weight_file`` names the reason for: a path that cannot be opened, a folder or other
non-regular file, a .param.bin (it starts with the int32 magic 7767517), UTF-8 text (a text .param, a YAML
map, a JSON index: no .bin decodes as printable text, since every tag of a tagged weight holds a NUL or a
byte that is invalid UTF-8, and fp32 data rarely avoids both for long), and, where the file is to be read as
flat float32 words, a size that is not a multiple of 4. An empty file is a valid .bin (a model without
weights).
"""

from __future__ import annotations

import codecs
import os
import re

from graphsurgeon.formats.param_text import MAGIC
from graphsurgeon.input_files import InputFileError, kind_of, open_input

#: How much of the file the text test reads: enough that binary data shows itself.
TEXT_SAMPLE = 64 << 10
#: C0 and C1 control characters and DEL, except the whitespace ones (tab, newlines, \v, \f)
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_PARAM_BIN_MAGIC = MAGIC.to_bytes(4, "little")


def _looks_like_text(sample: bytes, whole: bool) -> bool:
    """Whether ``sample`` (the whole file when ``whole``) is UTF-8 text without control characters other
    than whitespace. A character cut at the end of a partial sample does not count against it."""
    if not sample:
        return False
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(sample, final=whole)
    except UnicodeDecodeError:
        return False
    return _CONTROL.search(text) is None


def not_a_weight_file(path: str, *, flat: bool = False) -> str | None:
    """Why ``path`` is certainly not a .bin weight file (one line, without the path), or None when it may
    be one. ``flat``: the file is to be read as whole float32 words, so its size must be a multiple of 4."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as err:
        return f"cannot read: {err.strerror}"
    kind = kind_of(info.st_mode)
    if kind is not None:
        return f"is {kind}, not a .bin weight file"
    try:
        fd = open_input(path)  # checked again on the descriptor: never waits on a FIFO swapped in
        try:
            sample = os.pread(fd, TEXT_SAMPLE, 0)
        finally:
            os.close(fd)
    except InputFileError as err:
        return str(err).removeprefix(f"{path}: ")
    except OSError as err:
        return f"cannot read: {err.strerror}"
    if sample[:4] == _PARAM_BIN_MAGIC:
        return f"is a .param.bin (it starts with the int32 {MAGIC}), not a .bin weight file"
    if _looks_like_text(sample, whole=len(sample) == info.st_size):
        if sample.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(str(MAGIC).encode()):
            return f"is a text .param (it starts with {MAGIC}), not a .bin weight file"
        return "is UTF-8 text, not a .bin weight file"
    if flat and info.st_size % 4:
        return (
            f"is {info.st_size} bytes long, not a multiple of 4, so it is not float32 data "
            "(and no .param beside it tells how to walk it)"
        )
    return None
