"""YAML with positions: load a document and remember the line of every mapping key and sequence item, so a
schema error can name ``file:line`` rather than a path of keys.

Reading is bounded, because a rule file may come from anyone: a regular file of at most ``MAX_FILE_BYTES``
in UTF-8, at most ``MAX_VALUES`` values once aliases are expanded, at most ``MAX_DEPTH`` levels deep, no
recursive anchor, mapping keys that are plain values. Only YAML's safe tags are read (no Python objects).
Every failure is a ``RuleFileError`` naming the file and line."""

from __future__ import annotations

import os
import reprlib
import stat
from dataclasses import dataclass, field
from typing import Any, NoReturn

import yaml

from graphsurgeon.errors import GsurgError, one_line
from graphsurgeon.formats.outpaths import kind


def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` holds a code point of U+D800..U+DFFF, which no file name or UTF-8 file can hold
    (YAML's ``"\\ud800"`` escape makes one; so do undecodable bytes in a command-line argument)."""
    return any("\ud800" <= ch <= "\udfff" for ch in text)


Path_ = tuple[str | int, ...]


class RuleFileError(GsurgError):
    """A rule file that cannot be used; the message names the file and line."""


@dataclass
class LocatedYaml:
    """A loaded YAML document and the line (1-based) of each value, addressed by its key path."""

    path: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    values: int = 0  # the values it holds, aliases expanded (what it draws from ``MAX_VALUES``)

    def line_of(self, loc: Path_) -> int:
        """The line of the deepest known prefix of ``loc``."""
        for n in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:n]))
            if line is not None:
                return line
        return 1

    def where(self, loc: Path_) -> str:
        return f"{self.path}:{self.line_of(loc)}"


#: The largest rule file read (the shipped ones are a few KB).
MAX_FILE_BYTES = 4 << 20
#: The most values one document may expand to (aliases included): a "billion laughs" file of 405 bytes
#: would otherwise expand to hundreds of millions.
MAX_VALUES = 200_000
#: The deepest nesting of mappings and sequences.
MAX_DEPTH = 100


_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap")


def _code(character: int | str) -> int:
    return character if isinstance(character, int) else ord(character[:1] or "\0")


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class _Walker:
    """Turns a composed YAML node tree into Python values, recording lines, within the bounds above."""

    def __init__(self, path: str, lines: dict[Path_, int], limit: int) -> None:
        self.path = path
        self.lines = lines
        self.limit = limit
        self.values = 0
        self.open: set[int] = set()  # ids of the collections being walked (a recursive anchor loops)

    def fail(self, node: yaml.Node, message: str) -> NoReturn:
        raise RuleFileError(f"{self.path}:{_line(node)}: {message}")

    def scalar(self, node: yaml.Node) -> Any:
        try:
            value = yaml.constructor.SafeConstructor().construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as err:
            self.fail(node, str(err.problem))
        except Exception as err:
            # `!!int abc` (ValueError), `!!timestamp x` (AttributeError), `!!bool maybe` (KeyError), ...
            shown = reprlib.repr(node.value)
            self.fail(node, f"{node.tag.rsplit(':', 1)[-1]} {shown} cannot be read: {one_line(err)}")
        if isinstance(value, str) and has_lone_surrogate(value):
            self.fail(node, "the text holds a lone surrogate (an escape like \\ud800: not Unicode text)")
        return value

    def walk(self, node: yaml.Node, loc: Path_) -> Any:
        self.values += 1
        if self.values > self.limit:
            self.fail(node, _too_many(self.limit))
        if len(loc) > MAX_DEPTH:
            self.fail(node, f"nested more than {MAX_DEPTH} levels deep")
        self.lines.setdefault(loc, _line(node))
        if not isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            return self.scalar(node)
        if node.tag not in _COLLECTION_TAGS:
            self.fail(node, f"the tag {node.tag} is not allowed (plain YAML mappings and lists only)")
        if id(node) in self.open:
            self.fail(node, "an alias refers to a collection that contains it (a recursive anchor)")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.walk(item, (*loc, i)) for i, item in enumerate(node.value)]
            return self.mapping(node, loc)
        finally:
            self.open.discard(id(node))

    def mapping(self, node: yaml.MappingNode, loc: Path_) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}  # `<<: *anchor` entries: the mapping's own keys win over them
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for src in sources:
                    if not isinstance(src, yaml.MappingNode):
                        self.fail(key_node, "`<<` merges mappings only")
                    for k, v in self.walk(src, loc).items():
                        merged.setdefault(k, v)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.fail(key_node, "a mapping key is a plain value (a name or a number), not a collection")
            key = self.scalar(key_node)
            if key in out:
                self.fail(key_node, f"key {key!r} appears twice")
            self.lines[(*loc, key)] = _line(key_node)
            out[key] = self.walk(value_node, (*loc, key))
        return {**{k: v for k, v in merged.items() if k not in out}, **out}


def _too_many(limit: int) -> str:
    if limit < MAX_VALUES:  # what the files read before this one left
        return f"the rule file and its includes hold more than {MAX_VALUES} values together"
    return f"the document expands to more than {MAX_VALUES} values (aliases of aliases?)"


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's composer, stopped past the nodes ``limit`` values can take (each with its key): a 4 MB file
    of small values is refused then, not composed whole first (the pure-Python composer spent 69 s and
    885 MB on one)."""

    def __init__(self, text: str, path: str, limit: int) -> None:
        super().__init__(text)
        self.path = path
        self.limit = limit
        self.nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.nodes += 1
        if self.nodes > 2 * self.limit + 1:  # a value, and a key for each value of a mapping, at most
            mark = self.peek_event().start_mark
            raise RuleFileError(f"{self.path}:{mark.line + 1}: {_too_many(self.limit)}")
        return super().compose_node(parent, index)


def read_text(path: str) -> str:
    """A rule file's text: a regular file of at most ``MAX_FILE_BYTES``, in UTF-8 (errors name the file,
    and the line of a byte that is not UTF-8)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) else "the path holds a NUL character"
        raise RuleFileError(f"{path}: cannot read: {reason}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # before fdopen, which refuses a folder with the descriptor as its name
        os.close(fd)
        raise RuleFileError(f"{path}: cannot read: {kind(path)}, not a file")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > MAX_FILE_BYTES:
            raise RuleFileError(f"{path}: {st.st_size} bytes; a rule file is at most {MAX_FILE_BYTES}")
        data = fh.read(MAX_FILE_BYTES + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise RuleFileError(
            f"{path}:{line}: not UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start})"
        ) from None


def load_located(path: str, text: str | None = None, *, limit: int | None = None) -> LocatedYaml:
    """Parse ``path`` (or ``text``) keeping each value's line. Syntax errors name file, line and column;
    the bounds above are errors naming the file and line; ``limit`` is the values it may hold (what the
    files of its program read before it left of ``MAX_VALUES``)."""
    if text is None:
        text = read_text(path)
    limit = MAX_VALUES if limit is None else limit
    loader: yaml.SafeLoader | None = None
    try:
        loader = _BoundedLoader(text, path, limit)  # its reader refuses control characters here
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        line = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise RuleFileError(f"{path}{line}: not valid YAML: {err.problem}") from None
    except yaml.reader.ReaderError as err:
        at = text[: err.position].count("\n") + 1
        raise RuleFileError(
            f"{path}:{at}: not valid YAML: the control character U+{_code(err.character):04X} is not allowed"
        ) from None
    except yaml.YAMLError as err:
        raise RuleFileError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
    except RecursionError:
        raise RuleFileError(
            f"{path}: not valid YAML: nested too deeply (at most {MAX_DEPTH} levels)"
        ) from None
    except ValueError as err:  # PyYAML's scanner builds some scalars itself: chr() of a "\U00110000" escape
        raise RuleFileError(f"{path}:{loader.line + 1 if loader else 1}: not valid YAML: {err}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        raise RuleFileError(f"{path}: the rule file is empty")
    lines: dict[Path_, int] = {}
    walker = _Walker(path, lines, limit)
    data = walker.walk(node, ())
    return LocatedYaml(path, data, lines, walker.values)
