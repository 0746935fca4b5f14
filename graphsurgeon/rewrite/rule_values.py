"""The plain value types rule-file fields share, below both the selectors and the actions that use them.

``ParamValue`` is a param value as a rule file writes it (YAML lists; ``ir.params.ParamValue`` is the typed
form a layer holds, with tuples). The rule models' base is ``rewrite.strict``; the values only patterns hold
(``%captures``, ``*``) are ``rewrite.pattern_values``."""

from __future__ import annotations

ParamValue = int | float | str | list[int] | list[float]
