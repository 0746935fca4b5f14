"""Run-level values of a rule file: variables and facts, and the ``${…}`` templates that read them.

A ``${…}`` template holds an expression (``graphsurgeon.schema.expr``: integer arithmetic, comparisons,
``a if c else b``, string literals for ``==``, ``a.b`` fields). It may read

* **variables** (``vars:`` of the rule file and the files it includes; ``--set name=value`` overrides),
  each evaluated on first use, so a variable may be computed from others (``group: ${heads // kv_heads}``)
  and a cycle, or a chain deeper than ``MAX_CHAIN``, is an error naming it;
* **facts**: ``config`` (the source checkpoint's ``config.json``, e.g. ``${config.num_hidden_layers}``) and
  ``inputs`` (the models a graph reads, e.g. ``${inputs.decoder.count.SDPA}``), read only when used.

A string that is exactly one ``${…}`` takes the expression's value (numbers stay numbers); otherwise every
``${…}`` in it is replaced by its value's text. A variable declared ``{path: …}`` holds a file-system path:
relative to the file that declares it, to an installed package's folder (``{path: …, package: NAME}``), or
to the current directory when ``--set`` gives it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphsurgeon.errors import CatalogError
from graphsurgeon.rewrite.yaml_source import LocatedYaml, RuleFileError, has_lone_surrogate
from graphsurgeon.schema.expr import evaluate

TEMPLATE = re.compile(r"\$\{([^{}]*)\}")
#: How deep variables computed from variables may nest (each level is a stack of evaluator frames).
MAX_CHAIN = 50


def checked_path(value: str, base: Path, where: str) -> Path:
    """``value`` (relative to ``base``, ``~`` expanded) as a real path; a NUL, text that is not Unicode or a
    ``~user`` with no such user is an error naming ``where``. A symbolic link loop is left unresolved
    (reading it then fails with the system's reason)."""
    if "\0" in value:
        raise RuleFileError(f"{where}: the path {value!r} holds a NUL character")
    if has_lone_surrogate(value):
        raise RuleFileError(f"{where}: the path {value!r} is not valid text (a lone surrogate)")
    try:
        expanded = Path(value).expanduser()
    except RuntimeError:  # `~nosuchuser/x`
        raise RuleFileError(f"{where}: the path {value!r}: no such user to expand ~ for") from None
    return Path(os.path.realpath(base / expanded))


@dataclass(frozen=True)
class VarDef:
    """One variable as declared: its raw value, where it was written, and the folder its paths are from."""

    name: str
    raw: Any
    where: str  # file:line, or "--set"
    base: Path
    is_path: bool = False


class JsonFact(dict[str, Any]):
    """A JSON object a fact was read from, with ``origin`` saying where (``/ckpt/config.json``, or
    ``/ckpt/config.json: vision_encoder_config`` for a nested one), so a missing field's error names the
    file. Nested objects are wrapped when read."""

    def __init__(self, data: Mapping[str, Any], origin: str) -> None:
        super().__init__(data)
        self.origin = origin

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(key)
        if isinstance(value, dict) and not isinstance(value, JsonFact):
            value = JsonFact(value, f"{self.origin}: {key}")
            super().__setitem__(key, value)
        return value


class LazyFacts(Mapping[str, Any]):
    """A mapping whose entries are computed on first read (facts nobody uses are never read); ``origin``
    says where its names come from, for errors."""

    def __init__(self, names: list[str], make: Callable[[str], Any], origin: str = "") -> None:
        self._names = names
        self._make = make
        self._cache: dict[str, Any] = {}
        self.origin = origin

    def __getitem__(self, key: str) -> Any:
        if key not in self._names:
            raise KeyError(key)
        if key not in self._cache:
            self._cache[key] = self._make(key)
        return self._cache[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class Scope:
    """Variables and facts, evaluated lazily and once each."""

    def __init__(self, defs: Mapping[str, VarDef], facts: Mapping[str, Callable[[], Any]] | None = None):
        self._defs = dict(defs)
        self._facts = dict(facts or {})
        self._values: dict[str, Any] = {}
        self._fact_values: dict[str, Any] = {}
        self._evaluating: list[str] = []

    def add_fact(self, name: str, make: Callable[[], Any]) -> None:
        """Make the fact root ``name`` available (read on first use)."""
        self._facts[name] = make
        self._fact_values.pop(name, None)

    @property
    def names(self) -> list[str]:
        return list(self._defs)

    def var(self, name: str) -> Any:
        """The value of variable ``name`` (computed from its definition on first use)."""
        if name in self._values:
            return self._values[name]
        vdef = self._defs[name]
        if name in self._evaluating:
            cycle = " -> ".join([*self._evaluating[self._evaluating.index(name) :], name])
            raise RuleFileError(f"{vdef.where}: variable {name} depends on itself ({cycle})")
        if len(self._evaluating) >= MAX_CHAIN:
            chain = " -> ".join([*self._evaluating[:3], "…", name])
            raise RuleFileError(
                f"{vdef.where}: variable {name}: variables computed from variables nest more than "
                f"{MAX_CHAIN} deep ({chain})"
            )
        self._evaluating.append(name)
        try:
            value = self.render(vdef.raw, vdef.where)
            if vdef.is_path:
                if not isinstance(value, str) or not value:
                    raise RuleFileError(f"{vdef.where}: variable {name} is a path; got {value!r}")
                value = str(checked_path(value, vdef.base, vdef.where))
        finally:
            self._evaluating.pop()
        self._values[name] = value
        return value

    def path_values(self) -> list[str]:
        """The values of the ``{path: …}`` variables computed so far (an unread one names no file read)."""
        return [self._values[n] for n, d in self._defs.items() if d.is_path and n in self._values]

    def values(self) -> dict[str, Any]:
        """Every variable's value (facts a variable needs are read)."""
        return {name: self.var(name) for name in self._defs}

    def _env(self, local: Mapping[str, Any]) -> Mapping[str, Any]:
        scope = self

        class Env(Mapping[str, Any]):
            def __getitem__(self, key: str) -> Any:
                if key in local:
                    return local[key]
                if key in scope._defs:
                    return scope.var(key)
                if key in scope._facts:
                    if key not in scope._fact_values:
                        scope._fact_values[key] = scope._facts[key]()
                    return scope._fact_values[key]
                raise KeyError(key)

            def __iter__(self) -> Iterator[str]:
                return iter(dict.fromkeys([*local, *scope._defs, *scope._facts]))

            def __len__(self) -> int:
                return len(dict.fromkeys([*local, *scope._defs, *scope._facts]))

        return Env()

    def evaluate(self, expr: str, where: str, local: Mapping[str, Any] | None = None) -> Any:
        """The value of one ``${expr}``; errors name ``where`` and the expression. ``local`` holds values
        that hide the variables of the same name here only (a used rule's own ``vars``); the variables
        themselves are always computed without them."""
        try:
            return evaluate(expr, self._env(local or {}))
        except CatalogError as err:
            message = str(err)
            unknown = re.search(r"unknown name '([^']+)'", message)
            if unknown:
                known = ", ".join(sorted({*self._defs, *(local or {})})) or "none"
                facts = ", ".join(sorted(self._facts)) or "none"
                message = (
                    f"unknown variable ${{{unknown.group(1)}}} (define it in vars or --set; "
                    f"variables: {known}; facts: {facts})"
                )
            raise RuleFileError(f"{where}: {message}") from None

    def render(self, value: Any, where: str, local: Mapping[str, Any] | None = None) -> Any:
        """A YAML scalar with its ``${…}`` templates evaluated (other values are returned as they are);
        ``local`` as for ``evaluate``."""
        if not isinstance(value, str) or "${" not in value:
            return value
        whole = TEMPLATE.fullmatch(value.strip())
        if whole is not None:
            return self.evaluate(whole.group(1), where, local)
        return TEMPLATE.sub(lambda m: _text(self.evaluate(m.group(1), where, local)), value)

    def substitute(
        self, value: Any, src: LocatedYaml, loc: tuple[Any, ...], local: Mapping[str, Any] | None = None
    ) -> Any:
        """``render`` every string in a YAML tree (mapping keys stay as written); ``local`` as for
        ``evaluate``."""
        if isinstance(value, str):
            return self.render(value, src.where(loc), local)
        if isinstance(value, dict):
            return {k: self.substitute(v, src, (*loc, k), local) for k, v in value.items()}
        if isinstance(value, list):
            return [self.substitute(v, src, (*loc, i), local) for i, v in enumerate(value)]
        return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
