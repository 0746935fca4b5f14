"""Read a .param in either form, told apart by its first four bytes (the binary form starts with the
int32 magic; the text form with its digits)."""

from __future__ import annotations

import os

from graphsurgeon.formats.param_bin import parse_param_bin
from graphsurgeon.formats.param_text import MAGIC, PARAM_LIMIT, decode_param_text, parse_param_text
from graphsurgeon.input_files import InputFileError, open_input, read_input
from graphsurgeon.ir.graph import Graph
from graphsurgeon.schema.catalog import Catalog

BIN_MAGIC = MAGIC.to_bytes(4, "little")


def read_param(path: str | os.PathLike[str], *, catalog: Catalog | None = None, strict: bool = True) -> Graph:
    """Text or binary, each strict (raise at the first problem) or lenient (record them in
    ``graph.issues``), under the same file-level rules (``param_build``). Only a regular file of at most
    PARAM_LIMIT bytes is read (``input_files``)."""
    name = os.fspath(path)
    data = read_input(name, limit=PARAM_LIMIT, what="a .param")
    if data[:4] == BIN_MAGIC:
        return parse_param_bin(data, path=name, catalog=catalog, strict=strict)
    return parse_param_text(decode_param_text(data, name), path=name, catalog=catalog, strict=strict)


def is_param_bin(path: str) -> bool:
    """Whether ``path`` holds the binary form (so outputs derived from it are written binary too); False
    for what cannot be read (nor waited on: a FIFO is not opened)."""
    try:
        fd = open_input(path)
    except InputFileError:
        return False
    try:
        return os.pread(fd, 4, 0) == BIN_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)
