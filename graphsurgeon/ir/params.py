"""Typed param literals.

A ``Param`` is what one ``id=value`` token holds: the literal's own kind (what ncnn's parser makes of it) and
its value. An empty array is always an ``INT_ARRAY``: ncnn gives empty arrays no element type. Floats are
kept as Python floats that hold an exact float32 value. Whether the kind matches what the layer expects is
the catalog's business (``ncnn_view`` mirrors R1020's typed ``ParamDict::get``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsurgeon.schema.catalog import ParamSpec, ValueType

ParamValue = int | float | str | tuple[int, ...] | tuple[float, ...]


def to_f32(x: float) -> float:
    """Round a Python float to the nearest float32 (as ncnn stores it)."""
    return float(np.float32(x))


@dataclass(frozen=True, slots=True)
class Param:
    """One param literal: its kind and value (arrays as tuples, floats rounded to float32)."""

    kind: ValueType
    value: ParamValue

    def __post_init__(self) -> None:
        # An empty array has no element type in ncnn (ParamDict type 4): keep one spelling of it.
        if self.kind is ValueType.FLOAT_ARRAY and not self.value:
            object.__setattr__(self, "kind", ValueType.INT_ARRAY)

    @staticmethod
    def of(kind: ValueType, value: Any) -> Param:
        """Build a Param, coercing ``value`` to ``kind`` (ints stay ints, floats become float32)."""
        if kind is ValueType.INT:
            return Param(kind, int(value))
        if kind is ValueType.FLOAT:
            return Param(kind, to_f32(float(value)))
        if kind is ValueType.INT_ARRAY:
            return Param(kind, tuple(int(v) for v in value))
        if kind is ValueType.FLOAT_ARRAY:
            return Param(kind, tuple(to_f32(float(v)) for v in value))
        return Param(kind, str(value))

    @staticmethod
    def infer(value: Any) -> Param:
        """A Param for a plain Python value: int, float, str, or a list/tuple of ints or floats."""
        if isinstance(value, bool):
            return Param(ValueType.INT, int(value))
        if isinstance(value, int | np.integer):
            return Param(ValueType.INT, int(value))
        if isinstance(value, float | np.floating):
            return Param.of(ValueType.FLOAT, value)
        if isinstance(value, str):
            return Param(ValueType.STRING, value)
        items = list(value)
        if items and any(isinstance(v, float | np.floating) for v in items):
            return Param.of(ValueType.FLOAT_ARRAY, items)
        return Param.of(ValueType.INT_ARRAY, items)


def ncnn_view(spec: ParamSpec, param: Param) -> Any:
    """The value ncnn 1.0.20261020 hands the layer for this literal.

    A float literal where an int is expected yields the default (R1020 ``get(int)`` on type 3); an int literal
    where a float is expected is converted; arrays keep their elements; a string where a number is expected
    yields the default.
    """
    expected, kind, value = spec.type, param.kind, param.value
    if expected is ValueType.INT:
        return value if kind is ValueType.INT else spec.default
    if expected is ValueType.FLOAT:
        if kind is ValueType.FLOAT:
            return value
        if kind is ValueType.INT:
            return to_f32(float(value))  # type: ignore[arg-type]
        return spec.default
    if expected.is_array:
        return list(value) if kind.is_array else spec.default  # type: ignore[arg-type]
    return value if kind is ValueType.STRING else spec.default
