"""A validator for the part of JSON Schema (draft 2020-12) that gsurg's own schema files use: the
``model.json`` formats (``schemas/model.json/``) and any side-file schema a rule file names.

Keywords read: ``type`` (one name or a list), ``properties``, ``required``, ``additionalProperties``
(true, false or a schema), ``items``, ``minItems``, ``maxItems``, ``enum``, ``const``, ``minimum``,
``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``, ``minLength``, ``if`` /
``then`` / ``else``, ``allOf`` and ``$ref`` to ``#/$defs/NAME``; ``$schema``, ``$id``, ``$comment``,
``title``, ``description`` and ``$defs`` are annotations. A schema using any other keyword is refused
when it loads (``SchemaFileError``), so a schema can never hold a constraint that is silently not checked.

Types are JSON's as a C++ reader (nlohmann::json) sees them: ``integer`` is a number written without a
fraction or exponent (``1.0`` is a number, not an integer), and ``true``/``false`` are never numbers;
``const`` and ``enum`` compare that way too (``1`` is not ``true``). A non-finite number (``NaN``,
``Infinity``, which Python's JSON reader accepts) is no number.

``JsonSchema.violation`` gives the first place a document breaks the schema, as the dotted key a reader
would name (``decoder.rope.theta``, ``decoder.cache_inputs[3]``) and why — the same key the C++ runtime's
``JsonDoc`` errors name.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.input_files import Raise, parse_json, read_json_input

#: Keywords that constrain nothing (``$defs`` is reached through ``$ref``).
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "$defs"})
#: Keywords the validator checks.
CHECKED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "if",
        "then",
        "else",
        "allOf",
        "$ref",
    }
)
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
#: The largest schema file read.
SCHEMA_FILE_LIMIT = 1 << 20


class SchemaFileError(GsurgError):
    """A schema file that is not JSON Schema this validator reads; names the file and the schema location."""


@dataclass(frozen=True)
class Violation:
    """Where a document breaks a schema: ``key`` (dotted, ``""`` for the whole document) and why."""

    key: str
    why: str

    def __str__(self) -> str:
        return f"the document {self.why}" if not self.key else f'entry "{self.key}" {self.why}'


def type_name(value: Any) -> str:
    """The JSON type of a parsed value, as a schema's ``type`` names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise TypeError(f"not a parsed JSON value: {type(value).__name__}")


def _has_type(value: Any, name: str) -> bool:
    actual = type_name(value)
    if name == "number":
        return actual in ("integer", "number") and not (actual == "number" and not math.isfinite(value))
    if actual == "number" and not math.isfinite(value):
        return False
    return actual == name


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two parsed JSON values as JSON sees it: ``true`` is not ``1``, ``1`` equals ``1.0``."""
    ta, tb = type_name(a), type_name(b)
    if {ta, tb} <= {"integer", "number"}:
        return bool(a == b)
    if ta != tb:
        return False
    if ta == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if ta == "object":
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def shown(value: Any) -> str:
    """``value`` as JSON, cut after 80 characters (for messages)."""
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _child(key: str, name: str) -> str:
    plain = name and not any(c in name for c in '.[]"') and name.isprintable()
    part = name if plain else json.dumps(name)
    return part if not key else f"{key}.{part}" if plain else f"{key}[{part}]"


class JsonSchema:
    """One schema file, checked for the keywords this module reads when it loads."""

    def __init__(self, root: dict[str, Any], source: str) -> None:
        self.root = root
        self.source = source
        self._check_schema(root, "#")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> JsonSchema:
        name = os.fspath(path)
        root = read_json_input(name, limit=SCHEMA_FILE_LIMIT, what="a JSON Schema", error=SchemaFileError)
        if not isinstance(root, dict):
            raise SchemaFileError(f"{name}: a JSON Schema is an object, not {type_name(root)}")
        return cls(root, name)

    # ---- the schema itself ----------------------------------------------------------------------------
    def _fail(self, at: str, why: str) -> SchemaFileError:
        return SchemaFileError(f"{self.source}: schema {at}: {why}")

    def _check_schema(self, node: Any, at: str) -> None:
        if isinstance(node, bool):
            return
        if not isinstance(node, dict):
            raise self._fail(at, f"a schema is an object or true/false, not {shown(node)}")
        unknown = sorted(set(node) - ANNOTATIONS - CHECKED)
        if unknown:
            raise self._fail(at, f"keyword {unknown[0]!r} is not one gsurg's validator checks")
        kinds = node.get("type")
        names = kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []
        for kind in names:
            if kind not in TYPES:
                raise self._fail(f"{at}/type", f"{shown(kind)} is not a JSON type ({', '.join(TYPES)})")
        for word in ("properties", "$defs"):
            table = node.get(word, {})
            if not isinstance(table, dict):
                raise self._fail(f"{at}/{word}", "must be an object")
            for name, sub in table.items():
                self._check_schema(sub, f"{at}/{word}/{name}")
        for word in ("additionalProperties", "items", "if", "then", "else"):
            if word in node:
                self._check_schema(node[word], f"{at}/{word}")
        for i, sub in enumerate(self._list(node, "allOf", at)):
            self._check_schema(sub, f"{at}/allOf/{i}")
        for name in self._list(node, "required", at):
            if not isinstance(name, str):
                raise self._fail(f"{at}/required", f"{shown(name)} is not a key name")
        self._list(node, "enum", at)
        for word in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            if word in node and not _has_type(node[word], "number"):
                raise self._fail(f"{at}/{word}", f"must be a number, not {shown(node[word])}")
        for word in ("minItems", "maxItems", "minLength"):
            if word in node and not (_has_type(node[word], "integer") and node[word] >= 0):
                raise self._fail(f"{at}/{word}", f"must be a count, not {shown(node[word])}")
        if "multipleOf" in node and not node["multipleOf"] > 0:
            raise self._fail(f"{at}/multipleOf", "must be positive")
        if "$ref" in node:
            self._target(node["$ref"], at)

    def _list(self, node: dict[str, Any], word: str, at: str) -> list[Any]:
        value = node.get(word, [])
        if not isinstance(value, list):
            raise self._fail(f"{at}/{word}", f"must be a list, not {shown(value)}")
        return value

    def _target(self, ref: Any, at: str) -> Any:
        prefix = "#/$defs/"
        if not isinstance(ref, str) or not ref.startswith(prefix):
            raise self._fail(f"{at}/$ref", f"{shown(ref)} is not a reference to {prefix}NAME")
        defs = self.root.get("$defs", {})
        name = ref[len(prefix) :]
        if not isinstance(defs, dict) or name not in defs:
            raise self._fail(f"{at}/$ref", f"{ref} names no entry of $defs")
        return defs[name]

    # ---- documents ------------------------------------------------------------------------------------
    def violation(self, doc: Any) -> Violation | None:
        """The first place ``doc`` (a parsed JSON value) breaks the schema, or None when it holds."""
        return self._check(self.root, doc, "", depth=0)

    def _check(self, node: Any, value: Any, key: str, depth: int) -> Violation | None:
        if depth > 64:
            raise self._fail("#", "$ref nests more than 64 deep (a reference cycle?)")
        if node is True:
            return None
        if node is False:
            return Violation(key, "is not allowed here")
        if "$ref" in node:
            found = self._check(self._target(node["$ref"], "#"), value, key, depth + 1)
            if found is not None:
                return found
        kinds = node.get("type")
        if kinds is not None:
            names = kinds if isinstance(kinds, list) else [kinds]
            if not any(_has_type(value, n) for n in names):
                wanted = " or ".join(_article(n) for n in names)
                return Violation(key, f"must be {wanted}, not {shown(value)}")
        if "const" in node and not json_equal(value, node["const"]):
            return Violation(key, f"must be {shown(node['const'])}, not {shown(value)}")
        if "enum" in node and not any(json_equal(value, v) for v in node["enum"]):
            options = ", ".join(shown(v) for v in node["enum"])
            return Violation(key, f"must be one of {options}, not {shown(value)}")
        found = self._number(node, value, key) or self._string(node, value, key)
        found = found or self._object(node, value, key, depth) or self._array(node, value, key, depth)
        if found is not None:
            return found
        for sub in node.get("allOf", []):
            found = self._check(sub, value, key, depth + 1)
            if found is not None:
                return found
        if "if" in node:
            holds = self._check(node["if"], value, key, depth + 1) is None
            branch = node.get("then" if holds else "else")
            if branch is not None:
                return self._check(branch, value, key, depth + 1)
        return None

    @staticmethod
    def _number(node: dict[str, Any], value: Any, key: str) -> Violation | None:
        if not _has_type(value, "number"):
            return None
        if "minimum" in node and value < node["minimum"]:
            return Violation(key, f"must be at least {node['minimum']}, not {shown(value)}")
        if "maximum" in node and value > node["maximum"]:
            return Violation(key, f"must be at most {node['maximum']}, not {shown(value)}")
        if "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]:
            return Violation(key, f"must be above {node['exclusiveMinimum']}, not {shown(value)}")
        if "exclusiveMaximum" in node and value >= node["exclusiveMaximum"]:
            return Violation(key, f"must be below {node['exclusiveMaximum']}, not {shown(value)}")
        if "multipleOf" in node and math.remainder(value, node["multipleOf"]) != 0:
            return Violation(key, f"must be a multiple of {node['multipleOf']}, not {shown(value)}")
        return None

    @staticmethod
    def _string(node: dict[str, Any], value: Any, key: str) -> Violation | None:
        if isinstance(value, str) and len(value) < node.get("minLength", 0):
            least = node["minLength"]
            chars = "character" if least == 1 else "characters"
            return Violation(key, f"must hold at least {least} {chars}, not {shown(value)}")
        return None

    def _object(self, node: dict[str, Any], value: Any, key: str, depth: int) -> Violation | None:
        if not isinstance(value, dict):
            return None
        for name in node.get("required", []):
            if name not in value:
                return Violation(_child(key, name), "is missing")
        properties = node.get("properties", {})
        extra = node.get("additionalProperties", True)
        for name, item in value.items():
            sub = properties.get(name, extra)
            if sub is False:
                return Violation(_child(key, name), "is not a key the schema knows")
            found = self._check(sub, item, _child(key, name), depth + 1)
            if found is not None:
                return found
        return None

    def _array(self, node: dict[str, Any], value: Any, key: str, depth: int) -> Violation | None:
        if not isinstance(value, list):
            return None
        if len(value) < node.get("minItems", 0):
            return Violation(key, f"must hold at least {node['minItems']} items, not {len(value)}")
        if "maxItems" in node and len(value) > node["maxItems"]:
            return Violation(key, f"must hold at most {node['maxItems']} items, not {len(value)}")
        if "items" in node:
            for i, item in enumerate(value):
                found = self._check(node["items"], item, f"{key}[{i}]", depth + 1)
                if found is not None:
                    return found
        return None


_WORDS = {"object": "an object", "array": "a list", "integer": "an integer", "boolean": "true or false"}


def _article(name: str) -> str:
    return _WORDS.get(name, "null" if name == "null" else f"a {name}")


def check_json_text(raw: bytes, schema: JsonSchema, where: str, *, error: Raise) -> None:
    """``raw`` must be JSON that holds to ``schema``; else ``error`` starting with ``where`` and naming the
    key and the schema file."""
    violation = schema.violation(parse_json(raw, where, error=error))
    if violation is not None:
        raise error(f"{where}: {violation} (schema {schema.source})")


@lru_cache(maxsize=16)
def _schema(path: str, mtime_ns: int) -> JsonSchema:
    return JsonSchema.load(path)


def load_schema(path: str | os.PathLike[str]) -> JsonSchema:
    """The schema file at ``path`` (read once while it is unchanged)."""
    name = os.fspath(path)
    try:
        mtime = os.stat(name).st_mtime_ns
    except OSError:
        mtime = -1  # JsonSchema.load names the problem
    return _schema(name, mtime)
