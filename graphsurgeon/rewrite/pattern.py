"""Patterns written as ncnn param snippets, matched against a graph.

A pattern is layer lines without a header, parsed by the same grammar as a .param. A name, blob or value
written ``%x`` is a capture: where it repeats, what it stands for must agree (shared blob captures are how
a pattern says which layer feeds which). ``*`` matches anything (a value ``*``: the param must be present).
Params a line does not mention are unconstrained; a mentioned param compares with the value the layer sees
(explicit, or the catalog default). ``where`` expressions over captured values must all hold. Matches do
not overlap; they are found in graph order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from graphsurgeon.errors import CatalogError, GsurgError
from graphsurgeon.formats.param_records import LayerLine
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.params import Param, ncnn_view
from graphsurgeon.rewrite.pattern_values import AnyValue, ArrayPattern, Capture, parse_pattern_lines
from graphsurgeon.schema.expr import evaluate

ANY = "*"


class PatternError(GsurgError):
    """A pattern or where-expression that cannot be used."""


@dataclass(frozen=True)
class Pattern:
    lines: tuple[LayerLine, ...]
    where: tuple[str, ...] = ()


@dataclass
class PatternMatch:
    layers: list[Layer]
    captures: dict[str, Any] = field(default_factory=dict)


def compile_pattern(
    text: str, where: list[str] | None = None, *, path: str = "<pattern>", line: int = 1
) -> Pattern:
    lines = parse_pattern_lines(text, path=path, first_line=line)
    if not lines:
        raise PatternError(f"{path}:{line}: the pattern has no layer lines")
    return Pattern(tuple(lines), tuple(where or ()))


def _is_capture(token: str) -> bool:
    return token.startswith("%") and len(token) > 1


def _bind(caps: dict[str, Any], token: str, value: Any) -> bool:
    """Literal tokens must equal; ``*`` accepts; a capture binds or must agree with its binding."""
    if token == ANY:
        return True
    if not _is_capture(token):
        return token == value
    key = token[1:]
    if key in caps:
        return bool(caps[key] == value)
    caps[key] = value
    return True


def _seen_value(layer: Layer, pid: int) -> Any:
    """The value the layer sees for param ``pid``: explicit (as ncnn reads it) or the catalog default."""
    spec = layer.spec
    param = layer.params.get(pid)
    if spec is None or pid not in spec.params:
        return None if param is None else param.value
    pspec = spec.params[pid]
    value = ncnn_view(pspec, param) if param is not None else layer.env()[pspec.name]
    return tuple(value) if isinstance(value, list) else value


def _params_ok(layer: Layer, pat: LayerLine, caps: dict[str, Any]) -> bool:
    for pid, want in pat.params.items():
        if isinstance(want, AnyValue):
            if pid not in layer.params:
                return False
            continue
        try:
            seen = _seen_value(layer, pid)
        except CatalogError:
            return False
        if isinstance(want, Capture):
            if want.name in caps and caps[want.name] != seen:
                return False
            caps[want.name] = seen
        elif isinstance(want, ArrayPattern):
            if not isinstance(seen, tuple) or len(seen) != len(want.elements):
                return False
            for element, value in zip(want.elements, seen, strict=True):
                if isinstance(element, Capture):
                    if caps.setdefault(element.name, value) != value:
                        return False
                elif not isinstance(element, AnyValue) and element != value:
                    return False
        elif isinstance(want, Param):
            literal = want.value
            if seen != (tuple(literal) if isinstance(literal, list) else literal):
                return False
    return True


def _fits(layer: Layer, pat: LayerLine, caps: dict[str, Any]) -> bool:
    if pat.type != ANY and layer.type != pat.type:
        return False
    if len(layer.inputs) != len(pat.bottoms) or len(layer.outputs) != len(pat.tops):
        return False
    if not _bind(caps, pat.name, layer.name):
        return False
    for blob, token in zip((*layer.inputs, *layer.outputs), (*pat.bottoms, *pat.tops), strict=True):
        if not _bind(caps, token, blob.name):
            return False
    return _params_ok(layer, pat, caps)


def _candidates(graph: Graph, pat: LayerLine, caps: Mapping[str, Any]) -> list[Layer]:
    """Layers worth trying: readers of a bound bottom, the producer of a bound top, else all of the type."""
    for token in pat.bottoms:
        name = caps.get(token[1:]) if _is_capture(token) else (None if token == ANY else token)
        if isinstance(name, str) and name in graph.blobs:
            return list(dict.fromkeys(graph.blobs[name].consumers))
    for token in pat.tops:
        name = caps.get(token[1:]) if _is_capture(token) else (None if token == ANY else token)
        if isinstance(name, str) and name in graph.blobs:
            producer = graph.blobs[name].producer
            return [producer] if producer is not None else []
    return [layer for layer in graph.layers if pat.type == ANY or layer.type == pat.type]


def _where_ok(pattern: Pattern, caps: dict[str, Any]) -> bool:
    for expr in pattern.where:
        try:
            if not evaluate(expr, caps):
                return False
        except CatalogError as err:
            raise PatternError(f"where {expr!r}: {err}") from None
    return True


def _search(
    graph: Graph, pattern: Pattern, i: int, chosen: list[Layer], caps: dict[str, Any], used: set[int]
) -> Iterator[PatternMatch]:
    if i == len(pattern.lines):
        if _where_ok(pattern, caps):
            yield PatternMatch(list(chosen), dict(caps))
        return
    pat = pattern.lines[i]
    for layer in _candidates(graph, pat, caps):
        if id(layer) in used or any(layer is c for c in chosen):
            continue
        trial = dict(caps)
        if _fits(layer, pat, trial):
            chosen.append(layer)
            yield from _search(graph, pattern, i + 1, chosen, trial, used)
            chosen.pop()


def find_pattern(graph: Graph, pattern: Pattern, exclude: set[int] | None = None) -> list[PatternMatch]:
    """Non-overlapping matches in graph order (by the layer matching the first pattern line)."""
    used = set(exclude or ())
    found: list[PatternMatch] = []
    first = pattern.lines[0]
    for layer in graph.layers:
        if id(layer) in used or (first.type != ANY and layer.type != first.type):
            continue
        caps: dict[str, Any] = {}
        if not _fits(layer, first, caps):
            continue
        match = next(_search(graph, pattern, 1, [layer], caps, used), None)
        if match is not None:
            found.append(match)
            used.update(id(m) for m in match.layers)
    return found


def _deepest(graph: Graph, pattern: Pattern, chosen: list[Layer], caps: dict[str, Any]) -> list[Layer]:
    """The longest run of layers fitting the pattern's lines in order, extending ``chosen`` (which fits the
    first ``len(chosen)`` lines with captures ``caps``); where-constraints are not checked."""
    best = list(chosen)

    def walk(current: list[Layer], bound: dict[str, Any]) -> None:
        nonlocal best
        if len(current) > len(best):
            best = list(current)
        i = len(current)
        if i == len(pattern.lines):
            return
        for layer in _candidates(graph, pattern.lines[i], bound):
            trial = dict(bound)
            if not any(layer is c for c in current) and _fits(layer, pattern.lines[i], trial):
                walk([*current, layer], trial)

    walk(list(chosen), dict(caps))
    return best


def best_partial(graph: Graph, pattern: Pattern) -> str | None:
    """How far the best attempt got: 'layer X matched line 1, no layer fits line 2 (Tile …)'."""
    layers = _deepest(graph, pattern, [], {})
    best = (len(layers), layers)
    got, layers = best
    if got == len(pattern.lines):
        return "every line matched but a where constraint failed"
    if got == 0:
        return f"no layer fits line 1 ({pattern.lines[0].type})"
    names = ", ".join(layer.name for layer in layers)
    nxt = pattern.lines[got]
    return f"layers {names} matched lines 1-{got}; no layer fits line {got + 1} ({nxt.type} {nxt.name})"


def _why_not(layer: Layer, pat: LayerLine) -> str:
    """Why ``layer`` does not fit pattern line ``pat`` on its own (first failing test)."""
    if len(layer.inputs) != len(pat.bottoms) or len(layer.outputs) != len(pat.tops):
        have, want = (
            f"{len(layer.inputs)} in / {len(layer.outputs)} out",
            f"{len(pat.bottoms)} / {len(pat.tops)}",
        )
        return f"has {have}, the line {want}"
    for pid in pat.params:
        if not _params_ok(layer, LayerLine(pat.type, ANY, [], [], {pid: pat.params[pid]}, pat.line), {}):
            try:
                seen = _seen_value(layer, pid)
            except CatalogError:
                seen = "unreadable"
            return f"param {pid} is {seen!r}"
    return "its names or blobs do not fit"


def explain_pattern(graph: Graph, pattern: Pattern) -> list[tuple[Layer, str]]:
    """Every layer of the first line's type, with what happened from it: the match it starts, how far a
    match from it got, or why it does not fit line 1."""
    starts = {id(m.layers[0]): m for m in find_pattern(graph, pattern)}
    first = pattern.lines[0]
    out: list[tuple[Layer, str]] = []
    for layer in graph.layers:
        if first.type != ANY and layer.type != first.type:
            continue
        if id(layer) in starts:
            out.append((layer, "matched: " + ", ".join(x.name for x in starts[id(layer)].layers)))
            continue
        if not _fits(layer, first, {}):
            out.append((layer, f"line 1: {_why_not(layer, first)}"))
            continue
        reached = _deepest_from(graph, pattern, layer)
        if reached == len(pattern.lines):
            out.append((layer, "every line fits, but a where constraint fails or its layers are taken"))
        else:
            nxt = pattern.lines[reached]
            out.append(
                (layer, f"lines 1-{reached} fit; no layer fits line {reached + 1} ({nxt.type} {nxt.name})")
            )
    return out


def _deepest_from(graph: Graph, pattern: Pattern, start: Layer) -> int:
    caps: dict[str, Any] = {}
    _fits(start, pattern.lines[0], caps)
    return len(_deepest(graph, pattern, [start], caps))
