"""Locate the project's data folders (``grammars/``, ``emit/``, ``schemas/``) in a checkout or an installed
wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """The folder ``name`` beside the package (checkout, editable install) or inside it (wheel)."""
    for candidate in (_PACKAGE.parent / name, _PACKAGE / "_data" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"gsurg data folder {name!r} not found next to {_PACKAGE}")
