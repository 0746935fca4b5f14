"""Loading a rule file: YAML with line numbers, ``${name}`` variables (``--set`` overrides, typed as YAML
scalars), validation against ``rulefile.RuleFile``, and errors that name ``file:line`` and what was expected
there. Also the JSON Schema export behind ``gsurg schema rules``."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from pydantic import ValidationError

from graphsurgeon.rewrite.actions import ACTION_KEYS
from graphsurgeon.rewrite.rulefile import RuleFile
from graphsurgeon.rewrite.yaml_source import LocatedYaml, RuleFileError, load_located

#: Error kinds in the order they explain a union best: a validator's own message, then a wrong literal or
#: pattern, then a missing or an unexpected key; plain type errors ("not an int") come last.
_SPECIFIC = ("value_error", "literal_error", "string_pattern_mismatch", "missing", "extra_forbidden")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def json_schema() -> str:
    """The JSON Schema editors use for completion (``gsurg schema rules``)."""
    schema = RuleFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gsurg rule file"
    return json.dumps(schema, indent=2)


def _substitute(value: Any, variables: dict[str, Any], src: LocatedYaml, loc: tuple[Any, ...]) -> Any:
    """``${name}`` inside a string is replaced by the variable's text; a string that is exactly one
    ``${name}`` takes the variable's own value, so numbers stay numbers."""
    if isinstance(value, str):

        def lookup(name: str) -> Any:
            if name not in variables:
                raise RuleFileError(
                    f"{src.where(loc)}: unknown variable ${{{name}}} (define it in vars or --set)"
                )
            return variables[name]

        whole = _VAR.fullmatch(value)
        if whole is not None:
            return lookup(whole.group(1))
        return _VAR.sub(lambda m: str(lookup(m.group(1))), value)
    if isinstance(value, dict):
        return {k: _substitute(v, variables, src, (*loc, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, variables, src, (*loc, i)) for i, v in enumerate(value)]
    return value


def load_rule_file(path: str, overrides: dict[str, str] | None = None, text: str | None = None) -> RuleFile:
    """Read, substitute variables in, and validate a rule file. Errors name ``file:line`` and what was
    expected there."""
    src = load_located(path, text)
    if not isinstance(src.data, dict):
        raise RuleFileError(f"{path}:1: a rule file is a YAML mapping (version, name, graphs, …)")
    raw_vars = src.data.get("vars") or {}
    if not isinstance(raw_vars, dict):
        raise RuleFileError(f"{src.where(('vars',))}: vars is a mapping of name: value")
    variables: dict[str, Any] = {str(k): v for k, v in raw_vars.items()}
    unknown = set(overrides or {}) - set(variables)
    if unknown:
        raise RuleFileError(f"{path}: --set {sorted(unknown)[0]}: the rule file declares no such variable")
    for key, text in (overrides or {}).items():  # --set values are typed as YAML scalars: 2048 is an int
        variables[key] = yaml.safe_load(text) if text.strip() else text
    data = {k: (v if k == "vars" else _substitute(v, variables, src, (k,))) for k, v in src.data.items()}
    if overrides:
        data["vars"] = variables
    try:
        return RuleFile.model_validate(data)
    except ValidationError as err:
        errors = err.errors()
        # in a union, a validator's or schema's own complaint says more than "not an int"
        rank = {kind: i for i, kind in enumerate(_SPECIFIC)}
        first = min(errors, key=lambda e: rank.get(e["type"], len(rank)))
        loc = _data_path(data, tuple(first["loc"]))
        field = ".".join(str(p) for p in loc) or "(top level)"
        message = first["msg"]
        if first["type"] == "union_tag_not_found" and loc and loc[-2:-1] == ("do",):
            message = f"an action is one of {', '.join(ACTION_KEYS)}"
        elif first["type"] == "union_tag_not_found":
            message = "not a form this field takes"
        raise RuleFileError(f"{src.where(loc)}: {field}: {message}") from None


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop what pydantic adds to an error location that is not in the document (union member names such
    as ``Rule`` or ``SetAction``), so the location maps back to a YAML line."""
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
            break
    last = loc[-1] if loc else None
    is_key = isinstance(last, str) and re.fullmatch(r"[a-z_][A-Za-z0-9_]*", last) is not None
    return (*path, last) if is_key and last not in path else tuple(path)
