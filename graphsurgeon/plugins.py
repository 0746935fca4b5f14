"""Loading a callable a rule file or a model.json names: ``path/to/file.py:attr`` (relative to a base
folder, or absolute) or ``package.module:attr``. A file is loaded as a module of a package made for its
folder, so it reaches sibling files with relative imports (``from .model import X``) and nothing is added
to ``sys.path``. Every failure is one error naming the reference, with the module's own message."""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from graphsurgeon.errors import GsurgError, one_line


class PluginError(GsurgError):
    """A callable reference that cannot be loaded."""


DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def _is_file_ref(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def top_level_spec(top: str) -> importlib.machinery.ModuleSpec | None:
    """The import system's spec of top-level module ``top``, found without running any code (a top-level
    lookup imports nothing; an imported module's own spec otherwise), or None."""
    if top in sys.modules:  # already imported: its code ran before this reference was read
        return getattr(sys.modules[top], "__spec__", None)
    try:
        return importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None


def _package_for(folder: Path) -> str:
    """A package whose ``__path__`` is ``folder``, registered once under a name derived from the folder."""
    name = "_gsurg_plugin_" + hashlib.sha1(str(folder).encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(folder)]
        sys.modules[name] = importlib.util.module_from_spec(spec)
    return name


def _import_file(ref: str, path: Path, what: str, error: type[GsurgError]) -> ModuleType:
    if not path.is_file():
        raise error(f"{what} {ref!r}: no such file {path}")
    stem = re.sub(r"\W", "_", path.stem)
    name = f"{_package_for(path.parent)}.{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise error(f"{what} {ref!r}: {path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and relative imports look the module up while it runs
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        sys.modules.pop(name, None)
        raise error(f"{what} {ref!r}: {err.filename}:{err.lineno}: SyntaxError: {err.msg}") from None
    except Exception as err:
        sys.modules.pop(name, None)
        raise error(f"{what} {ref!r}: loading {path} failed: {one_line(err)}") from err
    return module


def _import_dotted(ref: str, target: str, what: str, error: type[GsurgError]) -> ModuleType:
    if not DOTTED.match(target):
        raise error(f"{what} {ref!r}: {target!r} is neither a .py file nor a dotted module name")
    try:
        return importlib.import_module(target)
    except Exception as err:
        raise error(f"{what} {ref!r}: importing {target} failed: {one_line(err)}") from err


def referenced_file(ref: str, base_dir: Path) -> Path | None:
    """Where the code ``ref`` names lies, found without running any of it: the resolved ``.py`` file
    (relative to ``base_dir``), or for ``package.module:attr`` the file or folder of its top-level module as
    the import system would find it now (``sys.path`` includes the current folder under ``python -m``).
    None for a malformed reference or a module that cannot be found (``load_callable`` reports those)."""
    target, sep, _ = ref.rpartition(":")
    if not sep or not target:
        return None
    if _is_file_ref(target):
        path = Path(target) if Path(target).is_absolute() else Path(base_dir) / target
        return path.resolve()
    if not DOTTED.match(target):
        return None
    spec = top_level_spec(target.split(".", 1)[0])
    if spec is None:
        return None
    where = spec.origin if spec.has_location and spec.origin else None
    if where is None and spec.submodule_search_locations:
        where = next(iter(spec.submodule_search_locations), None)
    return Path(where).resolve() if where else None


def load_callable(
    ref: str, base_dir: Path, *, what: str = "plugin", error: type[GsurgError] = PluginError
) -> Callable[..., Any]:
    """The callable ``ref`` names (``file.py:attr`` relative to ``base_dir``, or ``package.module:attr``);
    failures raise ``error`` with ``what`` naming the kind of reference."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise error(f"{what} {ref!r}: expected path/to/file.py:FUNCTION or package.module:FUNCTION")
    if _is_file_ref(target):
        path = Path(target) if Path(target).is_absolute() else Path(base_dir) / target
        module = _import_file(ref, path.resolve(), what, error)
    else:
        module = _import_dotted(ref, target, what, error)
    if not hasattr(module, attr):
        raise error(f"{what} {ref!r}: {module.__file__} has no attribute {attr!r}")
    fn = getattr(module, attr)
    if not callable(fn):
        raise error(f"{what} {ref!r}: {attr} is a {type(fn).__name__}, not a callable")
    return fn
