"""The one list of action kinds. Everything else about actions is derived from it: the rule-file type of a
``do`` entry (a discriminated union selected by the entry's key), the loader's "an action is one of …"
message, the JSON Schema, and the dispatch (each kind's own ``run``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Discriminator, Tag

from graphsurgeon.rewrite.actions.base import ActionModel
from graphsurgeon.rewrite.actions.params import AxisAction, SetAction, UnsetAction
from graphsurgeon.rewrite.actions.structure import (
    AddBottomsAction,
    AddInputAction,
    AddTopsAction,
    InsertAction,
    RemoveAction,
    RenameAction,
    RenameBlobAction,
    ReplaceAction,
    RewireAction,
)
from graphsurgeon.rewrite.actions.weights import MoveWeightAction, WeightAction

#: Every action kind, in the order the documentation lists them. Add a new kind here.
ACTION_KINDS: tuple[type[ActionModel], ...] = (
    SetAction,
    UnsetAction,
    RemoveAction,
    RenameAction,
    WeightAction,
    AxisAction,
    RewireAction,
    RenameBlobAction,
    ReplaceAction,
    InsertAction,
    MoveWeightAction,
    AddBottomsAction,
    AddTopsAction,
    AddInputAction,
)
ACTION_KEYS: tuple[str, ...] = tuple(kind.key for kind in ACTION_KINDS)
assert len(set(ACTION_KEYS)) == len(ACTION_KEYS), "two action kinds share a key"


def _has(value: Any, key: str) -> bool:
    if isinstance(value, dict):
        return key in value
    return getattr(value, "key", None) == key


def action_kind(value: Any) -> str | None:
    """Which action a ``do`` entry is, by the key it uses (None: no known key, a clear error follows)."""
    for key in ACTION_KEYS:
        if _has(value, key):
            return key
    return None


if TYPE_CHECKING:  # to a type checker, one ``do`` entry is some ActionModel
    AnyAction = ActionModel
else:  # to pydantic, the union of the kinds, selected by the key an entry uses
    AnyAction = Annotated[
        Union[tuple(Annotated[kind, Tag(kind.key)] for kind in ACTION_KINDS)],  # noqa: UP007
        Discriminator(action_kind),
    ]
