"""The plain value types rule-file fields share, below both the selectors and the actions that use them.

``ParamValue`` is a param value as a rule file writes it (YAML lists; ``ir.params.ParamValue`` is the typed
form a layer holds, with tuples); ``StorageName`` a float storage a rule may ask for (``weight``,
``move_weight``, ``storage:``). The rule models' base is ``rewrite.strict``; the values only patterns hold
(``%captures``, ``*``) are ``rewrite.pattern_values``."""

from __future__ import annotations

from typing import Literal

StorageName = Literal["fp32", "fp16", "bf16"]
ParamValue = int | float | str | list[int] | list[float]
