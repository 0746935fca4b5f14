"""Typing of .param value tokens, as ncnn 1.0.20261020's ``ParamDict::load_param`` types them.

Every semantic rule a token can break (lengths in bytes, int32 and float32 ranges, array element typing,
old-style array lengths, param id range) goes through a ``Reporter``: in strict mode it raises at the
offending token, in lenient mode (used by lint) it records a ``ParseIssue`` and the reader goes on with the
closest value ncnn would hold, so that one run can report every independent problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from lark import Token

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.params import Param, to_f32
from graphsurgeon.schema.catalog import ValueType

MAX_NAME = 255  # %255s in Net::load_param
MAX_VALUE_TOKEN = 127  # R1020 scan_numeric_value
MAX_STRING = 255
MAX_PARAM_ID = 31
OLD_ARRAY_BASE = -23300
FLT_MAX = 3.4028234663852886e38
INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True, slots=True)
class ParseIssue:
    """A problem the lenient reader recorded instead of raising: a stable code, where, and why."""

    code: str
    message: str
    line: int
    column: int
    layer: str | None = None
    warning: bool = False  # a hazard ncnn tolerates (spare blob slots, ignored extra lines), not an error
    offset: int | None = None  # the byte offset, for a .param.bin (which has no lines)


class Fail(GsurgError):
    """Raised in strict mode; carries the token that is wrong. The parser turns it into a ParamSyntaxError
    (file, line, column) before it leaves ``param_text``."""

    def __init__(self, message: str, token: Token) -> None:
        super().__init__(message)
        self.message = message
        self.token = token


@dataclass
class Reporter:
    """Raise (strict) or record (lenient) each problem found while reading tokens."""

    strict: bool = True
    issues: list[ParseIssue] = field(default_factory=list)

    def problem(self, code: str, message: str, token: Token) -> None:
        if self.strict:
            raise Fail(message, token)
        self.issues.append(ParseIssue(code, message, token.line or 0, token.column or 0))

    def attribute(self, line: int, layer: str) -> None:
        """Name the layer on the issues recorded while its line was read (tokens do not know it)."""
        for i in range(len(self.issues) - 1, -1, -1):
            issue = self.issues[i]
            if issue.line != line or issue.layer is not None:
                break
            self.issues[i] = replace(issue, layer=layer)


@dataclass(slots=True)
class RawArray:
    """An array literal before typing: the element tokens and where the literal starts."""

    items: list[str]
    token: Token
    trailing_comma: bool = False


def is_float_text(text: str) -> bool:
    return "." in text or "e" in text or "E" in text


def check_len(rep: Reporter, text: str, limit: int, what: str, at: Token) -> None:
    """ncnn's limits are in bytes (``%255s``, ``char[128]``), so UTF-8 text is measured in bytes."""
    size = len(text.encode("utf-8"))
    if size > limit:
        rep.problem(
            f"{what.replace(' ', '-')}-length", f"{what} is {size} bytes long; ncnn reads at most {limit}", at
        )


def to_int(rep: Reporter, text: str, token: Token) -> int:
    value = int(text)
    if not INT32[0] <= value <= INT32[1]:
        rep.problem("int-overflow", f"int {text} does not fit in 32 bits", token)
        value = max(INT32[0], min(INT32[1], value))
    return value


def to_float(rep: Reporter, text: str, token: Token) -> float:
    value = float(text)
    if math.isinf(value) or abs(value) > FLT_MAX * (1 + 2**-25):
        rep.problem("float-overflow", f"float {text} overflows float32", token)
    return to_f32(max(-FLT_MAX, min(FLT_MAX, value)))


def element(rep: Reporter, text: str, as_float: bool, token: Token) -> int | float:
    if as_float:
        return to_float(rep, text, token)
    if is_float_text(text):  # only reached after a reported mixed-type problem
        return int(float(text))
    return to_int(rep, text, token)


def natural_array(rep: Reporter, key_id: int, raw: RawArray) -> Param:
    """`K=v1,v2` / `K=v,`: the first element decides the type; a float after an int is an error (R1020)."""
    as_float = is_float_text(raw.items[0])
    if not as_float and any(is_float_text(i) for i in raw.items):
        rep.problem(
            "mixed-array",
            f"mixed-type array for param {key_id}: an int array cannot hold a float element",
            raw.token,
        )
        as_float = True
    values = tuple(element(rep, i, as_float, raw.token) for i in raw.items)
    return Param(ValueType.FLOAT_ARRAY if as_float else ValueType.INT_ARRAY, values)


def old_array(rep: Reporter, key_id: int, value: Any, key: Token) -> tuple[int, Param] | None:
    """`-233KK=N,v1,…,vN`: explicit length; elements must share one type (ncnn would store garbage).

    Returns None when the literal cannot be read as an array at all (lenient mode drops it)."""
    pid = -(key_id - OLD_ARRAY_BASE)
    if not 0 <= pid <= MAX_PARAM_ID:
        rep.problem("param-id", f"old-style array key {key_id} addresses param id {pid}, outside 0..31", key)
        return None
    if isinstance(value, Param) and value.kind is ValueType.INT:
        items: list[str] = [str(value.value)]
        token = key
    elif isinstance(value, RawArray):
        items, token = value.items, value.token
        if value.trailing_comma:
            rep.problem(
                "array-length", f"old-style array {key_id} ends with a comma (ncnn: length mismatch)", token
            )
    else:
        rep.problem("array-syntax", f"old-style array {key_id} needs `N,v1,…,vN`", key)
        return None
    if is_float_text(items[0]):
        rep.problem("array-length", f"old-style array {key_id}: length {items[0]!r} is not an int", token)
        return None
    length = to_int(rep, items[0], token)
    elements = items[1:]
    if length < 0 or length != len(elements):
        rep.problem(
            "array-length",
            f"bad array length: {key_id} declares {length} element(s) but has {len(elements)}",
            token,
        )
    kinds = {is_float_text(e) for e in elements}
    if len(kinds) > 1:
        rep.problem(
            "mixed-array",
            f"mixed-type array {key_id}: elements mix ints and floats (ncnn stores garbage)",
            token,
        )
    as_float = True in kinds
    values = tuple(element(rep, e, as_float, token) for e in elements)
    return pid, Param(ValueType.FLOAT_ARRAY if as_float else ValueType.INT_ARRAY, values)


# ---- rule-pattern values (only the pattern start of the grammar produces these) ----------------------


@dataclass(frozen=True, slots=True)
class Capture:
    """A ``%name`` value in a rule pattern."""

    name: str


@dataclass(frozen=True, slots=True)
class AnyValue:
    """A ``*`` value in a rule pattern: the param must be present, with any value."""


@dataclass(frozen=True, slots=True)
class ArrayPattern:
    """An array value in a rule pattern whose elements may be captures or ``*``."""

    elements: tuple[Any, ...]


def is_placeholder(item: str) -> bool:
    return item == "*" or item.startswith("%")
