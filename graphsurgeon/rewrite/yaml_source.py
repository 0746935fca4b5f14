"""YAML with positions: load a document and remember the line of every mapping key and sequence item, so a
schema error can name ``file:line`` rather than a path of keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from graphsurgeon.errors import GsurgError

Path_ = tuple[str | int, ...]


class RuleFileError(GsurgError):
    """A rule file that cannot be used; the message names the file and line."""


@dataclass
class LocatedYaml:
    """A loaded YAML document and the line (1-based) of each value, addressed by its key path."""

    path: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, loc: Path_) -> int:
        """The line of the deepest known prefix of ``loc``."""
        for n in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:n]))
            if line is not None:
                return line
        return 1

    def where(self, loc: Path_) -> str:
        return f"{self.path}:{self.line_of(loc)}"


def _scalar(node: yaml.Node) -> Any:
    try:
        return yaml.constructor.SafeConstructor().construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as err:
        raise RuleFileError(f"line {node.start_mark.line + 1}: {err.problem}") from None


def _walk(node: yaml.Node, loc: Path_, lines: dict[Path_, int]) -> Any:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}  # `<<: *anchor` entries: the mapping's own keys win over them
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for src in sources:
                    if not isinstance(src, yaml.MappingNode):
                        raise RuleFileError(f"line {key_node.start_mark.line + 1}: `<<` merges mappings only")
                    for k, v in _walk(src, loc, lines).items():
                        merged.setdefault(k, v)
                continue
            key = _scalar(key_node)
            if key in out:
                raise RuleFileError(f"line {key_node.start_mark.line + 1}: key {key!r} appears twice")
            lines[(*loc, key)] = key_node.start_mark.line + 1
            out[key] = _walk(value_node, (*loc, key), lines)
        return {**{k: v for k, v in merged.items() if k not in out}, **out}
    if isinstance(node, yaml.SequenceNode):
        return [_walk(item, (*loc, i), lines) for i, item in enumerate(node.value)]
    return _scalar(node)


def load_located(path: str, text: str | None = None) -> LocatedYaml:
    """Parse ``path`` (or ``text``) keeping each value's line. Syntax errors name file, line and column."""
    if text is None:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as err:
            raise RuleFileError(f"{path}: cannot read: {err.strerror}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        line = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise RuleFileError(f"{path}{line}: not valid YAML: {err.problem}") from None
    if node is None:
        raise RuleFileError(f"{path}: the rule file is empty")
    lines: dict[Path_, int] = {}
    try:
        data = _walk(node, (), lines)
    except RuleFileError as err:
        raise RuleFileError(f"{path}: {err}") from None
    return LocatedYaml(path, data, lines)
