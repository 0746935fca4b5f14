"""A pydantic validation error of a rule file as one readable line: where (the key path, which the loader
maps to ``file:line``) and what is expected there, with the value that was given.

Pydantic reports a union's failure once per member, at locations holding the member's name
(``vars.eos_token_id.str: Input should be a valid string`` for a ``null`` variable). Here the member names
are dropped from the location, a validator's own message is preferred over plain type errors, and plain
type errors at one place are merged into what the place takes: ``vars.eos_token_id: expected a string, an
integer, a number, a boolean or a mapping; got null``. A location inside a rule also names the rule.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from graphsurgeon.rewrite.actions import ACTION_KEYS

#: Error kinds in the order they explain a union best: a validator's own message, then a wrong literal or
#: pattern, then a missing or an unexpected key; plain type errors ("not an int") come last.
_SPECIFIC = ("value_error", "literal_error", "string_pattern_mismatch", "missing", "extra_forbidden")
#: What a plain type error says the place takes.
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dict_type": "a mapping",
    "list_type": "a list",
}
_TRANSFORMS = (
    "a transform is one of transpose, {transpose: [axes]}, {reshape: [dims]}, "
    "{repeat_interleave: {axis: A, n: N}}, {slice: {axis: A, start: S, stop: E}}"
)


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(err: ValidationError, data: Any, prefix: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], str]:
    """The location in ``data`` (key path) of ``err``'s most telling error, and the message for it."""
    errors = err.errors()
    rank = {kind: i for i, kind in enumerate(_SPECIFIC)}
    first = min(errors, key=lambda e: rank.get(e["type"], len(rank)))
    kind = first["type"]
    loc = _data_path(data, (*prefix, *first["loc"]), kind == "missing")
    message = str(first["msg"]).removeprefix("Value error, ")
    if kind == "union_tag_not_found" and loc[-2:-1] == ("do",):
        message = f"an action is one of {', '.join(ACTION_KEYS)}"
    elif kind == "union_tag_not_found" and loc[-2:-1] == ("transforms",):
        message = _TRANSFORMS
    elif kind == "union_tag_not_found":
        message = "not a form this field takes"
    elif kind in _EXPECTED:
        same = [e for e in errors if _data_path(data, (*prefix, *e["loc"])) == loc]
        wanted = list(dict.fromkeys(_EXPECTED[e["type"]] for e in same if e["type"] in _EXPECTED))
        said = wanted[0] if len(wanted) == 1 else ", ".join(wanted[:-1]) + f" or {wanted[-1]}"
        message = f"expected {said}; got {_shown(first.get('input'))}"
    rule = _rule_name(data, loc)
    return loc, f"rule {rule}: {message}" if rule else message


def _rule_name(data: Any, loc: tuple[Any, ...]) -> str | None:
    """The ``name`` of the rule ``loc`` lies in (``graphs.G.rules.I…``), when it has one."""
    if len(loc) < 5 or loc[0] != "graphs" or loc[2] != "rules" or loc[4:5] == ("name",):
        return None
    try:
        rule = data["graphs"][loc[1]]["rules"][loc[3]]
    except (KeyError, IndexError, TypeError):
        return None
    name = rule.get("name") if isinstance(rule, dict) else None
    return name if isinstance(name, str) else None


def _data_path(data: Any, loc: tuple[Any, ...], missing: bool = False) -> tuple[Any, ...]:
    """Drop what pydantic adds to an error location that is not in the document (union member names such
    as ``Rule``, ``SetAction``, ``selector`` or ``str``), so the location maps back to a YAML line; for a
    ``missing`` error the last part, the key the user did not write, is kept."""
    path: list[Any] = []
    node = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            node = node[part]
            path.append(part)
        elif isinstance(node, dict | list):
            continue  # a union member's name, or a field the user did not write
        else:
            return tuple(path)  # below a plain value: only member names follow
    last = loc[-1] if loc else None
    is_key = isinstance(last, str) and re.fullmatch(r"[a-z_][A-Za-z0-9_]*", last) is not None
    return (*path, last) if missing and is_key and isinstance(node, dict) else tuple(path)
