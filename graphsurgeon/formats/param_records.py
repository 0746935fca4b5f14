"""From the grammar's ``param`` and ``layer`` reductions to typed params and layer records.

``Records`` holds one parse call's state (its Reporter, and whether rule-pattern placeholders are values)
and provides the hooks ``lalr_fast.FastLALR`` calls at each reduction of those rules, in the order lark's
inline transformer would: a param's value is typed when the param is reduced (when the token after it has
been read), a layer's names and counts when the layer is reduced (at the end of its line). So strict mode
raises at the first problem in file order, and lenient mode records the issues in that order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from graphsurgeon.formats.lalr_fast import Hook, Item
from graphsurgeon.formats.param_literals import (
    MAX_COUNT_TOKEN,
    MAX_KEY_TOKEN,
    MAX_NAME,
    MAX_PARAM_ID,
    MAX_STRING,
    MAX_VALUE_TOKEN,
    OLD_ARRAY_BASE,
    SATURATED,
    RawArray,
    Reporter,
    check_len,
    int_token,
    is_placeholder,
    natural_array,
    old_array,
    shown_int,
    shown_token,
    to_float,
    to_int,
)
from graphsurgeon.ir.params import Param
from graphsurgeon.schema.catalog import ValueType


class Placeholders(Protocol):
    """What a rule pattern's ``%name``, ``*`` and arrays holding them become (the rule engine's types: the
    formats know only that such values exist)."""

    def capture(self, name: str) -> Any: ...

    def any(self) -> Any: ...

    def array(self, elements: tuple[Any, ...]) -> Any: ...


@dataclass(slots=True)
class LayerLine:
    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: dict[int, Any]  # Param; in rule patterns also what the Placeholders make
    line: int


class Records:
    """One parse call: its Reporter, and ``placeholders`` (when the text is a rule pattern: %captures and *
    are values, made by the rule engine's own types)."""

    def __init__(self, rep: Reporter, *, placeholders: Placeholders | None = None) -> None:
        self.rep = rep
        self.placeholders = placeholders
        # one typing function per value terminal of the grammar
        self._typers: dict[str, Callable[[str, int], Any]] = {
            "INT": self._int,
            "FLOAT": self._float,
            "WORD": self._word,
            "QUOTED": self._quoted,
            "ARRAY": self._array,
            "CAPTURE": self._capture,
            "ANY": self._any,
        }
        # a param that reads cleanly always reads the same way: each distinct spelling is typed once per call
        self._clean: dict[tuple[str, str, str], tuple[int, Any]] = {}

    def hooks(self) -> dict[str, Hook]:
        return {"param": self.param, "layer": self.layer}

    # ---- values ---------------------------------------------------------------------------------------

    def _int(self, text: str, at: int) -> Param:
        check_len(self.rep, text, MAX_VALUE_TOKEN, "value", at)
        return Param(ValueType.INT, to_int(self.rep, text, at))

    def _float(self, text: str, at: int) -> Param:
        check_len(self.rep, text, MAX_VALUE_TOKEN, "value", at)
        return Param(ValueType.FLOAT, to_float(self.rep, text, at))

    def _word(self, text: str, at: int) -> Param:
        check_len(self.rep, text, MAX_STRING, "string", at)
        return Param(ValueType.STRING, text)

    def _quoted(self, text: str, at: int) -> Param:
        check_len(self.rep, text, MAX_STRING + 2, "quoted string", at)
        return Param(ValueType.STRING, text[1:-1])

    def _array(self, text: str, at: int) -> RawArray:
        items = text.split(",")
        if items[-1] == "":
            items.pop()  # the trailing comma of a one-element (or closed) natural array
        for item in items:
            check_len(self.rep, item, MAX_VALUE_TOKEN, "array element", at)
        return RawArray(items, at, text.endswith(","))

    def _capture(self, text: str, at: int) -> Any:
        if self.placeholders is None:
            self.rep.problem("pattern-value", f"{text} is a rule-pattern capture, not an ncnn value", at)
            return Param(ValueType.STRING, text)
        return self.placeholders.capture(text[1:])

    def _any(self, text: str, at: int) -> Any:
        if self.placeholders is None:
            self.rep.problem("pattern-value", "* is a rule-pattern wildcard, not an ncnn value", at)
            return Param(ValueType.STRING, "*")
        return self.placeholders.any()

    # ---- param: KEY value -------------------------------------------------------------------------------

    def param(self, items: list[Item]) -> tuple[int, Any] | None:
        (_, key, key_at), (kind, text, at) = items
        spelling = (key, kind, text)
        known = self._clean.get(spelling)
        if known is not None:
            return known
        issues = len(self.rep.issues)
        typed = self._param(key, key_at, kind, text, at)
        if typed is not None and len(self.rep.issues) == issues:  # what had a problem is reported each time
            self._clean[spelling] = typed
        return typed

    def _param(self, key: str, key_at: int, kind: str, text: str, at: int) -> tuple[int, Any] | None:
        typer = self._typers.get(kind)
        if typer is None:
            raise ValueError(f"the grammar's value terminal {kind} has no typing rule")
        value = typer(text, at)
        rep = self.rep
        if len(key) > MAX_KEY_TOKEN + 1:
            check_len(rep, key[:-1], MAX_KEY_TOKEN, "param id", key_at)
        key_id = int_token(key[:-1])
        if abs(key_id) >= SATURATED:  # no param id nor old-style array key: do not compute with it
            message = (
                f"param id {shown_token(key[:-1])} is outside 0..{MAX_PARAM_ID} (ncnn has 32 param slots)"
            )
            rep.problem("param-id", message, key_at)
            return None
        if type(value) is RawArray and any(is_placeholder(i) for i in value.items):
            return self._array_pattern(key_id, value)
        if key_id <= OLD_ARRAY_BASE:
            return old_array(rep, key_id, value, key_at)
        if not 0 <= key_id <= MAX_PARAM_ID:
            message = f"param id {key_id} is outside 0..{MAX_PARAM_ID} (ncnn has 32 param slots)"
            rep.problem("param-id", message, key_at)
            return None
        if type(value) is RawArray:
            return key_id, natural_array(rep, key_id, value)
        return key_id, value

    def _array_pattern(self, key_id: int, raw: RawArray) -> tuple[int, Any] | None:
        holders = self.placeholders
        if holders is None:
            message = "%captures and * in arrays belong only in rule patterns"
            self.rep.problem("pattern-value", message, raw.at)
            return None
        items = raw.items
        if key_id <= OLD_ARRAY_BASE:
            if is_placeholder(items[0]) or int_token(items[0]) != len(items) - 1:
                self.rep.fail(f"old-style array {key_id}: the length must be the element count", raw.at)
            key_id, items = -(key_id - OLD_ARRAY_BASE), items[1:]
        elements: list[Any] = []
        for item in items:
            if item == "*":
                elements.append(holders.any())
            elif item.startswith("%"):
                elements.append(holders.capture(item[1:]))
            else:
                elements.append(float(item) if ("." in item or "e" in item.lower()) else int_token(item))
        return key_id, holders.array(tuple(elements))

    # ---- layer: NAME NAME COUNT COUNT NAME* param* --------------------------------------------------------

    def layer(self, items: list[Item]) -> LayerLine:
        rep = self.rep
        (_, layer_type, type_at), (_, name, name_at), (_, nb_text, nb_at), (_, nt_text, nt_at) = items[:4]
        names: list[str] = []
        params: dict[int, Any] = {}
        for text, at in ((layer_type, type_at), (name, name_at)):
            if len(text) > MAX_NAME or not text.isascii():  # an ASCII name's length is its size in bytes
                check_len(rep, text, MAX_NAME, "name", at)
        for kind, value, at in items[4:]:
            if kind == "param":
                if value is not None:
                    params[value[0]] = value[1]  # a repeated id: the last one wins, as in ncnn
            else:
                if len(value) > MAX_NAME or not value.isascii():
                    check_len(rep, value, MAX_NAME, "name", at)
                names.append(value)
        for text, at in ((nb_text, nb_at), (nt_text, nt_at)):
            if len(text) > MAX_COUNT_TOKEN:
                check_len(rep, text, MAX_COUNT_TOKEN, "count", at)
        n_bottom, n_top = int_token(nb_text), int_token(nt_text)
        if n_bottom < 0 or n_top < 0:
            rep.fail("bottom and top counts must not be negative", nb_at if n_bottom < 0 else nt_at)
        if n_bottom + n_top != len(names):
            # the line's structure is unknown: fatal in both modes
            rep.fail(
                f"layer {name} declares {shown_int(n_bottom)} bottom(s) and {shown_int(n_top)} top(s) "
                f"but lists {len(names)} blob name(s)",
                name_at,
            )
        line = rep.where(type_at)[0]
        if rep.issues:
            rep.attribute(line, name)
        return LayerLine(layer_type, name, names[:n_bottom], names[n_bottom:], params, line)
