"""The contract between a rule file's export source and gsurg: ``ExportSpec``, and finding and calling the
source.

A source is a callable ``build(variables, checkpoint) -> Sequence[ExportSpec]``: given the rule file's
variables and a checkpoint folder (or None), it returns the sub-models to export. A rule file names it as

* ``path/to/file.py:build`` -- a file, relative to the rule file's folder (or absolute). The file is loaded
  as a module of a package made for its folder, so it reaches sibling files with relative imports
  (``from .model import Qwen3``) and nothing is added to ``sys.path``;
* ``package.module:build`` -- a dotted import from ``sys.path``.

Every failure (no file, no attribute, not callable, the import or the call raising) is an ``ExportError``
naming the reference, with the module's own message.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.export.errors import ExportError, one_line

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ExportSpec:
    """One sub-model to export.

    ``name``: the sub-model's name (rule files refer to it; also the stem of its files). ``module``: in eval
    mode, fp32. ``inputs``: example inputs, each with a leading batch dim 1 (float32, or int32/int64 ids).
    ``dynamic``: symbolic dim -> the ``(input index, dim)`` pairs that take its size, e.g. a decoder with
    hidden ``[1,T,H]``, mask ``[1,T,T]``, cos/sin ``[1,T,D]``:
    ``{"seq": [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1)]}``."""

    name: str
    module: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    dynamic: Mapping[str, Sequence[tuple[int, int]]] = field(default_factory=dict)


Source = Callable[[Mapping[str, Any], Path | None], Sequence[ExportSpec]]

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def _is_file_ref(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _package_for(folder: Path) -> str:
    """A package whose ``__path__`` is ``folder``, registered once under a name derived from the folder."""
    name = "_gsurg_source_" + hashlib.sha1(str(folder).encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(folder)]
        sys.modules[name] = importlib.util.module_from_spec(spec)
    return name


def _import_file(ref: str, path: Path) -> ModuleType:
    if not path.is_file():
        raise ExportError(f"export source {ref!r}: no such file {path}")
    stem = re.sub(r"\W", "_", path.stem)
    name = f"{_package_for(path.parent)}.{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ExportError(f"export source {ref!r}: {path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and relative imports look the module up while it runs
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        sys.modules.pop(name, None)
        raise ExportError(
            f"export source {ref!r}: {err.filename}:{err.lineno}: SyntaxError: {err.msg}"
        ) from None
    except Exception as err:
        sys.modules.pop(name, None)
        raise ExportError(f"export source {ref!r}: loading {path} failed: {one_line(err)}") from err
    return module


def _import_dotted(ref: str, target: str) -> ModuleType:
    if not _DOTTED.match(target):
        raise ExportError(f"export source {ref!r}: {target!r} is neither a .py file nor a dotted module name")
    try:
        return importlib.import_module(target)
    except Exception as err:
        raise ExportError(f"export source {ref!r}: importing {target} failed: {one_line(err)}") from err


def load_source(ref: str, base_dir: Path) -> Source:
    """The callable ``ref`` names (``file.py:attr`` relative to ``base_dir``, or ``package.module:attr``)."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise ExportError(
            f"export source {ref!r}: expected path/to/file.py:FUNCTION or package.module:FUNCTION"
        )
    if _is_file_ref(target):
        path = Path(target) if Path(target).is_absolute() else Path(base_dir) / target
        module = _import_file(ref, path.resolve())
    else:
        module = _import_dotted(ref, target)
    if not hasattr(module, attr):
        raise ExportError(f"export source {ref!r}: {module.__file__} has no attribute {attr!r}")
    fn = getattr(module, attr)
    if not callable(fn):
        raise ExportError(f"export source {ref!r}: {attr} is a {type(fn).__name__}, not a callable")
    return fn


def call_source(
    source: Source, ref: str, variables: Mapping[str, Any], checkpoint: Path | None
) -> tuple[ExportSpec, ...]:
    """Run ``source``; its GsurgErrors pass through, any other exception becomes an ExportError naming
    ``ref``. The result must be a sequence of ExportSpec."""
    try:
        result = source(variables, checkpoint)
    except GsurgError:
        raise
    except Exception as err:
        raise ExportError(f"export source {ref!r} failed: {one_line(err)}") from err
    if isinstance(result, str | bytes) or not isinstance(result, Sequence):
        raise ExportError(
            f"export source {ref!r} returned a {type(result).__name__}, not a list of ExportSpec"
        )
    for item in result:
        if not isinstance(item, ExportSpec):
            raise ExportError(
                f"export source {ref!r} returned a {type(item).__name__} where an ExportSpec belongs"
            )
    return tuple(result)
