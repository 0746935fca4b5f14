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
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.passes import (
    extract_subgraph,
    insert_splits,
    merge_chained_splits,
    remove_dead_layers,
    toposort,
)
from graphsurgeon.rewrite.actions import ActionContext, apply_action
from graphsurgeon.rewrite.pattern import best_partial as pattern_best_partial
from graphsurgeon.rewrite.pattern import compile_pattern, find_pattern
from graphsurgeon.rewrite.rulefile import GraphSpec, PassStep, PatternSpec, Rule
from graphsurgeon.rewrite.select import best_partial, captures, find

MAX_ITERATIONS = 100


class RuleActionError(GsurgError):
    """An action that could not be applied; the message starts with the rule's name (exit 2)."""


def _act(graph: Graph, layer: Any, action: Any, ctx: ActionContext, rule: str) -> str:
    try:
        return apply_action(graph, layer, action, ctx)
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


@dataclass
class ApplyReport:
    outcomes: list[RuleOutcome] = field(default_factory=list)
    provenance: dict[str, list[str]] = field(default_factory=dict)  # layer name -> "rule: what it did"
    types_before: Counter[str] = field(default_factory=Counter)
    types_after: Counter[str] = field(default_factory=Counter)


def _errors(findings: list[Finding]) -> set[tuple[str, str | None, str]]:
    return {(f.check, f.layer, f.message) for f in findings if f.level is Level.ERROR}


def run_rule(
    graph: Graph,
    rule: Rule,
    interface: set[str],
    report: ApplyReport,
    checkpoints: dict[str, Any] | None = None,
) -> RuleOutcome:
    if isinstance(rule.match, PatternSpec):
        return _run_pattern_rule(graph, rule, rule.match, interface, report, checkpoints or {})
    selector = rule.match
    for action in rule.do:
        if action.layer is not None:
            raise RuleFailed(
                f"rule {rule.name}: `layer` names a pattern capture, but this rule matches a selector"
            )
    done: set[int] = set()
    iterations = 0
    while True:
        fresh = [layer for layer in find(graph, selector) if id(layer) not in done]
        if not fresh:
            break
        iterations += 1
        if iterations > MAX_ITERATIONS:
            raise RuleFailed(f"rule {rule.name}: did not converge after {MAX_ITERATIONS} iterations")
        for layer in fresh:
            done.add(id(layer))
            caps = captures(layer, selector)
            ctx = ActionContext(
                interface,
                caps,
                checkpoints or {},
                matched=[layer],
                layers={layer.name: layer},
                values=dict(caps),
            )
            for action in rule.do:
                what = _act(graph, layer, action, ctx, rule.name)
                report.provenance.setdefault(layer.name, []).append(f"{rule.name}: {what}")
    matched = len(done)
    if not rule.expect.allows(matched):
        partial = (
            best_partial(graph, selector) if matched < (rule.expect.count or rule.expect.min or 0) else None
        )
        hint = f"; closest miss: layer {partial.layer.name} ({partial.reason})" if partial else ""
        raise RuleFailed(
            f"rule {rule.name}: matched {matched} layer(s), expected {rule.expect.describe()}{hint}"
        )
    return RuleOutcome(rule.name, matched, iterations)


def _run_pattern_rule(
    graph: Graph,
    rule: Rule,
    spec: PatternSpec,
    interface: set[str],
    report: ApplyReport,
    checkpoints: dict[str, Any],
) -> RuleOutcome:
    """Every non-overlapping match, once, until no new one appears; actions act on the layer their ``layer``
    capture names (default: the layer matching the first pattern line)."""
    try:
        pattern = compile_pattern(spec.pattern, spec.where, path=f"rule {rule.name} pattern")
    except GsurgError as err:
        raise RuleFailed(str(err)) from None
    seen: set[tuple[str, ...]] = set()
    iterations = matched = 0
    while True:
        fresh = [m for m in find_pattern(graph, pattern) if tuple(x.name for x in m.layers) not in seen]
        if not fresh:
            break
        iterations += 1
        if iterations > MAX_ITERATIONS:
            raise RuleFailed(f"rule {rule.name}: did not converge after {MAX_ITERATIONS} iterations")
        for match in fresh:
            seen.add(tuple(x.name for x in match.layers))
            by_capture = {
                line.name[1:]: layer
                for line, layer in zip(pattern.lines, match.layers, strict=True)
                if line.name.startswith("%")
            }
            ctx = ActionContext(
                interface,
                {k: str(v) for k, v in match.captures.items()},
                checkpoints,
                matched=list(match.layers),
                layers=dict(by_capture),
                values=dict(match.captures),
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
        matched += len(fresh)
    if not rule.expect.allows(matched):
        hint = ""
        if matched < (rule.expect.count or rule.expect.min or 0):
            hint = f"; closest miss: {pattern_best_partial(graph, pattern)}"
        raise RuleFailed(
            f"rule {rule.name}: matched {matched} time(s), expected {rule.expect.describe()}{hint}"
        )
    return RuleOutcome(rule.name, matched, iterations)


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
    graph: Graph, spec: GraphSpec, *, strict: bool = False, checkpoints: dict[str, Any] | None = None
) -> ApplyReport:
    """Run ``spec``'s rules in order on ``graph`` (in place)."""
    report = ApplyReport(types_before=Counter(layer.type for layer in graph.layers))
    interface = set(spec.interface)
    missing = sorted(name for name in interface if name not in graph.blobs)
    if missing:
        raise RuleFailed(f"interface blob(s) {missing} are not in the input graph")
    baseline = _errors(lint_graph(graph)) if strict else set()
    for rule in spec.rules:
        if isinstance(rule, PassStep):
            report.outcomes.append(run_pass(graph, rule, interface))
        else:
            report.outcomes.append(run_rule(graph, rule, interface, report, checkpoints))
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
