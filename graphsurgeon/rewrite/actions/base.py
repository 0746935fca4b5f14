"""What every rule action shares: the context a match gives it, its error type, and the base model.

An action kind is one pydantic model that holds its YAML key (``key``), its fields, and its handler
(``run``). ``rewrite.actions.registry`` lists the kinds; the rule-file schema, the loader's error messages
and the driver's dispatch are all derived from that one list, so a new action is one class added there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.rewrite.match_template import render_match
from graphsurgeon.rewrite.strict import StrictModel


class ActionError(GsurgError):
    """An action that cannot be applied to a matched layer; names the rule and the layer."""


@dataclass
class ActionContext:
    """What actions may need beyond the layer: the protected blobs, the match's captures, checkpoints."""

    interface: set[str]
    captures: dict[str, str] = field(default_factory=dict)
    checkpoints: dict[str, Any] = field(default_factory=dict)  # name -> formats.safetensors.Checkpoint
    matched: list[Layer] = field(default_factory=list)  # every layer of the match (pattern rules)
    layers: dict[str, Layer] = field(default_factory=dict)  # layer captures, and layers a snippet made
    values: dict[str, Any] = field(default_factory=dict)  # captured values as they are (ints stay ints)
    variables: dict[str, Any] = field(default_factory=dict)  # the run's variables
    ordinal: int = 0  # this match's number among the rule's matches, in graph order
    pinned: set[tuple[int, str]] = field(default_factory=set)  # (id(layer), slot) with a declared storage

    def render(self, template: str, where: str, target: Layer | None = None) -> str:
        """A per-match name template (``rewrite.match_template``) filled for this match."""
        env: dict[str, Any] = dict(self.variables)
        for key, value in self.values.items():  # a regex group "3" reads as the number 3
            env[key] = (
                int(value)
                if isinstance(value, str) and value.isdigit() and str(int(value)) == value
                else value
            )
        env["match"] = self.ordinal
        named = target if target is not None else (self.matched[0] if self.matched else None)
        if named is not None:
            env["name"] = named.name
        return render_match(template, env, where)

    def blob_name(self, token: str) -> str:
        """A blob named in an action: a literal name, or ``%capture`` resolved from the match."""
        if token.startswith("%"):
            if token[1:] not in self.captures:
                raise ActionError(f"{token} is not a capture of the match")
            return self.captures[token[1:]]
        return token


class ActionModel(StrictModel):
    """One entry of a rule's ``do`` list. Subclasses set ``key`` (the YAML key that selects them) and
    implement ``run``. ``layer`` is None for actions that act on the match as a whole."""

    key: ClassVar[str]
    layer: str | None = None

    def run(self, graph: Graph, target: Layer, ctx: ActionContext) -> str:
        """Apply the action to ``target`` (the matched layer, or the capture ``layer`` names); returns a
        one-line description for the provenance record."""
        raise NotImplementedError


class LayerAction(ActionModel):
    """An action that acts on one layer: by default the matched layer (the first pattern line's layer for
    a pattern rule); ``layer: %x`` names another captured layer."""

    layer: str | None = Field(default=None, description="pattern rules: the %capture of the layer to act on")
