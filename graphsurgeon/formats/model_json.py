"""``model.json``: the file a rule file's side-file template writes beside the models for a runtime. Its
contract is a JSON Schema per **family** of layouts, ``<family>.v<version>.schema.json`` in the family's
folder (``graphsurgeon/models/<family>/``, found through ``graphsurgeon.registry``); every model.json starts
with

* ``format``: ``"gsurg-model"`` — a model.json gsurg wrote;
* ``family``: which layout: the schema file's name;
* ``version``: the layout's version within its family (a new family starts at 1; a family whose layout
  predates families starts at 2, its version 1 having had a ``gsurg-<layout>`` format of its own, which a
  reader names as such).

A reader names the families it reads; ``read_model_json`` picks the schema from the file's own family and
version and validates the whole file against it, so every error names the file and the key
(``entry "decoder.rope.theta" must be a number, not "x"``). Adding a family is adding its folder with the
schema file and the template that writes it, and a rule file's side-file entry naming both; its readers
name the family. Nothing here changes. The writer validates against the schema the rule file names
(``side_files: - {template: ..., schema: ...}``, ``pipeline.side_files``).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.json_schema import Violation, load_schema, shown, type_name
from graphsurgeon.input_files import Raise, read_json_input
from graphsurgeon.registry import schema_files

FORMAT = "gsurg-model"
#: ``format`` of every model.json gsurg writes; an earlier gsurg layout (version 1, before families and
#: schemas) named its own ``gsurg-<layout>`` format instead.


class ModelJsonError(GsurgError):
    """A model.json that is not one of the families its reader reads, or breaks its family's schema."""


def schema_file(family: str, version: int) -> Path | None:
    """The schema of ``family`` at ``version``, or None when no family folder holds one."""
    return schema_files().get((family, version))


def known_schemas() -> dict[str, list[int]]:
    """Family -> the versions a schema file exists for (sorted)."""
    found: dict[str, list[int]] = {}
    for family, version in schema_files():
        found.setdefault(family, []).append(version)
    return {family: sorted(versions) for family, versions in sorted(found.items())}


def _refuse(error: Raise, where: str, violation: Violation | str) -> GsurgError:
    return error(f"{where}: {violation}")


def check_model_json(
    doc: Any, where: str, families: Collection[str], *, error: Raise = ModelJsonError
) -> dict[str, Any]:
    """``doc`` (parsed from ``where``) if it is a model.json of one of ``families`` that holds to its
    family's schema; else ``error`` naming ``where`` and the first key that is wrong."""
    if not isinstance(doc, dict):
        raise _refuse(error, where, f"a model.json is a JSON object, not {type_name(doc)}")
    if "format" not in doc:
        raise _refuse(error, where, Violation("format", "is missing"))
    if doc["format"] != FORMAT:  # checked before family: a version-1 file has none, and is told so
        old = isinstance(doc["format"], str) and doc["format"].startswith("gsurg-")
        hint = " (a model.json of version 1, before families: convert the model again)" if old else ""
        why = f"is {shown(doc['format'])}, not {shown(FORMAT)}{hint}"
        raise _refuse(error, where, Violation("format", why))
    for key in ("family", "version"):
        if key not in doc:
            raise _refuse(error, where, Violation(key, "is missing"))
    family, version = doc["family"], doc["version"]
    wanted = " or ".join(shown(f) for f in sorted(families))
    if not isinstance(family, str) or family not in families:
        why = f"is {shown(family)}, but this reader reads {wanted}"
        raise _refuse(error, where, Violation("family", why))
    if type_name(version) != "integer":
        raise _refuse(error, where, Violation("version", f"must be an integer, not {shown(version)}"))
    path = schema_file(family, version)
    if path is None:
        versions = known_schemas().get(family, [])
        known = ", ".join(map(str, versions)) or "none"
        why = f"is {version}: family {family} has no schema of that version (known: {known})"
        raise _refuse(error, where, Violation("version", why))
    violation = load_schema(path).violation(doc)
    if violation is not None:
        raise _refuse(error, where, f"{violation} (schema {path.name})")
    return doc


def read_model_json(
    folder: str | os.PathLike[str], families: Collection[str], *, error: Raise = ModelJsonError
) -> dict[str, Any]:
    """``folder/model.json`` read and checked by ``check_model_json``."""
    path = Path(folder) / "model.json"
    doc = read_json_input(path, what="a model.json", error=error)
    return check_model_json(doc, str(path), families, error=error)
