"""The model families gsurg ships, found by name: each is a folder ``graphsurgeon/models/<name>/`` holding
a ``family.yaml`` manifest beside its code. Adding a family is adding its folder; nothing here names one.

The registry reads manifests and lists files; it imports no family code, so the engine (pipeline, verify,
cli) can look a family up without loading torch or a sibling. A manifest holds:

* ``name`` (the folder's name, also the ``model.json`` family its schema files are named after),
  ``title`` and ``summary``: what it converts, in words;
* ``rules``: its rule file, a name in ``rules/`` (checkout) or the wheel's copy of it;
* ``needs``: what ``gsurg apply NAME --checkpoint DIR`` needs in DIR; ``default_checkpoint`` (optional):
  the folder inside the family it converts when none is given (its embedded tiny checkpoint);
* ``model_types`` (optional): the ``config.json`` ``model_type`` values of the checkpoints it converts;
* ``mrope_layouts`` (optional): ``model_type`` -> ``interleaved`` or ``block``, how a checkpoint's text
  positions are laid out on the rotary slots when its config does not say so reliably (``gsurg rope``);
* ``evaluator`` (optional): ``file.py:FUNCTION`` in the family folder, the function ``gsurg eval`` opens a
  conversion with (``graphsurgeon.evaluation.answers``); ``batch_request`` (optional): ``file.py:FUNCTION``,
  the function that turns an evaluation item into a request of the C++ runner's batch mode (``gsurg eval
  --runner``, ``graphsurgeon.evaluation.runner_batch``); ``eval_sets``: the evaluation sets its models
  answer (``graphsurgeon.evaluation.sets``); ``trained_checkpoint``: the folder of its trained fixture.

``model.json`` schemas are the files ``<family>.v<version>.schema.json`` in the family folders.
Every problem with a manifest is a ``RegistryError`` naming the file and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from graphsurgeon.errors import GsurgError
from graphsurgeon.resources import resource_dir

MANIFEST = "family.yaml"
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_SCHEMA_NAME = re.compile(r"(?P<family>[a-z][a-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.schema\.json\Z")
_KEYS = {
    "name",
    "title",
    "summary",
    "rules",
    "needs",
    "default_checkpoint",
    "model_types",
    "mrope_layouts",
    "evaluator",
    "batch_request",
    "eval_sets",
    "trained_checkpoint",
}
MROPE_LAYOUTS = ("interleaved", "block")
_MODELS = Path(__file__).resolve().parent / "models"


class RegistryError(GsurgError):
    """A family that is unknown, or whose manifest is malformed."""


@dataclass(frozen=True)
class Family:
    """One shipped model family, as its manifest describes it."""

    name: str
    folder: Path
    title: str
    summary: str
    rules: Path
    needs: str
    default_checkpoint: Path | None = None
    model_types: tuple[str, ...] = ()
    mrope_layouts: dict[str, str] = field(default_factory=dict)
    evaluator: str | None = None
    batch_request: str | None = None
    eval_sets: tuple[str, ...] = ()
    trained_checkpoint: Path | None = None


def _text(doc: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = doc.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise RegistryError(f"{where}: {key}: expected a non-empty string, got {value!r}")
    return " ".join(value.split())


def _manifest(folder: Path) -> Family:
    path = folder / MANIFEST
    where = str(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise RegistryError(f"{where}: cannot be read: {' '.join(str(err).split())}") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{where}: expected a mapping of keys, got {type(doc).__name__}")
    unknown = sorted(set(map(str, doc)) - _KEYS)
    if unknown:
        raise RegistryError(f"{where}: {unknown[0]}: unknown key (known: {', '.join(sorted(_KEYS))})")
    name = _text(doc, "name", where)
    if name != folder.name or not _NAME.match(name):
        raise RegistryError(f"{where}: name: {name!r} must be the folder's name {folder.name!r}")
    rules_name = _text(doc, "rules", where)
    rules = resource_dir("rules") / rules_name
    if "/" in rules_name or not rules.is_file():
        raise RegistryError(f"{where}: rules: no rule file {rules_name!r} in {rules.parent}")
    checkpoint = _folder(doc, "default_checkpoint", folder, where)
    trained = _folder(doc, "trained_checkpoint", folder, where)
    evaluator = _function(doc, "evaluator", folder, where)
    batch_request = _function(doc, "batch_request", folder, where)
    sets = doc.get("eval_sets", [])
    if not isinstance(sets, list) or not all(isinstance(t, str) and t for t in sets):
        raise RegistryError(f"{where}: eval_sets: expected a list of set names")
    types = doc.get("model_types", [])
    if not isinstance(types, list) or not all(isinstance(t, str) and t for t in types):
        raise RegistryError(f"{where}: model_types: expected a list of strings")
    layouts = doc.get("mrope_layouts", {})
    if not isinstance(layouts, dict) or not all(
        isinstance(k, str) and v in MROPE_LAYOUTS for k, v in layouts.items()
    ):
        raise RegistryError(f"{where}: mrope_layouts: expected model_type: {' or '.join(MROPE_LAYOUTS)}")
    return Family(
        name=name,
        folder=folder,
        title=_text(doc, "title", where),
        summary=_text(doc, "summary", where),
        rules=rules,
        needs=_text(doc, "needs", where),
        default_checkpoint=checkpoint,
        model_types=tuple(types),
        mrope_layouts=dict(layouts),
        evaluator=evaluator,
        batch_request=batch_request,
        eval_sets=tuple(sets),
        trained_checkpoint=trained,
    )


def _function(doc: dict[str, Any], key: str, folder: Path, where: str) -> str | None:
    """An optional ``FILE.py:FUNCTION`` entry naming a function of a file in the family folder."""
    if doc.get(key) is None:
        return None
    value = _text(doc, key, where)
    file, sep, attr = value.partition(":")
    if not sep or not attr.isidentifier() or "/" in file or not (folder / file).is_file():
        raise RegistryError(f"{where}: {key}: expected FILE.py:FUNCTION of a file in {folder}")
    return value


def _folder(doc: dict[str, Any], key: str, folder: Path, where: str) -> Path | None:
    """The family's sub-folder ``key`` names, or None when the key is absent."""
    if doc.get(key) is None:
        return None
    path = folder / _text(doc, key, where)
    if not path.is_dir():
        raise RegistryError(f"{where}: {key}: no folder {path}")
    return path


@cache
def families() -> tuple[Family, ...]:
    """Every shipped family, by name."""
    if not _MODELS.is_dir():
        return ()
    folders = sorted(p for p in _MODELS.iterdir() if (p / MANIFEST).is_file())
    return tuple(_manifest(folder) for folder in folders)


def find_family(name: str) -> Family:
    """The family called ``name``; RegistryError listing the known ones otherwise."""
    for family in families():
        if family.name == name:
            return family
    known = ", ".join(f.name for f in families()) or "none"
    raise RegistryError(f"no model family {name!r} (known: {known})")


def mrope_layout(model_type: str) -> str | None:
    """The MRoPE layout a family declares for ``model_type``, or None when none does."""
    for family in families():
        if model_type in family.mrope_layouts:
            return family.mrope_layouts[model_type]
    return None


def schema_files() -> dict[tuple[str, int], Path]:
    """(model.json family, version) -> its JSON Schema file, from every family folder."""
    found: dict[tuple[str, int], Path] = {}
    if not _MODELS.is_dir():
        return found
    for path in sorted(_MODELS.glob("*/*.schema.json")):
        m = _SCHEMA_NAME.match(path.name)
        if m:
            found[(m["family"], int(m["version"]))] = path
    return found
