"""Safe evaluation of the catalog's size and condition expressions.

The language is a Python subset: int/float literals, names, ``+ - * // % **``, unary ``-``/``not``,
comparisons, ``and``/``or``, ``a if c else b`` and the functions ``min max abs len sum prod ceil_div align``.
``//`` truncates toward zero as C integer division does. Expressions are compiled once and cached.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from graphsurgeon.errors import CatalogError

Env = Mapping[str, Any]
Compiled = Callable[[Env], Any]


class Unresolved:
    """A value that could not be computed (e.g. a derived size dividing by a zero param).

    It sits in an environment and raises only when an expression actually reads it.
    """

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _c_floordiv(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("integer division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return math.trunc(a / b)


def _c_mod(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return a - b * _c_floordiv(a, b)
    return math.fmod(a, b)


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _align(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "len": len,
    "sum": sum,
    "prod": math.prod,
    "ceil_div": _ceil_div,
    "align": _align,
}

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: _c_floordiv,
    ast.Mod: _c_mod,
    ast.Pow: operator.pow,
    ast.Div: operator.truediv,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _compile(node: ast.AST, source: str) -> Compiled:
    """Turn one AST node into a closure; anything outside the subset is a CatalogError."""
    if isinstance(node, ast.Expression):
        return _compile(node.body, source)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Name):
        name = node.id

        def lookup(env: Env) -> Any:
            try:
                value = env[name]
            except KeyError:
                raise CatalogError(f"expression {source!r}: unknown name {name!r}") from None
            if isinstance(value, Unresolved):
                raise CatalogError(f"expression {source!r}: {name} is unavailable ({value.message})")
            return value

        return lookup
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        fn = _BINOPS[type(node.op)]
        left, right = _compile(node.left, source), _compile(node.right, source)
        return lambda env: fn(left(env), right(env))
    if isinstance(node, ast.UnaryOp):
        operand = _compile(node.operand, source)
        if isinstance(node.op, ast.USub):
            return lambda env: -operand(env)
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(node.op, ast.Not):
            return lambda env: int(not operand(env))
    if isinstance(node, ast.BoolOp):
        parts = [_compile(v, source) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda env: int(all(p(env) for p in parts))
        return lambda env: int(any(p(env) for p in parts))
    if isinstance(node, ast.Compare) and all(type(op) in _CMPOPS for op in node.ops):
        first = _compile(node.left, source)
        rest = [
            (_CMPOPS[type(op)], _compile(c, source)) for op, c in zip(node.ops, node.comparators, strict=True)
        ]

        def compare(env: Env) -> int:
            left = first(env)
            for fn, comp in rest:
                right = comp(env)
                if not fn(left, right):
                    return 0
                left = right
            return 1

        return compare
    if isinstance(node, ast.IfExp):
        test, body, orelse = (_compile(n, source) for n in (node.test, node.body, node.orelse))
        return lambda env: body(env) if test(env) else orelse(env)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        fn = FUNCTIONS[node.func.id]
        args = [_compile(a, source) for a in node.args]
        if node.keywords:
            raise CatalogError(f"expression {source!r}: keyword arguments are not allowed")
        return lambda env: fn(*(a(env) for a in args))
    if isinstance(node, ast.List | ast.Tuple):
        items = [_compile(e, source) for e in node.elts]
        return lambda env: [i(env) for i in items]
    raise CatalogError(f"expression {source!r}: {type(node).__name__} is not allowed in catalog expressions")


@lru_cache(maxsize=4096)
def compile_expr(source: str | int | float) -> Compiled:
    """Compile an expression (a number is a constant). Raises CatalogError on syntax outside the subset."""
    if isinstance(source, bool):
        value = int(source)
        return lambda env: value
    if isinstance(source, int | float):
        constant = source
        return lambda env: constant
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise CatalogError(f"expression {source!r}: {exc.msg}") from None
    return _compile(tree, source)


def names_in(source: str | int | float) -> set[str]:
    """The free names an expression reads (function names excluded)."""
    if not isinstance(source, str):
        return set()
    tree = ast.parse(source.strip(), mode="eval")
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate(source: str | int | float, env: Env) -> Any:
    """Evaluate an expression over ``env``; arithmetic errors become CatalogError naming the expression."""
    try:
        return compile_expr(source)(env)
    except CatalogError:
        raise
    except (ArithmeticError, TypeError, ValueError) as exc:
        raise CatalogError(f"expression {source!r}: {exc}") from None
