"""Parsing is re-entrant: threads parsing different texts at once (strict and lenient models, rule patterns)
get exactly what each parse gives when run alone."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from graphsurgeon.errors import ParamSyntaxError
from graphsurgeon.formats.emit_text import emit_param_text
from graphsurgeon.formats.param_text import parse_param_text
from graphsurgeon.rewrite.pattern_values import parse_pattern_lines

ROUNDS = 8


def _model(n_blocks: int, extra: str = "", bad_block: int = -1) -> str:
    """Input, then ``n_blocks`` Convolution -> ReLU pairs; ``extra`` is appended to every ReLU line and block
    ``bad_block`` gets a rule-pattern capture as a value."""
    lines = ["Input in0 0 1 x0 0=8 1=8 2=3"]
    for i in range(n_blocks):
        value = "%w" if i == bad_block else "16"
        lines.append(f"Convolution conv{i} 1 1 x{i} c{i} 0={value} 1=3 5=1 6=432 -23310=1,1.500000e-01")
        lines.append(f"ReLU relu{i} 1 1 c{i} x{i + 1} 0=1.000000e-02 {extra}".rstrip())
    return f"7767517\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n"


# every ReLU line carries three problems lenient mode records: an int overflow, a param id out of range and a
# rule-pattern capture used as a model value
LENIENT_TEXT = _model(150, extra="3=99999999999 40=1 5=%x")
STRICT_TEXT = _model(150)
BAD_TEXT = _model(150, bad_block=120)
PATTERN_TEXT = "\n".join(
    f"Convolution %conv{i} 1 1 %a{i} %b{i} 0=%out{i} 1=* 6=%w{i},* -23310=2,%lo{i},6.0\nReLU * 1 1 %b{i} *"
    for i in range(60)
)


@contextmanager
def _switch_often() -> Iterator[None]:
    """Make the interpreter switch threads every few microseconds so parses interleave closely."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _strict() -> Any:
    return emit_param_text(parse_param_text(STRICT_TEXT))


def _lenient() -> Any:
    graph = parse_param_text(LENIENT_TEXT, strict=False)
    return emit_param_text(graph), list(graph.issues)


def _pattern() -> Any:
    return parse_pattern_lines(PATTERN_TEXT, path="rules.yaml", first_line=10)


def _bad() -> Any:
    with pytest.raises(ParamSyntaxError) as info:
        parse_param_text(BAD_TEXT, path="bad.param")
    return str(info.value)


def _run_pairs(jobs: list[list[Callable[[], Any]]], expected: dict[Callable[[], Any], Any]) -> list[str]:
    """Run each job list in its own thread, ROUNDS times, all starting together; return every mismatch."""
    barrier = threading.Barrier(len(jobs))
    failures: list[str] = []

    def worker(fns: list[Callable[[], Any]]) -> None:
        barrier.wait()
        for _ in range(ROUNDS):
            for fn in fns:
                try:
                    got = fn()
                except BaseException as exc:  # a leaked flag turns into an unexpected error: record it
                    failures.append(f"{fn.__name__}: raised {exc!r}")
                    continue
                if got != expected[fn]:
                    failures.append(f"{fn.__name__}: differs from the sequential result")

    threads = [threading.Thread(target=worker, args=(fns,)) for fns in jobs]
    with _switch_often():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return failures


def test_the_inputs_exercise_every_kind_of_per_call_state() -> None:
    _, issues = _lenient()
    codes = {issue.code for issue in issues}
    assert {"int-overflow", "param-id", "pattern-value"} <= codes
    assert len(issues) == 3 * 150
    assert "bad.param:244:" in _bad() and "rule-pattern capture" in _bad()
    lines = _pattern()
    assert len(lines) == 120 and lines[-1].line == 120 and lines[0].params[1] != lines[1].params.get(1)


def test_concurrent_parses_match_sequential_ones() -> None:
    fns = [_strict, _lenient, _pattern, _bad]
    expected = {fn: fn() for fn in fns}
    failures = _run_pairs([[_strict, _pattern], [_lenient, _bad]], expected)
    failures += _run_pairs([[_pattern, _lenient], [_bad, _strict]], expected)
    assert not failures, f"{len(failures)} concurrent parses went wrong, e.g. {failures[:4]}"
