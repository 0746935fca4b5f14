"""Selectors: the model of a rule's ``match`` (type, name regex, params, producer and consumer), the layers
it picks, and, for ``--explain``, why each candidate did or did not match (the first test it failed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, model_validator

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.params import to_f32
from graphsurgeon.rewrite.rule_values import ParamValue
from graphsurgeon.rewrite.safe_regex import MAX_NAME, check_name_regex, name_automaton
from graphsurgeon.rewrite.strict import StrictModel


class ParamTest(StrictModel):
    """A predicate on one param, by name: exactly one of the comparisons."""

    eq: ParamValue | None = None
    ne: ParamValue | None = None
    lt: float | None = None
    le: float | None = None
    gt: float | None = None
    ge: float | None = None
    in_: list[ParamValue] | None = Field(default=None, alias="in")

    @model_validator(mode="after")
    def _one(self) -> ParamTest:
        given = [k for k, v in self.__dict__.items() if v is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of eq, ne, lt, le, gt, ge, in (got {given or 'none'})")
        return self


class Selector(StrictModel):
    """Which layers a rule looks at: type, name regex, params by name, and what feeds or reads them."""

    type: str | list[str] | None = None
    name: str | None = Field(
        default=None,
        description="a regular expression the whole layer name must match (a subset that matches in "
        "polynomial time: no backreferences, no quantifier over a quantifier or alternation, at most 3 "
        "unbounded quantifiers)",
    )

    @model_validator(mode="after")
    def _regex(self) -> Selector:
        if self.name is not None:
            check_name_regex(self.name)
        return self

    params: dict[
        str,
        Annotated[
            Annotated[ParamValue, Tag("value")] | Annotated[ParamTest, Tag("test")],
            Discriminator(lambda v: "test" if isinstance(v, dict | ParamTest) else "value"),
        ],
    ] = Field(default_factory=dict)
    producer: Selector | None = Field(default=None, description="the layer producing input 0")
    consumer: Selector | None = Field(default=None, description="some layer reading output 0")


@dataclass(frozen=True, slots=True)
class Verdict:
    layer: Layer
    matched: bool
    reason: str  # why not, or "matched"


def _same(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, list) or isinstance(actual, list | tuple):
        if not isinstance(wanted, list) or not isinstance(actual, list | tuple) or len(actual) != len(wanted):
            return False
        return all(_same(a, w) for a, w in zip(actual, wanted, strict=True))
    if isinstance(wanted, float) or isinstance(actual, float):
        try:
            return to_f32(float(actual)) == to_f32(float(wanted))
        except (TypeError, ValueError):
            return False
    return bool(actual == wanted)


def _param_ok(actual: Any, test: Any) -> bool:
    if not isinstance(test, ParamTest):
        return _same(actual, test)
    if test.eq is not None:
        return _same(actual, test.eq)
    if test.ne is not None:
        return not _same(actual, test.ne)
    if test.in_ is not None:
        return any(_same(actual, v) for v in test.in_)
    bounds = [("lt", test.lt, float.__lt__), ("le", test.le, float.__le__)]
    bounds += [("gt", test.gt, float.__gt__), ("ge", test.ge, float.__ge__)]
    for _, bound, cmp in bounds:
        if bound is not None:
            return isinstance(actual, int | float) and cmp(float(actual), float(bound))
    return False


def judge(layer: Layer, sel: Selector) -> str | None:
    """None when ``layer`` matches ``sel``, else the first reason it does not."""
    types = [sel.type] if isinstance(sel.type, str) else sel.type
    if types is not None and layer.type not in types:
        return f"type {layer.type} is not {' or '.join(types)}"
    if sel.name is not None and _name_match(sel.name, layer) is None:
        return f"name {layer.name!r} does not match /{sel.name}/"
    for name, test in sel.params.items():
        spec = layer.spec
        if spec is None or not spec.has_param(name):
            return f"{layer.type} has no param {name!r}"
        try:
            actual = layer.get(name)
        except GsurgError as err:
            return f"param {name} cannot be read: {err}"
        if not _param_ok(actual, test):
            return f"param {name} is {actual!r}, wanted {_describe(test)}"
    if sel.producer is not None:
        producer = layer.inputs[0].producer if layer.inputs else None
        if producer is None:
            return "input 0 has no producer"
        why = judge(producer, sel.producer)
        if why is not None:
            return f"producer {producer.name}: {why}"
    if sel.consumer is not None:
        readers = list(dict.fromkeys(layer.outputs[0].consumers)) if layer.outputs else []
        reasons = [judge(r, sel.consumer) for r in readers]
        if not any(r is None for r in reasons):
            return "no consumer of output 0 matches" + (f" ({reasons[0]})" if reasons else "")
    return None


def _name_match(pattern: str, layer: Layer) -> dict[str, str] | None:
    """The named groups of ``pattern`` matched against the whole name, or None; by the linear-time
    automaton (``safe_regex.name_automaton``), never by backtracking. A name longer than ncnn allows is an
    error."""
    if len(layer.name) > MAX_NAME:
        raise GsurgError(
            f"layer {layer.name[:40]}… ({layer.type}): a name of {len(layer.name)} characters; ncnn reads at "
            f"most {MAX_NAME - 1}, and name regexes match names of at most {MAX_NAME}"
        )
    automaton = name_automaton(pattern)
    if not automaton.names:
        return {} if automaton.fullmatch(layer.name) else None
    return automaton.groups(layer.name)


def _describe(test: Any) -> str:
    if isinstance(test, ParamTest):
        key, value = next((k, v) for k, v in test.__dict__.items() if v is not None)
        return f"{key.rstrip('_')} {value!r}"
    return repr(test)


def find(graph: Graph, sel: Selector) -> list[Layer]:
    return [layer for layer in graph.layers if judge(layer, sel) is None]


def explain(graph: Graph, sel: Selector) -> list[Verdict]:
    """Every layer with its verdict (what ``--explain RULE`` prints)."""
    out = []
    for layer in graph.layers:
        why = judge(layer, sel)
        out.append(Verdict(layer, why is None, why or "matched"))
    return out


def best_partial(graph: Graph, sel: Selector) -> Verdict | None:
    """The non-matching layer that got furthest (same type first), for a failed ``expect``."""
    verdicts = [v for v in explain(graph, sel) if not v.matched]
    if not verdicts:
        return None
    typed = [v for v in verdicts if not v.reason.startswith("type ")]
    named = [v for v in typed if not v.reason.startswith("name ")]
    return (named or typed or verdicts)[0]


def captures(layer: Layer, sel: Selector) -> dict[str, str]:
    """Named groups of the selector's name regex, e.g. ``layers\\.(?P<i>\\d+)\\.`` gives ``{"i": "3"}``."""
    if sel.name is None:
        return {}
    return _name_match(sel.name, layer) or {}
