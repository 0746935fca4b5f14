"""Read a text .param into a Graph through the lark grammar ``grammars/ncnn_param.lark``.

The grammar gives the structure and the token shapes; lark builds its LALR tables and contextual lexer, and
``lalr_fast`` runs them; ``param_records`` types the tokens at each reduction; ``param_build`` (shared with
the .param.bin reader) builds the layers under ncnn 1.0.20261020's file-level rules: magic, counts, SSA
tops. In strict mode (the default) every problem is a
ParamSyntaxError naming the file, line and column; in lenient mode (lint) the graph is built anyway and
``graph.issues`` lists every problem, so one run reports them all. A text the grammar rejects is handed to
lark's own parser, which says what it found and what the grammar expected there.

Parsing is re-entrant: the grammar's tables are built once and only read; every call has its own Reporter
and records.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, NoReturn

from lark import Lark, Transformer, Tree
from lark.exceptions import UnexpectedInput

from graphsurgeon.errors import ParamSyntaxError
from graphsurgeon.formats.lalr_fast import FastLALR, Item, Rejected
from graphsurgeon.formats.param_build import (
    MAGIC,
    MAX_NET_COUNT,
    PARAM_LIMIT,
    Diagnostics,
    Header,
    Place,
    build_graph,
)
from graphsurgeon.formats.param_errors import syntax_message
from graphsurgeon.formats.param_literals import (
    MAX_COUNT_TOKEN,
    MAX_NAME,
    MAX_STRING,
    OLD_ARRAY_BASE,
    Fail,
    ParseIssue,
    Reporter,
    check_len,
    int_token,
)
from graphsurgeon.formats.param_records import LayerLine, Placeholders, Records
from graphsurgeon.input_files import read_input
from graphsurgeon.ir.graph import Graph
from graphsurgeon.resources import resource_dir
from graphsurgeon.schema.catalog import Catalog

__all__ = [
    "MAGIC",
    "MAX_NAME",
    "MAX_NET_COUNT",
    "MAX_STRING",
    "OLD_ARRAY_BASE",
    "PARAM_LIMIT",
    "LayerLine",
    "ParseIssue",
    "parse_param_text",
]


class _Discard(Transformer[Any, Tree[Any]]):
    """Lark's own parse only has to find the syntax error: every rule gives the same empty tree."""

    _EMPTY: Tree[Any] = Tree("_", [])

    def __default__(self, data: Any, children: Any, meta: Any) -> Tree[Any]:
        return self._EMPTY


@lru_cache(maxsize=1)
def _grammar() -> tuple[Lark, FastLALR]:
    """The grammar, built once: lark's parser (for syntax errors) and the fast driver of its tables."""
    grammar = (resource_dir("grammars") / "ncnn_param.lark").read_text(encoding="utf-8")
    lark = Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        transformer=_Discard(),
        maybe_placeholders=False,
        start=["start", "pattern"],
    )
    return lark, FastLALR(lark)


def _run(text: str, start: str, records: Records) -> list[Item]:
    """Parse ``text`` from ``start``; raise lark's UnexpectedInput where the grammar rejects it, or Fail."""
    lark, fast = _grammar()
    try:
        return fast.parse(text, start, records.hooks())
    except Rejected:
        pass
    lark.parse(text, start=start)  # raises the precise syntax error
    raise AssertionError("lark accepts a text the fast LALR driver rejected")  # pragma: no cover


def parse_param_text(
    text: str, *, path: str = "<param>", catalog: Catalog | None = None, strict: bool = True
) -> Graph:
    """Parse .param text into a Graph.

    Strict (default): raises ParamSyntaxError (file, line, column) for anything ncnn rejects or would
    misread. Lenient: only syntax errors and layer lines whose blob counts do not match raise; every other
    problem is recorded in ``graph.issues`` and the graph is built the way ncnn would build it.
    """
    with _cyclic_gc_paused():
        return _parse_graph(text, path, catalog, strict)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Reading allocates millions of objects and frees few: the cyclic GC would walk the growing records
    and graph again and again (a quarter of the time on 100k layers), so it is paused until the graph is
    built."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _parse_graph(text: str, path: str, catalog: Catalog | None, strict: bool) -> Graph:
    rep = Reporter(text, strict=strict)
    head = Reporter(text, strict=strict)  # the header's own problems, listed before the layers'
    try:
        items = _run(text, "start", Records(rep))
        for _, count, at in items[1:3]:
            if len(count) > MAX_COUNT_TOKEN:
                check_len(head, count, MAX_COUNT_TOKEN, "count", at)
    except Fail as fail:
        raise ParamSyntaxError(fail.message, path=path, line=fail.line, column=fail.column) from None
    except UnexpectedInput as err:
        _syntax_error(err, text, path, None)
    # start: COUNT COUNT COUNT layer*; the three counts as (text, line, column)
    magic, layer_count_tok, blob_count_tok = [(text, *rep.where(at)) for _, text, at in items[:3]]
    records: list[LayerLine] = [item[1] for item in items[3:]]
    graph = Graph(catalog, source=path)
    graph.issues.extend(head.issues + rep.issues)
    build_graph(
        Diagnostics(graph, path, strict=strict, form="text .param"),
        Header(
            magic[0],
            int_token(layer_count_tok[0]),
            int_token(blob_count_tok[0]),
            Place(magic[1], magic[2]),
            Place(layer_count_tok[1], layer_count_tok[2]),
            Place(blob_count_tok[1], blob_count_tok[2]),
        ),
        records,
        lambda rec, k: Place(rec.line, 1),
        fresh_slots=True,
    )
    return graph


def read_param_text(
    path: str | os.PathLike[str], *, catalog: Catalog | None = None, strict: bool = True
) -> Graph:
    """Read a text .param file (a regular file of at most PARAM_LIMIT bytes, never opened for writing);
    ``strict`` as in ``parse_param_text``."""
    name = os.fspath(path)
    data = read_input(name, limit=PARAM_LIMIT, what="a .param")
    return parse_param_text(decode_param_text(data, name), path=name, catalog=catalog, strict=strict)


def decode_param_text(data: bytes, path: str) -> str:
    """The text of a .param file's bytes; ParamSyntaxError at the line where they stop being UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ParamSyntaxError(
            f"neither a text .param (not UTF-8) nor a .param.bin (which starts with the int32 {MAGIC})",
            path=path,
            line=line,
            column=1,
        ) from None


def parse_layer_lines(
    text: str, placeholders: Placeholders, *, path: str = "<pattern>", first_line: int = 1
) -> list[LayerLine]:
    """Parse layer lines without a header (a rule pattern) with the same grammar; ``%capture`` and ``*``
    values become what ``placeholders`` makes. ``first_line`` shifts reported lines to the lines' place in
    their file."""
    try:
        items = _run(text, "pattern", Records(Reporter(text, strict=True), placeholders=placeholders))
    except Fail as fail:
        raise ParamSyntaxError(
            fail.message, path=path, line=fail.line + first_line - 1, column=fail.column
        ) from None
    except UnexpectedInput as err:
        _syntax_error(err, text, path, first_line)
    return [item[1] for item in items]


def _syntax_error(err: UnexpectedInput, text: str, path: str, first_line: int | None) -> NoReturn:
    """Lark's error as one line; in a rule pattern, ``first_line`` is the pattern's line in its file."""
    line = (err.line or 0) if first_line is None else (err.line or 1) + first_line - 1
    raise ParamSyntaxError(syntax_message(err, text), path=path, line=line, column=err.column or 0) from None
