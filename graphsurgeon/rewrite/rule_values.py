"""The plain value types rule-file fields share, below both the selectors and the actions that use them.

``ParamValue`` is a param value as a rule file writes it (YAML lists; ``ir.params.ParamValue`` is the typed
form a layer holds, with tuples); ``StorageName`` a float storage a rule may ask for (``weight``,
``move_weight``, ``storage:``). The rule models' base is ``rewrite.strict``; the values only patterns hold
(``%captures``, ``*``) are ``rewrite.pattern_values``."""

from __future__ import annotations

from typing import Literal

StorageName = Literal["fp32", "fp16", "bf16"]
#: What a storage policy may ask of a weight: a float storage, or ncnn's weight-only block quantization at
#: 8, 6 or 4 bits (for the layers the catalog's ``weight_quantize`` allows; the others fall back to the
#: policy's ``unquantized`` float storage).
PolicyStorageName = Literal["fp32", "fp16", "bf16", "int8", "int6", "int4"]
ParamValue = int | float | str | list[int] | list[float]
