"""Per-match templates: ``{…}`` in the names an action writes (``rename``, ``rename_blob``, the layer and
blob names of ``replace``/``insert``/``add_*`` lines) and in checkpoint tensor names (``weight.from``).

``{expr}`` is an expression (``graphsurgeon.schema.expr``) over the match's captures (``%x`` of a pattern,
named groups of a selector's ``name`` regex), ``match`` (the match's ordinal: 0 for the first layer or
subgraph the rule matched, in graph order), ``name`` (the target layer's name) and the run's variables;
its value's text replaces it. ``{{`` and ``}}`` are literal braces. So ``cache_k{match}`` names the
first match's cache ``cache_k0``, and ``model.layers.{i}.mlp.up_proj.weight`` reads capture ``i``.
``${…}`` templates are evaluated earlier, when the rule file loads (``rewrite.scope``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from graphsurgeon.errors import CatalogError, GsurgError
from graphsurgeon.schema.expr import evaluate

_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


class TemplateError(GsurgError):
    """A per-match template that cannot be filled; names the template and what the match had."""


def render_match(template: str, env: Mapping[str, Any], where: str) -> str:
    """``template`` with every ``{expr}`` replaced by its value over ``env``."""

    def field(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        expr = m.group(1).strip()
        if not expr:
            raise TemplateError(f"{where} {template!r}: an empty {{}}")
        try:
            value = evaluate(expr, env)
        except CatalogError as err:
            have = ", ".join(sorted(k for k in env if not k.startswith("_"))) or "none"
            raise TemplateError(f"{where} {template!r}: {err} (the match has: {have})") from None
        return str(value)

    rest = _FIELD.sub(field, template)
    if "{" in _FIELD.sub("", template) or "}" in _FIELD.sub("", template):
        raise TemplateError(
            f"{where}: unbalanced brace in {template!r} (write a literal brace as {{{{ or }}}})"
        )
    return rest
