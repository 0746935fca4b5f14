"""The folder of an installed Python package, found without running any of its code: what a rule file's
``{path: P, package: NAME}`` variable is relative to, so a rule file shipped in a wheel can name the data a
package ships beside its code (a tiny checkpoint, a template) wherever pip put it.

Only the top-level name goes through the import system (``importlib.util.find_spec`` of a top-level name
imports nothing); the rest of a dotted name is walked as folders, so resolving ``a.b.c`` never runs
``a/__init__.py``. A name that is not an importable package folder is an error naming ``where``."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from graphsurgeon.rewrite.yaml_source import RuleFileError

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def _top_folders(top: str) -> list[Path]:
    module = sys.modules.get(top)
    spec = getattr(module, "__spec__", None) if module is not None else None
    if spec is None:
        try:
            spec = importlib.util.find_spec(top)  # a top-level lookup imports nothing
        except (ImportError, ValueError):
            spec = None
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def package_folder(name: str, where: str) -> Path:
    """The folder of package ``name`` (dotted), or a RuleFileError naming ``where`` and ``name``."""
    if not isinstance(name, str) or not _DOTTED.match(name):
        raise RuleFileError(f"{where}: package {name!r} is not a dotted Python package name")
    top, *rest = name.split(".")
    for folder in _top_folders(top):
        candidate = folder.joinpath(*rest)
        if candidate.is_dir() and (not rest or (candidate / "__init__.py").is_file()):
            return candidate.resolve()
    raise RuleFileError(f"{where}: package {name!r}: no such installed package folder")
