"""Read a text .param into a Graph through the lark grammar ``grammars/ncnn_param.lark``.

The grammar gives the structure and the token shapes; this module turns tokens into typed ``Param`` values
and layers into the IR, with ncnn 1.0.20261020's semantic rules: magic, counts, one-element and old-style
arrays, array element typing, token lengths, SSA tops. Every error names the file, line and column.
"""

from __future__ import annotations

import gc
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from graphsurgeon.errors import GraphError, ParamSyntaxError
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.params import Param, to_f32
from graphsurgeon.resources import resource_dir
from graphsurgeon.schema.catalog import Catalog, ValueType

MAGIC = 7767517
MAX_NAME = 255  # %255s in Net::load_param
MAX_VALUE_TOKEN = 127  # R1020 scan_numeric_value
MAX_STRING = 255
MAX_PARAM_ID = 31
OLD_ARRAY_BASE = -23300
FLT_MAX = 3.4028234663852886e38
INT32 = (-(2**31), 2**31 - 1)
MAX_NET_COUNT = 1_000_000  # R1020 max_net_count for layer and blob counts

_TERMINAL_NAMES = {
    "KEY": "a param `id=value` (no blank after '=')",
    "NAME": "a name",
    "COUNT": "an integer count",
    "INT": "an int",
    "FLOAT": "a float",
    "ARRAY": "an array",
    "WORD": "a string",
    "QUOTED": 'a "quoted string"',
    "_NL": "end of line",
    "$END": "end of file",
}


@dataclass(slots=True)
class _Raw:
    """An array literal before typing: the element tokens and where the literal starts."""

    items: list[str]
    token: Token
    trailing_comma: bool = False


@dataclass(slots=True)
class _LayerLine:
    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: dict[int, Param]
    line: int


class _Fail(Exception):
    """Raised inside grammar callbacks; carries the token that is wrong."""

    def __init__(self, message: str, token: Token) -> None:
        super().__init__(message)
        self.message = message
        self.token = token


def _check_len(token: Token | str, limit: int, what: str, at: Token | None = None) -> None:
    """ncnn's limits are in bytes (``%255s``, ``char[128]``), so UTF-8 text is measured in bytes."""
    size = len(str(token).encode("utf-8"))
    if size > limit:
        where = at if at is not None else token
        assert isinstance(where, Token)
        raise _Fail(f"{what} is {size} bytes long; ncnn reads at most {limit}", where)


def _to_int(text: str, token: Token) -> int:
    value = int(text)
    if not INT32[0] <= value <= INT32[1]:
        raise _Fail(f"int {text} does not fit in 32 bits", token)
    return value


def _to_float(text: str, token: Token) -> float:
    value = float(text)
    if math.isinf(value) or abs(value) > FLT_MAX * (1 + 2**-25):
        raise _Fail(f"float {text} overflows float32", token)
    return to_f32(max(-FLT_MAX, min(FLT_MAX, value)))


def _is_float_text(text: str) -> bool:
    return "." in text or "e" in text or "E" in text


class _ToRecords(Transformer[Token, Any]):
    """Inline LALR callbacks: tokens to Params and layer records (no parse tree is built)."""

    def int_value(self, children: list[Token]) -> Param:
        (tok,) = children
        _check_len(tok, MAX_VALUE_TOKEN, "value")
        return Param(ValueType.INT, _to_int(tok, tok))

    def float_value(self, children: list[Token]) -> Param:
        (tok,) = children
        _check_len(tok, MAX_VALUE_TOKEN, "value")
        return Param(ValueType.FLOAT, _to_float(tok, tok))

    def word_value(self, children: list[Token]) -> Param:
        (tok,) = children
        _check_len(tok, MAX_STRING, "string")
        return Param(ValueType.STRING, str(tok))

    def quoted_value(self, children: list[Token]) -> Param:
        (tok,) = children
        _check_len(tok, MAX_STRING + 2, "quoted string")
        return Param(ValueType.STRING, str(tok)[1:-1])

    def array_value(self, children: list[Token]) -> _Raw:
        (tok,) = children
        items = str(tok).split(",")
        if items[-1] == "":
            items.pop()  # the trailing comma of a one-element (or closed) natural array
        for item in items:
            _check_len(item, MAX_VALUE_TOKEN, "array element", at=tok)
        return _Raw(items, tok, str(tok).endswith(","))

    def param(self, children: list[Any]) -> tuple[int, Param]:
        key, value = children
        key_id = int(str(key)[:-1])
        if key_id <= OLD_ARRAY_BASE:
            return _old_array(key_id, value, key)
        if not 0 <= key_id <= MAX_PARAM_ID:
            raise _Fail(f"param id {key_id} is outside 0..{MAX_PARAM_ID} (ncnn has 32 param slots)", key)
        if isinstance(value, _Raw):
            return key_id, _natural_array(key_id, value)
        return key_id, value

    def layer(self, children: list[Any]) -> _LayerLine:
        type_tok, name_tok, nb_tok, nt_tok = children[:4]
        names: list[Token] = []
        params: dict[int, Param] = {}
        for child in children[4:]:
            if isinstance(child, Token):
                names.append(child)
            else:
                pid, param = child
                params[pid] = param  # a repeated id: the last one wins, as in ncnn
        for tok in (type_tok, name_tok, *names):
            _check_len(tok, MAX_NAME, "name")
        n_bottom, n_top = _to_int(nb_tok, nb_tok), _to_int(nt_tok, nt_tok)
        if n_bottom < 0 or n_top < 0:
            raise _Fail("bottom and top counts must not be negative", nb_tok if n_bottom < 0 else nt_tok)
        if n_bottom + n_top != len(names):
            raise _Fail(
                f"layer {name_tok} declares {n_bottom} bottom(s) and {n_top} top(s) "
                f"but lists {len(names)} blob name(s)",
                name_tok,
            )
        bottoms = [str(t) for t in names[:n_bottom]]
        tops = [str(t) for t in names[n_bottom:]]
        return _LayerLine(str(type_tok), str(name_tok), bottoms, tops, params, type_tok.line or 0)

    def start(self, children: list[Any]) -> tuple[list[Token], list[_LayerLine]]:
        header = [c for c in children[:3]]
        return header, list(children[3:])


def _element(text: str, as_float: bool, token: Token) -> int | float:
    return _to_float(text, token) if as_float else _to_int(text, token)


def _natural_array(key_id: int, raw: _Raw) -> Param:
    """`K=v1,v2` / `K=v,`: the first element decides the type; a float after an int is an error (R1020)."""
    as_float = _is_float_text(raw.items[0])
    if not as_float and any(_is_float_text(i) for i in raw.items):
        raise _Fail(
            f"mixed-type array for param {key_id}: an int array cannot hold a float element", raw.token
        )
    values = [_element(i, as_float, raw.token) for i in raw.items]
    kind = ValueType.FLOAT_ARRAY if as_float else ValueType.INT_ARRAY
    return Param(kind, tuple(values))


def _old_array(key_id: int, value: Any, key: Token) -> tuple[int, Param]:
    """`-233KK=N,v1,…,vN`: explicit length; elements must share one type (ncnn would store garbage)."""
    pid = -(key_id - OLD_ARRAY_BASE)
    if not 0 <= pid <= MAX_PARAM_ID:
        raise _Fail(f"old-style array key {key_id} addresses param id {pid}, outside 0..{MAX_PARAM_ID}", key)
    if isinstance(value, Param) and value.kind is ValueType.INT:
        items: list[str] = [str(value.value)]
        token = key
    elif isinstance(value, _Raw):
        items, token = value.items, value.token
        if value.trailing_comma:
            raise _Fail(f"old-style array {key_id} ends with a comma (ncnn: array length mismatch)", token)
    else:
        raise _Fail(f"old-style array {key_id} needs `N,v1,…,vN`", key)
    if _is_float_text(items[0]):
        raise _Fail(f"old-style array {key_id}: length {items[0]!r} is not an int", token)
    length = _to_int(items[0], token)
    elements = items[1:]
    if length < 0 or length != len(elements):
        raise _Fail(f"bad array length: {key_id} declares {length} element(s) but has {len(elements)}", token)
    kinds = {_is_float_text(e) for e in elements}
    if len(kinds) > 1:
        raise _Fail(f"mixed-type array {key_id}: elements mix ints and floats (ncnn stores garbage)", token)
    as_float = kinds == {True}
    values = tuple(_element(e, as_float, token) for e in elements)
    return pid, Param(ValueType.FLOAT_ARRAY if as_float else ValueType.INT_ARRAY, values)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = (resource_dir("grammars") / "ncnn_param.lark").read_text(encoding="utf-8")
    return Lark(
        grammar, parser="lalr", lexer="contextual", transformer=_ToRecords(), maybe_placeholders=False
    )


def _syntax_message(err: UnexpectedInput, text: str) -> str:
    if isinstance(err, UnexpectedEOF):
        return "unexpected end of file"
    order = list(_TERMINAL_NAMES)
    names = sorted(getattr(err, "expected", None) or (), key=lambda t: order.index(t) if t in order else 99)
    expected = [_TERMINAL_NAMES.get(t, t) for t in names]
    want = f"; expected {' or '.join(expected)}" if expected else ""
    if isinstance(err, UnexpectedToken):
        tok = err.token
        shown = (
            "end of line" if tok.type == "_NL" else "end of file" if tok.type == "$END" else repr(str(tok))
        )
        return f"unexpected {shown}{want}"
    if isinstance(err, UnexpectedCharacters):
        pos = err.pos_in_stream or 0
        if text[pos : pos + 1] == "=" and pos > 0 and text[pos - 1].isdigit():
            return "a param `id=` must be followed directly by its value (no blank, not at end of line)"
        end = pos
        while end < len(text) and not text[end].isspace() and end - pos < 40:
            end += 1
        return f"unexpected {text[pos:end]!r}{want}"
    return str(err).splitlines()[0]


def parse_param_text(text: str, *, path: str = "<param>", catalog: Catalog | None = None) -> Graph:
    """Parse .param text into a Graph. Raises ParamSyntaxError (file, line, column) for anything ncnn rejects
    or would misread."""
    collecting = gc.isenabled()
    gc.disable()  # the parse allocates millions of short-lived objects and no cycles: ~20% faster
    try:
        header, records = cast(tuple[list[Token], list[_LayerLine]], _parser().parse(text))
    except _Fail as fail:
        raise ParamSyntaxError(
            fail.message, path=path, line=fail.token.line or 0, column=fail.token.column or 0
        ) from None
    except UnexpectedInput as err:
        raise ParamSyntaxError(
            _syntax_message(err, text), path=path, line=err.line or 0, column=err.column
        ) from None
    finally:
        if collecting:
            gc.enable()
    magic_tok, layer_count_tok, blob_count_tok = header
    if str(magic_tok) != str(MAGIC):
        raise ParamSyntaxError(
            f"bad magic {magic_tok!s} (an ncnn text param starts with {MAGIC})",
            path=path,
            line=magic_tok.line or 1,
            column=magic_tok.column or 1,
        )
    layer_count, blob_count = int(layer_count_tok), int(blob_count_tok)
    for tok, count in ((layer_count_tok, layer_count), (blob_count_tok, blob_count)):
        if not 0 < count <= MAX_NET_COUNT:
            raise ParamSyntaxError(
                f"layer and blob counts must be in 1..{MAX_NET_COUNT} (ncnn's max_net_count), not {count}",
                path=path,
                line=tok.line or 0,
                column=tok.column or 0,
            )
    if len(records) < layer_count:
        raise ParamSyntaxError(
            f"header says {layer_count} layers but the file has only {len(records)}",
            path=path,
            line=layer_count_tok.line or 0,
            column=layer_count_tok.column or 0,
        )
    graph = Graph(catalog, source=path)
    if len(records) > layer_count:
        first = records[layer_count]
        graph.notes.append(
            f"{path}:{first.line}: {len(records) - layer_count} layer line(s) after the {layer_count} "
            "the header "
            f"counts are ignored, as ncnn ignores them (first: {first.type} {first.name})"
        )
        records = records[:layer_count]
    _build(graph, records, path)
    if blob_count < len(graph.blobs):
        raise ParamSyntaxError(
            f"header says {blob_count} blobs but the layers name {len(graph.blobs)} "
            "(too few blob slots corrupts ncnn's memory)",
            path=path,
            line=blob_count_tok.line or 0,
            column=blob_count_tok.column or 0,
        )
    if blob_count > len(graph.blobs):
        graph.notes.append(f"{path}: header says {blob_count} blobs but the layers name {len(graph.blobs)}")
    return graph


def _build(graph: Graph, records: list[_LayerLine], path: str) -> None:
    for rec in records:
        for top in rec.tops:
            blob = graph.blobs.get(top)
            if blob is not None and blob.producer is None and blob.consumers:
                first = blob.consumers[0]
                raise ParamSyntaxError(
                    f"blob {top!r} is read by layer {first.name} (line {first.line}) before layer {rec.name} "
                    "produces it; ncnn would give the reader an empty orphan blob",
                    path=path,
                    line=rec.line or 0,
                    column=1,
                )
        try:
            layer = graph.add_layer(rec.type, rec.name, rec.bottoms, rec.tops, rec.params)
        except GraphError as err:
            raise ParamSyntaxError(f"duplicate top: {err}", path=path, line=rec.line or 0, column=1) from None
        layer.line = rec.line


def read_param_text(path: str | os.PathLike[str], *, catalog: Catalog | None = None) -> Graph:
    """Read a text .param file (never opened for writing)."""
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
    return parse_param_text(text, path=name, catalog=catalog)
