"""Name regexes matched in time linear in the name: an automaton built from the pattern, not backtracking.

``safe_regex`` keeps out what makes Python's backtracking ``re`` exponential in the obvious ways (nested
quantifiers, backreferences), but not all of it: sixty optional characters then a literal backtracks for
ever on a 26-character name. So a selector's name pattern is not run by ``re`` at all. It is parsed (by
``re``'s own parser, so the syntax is Python's), compiled to a Thompson NFA, and matched against the whole
name by a DFA built lazily from it: each name character is one table lookup once the table is warm, and
at most one pass over the NFA (``len(program)`` steps) when not. The table is bounded (``MAX_STATES``;
past it, it starts again empty), so the work of a match is at most ``len(name) * len(program)`` steps
whatever the pattern, and the program is bounded too (``MAX_PROGRAM`` instructions, counted as bounded
repeats expand).

Named groups (a rule's ``{name}`` captures) are read, on a name the DFA accepted, by a Pike VM over the
same program: the threads kept in priority order give the groups Python's leftmost-first backtracking
would (greedy and lazy quantifiers alike), in the same linear bound.

What the automaton does not take is refused when the rule file loads, naming the construct: lookaround,
``\\b``/``\\B``, atomic groups and possessive quantifiers, inline flags. Layer names hold no whitespace
(the .param format splits on it), so ``$`` is the end of the name.
"""

from __future__ import annotations

import re._constants as c  # type: ignore[import-not-found]
import re._parser as sre_parser  # type: ignore[import-not-found]
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_PROGRAM = 20_000
MAX_STATES = 4_096

Pred = Callable[[str], bool]

# instruction kinds
_CHAR, _SPLIT, _JMP, _SAVE, _BOL, _EOL, _MATCH = range(7)


@dataclass
class _Ins:
    kind: int
    pred: Pred | None = None
    x: int = 0
    y: int = 0


def _category(cat: Any) -> Pred:
    table: dict[Any, Pred] = {
        c.CATEGORY_DIGIT: str.isdecimal,
        c.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
        c.CATEGORY_SPACE: str.isspace,
        c.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
        c.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
        c.CATEGORY_NOT_WORD: lambda ch: not (ch.isalnum() or ch == "_"),
    }
    if cat not in table:
        raise ValueError(f"the character category {cat} is not supported in a name regex")
    return table[cat]


def _equal(ch: str) -> Pred:
    return lambda x: x == ch


def _unequal(ch: str) -> Pred:
    return lambda x: x != ch


def _set_pred(items: list[Any]) -> Pred:
    negate = False
    chars: set[str] = set()
    ranges: list[tuple[int, int]] = []
    cats: list[Pred] = []
    for op, av in items:
        if op == c.NEGATE:
            negate = True
        elif op == c.LITERAL:
            chars.add(chr(av))
        elif op == c.RANGE:
            ranges.append(av)
        elif op == c.CATEGORY:
            cats.append(_category(av))
        else:
            raise ValueError(f"{op} inside a character class is not supported in a name regex")

    def inside(ch: str) -> bool:
        code = ord(ch)
        return ch in chars or any(lo <= code <= hi for lo, hi in ranges) or any(p(ch) for p in cats)

    return (lambda ch: not inside(ch)) if negate else inside


class _Compiler:
    def __init__(self) -> None:
        self.prog: list[_Ins] = []

    def emit(self, ins: _Ins) -> int:
        if len(self.prog) >= MAX_PROGRAM:
            raise ValueError(
                f"the name regex expands to more than {MAX_PROGRAM} automaton steps (its bounded repeats)"
            )
        self.prog.append(ins)
        return len(self.prog) - 1

    def seq(self, items: Any) -> None:
        for op, av in items:
            self.item(op, av)

    def item(self, op: Any, av: Any) -> None:
        if op == c.LITERAL:
            self.emit(_Ins(_CHAR, _equal(chr(av))))
        elif op == c.NOT_LITERAL:
            self.emit(_Ins(_CHAR, _unequal(chr(av))))
        elif op == c.ANY:
            self.emit(_Ins(_CHAR, lambda x: x != "\n"))
        elif op == c.IN:
            self.emit(_Ins(_CHAR, _set_pred(av)))
        elif op == c.BRANCH:
            self.branch(av[1])
        elif op == c.SUBPATTERN:
            group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                raise ValueError("inline flags such as (?i:...) are not supported in a name regex")
            if group is not None:
                self.emit(_Ins(_SAVE, x=2 * group))
            self.seq(sub)
            if group is not None:
                self.emit(_Ins(_SAVE, x=2 * group + 1))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            self.repeat(av[0], av[1], av[2], greedy=op == c.MAX_REPEAT)
        elif op == c.AT:
            if av in (c.AT_BEGINNING, c.AT_BEGINNING_STRING):
                self.emit(_Ins(_BOL))
            elif av in (c.AT_END, c.AT_END_STRING):
                self.emit(_Ins(_EOL))
            else:
                raise ValueError(f"the anchor {av} (\\b, \\B) is not supported in a name regex")
        else:
            raise ValueError(
                f"{op} (lookaround, atomic group, possessive quantifier) is not supported in a name regex"
            )

    def branch(self, alternatives: list[Any]) -> None:
        jumps = []
        for k, alt in enumerate(alternatives):
            if k < len(alternatives) - 1:
                split = self.emit(_Ins(_SPLIT))
                self.prog[split].x = split + 1
                self.seq(alt)
                jumps.append(self.emit(_Ins(_JMP)))
                self.prog[split].y = len(self.prog)
            else:
                self.seq(alt)
        for j in jumps:
            self.prog[j].x = len(self.prog)

    def repeat(self, low: int, high: int, sub: Any, *, greedy: bool) -> None:
        for _ in range(low):
            self.seq(sub)
        if high == c.MAXREPEAT:
            top = self.emit(_Ins(_SPLIT))
            self.seq(sub)
            self.emit(_Ins(_JMP, x=top))
            body, out = top + 1, len(self.prog)
            self.prog[top].x, self.prog[top].y = (body, out) if greedy else (out, body)
            return
        splits = []
        for _ in range(high - low):
            split = self.emit(_Ins(_SPLIT))
            splits.append(split)
            self.seq(sub)
        out = len(self.prog)
        for split in splits:
            self.prog[split].x, self.prog[split].y = (split + 1, out) if greedy else (out, split + 1)


@dataclass
class NameAutomaton:
    """A compiled name pattern: ``fullmatch`` (bool) and ``groups`` (named captures)."""

    prog: list[_Ins]
    names: dict[str, int]
    _moves: dict[tuple[frozenset[int], str], frozenset[int]] = field(default_factory=dict)
    _start: frozenset[int] | None = None

    def _closure(self, pcs: list[int], at_start: bool) -> frozenset[int]:
        """The char, EOL and MATCH instructions reachable from ``pcs`` without consuming a character."""
        out: set[int] = set()
        seen: set[int] = set()
        stack = list(pcs)
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            ins = self.prog[pc]
            if ins.kind == _SPLIT:
                stack += [ins.x, ins.y]
            elif ins.kind == _JMP:
                stack.append(ins.x)
            elif ins.kind == _SAVE:
                stack.append(pc + 1)
            elif ins.kind == _BOL:
                if at_start:
                    stack.append(pc + 1)
            else:
                out.add(pc)
        return frozenset(out)

    def _accepts(self, state: frozenset[int]) -> bool:
        """Whether a state reached at the end of the name accepts (through any ``$`` still pending)."""
        pending = set(state)
        while True:
            if any(self.prog[pc].kind == _MATCH for pc in pending):
                return True
            more = self._closure([pc + 1 for pc in pending if self.prog[pc].kind == _EOL], at_start=False)
            if more <= pending:
                return False
            pending |= more

    def fullmatch(self, name: str) -> bool:
        """Whether the whole of ``name`` matches; at most ``len(name) * len(prog)`` steps."""
        if self._start is None:
            self._start = self._closure([0], at_start=True)
        state = self._start
        for ch in name:
            nxt = self._moves.get((state, ch))
            if nxt is None:
                step = [pc + 1 for pc in sorted(state) if self._consumes(pc, ch)]
                nxt = self._closure(step, at_start=False)
                if len(self._moves) >= MAX_STATES:  # a bounded table: start again (a miss is one NFA pass)
                    self._moves.clear()
                self._moves[(state, ch)] = nxt
            state = nxt
            if not state:
                return False
        return self._accepts(state)

    def _consumes(self, pc: int, ch: str) -> bool:
        ins = self.prog[pc]
        return ins.kind == _CHAR and ins.pred is not None and ins.pred(ch)

    def groups(self, name: str) -> dict[str, str] | None:
        """The named groups of the match Python's ``re.fullmatch`` finds (leftmost-first), or None."""
        if not self.fullmatch(name):
            return None
        slots_n = 2 * (max(self.names.values(), default=0) + 1)
        threads = self._add([], 0, (None,) * slots_n, name, 0, set())
        for pos, ch in enumerate(name):
            nxt: list[tuple[int, tuple[Any, ...]]] = []
            seen: set[int] = set()
            for pc, slots in threads:
                if self._consumes(pc, ch):
                    nxt = self._add(nxt, pc + 1, slots, name, pos + 1, seen)
            threads = nxt
        for pc, slots in threads:
            if self.prog[pc].kind == _MATCH:
                out = {}
                for group_name, g in self.names.items():
                    start, end = slots[2 * g], slots[2 * g + 1]
                    if start is not None and end is not None:
                        out[group_name] = name[start:end]
                return out
        return None  # unreachable when fullmatch said yes

    def _add(
        self,
        threads: list[tuple[int, tuple[Any, ...]]],
        pc: int,
        slots: tuple[Any, ...],
        name: str,
        pos: int,
        seen: set[int],
    ) -> list[tuple[int, tuple[Any, ...]]]:
        """Follow the empty steps from ``pc`` in priority order (a Pike VM's addthread), iteratively."""
        stack: list[tuple[int, tuple[Any, ...]]] = [(pc, slots)]
        while stack:
            pc, slots = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            ins = self.prog[pc]
            if ins.kind == _SPLIT:
                stack += [(ins.y, slots), (ins.x, slots)]  # x first: it is popped first
            elif ins.kind == _JMP:
                stack.append((ins.x, slots))
            elif ins.kind == _SAVE:
                stack.append((pc + 1, (*slots[: ins.x], pos, *slots[ins.x + 1 :])))
            elif ins.kind == _BOL:
                if pos == 0:
                    stack.append((pc + 1, slots))
            elif ins.kind == _EOL:
                if pos == len(name):
                    stack.append((pc + 1, slots))
            else:
                threads.append((pc, slots))
        return threads


def compile_name(pattern: str) -> NameAutomaton:
    """The automaton of ``pattern`` (already checked by ``safe_regex``); ValueError naming what it cannot
    take."""
    parsed = sre_parser.parse(pattern)
    if parsed.state.flags & ~(c.SRE_FLAG_UNICODE):
        raise ValueError(f"name {pattern!r}: inline flags such as (?i) are not supported in a name regex")
    comp = _Compiler()
    try:
        comp.seq(parsed)
    except ValueError as err:
        raise ValueError(f"name {pattern!r}: {err}") from None
    comp.emit(_Ins(_MATCH))
    return NameAutomaton(comp.prog, dict(parsed.state.groupdict))
