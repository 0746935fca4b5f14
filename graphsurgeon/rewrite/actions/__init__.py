"""Rule actions: what a rule does to each match. One class per kind (its YAML key, fields and handler),
listed once in ``registry.ACTION_KINDS``."""

from graphsurgeon.rewrite.actions.base import ActionContext, ActionError, ActionModel, LayerAction
from graphsurgeon.rewrite.actions.registry import ACTION_KEYS, ACTION_KINDS, AnyAction, action_kind

__all__ = [
    "ACTION_KEYS",
    "ACTION_KINDS",
    "ActionContext",
    "ActionError",
    "ActionModel",
    "AnyAction",
    "LayerAction",
    "action_kind",
]
