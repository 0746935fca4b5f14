"""The folder of an installed Python package, found without running any of its code: what a rule file's
``{path: P, package: NAME}`` variable is relative to, so a rule file shipped in a wheel can name the data a
package ships beside its code (a tiny checkpoint, a template) wherever pip put it.

Only the top-level name goes through the import system (``importlib.util.find_spec`` of a top-level name
imports nothing); the rest of a dotted name is walked as folders, so resolving ``a.b.c`` never runs
``a/__init__.py``. A name that is not an importable package folder is an error naming ``where``."""

from __future__ import annotations

from pathlib import Path

from graphsurgeon.plugins import DOTTED, top_level_spec
from graphsurgeon.rewrite.yaml_source import RuleFileError


def package_folder(name: str, where: str) -> Path:
    """The folder of package ``name`` (dotted), or a RuleFileError naming ``where`` and ``name``."""
    if not isinstance(name, str) or not DOTTED.match(name):
        raise RuleFileError(f"{where}: package {name!r} is not a dotted Python package name")
    top, *rest = name.split(".")
    spec = top_level_spec(top)
    folders = spec.submodule_search_locations if spec is not None else None
    for folder in map(Path, folders or []):
        candidate = folder.joinpath(*rest)
        if candidate.is_dir() and (not rest or (candidate / "__init__.py").is_file()):
            return candidate.resolve()
    raise RuleFileError(f"{where}: package {name!r}: no such installed package folder")
