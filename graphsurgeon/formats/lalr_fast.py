"""A lean driver for a lark LALR grammar: lark's own tables and terminals, run without per-token objects.

Lark builds everything from the grammar: the LALR(1) action table, and for every parser state the terminals
its contextual lexer tries, in lark's priority order, with the ``%ignore`` terminals among them.
``FastLALR`` runs that same automaton over a text, and accepts or rejects exactly what lark's parser accepts
or rejects, with the same tokens, but without lark's per-token machinery (``Token`` objects, line counting,
generic tree-building callbacks), which costs several times the parse itself on large inputs.

Semantic values are built by *hooks*: a function per rule name (``{"layer": ...}``) called at each
reduction of that rule, in the same order as lark's inline transformer callbacks run. A hook receives the
items the rule spans, in order: ``(terminal name, text, offset)`` for each kept terminal (lark's filtered
terminals, ``_NL`` and the like, are dropped as in its trees) and ``(rule name, hook result, offset)`` for
each hooked rule inside; rules without a hook are transparent. Offsets are character offsets into the text.

On input lark rejects, ``parse`` raises ``Rejected``; lark's own parser then gives the precise error (what
was found, what the grammar expected there, line and column), see ``param_text``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lark import Lark
from lark.grammar import Terminal
from lark.parsers.lalr_analysis import Shift

from graphsurgeon.errors import GsurgError

Item = tuple[str, Any, int]
Hook = Callable[[list[Item]], Any]

_END = "$END"


class Rejected(GsurgError):
    """The text is not in the grammar's language; ``offset`` is where the driver stopped. Internal: the
    reader then runs lark's own parser, whose error it reports."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class FastLALR:
    """The LALR automaton and contextual lexer of ``lark`` (built with parser="lalr", lexer="contextual").

    Immutable once built, so one instance serves every call and thread."""

    def __init__(self, lark: Lark) -> None:
        frontend = lark.parser
        table = frontend.parser._parse_table
        lexer = frontend.lexer
        conf = lark.lexer_conf
        if conf.postlex is not None or conf.callbacks:
            raise ValueError("the fast LALR driver supports no postlexer and no lexer callbacks")
        self._start_states: dict[str, int] = dict(table.start_states)
        self._end_states: dict[str, int] = dict(table.end_states)
        filtered: set[str] = set()
        kept: set[str] = set()
        for rule in lark.rules:
            if rule.options.keep_all_tokens:
                raise ValueError(f"the fast LALR driver does not support !rules ({rule.origin.name})")
            for sym in rule.expansion:
                if isinstance(sym, Terminal):
                    (filtered if sym.filter_out else kept).add(str(sym.name))
        if filtered & kept:
            raise ValueError(f"terminals both kept and filtered: {sorted(filtered & kept)}")
        self._filtered = frozenset(filtered)
        ignore = frozenset(str(name) for name in conf.ignore)
        # per state: terminal -> (shift?, next state or rule length, rule name), and its lexer's match
        self._actions: dict[int, dict[str, tuple[bool, int, str]]] = {}
        self._scan: dict[int, Callable[..., Any]] = {}
        compiled: dict[str, Callable[..., Any]] = {}
        for state, row in table.states.items():
            actions: dict[str, tuple[bool, int, str]] = {}
            for symbol, (action, arg) in row.items():
                # names as plain str: lark's rule names are Tokens, whose == runs in Python
                if action is Shift:
                    actions[str(symbol)] = (True, arg, "")
                else:
                    actions[str(symbol)] = (False, len(arg.expansion), str(arg.origin.name))
            self._actions[state] = actions
            basic = lexer.lexers[state]
            basic.scanner  # noqa: B018 - builds lark's scanner, and with it its terminal callbacks
            if basic.callback:
                raise ValueError(f"terminals with lexer callbacks: {sorted(basic.callback)}")
            pattern = _scanner_pattern(
                [(str(t.name), t.pattern.to_regexp()) for t in basic.terminals], ignore
            )
            if pattern not in compiled:
                compiled[pattern] = conf.re_module.compile(pattern, conf.g_regex_flags).match
            self._scan[state] = compiled[pattern]

    def parse(self, text: str, start: str, hooks: Mapping[str, Hook]) -> list[Item]:
        """Run the automaton over ``text`` from rule ``start``; return the items of ``start`` (see module)."""
        actions, scan, filtered = self._actions, self._scan, self._filtered
        end_state = self._end_states[start]
        state = self._start_states[start]
        states = [state]
        begins = [0]  # per stacked state: the index in ``items`` of its symbol's first item
        items: list[Item] = []
        append = items.append
        pos, size = 0, len(text)
        at_end = False
        match: Any = None
        while True:
            if pos < size:
                match = scan[state](text, pos)
                if match is None:
                    raise Rejected(pos)
                kind = match.lastgroup
                pos = match.end()
                if kind is None:  # ignored text up to the end
                    continue
            else:
                kind, at_end = _END, True
            row = actions[state]
            while True:
                action = row.get(kind)
                if action is None:
                    raise Rejected(size if at_end else match.start(kind))
                shift, arg, rule = action
                if shift:
                    state = arg
                    states.append(state)
                    begins.append(len(items))
                    if kind not in filtered:
                        append((kind, match.group(kind), match.start(kind)))
                    break
                hook = hooks.get(rule)
                if arg == 1 and hook is None:  # a unit reduction: only the top state changes
                    state = actions[states[-2]][rule][1]
                    if at_end and state == end_state:
                        return items
                    states[-1] = state
                    row = actions[state]
                    continue
                if arg:
                    begin = begins[-arg]
                    del states[-arg:]
                    del begins[-arg:]
                else:
                    begin = len(items)
                if hook is not None:
                    spanned = items[begin:]
                    del items[begin:]
                    append((rule, hook(spanned), spanned[0][2] if spanned else pos))
                state = actions[states[-1]][rule][1]
                if at_end and state == end_state:
                    return items
                states.append(state)
                begins.append(begin)
                row = actions[state]


def _scanner_pattern(terminals: list[tuple[str, str]], ignore: frozenset[str]) -> str:
    """One regex for one state's lexer that skips the ignored text before the next token in the same match.

    Lark tries the state's terminals in order (ignored ones among them) at each position and takes the first
    that matches, skipping it if it is ignored. The same, in one pattern: a possessive loop takes an ignored
    terminal only where no terminal before it in lark's order matches, then the terminals that are not
    ignored follow as named alternatives in lark's order; ``\\Z`` ends it when only ignored text remains
    (``lastgroup`` is then None)."""
    skips: list[str] = []
    before: list[str] = []
    for name, regexp in terminals:
        if name in ignore:
            # the cheap test first: the guard runs only where ignored text starts
            guard = f"(?={regexp})(?!{'|'.join(before)})" if before else ""
            skips.append(f"{guard}(?:{regexp})")
        else:
            before.append(f"(?:{regexp})")
    alternatives = [f"(?P<{name}>{regexp})" for name, regexp in terminals if name not in ignore]
    alternatives.append(r"\Z")
    skip = f"(?:{'|'.join(skips)})*+" if skips else ""
    return f"{skip}(?:{'|'.join(alternatives)})"
