"""The rule-file language, as pydantic models: what ``gsurg apply`` reads and ``gsurg schema rules`` exports.

Loading (YAML with lines, variables, validation errors by file:line) is ``rewrite.loader``. A rule file
declares variables (``${name}`` anywhere in a string; ``--set name=value`` overrides), the
models it reads (param/bin pairs) and checkpoints, one or more graphs — each with an ``interface`` of blob
names no rule may remove or rename (ncnn has no output list) and ordered rules — and where outputs go.
Every rule says what it matches, what must hold (``where``), how many matches it expects (``expect``) and
what it does. Validation errors name the YAML file and line.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from graphsurgeon.errors import GsurgError
from graphsurgeon.rewrite.actions import AnyAction
from graphsurgeon.rewrite.actions.params import ParamValue
from graphsurgeon.rewrite.strict import StrictModel
from graphsurgeon.schema.expr import compile_expr


def _has(value: Any, key: str) -> bool:
    return (
        key in value if isinstance(value, dict) else hasattr(value, key) and getattr(value, key) is not None
    )


class ModelInput(StrictModel):
    """A model the rules read: its .param and, when weights are rewritten or checked, its .bin."""

    param: str
    bin: str | None = None


class CheckpointInput(StrictModel):
    """A safetensors checkpoint (single file or sharded ``*.safetensors.index.json``) weights come from."""

    path: str


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
    name: str | None = Field(default=None, description="a regular expression the whole layer name must match")

    @model_validator(mode="after")
    def _regex(self) -> Selector:
        if self.name is not None:
            try:
                re.compile(self.name)
            except re.error as err:
                raise ValueError(f"name {self.name!r} is not a valid regular expression: {err}") from None
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
    expressions over captured values must hold."""

    pattern: str
    where: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _compiles(self) -> PatternSpec:
        from graphsurgeon.formats.param_text import parse_pattern_lines  # the grammar, loaded on first use

        try:
            if not parse_pattern_lines(self.pattern, path="pattern"):
                raise ValueError("the pattern has no layer lines")
            for expr in self.where:
                compile_expr(expr)
        except GsurgError as err:
            raise ValueError(str(err)) from None
        return self


class Rule(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    match: Annotated[
        Annotated[Selector, Tag("selector")] | Annotated[PatternSpec, Tag("pattern")],
        Discriminator(lambda v: "pattern" if _has(v, "pattern") else "selector"),
    ]
    expect: Expect
    do: list[AnyAction] = Field(min_length=1)


class PassStep(StrictModel):
    """A whole-graph clean-up between rules: insert Splits for fan-out, remove dead layers (outputs that
    are neither read nor interface), merge chained Splits, re-sort topologically, or extract the subgraph
    between given blobs (``inputs`` become Input layers; only what ``outputs`` need is kept)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    pass_: Literal["insert_splits", "remove_dead", "merge_splits", "toposort", "extract"] = Field(
        alias="pass"
    )
    inputs: list[str] = Field(default_factory=list, description="extract: the new graph inputs")
    outputs: list[str] = Field(default_factory=list, description="extract: the blobs to keep computing")


class GraphSpec(StrictModel):
    input: str = Field(default="model", description="which entry of `inputs` this graph rewrites")
    interface: list[str] = Field(default_factory=list, description="blob names no rule may remove or rename")
    rules: list[
        Annotated[
            Annotated[Rule, Tag("rule")] | Annotated[PassStep, Tag("pass")],
            Discriminator(lambda v: "pass" if _has(v, "pass") or _has(v, "pass_") else "rule"),
        ]
    ] = Field(default_factory=list)


class Outputs(StrictModel):
    dir: str | None = Field(default=None, description="output folder (the command's --out wins)")


class RuleFile(StrictModel):
    version: Literal[1]
    name: str
    description: str = ""
    vars: dict[str, str | int | float] = Field(default_factory=dict)
    inputs: dict[str, ModelInput] = Field(default_factory=dict)
    checkpoints: dict[str, CheckpointInput] = Field(default_factory=dict)
    graphs: dict[str, GraphSpec]
    outputs: Outputs = Outputs()
