"""The fast driver runs lark's own automaton for the .param grammar: on any text it accepts exactly what
lark's parser accepts, with the same tokens (type, text, offset) in every param and layer, and rejects
exactly what lark rejects. The oracle is lark itself, building its parse tree from the same grammar file."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedInput

from graphsurgeon.formats.lalr_fast import FastLALR, Item, Rejected
from graphsurgeon.formats.param_literals import Reporter
from graphsurgeon.resources import resource_dir
from tests.conftest import CORPUS_PARAMS, corpus_id

GRAMMAR = (resource_dir("grammars") / "ncnn_param.lark").read_text(encoding="utf-8")
LARK = Lark(GRAMMAR, parser="lalr", lexer="contextual", maybe_placeholders=False, start=["start", "pattern"])
FAST = FastLALR(LARK)
HOOKED = ("param", "layer")


def lark_view(text: str, start: str) -> Any:
    """Lark's parse tree as nested lists: a token is (type, text, offset), a param or layer is (rule, [...])
    and the rules lark inlines or aliases (value alternatives) give their children in place."""

    def flat(node: Any) -> list[Any]:
        if isinstance(node, Token):
            return [(node.type, str(node), node.start_pos)]
        assert isinstance(node, Tree)
        children = [part for child in node.children for part in flat(child)]
        if node.data in HOOKED:
            return [(str(node.data), children)]
        return children

    try:
        tree = LARK.parse(text, start=start)
    except UnexpectedInput:
        return "rejected"
    return flat(tree)


def fast_view(text: str, start: str) -> Any:
    def keep(items: list[Item]) -> list[Any]:
        return [item if item[0] not in HOOKED else (item[0], item[1]) for item in items]

    hooks = {rule: keep for rule in HOOKED}
    try:
        return keep(FAST.parse(text, start, hooks))
    except Rejected:
        return "rejected"


def same_as_lark(text: str) -> None:
    for start in ("start", "pattern"):
        assert fast_view(text, start) == lark_view(text, start), (start, text)


@pytest.mark.parametrize("path", CORPUS_PARAMS, ids=corpus_id)
def test_every_corpus_param_parses_to_lark_s_tokens(path: Any) -> None:
    text = path.read_text(encoding="utf-8")
    assert fast_view(text, "start") == lark_view(text, "start") != "rejected"


EDGE_CASES = [
    "",
    "\n",
    "7767517\n1 1\nInput in 0 1 x\n",
    "7767517\n1 1\nInput in 0 1 x",  # no final newline
    "7767517\n1 1\nInput in 0 1 x   ",  # blanks up to the end of the text
    "7767517\n1 1\nInput in 0 1 x  \t \n  \n\t",  # blanks before a newline belong to the newline token
    "7767517\r\n1\t1\r\n\r\nInput\tin\t0 1 x\t0=4\r\n",
    "7767517\r1 1\rInput in 0 1 x\r",  # old Mac line ends: lark counts no line for a bare CR
    "\f7767517\v\n1 1\nInput in 0 1 x 0=1\f1=2.5\v2=abc\n",
    "  7767517\n1 1\nInput in 0 1 x\n",
    "\n\n7767517\n\n1 1\n\nInput in 0 1 x\n\n\n",
    "7767517 1 1 Input in 0 1 x",  # the header on one line, then a layer on the same line: rejected
    "7767517\n1 1\nInput in 0 1 x 0= 1\n",  # a blank after '='
    "7767517\n1 1\nInput in 0 1 x 0=\n",
    "7767517\n1 1\nInput in 0 1 x 0=1x\n",
    '7767517\n1 1\nInput in 0 1 x 0=1,2, 1=1, 2=-23300 3="a b" 4=%c 5=* 6=1,%x,* -23307=2,1,2\n',
    "7767517\n1 1\nInput in 0 1 x\n0=1\n",  # params on a line of their own
    "7767517\n1 1\nInput in 0 1 x\x00\n",
    "7767517\n2 2\nInput in 0 1 x\nReLU r 1 1 x y 0=99999999999 1=2 =5\n",
    "Convolution %c 1 1 %x * 0=%out 1=* 6=%w,*\nReLU * 1 1 * %y\n",  # a rule pattern
    "ReLU %r 1 1 * *",  # a one-line pattern, no final newline
    "ReLU r 1 1 x y 0=1",
    "%magic\n1 1\n",
    "7767517\n1 1\nIn=put in 0 1 x\n",
    "7767517\n1 1\n+1 -2 0 1 x\n",
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_parse_as_lark_parses_them(text: str) -> None:
    same_as_lark(text)


# pieces of .param text, valid and not, that meet at every kind of boundary when strung together
PIECES = [
    " ", "  ", "\t", "\f", "\v", "\n", "\r\n", "\r", " \n", "\t\r\n ",
    "7767517", "1", "2", "0", "-1", "+3", "12", "3.5", ".5", "1e5", "-2.5E-3", "1.",
    "Input", "ReLU", "in0", "x", "y_1", "a.b", "%x", "%out", "*", "#", "=", "==", "\x00", "é",
    "0=", "1=", "-23310=", "31=", "99=", "0=1", "1=2.5", "2=abc", "3=1,2", "4=1,", "5=1,2.5,", '6="a b"',
    '"q"', '7="', "8=%c", "9=*", "10=1,%x,*", "11=1x", "12=,", ",", "1,2",
]  # fmt: skip
HEADER = "7767517\n3 4\n"


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.lists(st.sampled_from(PIECES), max_size=40))
def test_random_texts_are_accepted_and_rejected_as_lark_does(with_header: bool, pieces: list[str]) -> None:
    same_as_lark((HEADER if with_header else "") + "".join(pieces))


LINE = st.builds(
    lambda kind, name, blobs, params: f"{kind} {name} 1 1 {blobs} {params}",
    st.sampled_from(["ReLU", "Convolution", "Split", "%t", "*"]),
    st.sampled_from(["r", "conv_1", "%n", "*", "1"]),
    st.sampled_from(["x y", "%a %b", "* *", "x\ty", "x"]),
    st.lists(st.sampled_from([p for p in PIECES if "=" in p and not p.endswith("=")]), max_size=5).map(
        " ".join
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["", HEADER]),
    st.lists(LINE, min_size=1, max_size=6),
    st.sampled_from(["", "\n", " ", "\n\n"]),
    st.lists(st.tuples(st.integers(0, 400), st.sampled_from(PIECES))),
)
def test_mostly_valid_texts_with_edits_parse_as_lark_parses_them(
    header: str, lines: list[str], end: str, edits: list[tuple[int, str]]
) -> None:
    """Models and rule patterns (no header), each with or without a final newline, with a few edits."""
    text = header + "\n".join(lines) + end
    for where, piece in edits[:3]:  # a few insertions at random places
        where %= len(text) + 1
        text = text[:where] + piece + text[where:]
    same_as_lark(text)


def test_each_state_s_scanner_finds_lark_s_next_token_everywhere() -> None:
    """At every offset of varied texts and in every parser state, the one-match scanner (ignored text
    folded in) finds the token lark's own loop finds: the state's terminals tried in lark's order, ignored
    ones skipped."""
    lexer = LARK.parser.lexer
    ignore = set(LARK.lexer_conf.ignore)
    texts = [*EDGE_CASES, " \t x \n  ", "\t\t\n", "  0=1", " \f\v 1,2,", '  "a b" ', "   "]
    checked = 0
    for state, scan in FAST._scan.items():
        terminals = lexer.lexers[state].terminals
        lark_order = re.compile("|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in terminals))
        for text in texts:
            for pos in range(len(text)):
                expected: tuple[str, int, int] | None = None
                at = pos
                while at < len(text):
                    m = lark_order.match(text, at)
                    if m is None:
                        break
                    if m.lastgroup in ignore:
                        at = m.end()
                        continue
                    expected = (str(m.lastgroup), m.start(), m.end())
                    break
                else:
                    expected = ("<end>", len(text), len(text))
                got = scan(text, pos)
                if got is None:
                    found = None
                elif got.lastgroup is None:
                    found = ("<end>", got.end(), got.end())
                else:
                    found = (got.lastgroup, got.start(got.lastgroup), got.end())
                assert found == expected, (state, text, pos)
                checked += 1
    assert checked > 10_000


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(LINE, min_size=1, max_size=8),
    st.lists(st.sampled_from(["\n", "\r\n", "\r", "\n\n", " \n\t"]), min_size=8, max_size=8),
    st.randoms(use_true_random=False),
)
def test_offsets_become_lark_s_line_and_column_in_any_order(
    lines: list[str], ends: list[str], rnd: Any
) -> None:
    """The Reporter turns an offset into the line and column lark gives the token there (a bare CR ends no
    line for lark), whichever order the offsets are asked for in."""
    text = HEADER + "".join(line + end for line, end in zip(lines, ends, strict=False))
    try:
        tree = LARK.parse(text, start="start")
    except UnexpectedInput:
        assume(False)
    tokens = list(tree.scan_values(lambda v: isinstance(v, Token)))
    rnd.shuffle(tokens)
    rep = Reporter(text)
    for tok in tokens:
        assert tok.start_pos is not None, (tok, text)  # lark sets it on every token its lexer makes
        assert rep.where(tok.start_pos) == (tok.line, tok.column), (tok, text)
