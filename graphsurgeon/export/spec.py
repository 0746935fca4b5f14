"""The contract between a rule file's export source and gsurg: ``ExportSpec``, and finding and calling the
source.

A source is a callable ``build(variables, checkpoint) -> Sequence[ExportSpec]``: given the rule file's
variables and a checkpoint folder (or None), it returns the sub-models to export. A rule file names it as

* ``path/to/file.py:build`` -- a file, relative to the rule file's folder (or absolute). The file is loaded
  as a module of a package made for its folder, so it reaches sibling files with relative imports
  (``from .model import Net``) and nothing is added to ``sys.path``;
* ``package.module:build`` -- a dotted import from ``sys.path``.

Every failure (no file, no attribute, not callable, the import or the call raising) is an ``ExportError``
naming the reference, with the module's own message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.export.errors import ExportError, one_line
from graphsurgeon.plugins import load_callable

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ExportSpec:
    """One sub-model to export.

    ``name``: the sub-model's name (rule files refer to it; also the stem of its files). ``module``: in eval
    mode, fp32. ``inputs``: example inputs, each with a leading batch dim 1 (float32, or int32/int64 ids).
    ``dynamic``: symbolic dim -> the ``(input index, dim)`` pairs that take its size, e.g. a decoder with
    hidden ``[1,T,H]``, mask ``[1,T,T]``, cos/sin ``[1,T,D]``:
    ``{"seq": [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1)]}``.
    ``calibration``: inputs a storage policy's calibration runs the converted graph on (``calibrate:`` in a
    rule file), each sample a tuple like ``inputs`` (same count, ranks and kinds; sizes of the dynamic dims
    may differ); None means the example inputs. gsurg reads it only when a graph calibrates, so a source
    may hand over a lazy sequence that computes realistic samples (a reference model's activations) on
    first access."""

    name: str
    module: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    dynamic: Mapping[str, Sequence[tuple[int, int]]] = field(default_factory=dict)
    calibration: Sequence[tuple[torch.Tensor, ...]] | None = None


Source = Callable[[Mapping[str, Any], Path | None], Sequence[ExportSpec]]


def load_source(ref: str, base_dir: Path) -> Source:
    """The export source ``ref`` names (see ``graphsurgeon.plugins.load_callable``)."""
    return load_callable(ref, base_dir, what="export source", error=ExportError)


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
