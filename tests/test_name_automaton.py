"""Selector name regexes run by a linear-time automaton (hardening, round three, item 3): sixty optional
characters then a literal passed every safe_regex rule and made ``re`` backtrack for ever on a 26-character
name. The oracle for what a pattern means is Python's ``re.fullmatch`` itself, on patterns and names small
enough for it to finish: the automaton must agree on every match and every named group."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsurgeon.cli import main
from graphsurgeon.rewrite.name_automaton import MAX_PROGRAM, compile_name
from graphsurgeon.rewrite.safe_regex import check_name_regex
from tests.conftest import REPO

ATOMS = ["a", "b", "_", r"\.", ".", "[ab]", "[^a]", r"\d", r"\w", "[0-9_]"]


@st.composite
def patterns(draw: st.DrawFn) -> str:
    """Patterns within the subset: atoms, optional/bounded/unbounded quantifiers (greedy or lazy) on atoms,
    alternations and named groups of plain sequences, anchors."""
    parts = []
    groups = 0
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["atom", "quant", "alt", "group"]))
        atom = draw(st.sampled_from(ATOMS))
        if kind == "quant":
            q = draw(st.sampled_from(["?", "*", "+", "{2}", "{1,3}", "{0,2}"]))
            lazy = "?" if draw(st.booleans()) and q != "{2}" else ""
            parts.append(atom + q + lazy)
        elif kind == "alt":
            parts.append(f"(?:{atom}|{draw(st.sampled_from(ATOMS))}{draw(st.sampled_from(ATOMS))})")
        elif kind == "group":
            groups += 1
            inner = atom + draw(st.sampled_from(["", "*", "+?", "?"]))
            parts.append(f"(?P<g{groups}>{inner})")
        else:
            parts.append(atom)
    body = "".join(parts)
    return ("^" if draw(st.booleans()) else "") + body + ("$" if draw(st.booleans()) else "")


@settings(max_examples=400, deadline=None)
@given(patterns(), st.lists(st.text(alphabet="ab_.1", max_size=7), min_size=1, max_size=6))
def test_the_automaton_agrees_with_re_on_matches_and_groups(pattern: str, names: list[str]) -> None:
    automaton = compile_name(pattern)
    for name in names:
        expected = re.fullmatch(pattern, name)
        assert automaton.fullmatch(name) is (expected is not None), (pattern, name)
        got = automaton.groups(name)
        if expected is None:
            assert got is None
        else:
            assert got == {k: v for k, v in expected.groupdict().items() if v is not None}, (pattern, name)


def test_the_probes_pattern_answers_at_once() -> None:
    """The probe's case: it passes the subset's rules, and ``re`` would not finish on it."""
    pattern = "a?" * 60 + "b"
    check_name_regex(pattern)
    automaton = compile_name(pattern)
    start = time.monotonic()
    assert not automaton.fullmatch("a" * 26)
    assert automaton.fullmatch("a" * 26 + "b")
    assert automaton.groups("a" * 26) is None
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        ("(?=a)a", "lookaround"),
        (r"a\b", r"\b"),
        ("(?i)a", "inline flags"),
        ("(?>a)", "atomic group"),
        ("a*+", "possessive"),
    ],
)
def test_what_the_automaton_cannot_take_is_refused_at_load(pattern: str, what: str) -> None:
    with pytest.raises(ValueError, match=re.escape(what)):
        check_name_regex(pattern)


def test_the_program_is_bounded() -> None:
    """safe_regex's rules (no nesting, 500 characters) keep a program under ~9,000 steps; the automaton's own
    bound holds whatever pattern reaches it."""
    with pytest.raises(ValueError, match=f"more than {MAX_PROGRAM}"):
        compile_name("(?:(?:(?:a{60}){60}){60})")


def test_the_probes_command_finishes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``rules/axis-from-torch.yaml --set layers=…`` with sixty optional characters then a literal, over a
    model of Softmax layers with 25-character names: the selector answers at once (none matches)."""
    layers = "".join(f"Softmax attention_softmax_{i:03d} 1 1 b{i} b{i + 1}\n" for i in range(40))
    param = tmp_path / "m.param"
    param.write_text(f"7767517\n41 41\nInput in 0 1 b0\n{layers}")
    start = time.monotonic()
    argv = ["apply", str(REPO / "rules" / "axis-from-torch.yaml"), str(param), "--dry-run", "-q"]
    assert main([*argv, "--set", "layers=" + ".?" * 60 + "Z"]) == 0
    assert time.monotonic() - start < 20
