"""Running a graph's rules: each rule to a fixed point (every layer it matches, once, until no new match
appears, within an iteration cap), its ``expect`` checked against the layers it matched, optional
re-lint after every rule (``--strict``), and a provenance record of which rule touched which layer."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from graphsurgeon.check.findings import Finding, Level
from graphsurgeon.check.lint import lint_graph
from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.passes import (
    extract_subgraph,
    insert_splits,
    merge_chained_splits,
    remove_dead_layers,
    toposort,
)
from graphsurgeon.rewrite.actions import ActionContext, ActionModel
from graphsurgeon.rewrite.interface import declared_names
from graphsurgeon.rewrite.pattern import Pattern, explain_pattern, find_pattern
from graphsurgeon.rewrite.pattern import best_partial as pattern_best_partial
from graphsurgeon.rewrite.rulefile import GraphSpec, PassStep, PatternSpec, Rule, Selector
from graphsurgeon.rewrite.select import best_partial, captures, explain, find

MAX_ITERATIONS = 100


class RuleActionError(GsurgError):
    """An action that could not be applied; the message starts with the rule's name (exit 2)."""


def _act(graph: Graph, layer: Layer, action: ActionModel, ctx: ActionContext, rule: str) -> str:
    try:
        return action.run(graph, layer, ctx)
    except RuleFailed:
        raise
    except GsurgError as err:
        raise RuleActionError(f"rule {rule}: {err}") from None


class RuleFailed(GsurgError):
    """A rule whose expectation failed, that did not converge, or that broke an invariant (exit 1)."""

    exit_code = 1


@dataclass
class RuleOutcome:
    rule: str
    matches: int
    iterations: int
    skipped: bool = False  # its `when` was false


@dataclass
class ApplyReport:
    outcomes: list[RuleOutcome] = field(default_factory=list)
    provenance: dict[str, list[str]] = field(default_factory=dict)  # layer name -> "rule: what it did"
    types_before: Counter[str] = field(default_factory=Counter)
    types_after: Counter[str] = field(default_factory=Counter)
    pinned: set[tuple[int, str]] = field(default_factory=set)  # (id(layer), slot) given a storage by a rule
    held: list[Layer] = field(default_factory=list)  # keeps pinned layers alive, so their ids stay unique


def _errors(findings: list[Finding]) -> set[tuple[str, str | None, str]]:
    return {(f.check, f.layer, f.message) for f in findings if f.level is Level.ERROR}


@dataclass
class _Match:
    layers: list[Layer]  # every layer matched; actions act on layers[0] unless they name a capture
    captures: dict[str, Any]  # captured values (blob and layer names, param values)
    targets: dict[str, Layer]  # layers an action may name with `layer:`


def _selector_matches(graph: Graph, selector: Selector) -> list[_Match]:
    out = []
    for layer in find(graph, selector):
        out.append(_Match([layer], dict(captures(layer, selector)), {layer.name: layer}))
    return out


def _pattern_matches(graph: Graph, pattern: Pattern) -> list[_Match]:
    out = []
    for m in find_pattern(graph, pattern):
        targets = {
            line.name[1:]: layer
            for line, layer in zip(pattern.lines, m.layers, strict=True)
            if line.name.startswith("%")
        }
        out.append(_Match(list(m.layers), dict(m.captures), targets))
    return out


def run_rule(
    graph: Graph,
    rule: Rule,
    interface: set[str],
    report: ApplyReport,
    checkpoints: dict[str, Any] | None = None,
    variables: dict[str, Any] | None = None,
) -> RuleOutcome:
    """Apply the rule to every match, once, until no new match appears (within MAX_ITERATIONS), then check
    ``expect`` against the number of matches. For a pattern rule an action acts on the layer its ``layer``
    capture names (default: the layer matching the first pattern line). Matches are numbered in the order
    they are applied (``{match}`` in per-match templates)."""
    spec = rule.match
    if isinstance(spec, PatternSpec):
        pattern = spec.compiled

        def matches() -> list[_Match]:
            return _pattern_matches(graph, pattern)

        def closest() -> str | None:
            return pattern_best_partial(graph, pattern)

        unit = "time(s)"
    else:
        selector = spec
        if any(action.layer is not None for action in rule.do):
            raise RuleFailed(
                f"rule {rule.name}: `layer` names a pattern capture, but this rule matches a selector"
            )

        def matches() -> list[_Match]:
            return _selector_matches(graph, selector)

        def closest() -> str | None:
            partial = best_partial(graph, selector)
            return f"layer {partial.layer.name} ({partial.reason})" if partial else None

        unit = "layer(s)"
    seen: set[tuple[int, ...]] = set()
    held: list[Layer] = []  # keeps matched layers alive, so their ids are never reused by new ones
    iterations = 0
    while True:
        fresh = [m for m in matches() if tuple(id(x) for x in m.layers) not in seen]
        if not fresh:
            break
        iterations += 1
        if iterations > MAX_ITERATIONS:
            raise RuleFailed(f"rule {rule.name}: did not converge after {MAX_ITERATIONS} iterations")
        for match in fresh:
            seen.add(tuple(id(x) for x in match.layers))
            held.extend(match.layers)
            ordinal = len(seen) - 1
            _apply_match(graph, rule, match, interface, report, checkpoints or {}, variables or {}, ordinal)
    matched = len(seen)
    if not rule.expect.allows(matched):
        miss = closest() if matched < (rule.expect.count or rule.expect.min or 0) else None
        hint = f"; closest miss: {miss}" if miss else ""
        raise RuleFailed(
            f"rule {rule.name}: matched {matched} {unit}, expected {rule.expect.describe()}{hint}"
        )
    return RuleOutcome(rule.name, matched, iterations)


def _apply_match(
    graph: Graph,
    rule: Rule,
    match: _Match,
    interface: set[str],
    report: ApplyReport,
    checkpoints: dict[str, Any],
    variables: dict[str, Any],
    ordinal: int,
) -> None:
    ctx = ActionContext(
        interface,
        {k: str(v) for k, v in match.captures.items()},
        checkpoints,
        matched=list(match.layers),
        layers=dict(match.targets),
        values=dict(match.captures),
        variables=variables,
        ordinal=ordinal,
        pinned=report.pinned,
    )
    for action in rule.do:
        target = match.layers[0]
        if action.layer is not None:  # captured layers, or ones a replace/insert just made
            found = ctx.layers.get(action.layer.lstrip("%"))
            if found is None:
                raise RuleFailed(
                    f"rule {rule.name}: `layer: {action.layer}` is not a layer capture of the pattern"
                )
            target = found
        what = _act(graph, target, action, ctx, rule.name)
        report.provenance.setdefault(target.name, []).append(f"{rule.name}: {what}")
    report.held.extend(ctx.layers.values())


@dataclass(frozen=True)
class Candidate:
    """One layer ``--explain RULE`` looked at, and what became of it."""

    layer_type: str
    layer_name: str
    matched: bool
    reason: str


def candidates(graph: Graph, rule: Rule) -> list[Candidate]:
    """Every layer the rule could start a match from on ``graph``, with its verdict: for a selector every
    layer, for a pattern every layer of its first line's type."""
    if isinstance(rule.match, PatternSpec):
        return [
            Candidate(layer.type, layer.name, verdict.startswith("matched"), verdict)
            for layer, verdict in explain_pattern(graph, rule.match.compiled)
        ]
    return [Candidate(v.layer.type, v.layer.name, v.matched, v.reason) for v in explain(graph, rule.match)]


def run_pass(graph: Graph, step: PassStep, interface: set[str]) -> RuleOutcome:
    """A whole-graph clean-up step; ``matches`` is 1 when it changed the graph."""
    if step.pass_ == "insert_splits":
        changed = insert_splits(graph)
    elif step.pass_ == "remove_dead":
        changed = remove_dead_layers(graph, keep=interface)
    elif step.pass_ == "merge_splits":
        changed = merge_chained_splits(graph)
    elif step.pass_ == "toposort":
        changed = toposort(graph)
    else:
        if not step.outputs:
            raise RuleFailed(f"step {step.name}: extract needs outputs")
        changed = extract_subgraph(graph, step.inputs, step.outputs)
    return RuleOutcome(step.name, int(changed), 1)


def apply_graph(
    graph: Graph,
    spec: GraphSpec,
    *,
    strict: bool = False,
    checkpoints: dict[str, Any] | None = None,
    variables: dict[str, Any] | None = None,
    stop_before: str | None = None,
) -> ApplyReport:
    """Run ``spec``'s rules in order on ``graph`` (in place), checking protected blobs after each and,
    with ``strict``, re-linting; rules whose ``when`` is false are skipped. With ``stop_before``, return just
    before the rule or step of that name runs (``--explain`` sees the graph that rule would see)."""
    report = ApplyReport(types_before=Counter(layer.type for layer in graph.layers))
    interface = spec.protected
    missing = sorted(name for name in interface if name not in graph.blobs)
    if missing:
        raise RuleFailed(f"interface blob(s) {missing} are not in the input graph")
    baseline = _errors(lint_graph(graph)) if strict else set()
    for rule in spec.rules:
        if rule.name == stop_before:
            break
        if isinstance(rule, PassStep):
            keep = interface | declared_names(graph, spec.interface)
            report.outcomes.append(run_pass(graph, rule, keep))
        elif not rule.when:
            report.outcomes.append(RuleOutcome(rule.name, 0, 0, skipped=True))
            continue
        else:
            report.outcomes.append(run_rule(graph, rule, interface, report, checkpoints, variables))
        gone = sorted(name for name in interface if name not in graph.blobs)
        if gone:
            raise RuleFailed(f"rule {rule.name}: removed interface blob(s) {gone}")
        if strict:
            new = _errors(lint_graph(graph)) - baseline
            if new:
                check, layer, message = sorted(new, key=str)[0]
                raise RuleFailed(f"rule {rule.name} broke an invariant: [{check}] layer {layer}: {message}")
    report.types_after = Counter(layer.type for layer in graph.layers)
    return report
