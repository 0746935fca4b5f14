"""Read a text .param into a Graph through the lark grammar ``grammars/ncnn_param.lark``.

The grammar gives the structure and the token shapes; ``param_literals`` types the tokens; this module
builds the layers and applies ncnn 1.0.20261020's file-level rules: magic, counts, SSA tops. In strict mode
(the default) every problem is a ParamSyntaxError naming the file, line and column; in lenient mode (lint)
the graph is built anyway and ``graph.issues`` lists every problem, so one run reports them all.
"""

from __future__ import annotations

import gc
import os
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedInput

from graphsurgeon.errors import ParamSyntaxError
from graphsurgeon.formats.param_errors import syntax_message
from graphsurgeon.formats.param_literals import (
    MAX_NAME,
    MAX_PARAM_ID,
    MAX_STRING,
    MAX_VALUE_TOKEN,
    OLD_ARRAY_BASE,
    AnyValue,
    ArrayPattern,
    Capture,
    Fail,
    ParseIssue,
    RawArray,
    Reporter,
    check_len,
    is_placeholder,
    natural_array,
    old_array,
    to_float,
    to_int,
)
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.params import Param
from graphsurgeon.resources import resource_dir
from graphsurgeon.schema.catalog import Catalog, ValueType

__all__ = [
    "MAGIC",
    "MAX_NAME",
    "MAX_NET_COUNT",
    "MAX_STRING",
    "OLD_ARRAY_BASE",
    "ParseIssue",
    "parse_param_text",
]

MAGIC = 7767517
MAX_NET_COUNT = 1_000_000  # R1020 max_net_count for layer and blob counts


@dataclass(slots=True)
class LayerLine:
    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: dict[int, Param]
    line: int


@dataclass(slots=True)
class _CallState:
    """What one parse call owns: its Reporter, and whether %captures and * are values (rule patterns)."""

    rep: Reporter
    patterns: bool


# The lark parser and its transformer are built once and shared by every call and thread; each call's state
# lives in this context variable (per thread), never on the shared transformer.
_CALL: ContextVar[_CallState] = ContextVar("gsurg_param_parse_call")


class _ToRecords(Transformer[Token, Any]):
    """Inline LALR callbacks: tokens to Params and layer records (no parse tree is built). Stateless: the
    current call's Reporter and pattern flag come from ``_CALL``."""

    @property
    def rep(self) -> Reporter:
        return _CALL.get().rep

    @property
    def patterns(self) -> bool:
        return _CALL.get().patterns

    def capture_value(self, children: list[Token]) -> Any:
        (tok,) = children
        if not self.patterns:
            self.rep.problem("pattern-value", f"{tok} is a rule-pattern capture, not an ncnn value", tok)
            return Param(ValueType.STRING, str(tok))
        return Capture(str(tok)[1:])

    def any_value(self, children: list[Token]) -> Any:
        (tok,) = children
        if not self.patterns:
            self.rep.problem("pattern-value", "* is a rule-pattern wildcard, not an ncnn value", tok)
            return Param(ValueType.STRING, "*")
        return AnyValue()

    def int_value(self, children: list[Token]) -> Param:
        (tok,) = children
        check_len(self.rep, tok, MAX_VALUE_TOKEN, "value", tok)
        return Param(ValueType.INT, to_int(self.rep, tok, tok))

    def float_value(self, children: list[Token]) -> Param:
        (tok,) = children
        check_len(self.rep, tok, MAX_VALUE_TOKEN, "value", tok)
        return Param(ValueType.FLOAT, to_float(self.rep, tok, tok))

    def word_value(self, children: list[Token]) -> Param:
        (tok,) = children
        check_len(self.rep, tok, MAX_STRING, "string", tok)
        return Param(ValueType.STRING, str(tok))

    def quoted_value(self, children: list[Token]) -> Param:
        (tok,) = children
        check_len(self.rep, tok, MAX_STRING + 2, "quoted string", tok)
        return Param(ValueType.STRING, str(tok)[1:-1])

    def array_value(self, children: list[Token]) -> RawArray:
        (tok,) = children
        items = str(tok).split(",")
        if items[-1] == "":
            items.pop()  # the trailing comma of a one-element (or closed) natural array
        for item in items:
            check_len(self.rep, item, MAX_VALUE_TOKEN, "array element", tok)
        return RawArray(items, tok, str(tok).endswith(","))

    def param(self, children: list[Any]) -> tuple[int, Any] | None:
        key, value = children
        key_id = int(str(key)[:-1])
        if isinstance(value, RawArray) and any(is_placeholder(i) for i in value.items):
            return self._array_pattern(key, key_id, value)
        if key_id <= OLD_ARRAY_BASE:
            return old_array(self.rep, key_id, value, key)
        if not 0 <= key_id <= MAX_PARAM_ID:
            self.rep.problem(
                "param-id", f"param id {key_id} is outside 0..{MAX_PARAM_ID} (ncnn has 32 param slots)", key
            )
            return None
        if isinstance(value, RawArray):
            return key_id, natural_array(self.rep, key_id, value)
        return key_id, value

    def _array_pattern(self, key: Token, key_id: int, raw: RawArray) -> tuple[int, Any] | None:
        if not self.patterns:
            self.rep.problem(
                "pattern-value", "%captures and * in arrays belong only in rule patterns", raw.token
            )
            return None
        items = raw.items
        if key_id <= OLD_ARRAY_BASE:
            if is_placeholder(items[0]) or int(items[0]) != len(items) - 1:
                raise Fail(f"old-style array {key_id}: the length must be the element count", raw.token)
            key_id, items = -(key_id - OLD_ARRAY_BASE), items[1:]
        elements: list[Any] = []
        for item in items:
            if item == "*":
                elements.append(AnyValue())
            elif item.startswith("%"):
                elements.append(Capture(item[1:]))
            else:
                elements.append(float(item) if ("." in item or "e" in item.lower()) else int(item))
        return key_id, ArrayPattern(tuple(elements))

    def layer(self, children: list[Any]) -> LayerLine:
        type_tok, name_tok, nb_tok, nt_tok = children[:4]
        names: list[Token] = []
        params: dict[int, Param] = {}
        for child in children[4:]:
            if isinstance(child, Token):
                names.append(child)
            elif child is not None:
                pid, param = child
                params[pid] = param  # a repeated id: the last one wins, as in ncnn
        for tok in (type_tok, name_tok, *names):
            check_len(self.rep, tok, MAX_NAME, "name", tok)
        n_bottom, n_top = int(nb_tok), int(nt_tok)
        if n_bottom < 0 or n_top < 0:
            raise Fail("bottom and top counts must not be negative", nb_tok if n_bottom < 0 else nt_tok)
        if n_bottom + n_top != len(names):
            # the line's structure is unknown: fatal in both modes
            raise Fail(
                f"layer {name_tok} declares {n_bottom} bottom(s) and {n_top} top(s) "
                f"but lists {len(names)} blob name(s)",
                name_tok,
            )
        bottoms = [str(t) for t in names[:n_bottom]]
        tops = [str(t) for t in names[n_bottom:]]
        self.rep.attribute(type_tok.line or 0, str(name_tok))
        return LayerLine(str(type_tok), str(name_tok), bottoms, tops, params, type_tok.line or 0)

    def start(self, children: list[Any]) -> tuple[list[Token], list[LayerLine]]:
        header = [c for c in children[:3]]
        return header, list(children[3:])

    def pattern(self, children: list[Any]) -> list[LayerLine]:
        return list(children)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = (resource_dir("grammars") / "ncnn_param.lark").read_text(encoding="utf-8")
    return Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        transformer=_ToRecords(),
        maybe_placeholders=False,
        start=["start", "pattern"],
    )


def parse_param_text(
    text: str, *, path: str = "<param>", catalog: Catalog | None = None, strict: bool = True
) -> Graph:
    """Parse .param text into a Graph.

    Strict (default): raises ParamSyntaxError (file, line, column) for anything ncnn rejects or would
    misread. Lenient: only syntax errors and layer lines whose blob counts do not match raise; every other
    problem is recorded in ``graph.issues`` and the graph is built the way ncnn would build it.
    """
    rep = Reporter(strict=strict)
    call = _CALL.set(_CallState(rep, patterns=False))
    collecting = gc.isenabled()
    gc.disable()  # the parse allocates millions of short-lived objects and no cycles: ~20% faster
    try:
        header, records = cast(tuple[list[Token], list[LayerLine]], _parser().parse(text, start="start"))
    except Fail as fail:
        raise ParamSyntaxError(
            fail.message, path=path, line=fail.token.line or 0, column=fail.token.column or 0
        ) from None
    except UnexpectedInput as err:
        raise ParamSyntaxError(
            syntax_message(err, text), path=path, line=err.line or 0, column=err.column or 0
        ) from None
    finally:
        _CALL.reset(call)
        if collecting:
            gc.enable()
    graph = Graph(catalog, source=path)
    graph.issues.extend(rep.issues)

    def problem(code: str, message: str, line: int, column: int, layer: str | None = None) -> None:
        if strict:
            raise ParamSyntaxError(message, path=path, line=line, column=column)
        graph.issues.append(ParseIssue(code, message, line, column, layer))

    def hazard(code: str, message: str, line: int, layer: str | None = None) -> None:
        """Something ncnn tolerates: a note in strict mode, a warning issue in lenient mode."""
        if strict:
            graph.notes.append(f"{path}:{line}: {message}")
        else:
            graph.issues.append(ParseIssue(code, message, line, 1, layer, warning=True))

    magic_tok, layer_count_tok, blob_count_tok = header
    if str(magic_tok) != str(MAGIC):
        problem(
            "magic",
            f"bad magic {magic_tok!s} (an ncnn text param starts with {MAGIC})",
            magic_tok.line or 1,
            1,
        )
    counts = []
    for tok in (layer_count_tok, blob_count_tok):
        count = int(tok)
        if not 0 < count <= MAX_NET_COUNT:
            problem(
                "header-count",
                f"layer and blob counts must be in 1..{MAX_NET_COUNT} (ncnn's max_net_count), not {count}",
                tok.line or 0,
                tok.column or 0,
            )
        counts.append(count)
    layer_count, blob_count = counts
    if len(records) < layer_count:
        problem(
            "layer-count",
            f"header says {layer_count} layers but the file has only {len(records)} (ncnn fails to load it)",
            layer_count_tok.line or 0,
            layer_count_tok.column or 0,
        )
    if len(records) > layer_count > 0:
        first = records[layer_count]
        hazard(
            "extra-layers",
            f"{len(records) - layer_count} layer line(s) after the {layer_count} the header counts are "
            f"ignored, as ncnn ignores them (first: {first.type} {first.name})",
            first.line,
            first.name,
        )
        records = records[:layer_count]
    _build(graph, records, path, problem)
    if blob_count < len(graph.blobs):
        problem(
            "blob-count",
            f"header says {blob_count} blobs but the layers name {len(graph.blobs)} "
            "(too few blob slots corrupts ncnn's memory)",
            blob_count_tok.line or 0,
            blob_count_tok.column or 0,
        )
    if blob_count > len(graph.blobs):
        hazard(
            "spare-blobs",
            f"header says {blob_count} blobs but the layers name {len(graph.blobs)}",
            blob_count_tok.line or 0,
        )
    return graph


def _build(graph: Graph, records: list[LayerLine], path: str, problem: Any) -> None:
    """Add the layers in file order. A top that repeats a name, or that defines a name a layer already read,
    takes a fresh slot in ncnn while lookups keep finding the first; lenient mode mirrors that by giving the
    late top a distinct name (``name#2``)."""
    for rec in records:
        tops = []
        for top in rec.tops:
            blob = graph.blobs.get(top)
            if blob is not None and blob.producer is None and blob.consumers:
                first = blob.consumers[0]
                problem(
                    "use-before-def",
                    f"blob {top!r} is read by layer {first.name} (line {first.line}) before layer {rec.name} "
                    "produces it; ncnn gives the reader an empty orphan blob",
                    rec.line,
                    1,
                    rec.name,
                )
                top = _fresh_name(graph, top)
            elif (blob is not None and blob.producer is not None) or top in tops:
                by = (
                    f"is already produced by layer {blob.producer.name}"
                    if blob is not None and blob.producer is not None
                    else "is listed as the same top twice"
                )
                problem(
                    "duplicate-top",
                    f"duplicate top: layer {rec.name}: blob {top!r} {by}",
                    rec.line,
                    1,
                    rec.name,
                )
                top = _fresh_name(graph, top)
            tops.append(top)
        layer = graph.add_layer(rec.type, rec.name, rec.bottoms, tops, rec.params)
        layer.line = rec.line


def _fresh_name(graph: Graph, name: str) -> str:
    n = 2
    while f"{name}#{n}" in graph.blobs:
        n += 1
    return f"{name}#{n}"


def read_param_text(
    path: str | os.PathLike[str], *, catalog: Catalog | None = None, strict: bool = True
) -> Graph:
    """Read a text .param file (never opened for writing); ``strict`` as in ``parse_param_text``."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            data = fh.read()
    except OSError as err:
        raise ParamSyntaxError(f"cannot read: {err.strerror}", path=name) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ParamSyntaxError(
            f"neither a text .param (not UTF-8) nor a .param.bin (which starts with the int32 {MAGIC})",
            path=name,
            line=line,
            column=1,
        ) from None
    return parse_param_text(text, path=name, catalog=catalog, strict=strict)


def parse_pattern_lines(text: str, *, path: str = "<pattern>", first_line: int = 1) -> list[LayerLine]:
    """Parse a rule pattern (layer lines, no header) with the same grammar; values may be ``%capture`` or
    ``*``. ``first_line`` shifts reported lines to the pattern's place in its rule file."""
    call = _CALL.set(_CallState(Reporter(strict=True), patterns=True))
    try:
        return cast(list[LayerLine], _parser().parse(text, start="pattern"))
    except Fail as fail:
        line = (fail.token.line or 1) + first_line - 1
        raise ParamSyntaxError(fail.message, path=path, line=line, column=fail.token.column or 0) from None
    except UnexpectedInput as err:
        line = (err.line or 1) + first_line - 1
        raise ParamSyntaxError(
            syntax_message(err, text), path=path, line=line, column=err.column or 0
        ) from None
    finally:
        _CALL.reset(call)
