"""The values only rule patterns hold — ``%name`` captures, ``*`` wildcards, arrays of them — and the
parse of a pattern (or a replacement snippet) with the .param grammar, making these values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphsurgeon.formats.param_records import LayerLine
from graphsurgeon.formats.param_text import parse_layer_lines


@dataclass(frozen=True, slots=True)
class Capture:
    """A ``%name`` value in a rule pattern."""

    name: str


@dataclass(frozen=True, slots=True)
class AnyValue:
    """A ``*`` value in a rule pattern: the param must be present, with any value."""


@dataclass(frozen=True, slots=True)
class ArrayPattern:
    """An array value in a rule pattern whose elements may be captures or ``*``."""

    elements: tuple[Any, ...]


class _Makers:
    """The placeholders the grammar's CAPTURE, ANY and pattern arrays become."""

    def capture(self, name: str) -> Capture:
        return Capture(name)

    def any(self) -> AnyValue:
        return AnyValue()

    def array(self, elements: tuple[Any, ...]) -> ArrayPattern:
        return ArrayPattern(elements)


_MAKERS = _Makers()


def parse_pattern_lines(text: str, *, path: str = "<pattern>", first_line: int = 1) -> list[LayerLine]:
    """Parse a rule pattern (layer lines, no header) with the .param grammar; values may be ``%capture`` or
    ``*``. ``first_line`` shifts reported lines to the pattern's place in its rule file."""
    return parse_layer_lines(text, _MAKERS, path=path, first_line=first_line)
