"""Layer lines written in a rule (``replace``/``insert``), turned into real layers: captures substituted,
every other blob or layer name made unique in the graph."""

from __future__ import annotations

from typing import Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.param_records import LayerLine
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.names import fresh_name
from graphsurgeon.ir.params import Param
from graphsurgeon.rewrite.pattern_values import AnyValue, ArrayPattern, Capture, parse_pattern_lines


class SnippetError(GsurgError):
    """A replacement or insertion that cannot be built."""


def _value(value: Any, captures: dict[str, Any], where: str) -> Param:
    if isinstance(value, Param):
        return value
    if isinstance(value, Capture):
        if value.name not in captures:
            raise SnippetError(f"{where}: %{value.name} is not a capture of the match")
        return Param.infer(captures[value.name])
    if isinstance(value, ArrayPattern):
        items = []
        for element in value.elements:
            if isinstance(element, AnyValue):
                raise SnippetError(f"{where}: * has no value in a replacement")
            items.append(_value(element, captures, where).value if isinstance(element, Capture) else element)
        return Param.infer(items)
    raise SnippetError(f"{where}: * has no value in a replacement")


def _unique(name: str, taken: set[str]) -> str:
    candidate = fresh_name(name, taken)
    taken.add(candidate)
    return candidate


def build(
    graph: Graph, text: str, captures: dict[str, Any], at: int, where: str
) -> tuple[list[Layer], dict[str, Layer]]:
    """Insert the snippet's layers at index ``at``; returns them and a map from each name as written (a
    %capture or a literal) to its layer."""
    lines: list[LayerLine] = parse_pattern_lines(text, path=where)
    blob_names: dict[str, str] = {}
    taken_blobs = set(graph.blobs)
    taken_layers = {layer.name for layer in graph.layers}

    def blob(token: str) -> str:
        if token == "*":
            raise SnippetError(f"{where}: * cannot name a blob in a replacement")
        if token.startswith("%"):
            key = token[1:]
            if key not in captures:
                raise SnippetError(f"{where}: %{key} is not a capture of the match")
            return str(captures[key])
        if token not in blob_names:
            blob_names[token] = _unique(token, taken_blobs)
        return blob_names[token]

    made: list[Layer] = []
    by_written: dict[str, Layer] = {}
    for offset, line in enumerate(lines):
        if line.name.startswith("%"):
            name = str(captures.get(line.name[1:], line.name[1:]))
        else:
            name = _unique(line.name, taken_layers)
        params = {
            pid: _value(v, captures, f"{where}: {line.type} {line.name}") for pid, v in line.params.items()
        }
        layer = graph.add_layer(
            line.type,
            name,
            [blob(t) for t in line.bottoms],
            [blob(t) for t in line.tops],
            params,
            index=at + offset,
        )
        made.append(layer)
        by_written[line.name.lstrip("%")] = layer
    return made, by_written
