"""Read a .param in either form, told apart by its first four bytes (the binary form starts with the
int32 magic; the text form with its digits)."""

from __future__ import annotations

from graphsurgeon.errors import ParamSyntaxError
from graphsurgeon.formats.param_bin import read_param_bin
from graphsurgeon.formats.param_text import MAGIC, read_param_text
from graphsurgeon.ir.graph import Graph
from graphsurgeon.schema.catalog import Catalog

BIN_MAGIC = MAGIC.to_bytes(4, "little")


def read_param(path: str, *, catalog: Catalog | None = None, strict: bool = True) -> Graph:
    """Text or binary, each strict (raise at the first problem) or lenient (record them in
    ``graph.issues``), under the same file-level rules (``param_build``)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as err:
        raise ParamSyntaxError(f"cannot read: {err.strerror}", path=path) from None
    if head == BIN_MAGIC:
        return read_param_bin(path, catalog=catalog, strict=strict)
    return read_param_text(path, catalog=catalog, strict=strict)


def is_param_bin(path: str) -> bool:
    """Whether ``path`` holds the binary form (so outputs derived from it are written binary too)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == BIN_MAGIC
    except OSError:
        return False
