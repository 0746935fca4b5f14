"""Safe evaluation of the catalog's size and condition expressions.

The language is a Python subset: int/float literals, names, ``a.b`` fields of mapping values (a rule file's
``config.num_hidden_layers``), string literals (for ``==``/``!=``), ``+ - * / // % **``, unary
``-``/``not``, comparisons, ``and``/``or``, ``a if c else b`` and the functions ``min max abs len sum prod
ceil_div align`` and ``get(mapping, key, default)``. ``//`` truncates toward zero as C integer division
does. Expressions are compiled once and cached.

Evaluation is bounded, because expressions also come from users (``--custom``, rule ``where:``) and from
model params: arithmetic takes numbers only (no list or string repetition); every int result, intermediate
ones included, must fit in int64 and every float result must be finite; ``**`` takes an exponent of at most
``MAX_EXPONENT`` in magnitude, so its result is computed only when it stays small; an expression is at
most ``MAX_SOURCE`` characters nesting at most ``MAX_NESTING`` levels. Breaking a bound is a
CatalogError naming the expression, never a hang or a traceback. Subexpressions without names are evaluated
once at compile time, so a constant that breaks a bound is refused where the expression is declared.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

from graphsurgeon.errors import CatalogError

Env = Mapping[str, Any]
Compiled = Callable[[Env], Any]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: The largest exponent ``**`` takes (in magnitude): with int64 operands the result is computed in
#: microseconds before it is bounded.
MAX_EXPONENT = 64
#: The longest expression, and its deepest nesting of operators, calls and parentheses (``-(-(-1))`` is
#: three levels): deeper ones would exhaust the parser's or the evaluator's stack.
MAX_SOURCE = 10_000
MAX_NESTING = 100


class Unresolved:
    """A value that could not be computed (e.g. a derived size dividing by a zero param).

    It sits in an environment and raises only when an expression actually reads it.
    """

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class BoundError(CatalogError, ArithmeticError):
    """A result outside the evaluator's bounds; ``evaluate`` turns it into a CatalogError."""


def _describe(value: int) -> str:
    return f"the result {value}" if value.bit_length() <= 96 else f"a {value.bit_length()}-bit result"


def bounded(value: Any) -> Any:
    """``value`` itself when it is within bounds: ints in int64, floats finite, no complex numbers."""
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return value
        raise BoundError(f"{_describe(value)} does not fit in int64")
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise BoundError(f"a result is {value} (float overflow)")
    if isinstance(value, complex):
        raise BoundError(f"the result {value} is not a real number")
    return value


def _number(value: Any) -> int | float:
    if isinstance(value, int | float):
        return value
    raise BoundError(f"arithmetic takes numbers, not {type(value).__name__} {value!r}")


def _arith(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def op(a: Any, b: Any) -> Any:
        return bounded(fn(_number(a), _number(b)))

    return op


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


def _pow(a: int | float, b: int | float) -> Any:
    """``a ** b`` only for ``|b| <= MAX_EXPONENT`` (``bounded`` then checks the result)."""
    if abs(b) > MAX_EXPONENT:
        raise BoundError(f"the exponent {b} is beyond {MAX_EXPONENT}")
    return a**b


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _align(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def _prod(items: Iterable[Any]) -> Any:
    """The product, bounded at every step (an unbounded product of a long list would take long)."""
    result: Any = 1
    for item in items:
        result = bounded(result * _number(item))
    return result


def _sum(items: Iterable[Any]) -> Any:
    return bounded(sum(_number(item) for item in items))


def _abs(value: Any) -> Any:
    return bounded(abs(_number(value)))


def _get(obj: Any, key: Any, default: Any = None) -> Any:
    """``obj[key]`` for a mapping that has it, else ``default`` (an optional config key)."""
    return obj[key] if isinstance(obj, Mapping) and key in obj else default


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": _abs,
    "len": len,
    "sum": _sum,
    "prod": _prod,
    "ceil_div": _arith(_ceil_div),
    "align": _arith(_align),
    "get": _get,
}

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: _arith(operator.add),
    ast.Sub: _arith(operator.sub),
    ast.Mult: _arith(operator.mul),
    ast.FloorDiv: _arith(_c_floordiv),
    ast.Mod: _arith(_c_mod),
    ast.Pow: _arith(_pow),
    ast.Div: _arith(operator.truediv),
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _has_names(node: ast.AST) -> bool:
    """Whether the subtree reads a name (called function names do not count)."""
    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    return any(isinstance(n, ast.Name) and id(n) not in called for n in ast.walk(node))


def _compile(node: ast.AST, source: str) -> Compiled:
    """One AST node as a closure; a subtree without names is evaluated here, once (so a constant that
    breaks a bound is refused at compile time)."""
    compiled = _compile_node(node, source)
    if isinstance(node, ast.Constant | ast.Expression) or _has_names(node):
        return compiled
    value = _run(compiled, {}, source)
    return lambda env: value


def _compile_node(node: ast.AST, source: str) -> Compiled:
    """Turn one AST node into a closure; anything outside the subset is a CatalogError."""
    if isinstance(node, ast.Expression):
        return _compile(node.body, source)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        value = _run(lambda env: bounded(node.value), {}, source)
        return lambda env: value
    if isinstance(node, ast.Constant) and (isinstance(node.value, str) or node.value is None):
        text = node.value  # compared with == / != (a rule's `when:`), a get() default; arithmetic refuses it
        return lambda env: text
    if isinstance(node, ast.Attribute):
        base, attr = _compile(node.value, source), node.attr

        def member(env: Env) -> Any:
            obj = base(env)
            if isinstance(obj, Mapping) and attr in obj:
                return obj[attr]
            fields = f" (it has {', '.join(sorted(map(str, obj)))})" if isinstance(obj, Mapping) else ""
            origin = getattr(obj, "origin", "")  # where a fact's mapping was read from, when it says
            place = f" in {origin}" if origin else ""
            raise CatalogError(f"expression {source!r}: no field {attr!r}{place}{fields}")

        return member
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
            return lambda env: bounded(-_number(operand(env)))
        if isinstance(node.op, ast.UAdd):
            return lambda env: _number(operand(env))
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
    raise CatalogError(f"expression {source!r}: {type(node).__name__} is not allowed in expressions")


def _run(compiled: Compiled, env: Env, source: str | int | float) -> Any:
    """Run a compiled expression; arithmetic errors and broken bounds become CatalogError."""
    try:
        return compiled(env)
    except BoundError as exc:  # a CatalogError without the expression yet
        raise CatalogError(f"expression {source!r}: {exc}") from None
    except CatalogError:
        raise
    except (ArithmeticError, TypeError, ValueError) as exc:
        raise CatalogError(f"expression {source!r}: {exc}") from None


@lru_cache(maxsize=4096)
def compile_expr(source: str | int | float) -> Compiled:
    """Compile an expression (a number is a constant). Raises CatalogError on syntax outside the subset
    and on a constant part that breaks a bound."""
    if isinstance(source, bool):
        value = int(source)
        return lambda env: value
    if isinstance(source, int | float):
        constant = _run(lambda env: bounded(source), {}, source)
        return lambda env: constant
    return _compile(_parse(source), source)


def _shown(source: str) -> str:
    return repr(source) if len(source) <= 80 else f"{source[:60]!r}… ({len(source)} characters)"


def _parse(source: str) -> ast.Expression:
    """The syntax tree of ``source``, at most ``MAX_SOURCE`` characters nesting at most ``MAX_NESTING``
    levels (deeper trees would exhaust the parser's or the compiler's stack)."""
    if len(source) > MAX_SOURCE:
        raise CatalogError(f"expression {_shown(source)}: longer than {MAX_SOURCE} characters")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise CatalogError(f"expression {_shown(source)}: {exc.msg}") from None
    except (MemoryError, RecursionError):
        raise CatalogError(f"expression {_shown(source)}: nested too deeply to parse") from None
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise CatalogError(f"expression {_shown(source)}: nested more than {MAX_NESTING} levels deep")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return tree


def names_in(source: str | int | float) -> set[str]:
    """The free names an expression reads (function names excluded)."""
    if not isinstance(source, str):
        return set()
    tree = _parse(source)
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate(source: str | int | float, env: Env) -> Any:
    """Evaluate an expression over ``env``; arithmetic errors and broken bounds become CatalogError naming
    the expression."""
    return _run(compile_expr(source), env, source)


def evaluate_size(source: str | int | float, env: Env) -> int:
    """Evaluate an expression whose value is a size or a count: it must be an int, not a float (``4 / 2``
    is 2.0, a float; use ``//``)."""
    value = evaluate(source, env)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CatalogError(f"expression {source!r} gives {value!r}; a size must be an integer")
    return value
