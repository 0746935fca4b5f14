"""The exception hierarchy. Every message names the place: file and line, or layer, slot and byte offset.

All of these are user-facing input errors: the CLI prints ``str(err)`` on one line and exits 2.
"""

from __future__ import annotations

#: The most characters of a user's input an error line quotes (``quoted``), and of a whole message line
#: (``clipped``): a 2 MB token in a .param must not become a 2 MB line on stderr.
QUOTE_LIMIT = 60
LINE_LIMIT = 1000


def quoted(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``repr(text)``, cut to its first ``limit`` characters with the whole length stated when longer."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def clipped(line: str, limit: int = LINE_LIMIT) -> str:
    """A message line cut to ``limit`` characters, with what was cut stated; the last bound for every line
    the CLI prints, whichever message quoted input without ``quoted``."""
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... ({len(line) - limit} more characters)"


class GsurgError(Exception):
    """Base of every error gsurg reports to a user (exit code 2)."""

    exit_code = 2


class ParamSyntaxError(GsurgError):
    """A text .param that ncnn would reject or misread; carries file, line and column."""

    def __init__(self, message: str, *, path: str = "<param>", line: int = 0, column: int = 0) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.reason = message
        where = f"{path}:{line}:{column}" if line else path
        super().__init__(f"{where}: {message}")


class ParamBinError(GsurgError):
    """A binary .param.bin that cannot be read or written; carries the byte offset."""


class GraphError(GsurgError):
    """An operation that would break the graph's invariants (SSA blobs, links, names)."""


class CatalogError(GsurgError):
    """The layer catalog itself is inconsistent, or an expression in it cannot be evaluated."""


class BinFormatError(GsurgError):
    """A .bin weight file that does not match its .param; names layer, slot and byte offset."""

    def __init__(
        self,
        message: str,
        *,
        path: str = "<bin>",
        layer: str | None = None,
        slot: str | None = None,
        offset: int | None = None,
    ) -> None:
        self.path = path
        self.layer = layer
        self.slot = slot
        self.offset = offset
        self.reason = message
        parts = [path]
        if layer is not None:
            parts.append(f"layer {layer}")
        if slot is not None:
            parts.append(f"weight {slot}")
        if offset is not None:
            parts.append(f"offset {offset}")
        super().__init__(": ".join([", ".join(parts), message]))


class OutputError(GsurgError):
    """An output that cannot be written: names the output path and the system's reason."""


class EmitError(GsurgError):
    """The IR holds something the safe-writer rules cannot express (inf/nan, overlong value, …)."""


class OutputSpaceError(GsurgError):
    """An output that cannot fit where it is to be written (checked before anything is written)."""


TORCHSCRIPT_PREAMBLE = "The following operation failed in the TorchScript interpreter"


def one_line(err: BaseException) -> str:
    """``Type: first non-empty line of the message`` (torch messages span many lines). An error raised
    inside a TorchScript module starts with a preamble and a traceback; its last line holds the reason
    (``RuntimeError: shape '[1, 40]' is invalid ...``) and is returned as it is."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    if lines[0].startswith(TORCHSCRIPT_PREAMBLE):
        return lines[-1]
    return f"{type(err).__name__}: {lines[0]}"
