"""Custom layer declarations (``--custom TYPE[:SLOT=LOAD(EXPR),…]``) turned into catalog entries.

A custom layer is one the program registers with ncnn itself, so the catalog cannot know its params or
weights. The declaration names its weight loads in order: ``LOAD`` is ``tagged`` or ``raw`` and ``EXPR`` is
an element count over the layer's params ``p0``…``p29`` (read as ints). ``YoloV5Focus`` alone declares a
custom layer that loads nothing; ``MyConv:weight=tagged(p0*p1),bias=raw(p0)`` one with two loads.

An element count is an integer, so an ``EXPR`` may hold neither float literals nor ``/`` (``//`` is C integer
division); with int params every value it computes is then an int. The evaluator's bounds (``schema.expr``)
refuse a constant part that overflows (``9**9**9``, ``10**30``) here, when the declaration is read; a value
that overflows only for some model's params is refused when that layer's weights are sized.
"""

from __future__ import annotations

import ast
import re

from graphsurgeon.errors import CatalogError
from graphsurgeon.schema.catalog import Catalog, LayerSpec, ParamSpec, ValueType, WeightSpec
from graphsurgeon.schema.expr import compile_expr, names_in

_SLOT = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(tagged|raw)\s*\((.+)\)\s*")
_TYPE = re.compile(r"[^\s=:,]+")


def _split_slots(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (ch == "(") - (ch == ")")
        current += ch
    parts.append(current)
    return parts


def _integer_only(expr: str) -> str | None:
    """Why ``expr`` could compute a float (so cannot be an element count), or None."""
    for node in ast.walk(ast.parse(expr.strip(), mode="eval")):
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            return f"{expr!r}: the float {node.value!r} cannot be part of an element count (integers only)"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return f"{expr!r}: / gives a float; an element count is an integer (use // for integer division)"
    return None


def parse_custom(declaration: str) -> LayerSpec:
    """One ``--custom`` value as a LayerSpec (index -1: custom layers have no built-in type index)."""
    type_name, _, slots_text = declaration.partition(":")
    if not _TYPE.fullmatch(type_name):
        raise CatalogError(f"--custom {declaration!r}: {type_name!r} is not a layer type name")
    params = {pid: ParamSpec(pid, f"p{pid}", ValueType.INT, 0) for pid in range(30)}
    weights = []
    for part in _split_slots(slots_text) if slots_text.strip() else []:
        match = _SLOT.fullmatch(part)
        if match is None:
            raise CatalogError(
                f"--custom {declaration!r}: {part!r} is not SLOT=tagged(EXPR) or SLOT=raw(EXPR)"
            )
        name, load, expr = match.groups()
        try:
            compile_expr(expr)
            unknown = names_in(expr) - {p.name for p in params.values()}
            not_integer = _integer_only(expr)
        except (CatalogError, SyntaxError) as err:
            raise CatalogError(f"--custom {declaration!r}: {err}") from None
        if not_integer:
            raise CatalogError(f"--custom {declaration!r}: {not_integer}")
        if unknown:
            raise CatalogError(f"--custom {declaration!r}: {sorted(unknown)} are not p0..p29")
        weights.append(WeightSpec(name=name, load=load, count=expr))
    return LayerSpec(type=type_name, index=-1, source="--custom", params=params, weights=tuple(weights))


def with_custom(catalog: Catalog, declarations: list[str]) -> Catalog:
    """The catalog plus declared custom layers; declaring a built-in type is an error."""
    extra = {}
    for declaration in declarations:
        spec = parse_custom(declaration)
        if spec.type in catalog.layers:
            raise CatalogError(f"--custom {spec.type}: that is a built-in ncnn layer type")
        extra[spec.type] = spec
    return Catalog({**catalog.layers, **extra}, catalog.reserved)
