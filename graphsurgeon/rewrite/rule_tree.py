"""The files of a rule program and the variables they declare: ``include:`` followed once per file and
bounded (depth, count, cycles named), paths made real (``~`` expanded, a NUL refused), and ``vars:`` merged
with the command line's ``--set`` values, each typed as a YAML scalar."""

from __future__ import annotations

import os
import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from graphsurgeon.formats.outpaths import kind
from graphsurgeon.rewrite.scope import VarDef, checked_path
from graphsurgeon.rewrite.yaml_source import LocatedYaml, RuleFileError, has_lone_surrogate, load_located

MAX_INCLUDE_DEPTH = 32
MAX_INCLUDED_FILES = 256


def real_path(value: str, base: Path, where: str) -> Path:
    """``value`` (relative to ``base``, ``~`` expanded) as a real path; a NUL in it is an error naming
    ``where``. A symbolic link loop is left unresolved (reading it then fails with the system's reason)."""
    return checked_path(value, base, where)


def read_tree(
    path: Path, text: str | None, chain: tuple[Path, ...], done: dict[Path, list[LocatedYaml]]
) -> list[LocatedYaml]:
    """``path`` and everything it includes, included files first (each once, in order). ``done`` holds the
    files already read with their trees, so a file included along many paths is read once."""
    if path in chain:
        cycle = " -> ".join(str(p) for p in (*chain[chain.index(path) :], path))
        raise RuleFileError(f"{chain[-1]}: include cycle: {cycle}")
    if path in done:
        return done[path]
    if len(chain) >= MAX_INCLUDE_DEPTH:
        raise RuleFileError(f"{chain[-1]}: includes nest more than {MAX_INCLUDE_DEPTH} files deep")
    src = load_located(str(path), text)
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
        if not child.is_file():
            what = "does not exist" if not os.path.lexists(child) else f"is {kind(str(child))}, not a file"
            raise RuleFileError(f"{where}: included rule file {child} {what}")
        for sub in read_tree(child, None, (*chain, path), done):
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
            if is_path and (set(raw) != {"path"} or not isinstance(raw["path"], str)):
                raise RuleFileError(f"{where}: a variable is a scalar, or {{path: PATH}} for a path")
            declared = raw["path"] if is_path else raw
            defs[str(name)] = VarDef(str(name), declared, where, Path(src.path).parent, is_path)
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
