"""Typing of .param value tokens, as ncnn 1.0.20261020's ``ParamDict::load_param`` types them.

Every semantic rule a token can break (lengths in bytes, int32 and float32 ranges, array element typing,
old-style array lengths, param id range) goes through a ``Reporter``: in strict mode it raises at the
offending token, in lenient mode (used by lint) it records a ``ParseIssue`` and the reader goes on with the
closest value ncnn would hold, so that one run can report every independent problem. Tokens are known by
their character offset in the text; the Reporter turns an offset into a line and column only when it
reports a problem there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.params import Param, to_f32
from graphsurgeon.schema.catalog import ValueType

MAX_NAME = 255  # %255s in Net::load_param
MAX_VALUE_TOKEN = 127  # R1020 scan_numeric_value
MAX_KEY_TOKEN = 15  # R1020 reads a param id (before its '=') of at most 15 characters
MAX_COUNT_TOKEN = 31  # R1020 scan_net_value: header and blob counts as a %31s integer
MAX_STRING = 255
MAX_PARAM_ID = 31
OLD_ARRAY_BASE = -23300
FLT_MAX = 3.4028234663852886e38
INT32 = (-(2**31), 2**31 - 1)
#: A decimal token with more significant digits than this is held as ±SATURATED, never converted: no number
#: ncnn reads (an int32 value, a param id, a count up to max_net_count) comes near it, and Python refuses to
#: convert a string of more than 4,300 digits at all.
MAX_INT_DIGITS = 19
SATURATED = 10**MAX_INT_DIGITS
#: Tokens longer than this are abbreviated in messages, so that every message stays one readable line.
MAX_SHOWN = 40


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
    """Raised in strict mode (and for what no mode can read past); carries the 1-based line and column.
    The parser turns it into a ParamSyntaxError (file, line, column) before it leaves ``param_text``."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


class Reporter:
    """Raise (strict) or record (lenient) each problem found while reading the tokens of ``text``.

    One Reporter belongs to one parse call."""

    def __init__(self, text: str, *, strict: bool = True) -> None:
        self.text = text
        self.strict = strict
        self.issues: list[ParseIssue] = []
        # a cursor: offsets are asked for in file order, give or take a line, so counting stays linear
        self._offset = 0
        self._line = 1
        self._line_start = 0

    def where(self, offset: int) -> tuple[int, int]:
        """The 1-based line and column of ``offset``, counted as lark counts them (lines end at '\\n')."""
        text = self.text
        if offset >= self._offset:
            newlines = text.count("\n", self._offset, offset)
            if newlines:
                self._line += newlines
                self._line_start = text.rfind("\n", self._offset, offset) + 1
        else:
            newlines = text.count("\n", offset, self._offset)
            if newlines:
                self._line -= newlines
                self._line_start = text.rfind("\n", 0, offset) + 1
        self._offset = offset
        return self._line, offset - self._line_start + 1

    def problem(self, code: str, message: str, at: int) -> None:
        line, column = self.where(at)
        if self.strict:
            raise Fail(message, line, column)
        self.issues.append(ParseIssue(code, message, line, column))

    def fail(self, message: str, at: int) -> NoReturn:
        """A problem no mode reads past (the line's structure is unknown)."""
        raise Fail(message, *self.where(at))

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
    at: int
    trailing_comma: bool = False


def is_float_text(text: str) -> bool:
    return "." in text or "e" in text or "E" in text


def check_len(rep: Reporter, text: str, limit: int, what: str, at: int) -> None:
    """ncnn's limits are in bytes (``%255s``, ``char[128]``), so UTF-8 text is measured in bytes."""
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > limit:
        rep.problem(
            f"{what.replace(' ', '-')}-length", f"{what} is {size} bytes long; ncnn reads at most {limit}", at
        )


def int_token(text: str) -> int:
    """The value of a decimal token (``[+-]?[0-9]+``, as the grammar gives it) of any length: exact up to
    MAX_INT_DIGITS significant digits, else -SATURATED or SATURATED, which every range check refuses."""
    if len(text.lstrip("+-").lstrip("0")) <= MAX_INT_DIGITS:
        return int(text)
    return -SATURATED if text.startswith("-") else SATURATED


def shown_int(value: int) -> str:
    """``value`` for a message; a saturated one (see ``int_token``) as what it stands for."""
    if abs(value) < SATURATED:
        return str(value)
    return f"-10^{MAX_INT_DIGITS} or less" if value < 0 else f"10^{MAX_INT_DIGITS} or more"


def shown_token(text: str) -> str:
    """``text`` for a message: as it is, or its start and its length when it is longer than MAX_SHOWN."""
    if len(text) <= MAX_SHOWN:
        return text
    return f"{text[:20]}... ({len(text)} characters)"


def to_int(rep: Reporter, text: str, at: int) -> int:
    value = int_token(text)
    if not INT32[0] <= value <= INT32[1]:
        rep.problem("int-overflow", f"int {shown_token(text)} does not fit in 32 bits", at)
        value = max(INT32[0], min(INT32[1], value))
    return value


def to_float(rep: Reporter, text: str, at: int) -> float:
    value = float(text)
    if math.isinf(value) or abs(value) > FLT_MAX * (1 + 2**-25):
        rep.problem("float-overflow", f"float {text} overflows float32", at)
    return to_f32(max(-FLT_MAX, min(FLT_MAX, value)))


def element(rep: Reporter, text: str, as_float: bool, at: int) -> int | float:
    if as_float:
        return to_float(rep, text, at)
    if is_float_text(text):  # only reached after a reported mixed-type problem
        return int(float(text))
    return to_int(rep, text, at)


def natural_array(rep: Reporter, key_id: int, raw: RawArray) -> Param:
    """`K=v1,v2` / `K=v,`: the first element decides the type; a float after an int is an error (R1020)."""
    as_float = is_float_text(raw.items[0])
    if not as_float and any(is_float_text(i) for i in raw.items):
        rep.problem(
            "mixed-array",
            f"mixed-type array for param {key_id}: an int array cannot hold a float element",
            raw.at,
        )
        as_float = True
    values = tuple(element(rep, i, as_float, raw.at) for i in raw.items)
    return Param(ValueType.FLOAT_ARRAY if as_float else ValueType.INT_ARRAY, values)


def old_array(rep: Reporter, key_id: int, value: Any, key_at: int) -> tuple[int, Param] | None:
    """`-233KK=N,v1,…,vN`: explicit length; elements must share one type (ncnn would store garbage).

    Returns None when the literal cannot be read as an array at all (lenient mode drops it)."""
    pid = -(key_id - OLD_ARRAY_BASE)
    if not 0 <= pid <= MAX_PARAM_ID:
        message = f"old-style array key {key_id} addresses param id {pid}, outside 0..31"
        rep.problem("param-id", message, key_at)
        return None
    if isinstance(value, Param) and value.kind is ValueType.INT:
        items: list[str] = [str(value.value)]
        at = key_at
    elif isinstance(value, RawArray):
        items, at = value.items, value.at
        if value.trailing_comma:
            rep.problem(
                "array-length", f"old-style array {key_id} ends with a comma (ncnn: length mismatch)", at
            )
    else:
        rep.problem("array-syntax", f"old-style array {key_id} needs `N,v1,…,vN`", key_at)
        return None
    if is_float_text(items[0]):
        rep.problem("array-length", f"old-style array {key_id}: length {items[0]!r} is not an int", at)
        return None
    length = to_int(rep, items[0], at)
    elements = items[1:]
    if length < 0 or length != len(elements):
        rep.problem(
            "array-length",
            f"bad array length: {key_id} declares {length} element(s) but has {len(elements)}",
            at,
        )
    kinds = {is_float_text(e) for e in elements}
    if len(kinds) > 1:
        rep.problem(
            "mixed-array",
            f"mixed-type array {key_id}: elements mix ints and floats (ncnn stores garbage)",
            at,
        )
    as_float = True in kinds
    values = tuple(element(rep, e, as_float, at) for e in elements)
    return pid, Param(ValueType.FLOAT_ARRAY if as_float else ValueType.INT_ARRAY, values)


def is_placeholder(item: str) -> bool:
    return item == "*" or item.startswith("%")
