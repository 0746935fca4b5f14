"""The fields of a rule file that hold paths, and how each is resolved: a path relative to the file that
wrote it (or to the working folder when it starts with a ``--set`` variable), made real, and held to what a
rule file may read (``read_scope``); a module of ``source.export``/``source.config`` resolved only when it
names a file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from graphsurgeon.rewrite.read_scope import ReadScope
from graphsurgeon.rewrite.rule_tree import real_path


def path_field(loc: tuple[Any, ...]) -> str | None:
    """Which kind of path a field holds: "path", "module" (source.export), "template", or None."""
    if loc in (("source", "export"), ("source", "config")):
        return "module"
    if loc in (("source", "checkpoint"), ("outputs", "dir")):
        return "path"
    if len(loc) == 3 and loc[0] == "inputs" and loc[2] in ("param", "bin"):
        return "path"
    if len(loc) == 3 and loc[0] == "checkpoints" and loc[2] == "path":
        return "path"
    if len(loc) == 3 and loc[0] == "side_files" and loc[2] in ("copy", "weight_map", "schema"):
        return "path"
    if len(loc) == 3 and loc[0] == "side_files" and loc[2] == "template":
        return "template"
    return None


def resolve_path(kind: str, value: str, base: Path, where: str) -> str:
    """``value`` of a field of ``kind`` as a real path relative to ``base`` (a module name stays a name)."""
    if kind == "module":
        module, sep, attr = value.rpartition(":")
        if sep and (module.endswith(".py") or "/" in module or os.sep in module):
            return f"{real_path(module, base, where)}:{attr}"
        return value
    return str(real_path(value, base, where))


def resolve_field(
    kind: str, loc: tuple[Any, ...], value: str, base: Path, where: str, scope: ReadScope | None
) -> str:
    """``resolve_path``, then, for a path the run reads (not a module, not ``outputs.dir``), the
    RuleFileError naming ``where`` unless ``scope`` allows it."""
    resolved = resolve_path(kind, value, base, where)
    if scope is not None and kind != "module" and loc != ("outputs", "dir"):
        scope.check(resolved, base, where, ".".join(map(str, loc)), written=value)
    return resolved
