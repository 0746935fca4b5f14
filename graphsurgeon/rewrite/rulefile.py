"""The rule-file language, as pydantic models: what ``gsurg apply`` reads and ``gsurg schema rules`` exports.

Loading (YAML with lines, variables, validation errors by file:line) is ``rewrite.loader``. A rule file
declares variables (``${name}`` anywhere in a string; ``--set name=value`` overrides), the
models it reads (param/bin pairs) and checkpoints, one or more graphs — each with an ``interface`` of blob
names no rule may remove or rename (ncnn has no output list) and ordered rules — and where outputs go.
Every rule says what it matches, what must hold (``where``), how many matches it expects (``expect``) and
what it does. A rule written once in the top-level ``rules:`` (``RuleDefinition``) runs wherever a graph's
rules say ``use: NAME`` (``RuleUse``), each use with its own ``expect``. Validation errors name the YAML
file and line.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Discriminator, Field, PrivateAttr, StringConstraints, Tag, model_validator

from graphsurgeon.errors import GsurgError
from graphsurgeon.rewrite.actions import AnyAction
from graphsurgeon.rewrite.sections import (
    CheckpointInput,
    GraphOutput,
    Interface,
    ModelInput,
    Outputs,
    PathVar,
    SideFile,
    Source,
    StoragePolicy,
)
from graphsurgeon.rewrite.select import Selector

if TYPE_CHECKING:
    from graphsurgeon.rewrite.pattern import Pattern
from graphsurgeon.rewrite.strict import StrictModel
from graphsurgeon.schema.expr import compile_expr


def _has(value: Any, key: str) -> bool:
    return (
        key in value if isinstance(value, dict) else hasattr(value, key) and getattr(value, key) is not None
    )


class Expect(StrictModel):
    """How many matches a rule must find; a miss fails the run with the best partial match."""

    count: int | None = Field(default=None, ge=0)
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> Expect:
        if self.count is not None and (self.min is not None or self.max is not None):
            raise ValueError("give count, or min and/or max, not both")
        if self.count is None and self.min is None and self.max is None:
            raise ValueError("give count, min or max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self

    def allows(self, n: int) -> bool:
        if self.count is not None:
            return n == self.count
        return (self.min is None or n >= self.min) and (self.max is None or n <= self.max)

    def describe(self) -> str:
        if self.count is not None:
            return f"exactly {self.count}"
        parts = [f"at least {self.min}"] if self.min is not None else []
        parts += [f"at most {self.max}"] if self.max is not None else []
        return " and ".join(parts)


class PatternSpec(StrictModel):
    """A subgraph written as ncnn param lines (no header): ``%x`` captures, ``*`` wildcards; ``where``
    expressions over captured values must hold. The lines are parsed once, when the rule file is validated;
    the driver and ``--explain`` use that parse (``compiled``)."""

    pattern: str
    where: list[str] = Field(default_factory=list)
    _compiled: Pattern | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _compiles(self) -> PatternSpec:
        from graphsurgeon.rewrite.pattern import compile_pattern  # the grammar, on first use

        try:
            self._compiled = compile_pattern(self.pattern, self.where, path="pattern")
            for expr in self.where:
                compile_expr(expr)
        except GsurgError as err:
            raise ValueError(str(err)) from None
        return self

    @property
    def compiled(self) -> Pattern:
        """The parsed pattern."""
        assert self._compiled is not None, "a PatternSpec is compiled when it is validated"
        return self._compiled


#: A rule's name: what reports, provenance, ``--explain`` and ``use:`` call it.
RULE_NAME = r"^[A-Za-z0-9_.-]+$"
#: A used rule's own variable: a name a ``${…}`` expression can read.
RULE_VAR = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: What ``match`` takes: a layer selector, or a pattern.
Match = Annotated[
    Annotated[Selector, Tag("selector")] | Annotated[PatternSpec, Tag("pattern")],
    Discriminator(lambda v: "pattern" if _has(v, "pattern") else "selector"),
]
_WHEN = "run the rule only when this holds, e.g. ${rope == 'explicit'}"
_DO = "the actions; none makes the rule a check of its expect count"


class Rule(StrictModel):
    name: str = Field(pattern=RULE_NAME)
    description: str = ""
    match: Match
    when: bool = Field(default=True, description=_WHEN)
    expect: Expect
    do: list[AnyAction] = Field(default_factory=list, description=_DO)


class RuleDefinition(StrictModel):
    """A rule written once in the top-level ``rules:`` (its key is its name) and run wherever a graph's
    rule list says ``use: NAME``, each use with its own ``expect``. ``vars`` are the rule's own variables
    with their defaults: its ``${…}`` read them before the file's, and a use may set them."""

    vars: dict[Annotated[str, StringConstraints(pattern=RULE_VAR)], str | int | float | bool] = Field(
        default_factory=dict, description="the rule's own variables and their defaults (a use may set them)"
    )
    description: str = ""
    match: Match
    when: bool = Field(default=True, description=_WHEN)
    do: list[AnyAction] = Field(default_factory=list, description=_DO)


class RuleUse(StrictModel):
    """An entry of a graph's rules that runs ``rules.NAME`` (of this file or a file it includes) as a rule
    named NAME, with this use's own ``expect`` and values for the rule's ``vars``. The loader turns it into
    a ``Rule``: a loaded ``GraphSpec`` holds none (it is in the JSON Schema for editors)."""

    use: str = Field(pattern=RULE_NAME, description="the name of a rule in a `rules:` section")
    expect: Expect
    vars: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="values for the rule's own vars (those it declares)"
    )


class PassStep(StrictModel):
    """A whole-graph clean-up between rules: insert Splits for fan-out, remove dead layers (outputs that
    are neither read nor interface), merge chained Splits, re-sort topologically, or extract the subgraph
    between given blobs (``inputs`` become Input layers; only what ``outputs`` need is kept)."""

    name: str = Field(pattern=RULE_NAME)
    pass_: Literal["insert_splits", "remove_dead", "merge_splits", "toposort", "extract"] = Field(
        alias="pass"
    )
    inputs: list[str] = Field(default_factory=list, description="extract: the new graph inputs")
    outputs: list[str] = Field(default_factory=list, description="extract: the blobs to keep computing")


class GraphSpec(StrictModel):
    extend: bool = Field(
        default=False,
        description="in a file that includes another: add these rules (and override these keys) to the "
        "included graph of the same name instead of replacing it",
    )
    input: str = Field(
        default="model",
        description="an entry of `inputs`, or an earlier graph whose result this graph rewrites further",
    )
    interface: list[str] | Interface = Field(
        default_factory=list,
        description="a list: blob names no rule may remove or rename; {inputs, outputs}: the names the "
        "result must expose (rules may reach them by renames), checked on the result",
    )
    output: GraphOutput | None = Field(
        default=None, description="file names inside the output folder (default: the input's names)"
    )
    storage: StoragePolicy | None = Field(default=None, description="how tagged weights are stored")
    when: bool = Field(
        default=True,
        description="run and write this graph only when this holds, e.g. ${storage == 'fp32'}; a graph "
        "that does not is left out as if it were not written (no export of an input only it reads, no "
        "files, no entry for side files)",
    )
    rules: list[
        Annotated[
            Annotated[Rule, Tag("rule")] | Annotated[PassStep, Tag("pass")],
            Discriminator(lambda v: "pass" if _has(v, "pass") or _has(v, "pass_") else "rule"),
        ]
    ] = Field(default_factory=list)

    @property
    def protected(self) -> set[str]:
        """Blob names no rule may remove or rename (the list form of ``interface``)."""
        return set(self.interface) if isinstance(self.interface, list) else set()


class RuleFile(StrictModel):
    """A whole rule file, after its includes are merged and its ``${…}`` templates evaluated."""

    version: Literal[1]
    name: str
    description: str = ""
    include: list[str] = Field(
        default_factory=list,
        description="rule files whose vars, inputs, graphs, side files and named rules this one "
        "inherits (its own entries win; a rule name is defined once); paths relative to this file",
    )
    vars: dict[str, str | int | float | bool | PathVar] = Field(default_factory=dict)
    rules: dict[Annotated[str, StringConstraints(pattern=RULE_NAME)], RuleDefinition] = Field(
        default_factory=dict,
        description="named rules, each run where a graph's rules say `use: NAME` (with that use's expect)",
    )
    source: Source | None = None
    inputs: dict[str, ModelInput] = Field(default_factory=dict)
    checkpoints: dict[str, CheckpointInput] = Field(default_factory=dict)
    graphs: dict[str, GraphSpec]
    side_files: list[SideFile] = Field(default_factory=list)
    outputs: Outputs = Outputs()

    @model_validator(mode="after")
    def _consistent(self) -> RuleFile:
        outputs: dict[str, str] = {}
        seen: list[str] = []
        skipped = {name for name, graph in self.graphs.items() if not graph.when}
        for name, graph in self.graphs.items():
            if graph.input in seen and graph.input in self.inputs:
                raise ValueError(f"graph {name}: input {graph.input!r} is both an input and an earlier graph")
            later = graph.input in self.graphs and graph.input not in seen and graph.input not in self.inputs
            if later:
                raise ValueError(f"graph {name}: takes graph {graph.input!r}, which is declared after it")
            if graph.when and graph.input in skipped:
                raise ValueError(f"graph {name}: takes graph {graph.input!r}, whose when: is false")
            seen.append(name)
            if graph.output is not None:
                for path in (graph.output.param, graph.output.bin):
                    if path is None:
                        continue
                    if path in outputs:
                        raise ValueError(f"graphs {outputs[path]} and {name} both write {path}")
                    outputs[path] = f"{name}"
        for side in self.side_files:
            unknown = sorted(set(side.graphs or ()) - set(self.graphs))
            if unknown:
                raise ValueError(f"side file {side.output}: no graph named {', '.join(unknown)}")
            left_out = sorted(set(side.graphs or ()) & skipped) if side.when else []
            if left_out:
                raise ValueError(f"side file {side.output}: graph {', '.join(left_out)} has when: false")
            for path in side.outputs_for(list(self.graphs)):
                if path in outputs:
                    other = outputs[path]
                    by = "another side file" if other == "" else f"graph {other}"
                    raise ValueError(f"side file {path} is also written by {by}")
                outputs[path] = ""
        return self


def written_graphs(rf: RuleFile) -> RuleFile:
    """``rf`` without the graphs whose ``when`` is false: what ``apply`` runs, writes and gives the side
    files (``RuleFile`` has checked that nothing that stays reads one of them)."""
    if all(graph.when for graph in rf.graphs.values()):
        return rf
    return rf.model_copy(update={"graphs": {n: g for n, g in rf.graphs.items() if g.when}})


def json_schema() -> str:
    """The JSON Schema editors use for completion (``gsurg schema rules``)."""
    schema = RuleFile.model_json_schema()
    # a loaded graph holds Rules only (the loader resolves `use:`); the file an editor sees may say `use:`
    use = RuleUse.model_json_schema(ref_template="#/$defs/{model}")
    schema["$defs"].update(use.pop("$defs", {}))
    schema["$defs"]["RuleUse"] = use
    schema["$defs"]["GraphSpec"]["properties"]["rules"]["items"]["oneOf"].append({"$ref": "#/$defs/RuleUse"})
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gsurg rule file"
    return json.dumps(schema, indent=2)
