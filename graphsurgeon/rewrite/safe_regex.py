"""The regular expressions a rule file may use to select layers by name: a subset Python's backtracking
``re`` matches in time polynomial in the name, checked when the rule file loads.

Python's ``re`` has no timeout, and ``(a+)+$`` takes minutes on a 35-character name. Rather than a
different engine (a new dependency) or a timer around every match, a name regex is held to rules that keep
backtracking small, and layer names to ncnn's own limit:

* no backreference (``\\1``, ``(?P=x)``, ``(?(1)…)``): they make matching NP-hard;
* no quantifier over something that itself holds a quantifier or an alternation (``(a+)+``,
  ``(\\.\\d+)*``, ``(q|k)+``): these are what backtracks exponentially; write a character class
  (``[qk]+``, ``[.\\d]*``) or spell the repetitions out;
* at most ``MAX_UNBOUNDED`` unbounded quantifiers (``*``, ``+``, ``{n,}``, or a bound above
  ``LARGE_REPEAT``): adjacent ones make matching a name of ``n`` characters take up to ``n**k`` steps;
* at most ``MAX_PATTERN`` characters;
* a layer name is matched only when it has at most ``MAX_NAME`` characters (ncnn reads at most 255 into a
  layer name); a longer one is an error naming the layer.

These rules came first, when ``re`` ran the selectors; they still say what a name regex may be. Matching
no longer backtracks at all: selectors run ``name_automaton`` (linear in the name, whatever the pattern),
since sixty optional characters then a literal passed every rule above and backtracked for ever.
"""

from __future__ import annotations

import functools
import re
import re._constants as sre_constants  # type: ignore[import-not-found]
import re._parser as sre_parser  # type: ignore[import-not-found]
from typing import Any

from graphsurgeon.rewrite.name_automaton import NameAutomaton, compile_name

MAX_PATTERN = 500
MAX_UNBOUNDED = 3
LARGE_REPEAT = 64
MAX_NAME = 256

_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT}
_BACKREFS = {sre_constants.GROUPREF, sre_constants.GROUPREF_EXISTS, sre_constants.GROUPREF_IGNORE}


def _children(op: Any, av: Any) -> list[Any]:
    """The sub-patterns inside one parsed item."""
    if op in _REPEATS:
        return [av[2]]
    if op == sre_constants.SUBPATTERN:
        return [av[3]]
    if op == sre_constants.BRANCH:
        return list(av[1])
    if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
        return [av[1]]
    if op == sre_constants.ATOMIC_GROUP:
        return [av]
    return []


def _holds_repeat_or_branch(sub: Any) -> bool:
    for op, av in sub:
        if (op in _REPEATS and av[1] > 1) or op == sre_constants.BRANCH:
            return True
        if any(_holds_repeat_or_branch(child) for child in _children(op, av)):
            return True
    return False


def check_name_regex(pattern: str) -> re.Pattern[str]:
    """The compiled ``pattern`` when it is within the subset (see the module docstring); else ValueError
    saying which rule it breaks."""
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"a name regex is at most {MAX_PATTERN} characters (this one has {len(pattern)})")
    try:
        compiled = re.compile(pattern)
        parsed = sre_parser.parse(pattern)
    except (re.error, RecursionError, OverflowError) as err:
        raise ValueError(f"name {pattern!r} is not a valid regular expression: {err}") from None
    unbounded = 0
    stack = [parsed]
    while stack:
        for op, av in stack.pop():
            if op in _BACKREFS:
                raise ValueError(f"name {pattern!r}: backreferences are not allowed in a name regex")
            if op in _REPEATS and av[1] > 1 and _holds_repeat_or_branch(av[2]):
                raise ValueError(
                    f"name {pattern!r}: a quantifier over a group that holds a quantifier or an alternation "
                    "(like (a+)+ or (q|k)+) can take exponential time; use a character class such as [qk]+"
                )
            if op in _REPEATS and (av[1] == sre_constants.MAXREPEAT or av[1] > LARGE_REPEAT):
                unbounded += 1
            stack.extend(_children(op, av))
    if unbounded > MAX_UNBOUNDED:
        raise ValueError(
            f"name {pattern!r}: at most {MAX_UNBOUNDED} unbounded quantifiers (*, +, {{n,}}) in a name regex "
            f"(it has {unbounded})"
        )
    name_automaton(pattern)  # what the matcher cannot take is refused here, where the error names the line
    return compiled


@functools.lru_cache(maxsize=256)
def name_automaton(pattern: str) -> NameAutomaton:
    """The linear-time matcher selectors use for ``pattern`` (``name_automaton``), built once per pattern."""
    return compile_name(pattern)
