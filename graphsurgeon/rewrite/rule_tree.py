"""The files of a rule program and what they declare: ``include:`` followed once per file and bounded
(depth, count, cycles named), paths made real (``~`` expanded, a NUL refused), ``vars:`` merged with the
command line's ``--set`` values, each typed as a YAML scalar, and the named rules of ``rules:`` sections,
each defined once in the whole tree and seen by its file and the files that include it."""

from __future__ import annotations

import os
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from graphsurgeon.formats.outpaths import kind
from graphsurgeon.rewrite import yaml_source
from graphsurgeon.rewrite.package_folder import package_folder
from graphsurgeon.rewrite.read_scope import ReadScope
from graphsurgeon.rewrite.rulefile import RULE_NAME, RULE_VAR
from graphsurgeon.rewrite.scope import VarDef, checked_path
from graphsurgeon.rewrite.yaml_source import (
    LocatedYaml,
    RuleFileError,
    has_lone_surrogate,
    load_located,
)

MAX_INCLUDE_DEPTH = 32
MAX_INCLUDED_FILES = 256


def real_path(value: str, base: Path, where: str) -> Path:
    """``value`` (relative to ``base``, ``~`` expanded) as a real path; a NUL in it is an error naming
    ``where``. A symbolic link loop is left unresolved (reading it then fails with the system's reason)."""
    return checked_path(value, base, where)


def read_tree(
    path: Path,
    text: str | None,
    chain: tuple[Path, ...],
    done: dict[Path, list[LocatedYaml]],
    counted: dict[str, int] | None = None,
    *,
    scope: ReadScope | None = None,
) -> list[LocatedYaml]:
    """``path`` and everything it includes, included files first (each once, in order). ``done`` holds the
    files already read with their trees, so a file included along many paths is read once; ``counted`` the
    values of every file read so far, which together may hold at most ``MAX_VALUES`` (eight includes of
    190,000 values each are refused, not each allowed). An include must lie where ``scope`` allows a rule
    file to read."""
    counted = {} if counted is None else counted
    if path in chain:
        cycle = " -> ".join(str(p) for p in (*chain[chain.index(path) :], path))
        raise RuleFileError(f"{chain[-1]}: include cycle: {cycle}")
    if path in done:
        return done[path]
    if len(chain) >= MAX_INCLUDE_DEPTH:
        raise RuleFileError(f"{chain[-1]}: includes nest more than {MAX_INCLUDE_DEPTH} files deep")
    src = load_located(str(path), text, limit=yaml_source.MAX_VALUES - sum(counted.values()))
    counted[src.path] = src.values
    if not isinstance(src.data, dict):
        raise RuleFileError(f"{path}:1: a rule file is a YAML mapping (version, name, graphs, …)")
    includes = src.data.get("include") or []
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise RuleFileError(f"{src.where(('include',))}: include is a list of rule-file paths")
    files: list[LocatedYaml] = []
    seen: set[str] = set()
    for i, item in enumerate(includes):
        where = src.where(("include", i))
        child = real_path(item, path.parent, where)
        if scope is not None:
            scope.check(child, path.parent, where, "included rule file", written=item)
        if not child.is_file():
            what = "does not exist" if not os.path.lexists(child) else f"is {kind(str(child))}, not a file"
            raise RuleFileError(f"{where}: included rule file {child} {what}")
        for sub in read_tree(child, None, (*chain, path), done, counted, scope=scope):
            if sub.path not in seen:
                seen.add(sub.path)
                files.append(sub)
    files.append(src)
    done[path] = files
    if len(done) > MAX_INCLUDED_FILES:
        raise RuleFileError(f"{path}: includes bring in more than {MAX_INCLUDED_FILES} rule files")
    return files


def var_defs(files: list[LocatedYaml], overrides: Mapping[str, str], cwd: Path) -> dict[str, VarDef]:
    defs: dict[str, VarDef] = {}
    for src in files:
        raw_vars = src.data.get("vars") or {}
        if not isinstance(raw_vars, dict):
            raise RuleFileError(f"{src.where(('vars',))}: vars is a mapping of name: value")
        for name, raw in raw_vars.items():
            where = src.where(("vars", name))
            is_path = isinstance(raw, dict)
            base = Path(src.path).parent
            if is_path and (
                "path" not in raw
                or not set(raw) <= {"path", "package"}
                or not all(isinstance(v, str) for v in raw.values())
            ):
                raise RuleFileError(
                    f"{where}: a variable is a scalar, or {{path: PATH}} for a path (optionally with "
                    "package: NAME, the installed package folder PATH is relative to)"
                )
            if is_path and "package" in raw:
                base = package_folder(raw["package"], f"{where}: package")
            declared = raw["path"] if is_path else raw
            defs[str(name)] = VarDef(str(name), declared, where, base, is_path)
    for name, text in overrides.items():
        if name not in defs:
            raise RuleFileError(f"{files[-1].path}: --set {name}: the rule file declares no such variable")
        value = _set_value(name, text)
        defs[name] = VarDef(name, value, f"--set {name}", cwd, defs[name].is_path)
    return defs


def _set_value(name: str, text: str) -> Any:
    """A ``--set`` value typed as a YAML scalar (``2048`` is an int, ``true`` a bool; anything else, a
    collection or a date, stays the text); a value YAML cannot read (``[``, ``!!int abc``) is an error
    naming the option."""
    if has_lone_surrogate(text):
        raise RuleFileError(
            f"--set {name}: the value {reprlib.repr(text)} is not valid text (undecodable bytes?)"
        )
    if not text.strip():
        return text
    shown = text if len(text) <= 80 else text[:77] + "..."
    try:
        value = yaml.safe_load(text)
    except RecursionError:
        raise RuleFileError(f"--set {name}={shown}: nested too deeply for a value") from None
    except Exception as err:
        problem = getattr(err, "problem", None) or (str(err).splitlines() or [type(err).__name__])[0]
        raise RuleFileError(
            f"--set {name}={shown}: not a value YAML can read ({problem}); quote it to give a string"
        ) from None
    return value if isinstance(value, str | int | float | bool) else text  # a list, a date: the text


@dataclass(frozen=True)
class RuleDef:
    """A named rule as a ``rules:`` section writes it: its body (``${…}`` not yet evaluated), its own
    variables with their default values, and the file that defines it."""

    name: str
    body: dict[str, Any]
    vars: dict[str, Any]
    src: LocatedYaml
    size: int  # values in the body: what each use adds to the program (``yaml_source.MAX_VALUES``)

    @property
    def where(self) -> str:
        return self.src.where(("rules", self.name))


_SCALAR = (str, int, float, bool)


def rule_defs(
    files: list[LocatedYaml], variables: Mapping[str, VarDef], facts: tuple[str, ...]
) -> dict[str, RuleDef]:
    """The named rules of every file's ``rules:`` section. A name defined twice in the tree, a rule
    variable with the name of a rule-file variable or a fact (``${x}`` in the body would be ambiguous), and
    the keys a definition cannot have (``name``: its key is its name; ``expect``: each use gives its own)
    are errors naming the file and line."""
    defs: dict[str, RuleDef] = {}
    for src in files:
        section = src.data.get("rules")
        if section is None:
            continue
        if not isinstance(section, dict):
            raise RuleFileError(f"{src.where(('rules',))}: rules is a mapping of name: rule (match, do, …)")
        for name, body in section.items():
            where = src.where(("rules", name))
            if not isinstance(name, str) or re.fullmatch(RULE_NAME, name) is None:
                raise RuleFileError(f"{where}: rule name {name!r}: letters, digits, '_', '.' and '-' only")
            if name in defs:
                raise RuleFileError(f"{where}: rule {name} is defined twice: here and at {defs[name].where}")
            if not isinstance(body, dict):
                raise RuleFileError(f"{where}: rule {name} is a mapping (description, match, when, do, vars)")
            for key, why in (
                ("name", "its key under rules: is its name"),
                ("expect", "each use gives its own"),
            ):
                if key in body:
                    raise RuleFileError(
                        f"{src.where(('rules', name, key))}: rule {name}: no {key} here: {why}"
                    )
            own = body.get("vars") or {}
            if not isinstance(own, dict):
                raise RuleFileError(f"{src.where(('rules', name, 'vars'))}: rule {name}: vars is a mapping")
            for var, default in own.items():
                at = src.where(("rules", name, "vars", var))
                if not isinstance(var, str) or re.fullmatch(RULE_VAR, var) is None:
                    raise RuleFileError(f"{at}: rule {name}: variable {var!r}: a name ${{…}} can read")
                if var in variables:
                    raise RuleFileError(
                        f"{at}: rule {name}: its variable {var} is also a variable of the rule file "
                        f"({variables[var].where}); rename one"
                    )
                if var in facts:
                    raise RuleFileError(f"{at}: rule {name}: {var} names a fact (${{{var}.…}}); rename it")
                if not isinstance(default, _SCALAR):
                    raise RuleFileError(f"{at}: rule {name}: variable {var}: a default is a scalar value")
            rest = {k: v for k, v in body.items() if k != "vars"}
            defs[name] = RuleDef(name, rest, dict(own), src, _values(rest))
    return defs


def _values(tree: Any) -> int:
    if isinstance(tree, dict):
        return 1 + sum(_values(v) for v in tree.values())
    if isinstance(tree, list):
        return 1 + sum(_values(v) for v in tree)
    return 1


def rules_seen(
    src: LocatedYaml, tree: Mapping[Path, list[LocatedYaml]], defs: Mapping[str, RuleDef]
) -> list[str]:
    """The named rules ``src`` may use: its own and those of the files it includes, directly or not
    (``tree``: each file with everything it includes, as ``read_tree`` leaves it)."""
    reach = {f.path for f in tree.get(Path(src.path), [src])}
    return sorted(name for name, d in defs.items() if d.src.path in reach)
