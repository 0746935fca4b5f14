"""Turning lark's parse errors into one-line messages: what was found, and what the grammar expected there,
in words (``expected an int or a float …``), not terminal names."""

from __future__ import annotations

from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from graphsurgeon.errors import quoted

_TERMINAL_NAMES = {
    "KEY": "a param `id=value` (no blank after '=')",
    "NAME": "a name",
    "COUNT": "an integer count",
    "INT": "an int",
    "FLOAT": "a float",
    "ARRAY": "an array",
    "WORD": "a string",
    "QUOTED": 'a "quoted string"',
    "_NL": "end of line",
    "$END": "end of file",
}


def syntax_message(err: UnexpectedInput, text: str) -> str:
    if isinstance(err, UnexpectedEOF):
        return "unexpected end of file"
    order = list(_TERMINAL_NAMES)
    # lark's expected terminals are a set, which iterates in a per-process order: sort them fully
    names = sorted(
        getattr(err, "expected", None) or (), key=lambda t: (order.index(t) if t in order else len(order), t)
    )
    expected = [_TERMINAL_NAMES.get(t, t) for t in names]
    want = f"; expected {' or '.join(expected)}" if expected else ""
    if isinstance(err, UnexpectedToken):
        tok = err.token
        shown = (
            "end of line" if tok.type == "_NL" else "end of file" if tok.type == "$END" else quoted(str(tok))
        )
        return f"unexpected {shown}{want}"
    if isinstance(err, UnexpectedCharacters):
        pos = err.pos_in_stream or 0
        if text[pos : pos + 1] == "=" and pos > 0 and text[pos - 1].isdigit():
            return "a param `id=` must be followed directly by its value (no blank, not at end of line)"
        end = pos
        while end < len(text) and not text[end].isspace() and end - pos < 40:
            end += 1
        return f"unexpected {text[pos:end]!r}{want}"
    return str(err).splitlines()[0]
