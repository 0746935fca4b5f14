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

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from graphsurgeon.errors import GsurgError
from graphsurgeon.schema.expr import compile_expr

ParamValue = int | float | str | list[int] | list[float]


_ACTION_KEYS = (
    "set",
    "unset",
    "remove",
    "rename",
    "weight",
    "axis_from_torch",
    "rewire",
    "rename_blob",
    "replace",
    "insert",
    "move_weight",
)


def _has(value: Any, key: str) -> bool:
    return (
        key in value if isinstance(value, dict) else hasattr(value, key) and getattr(value, key) is not None
    )


def _action_kind(value: Any) -> str | None:
    """Which action a ``do`` entry is, by the key it uses (None: no known key, a clear error follows)."""
    for key in _ACTION_KEYS:
        if _has(value, key):
            return key
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelInput(_Strict):
    """A model the rules read: its .param and, when weights are rewritten or checked, its .bin."""

    param: str
    bin: str | None = None


class CheckpointInput(_Strict):
    """A safetensors checkpoint (single file or sharded ``*.safetensors.index.json``) weights come from."""

    path: str


class ParamTest(_Strict):
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


class Selector(_Strict):
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


class Expect(_Strict):
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


class SetAction(_Strict):
    set: dict[str, ParamValue] = Field(description="params by name, typed by the layer catalog")
    layer: str | None = Field(default=None, description="pattern rules: the %capture of the layer to act on")


class UnsetAction(_Strict):
    unset: list[str]
    layer: str | None = Field(default=None, description="pattern rules: the %capture of the layer to act on")


class RemoveAction(_Strict):
    remove: Literal[True] = Field(
        description="remove the layer, wiring its output to its input (1 in, 1 out)"
    )
    layer: str | None = Field(default=None, description="pattern rules: the %capture of the layer to act on")


class RenameAction(_Strict):
    rename: str = Field(description="new layer name; {name} is the old one")
    layer: str | None = Field(default=None, description="pattern rules: the %capture of the layer to act on")


class WeightOp(_Strict):
    """Replace or transform one weight slot of the matched layer. ``from`` names a checkpoint tensor; its
    ``{capture}`` fields are filled from the match (named groups of the ``name`` regex, pattern captures).
    Without ``from`` the slot's current data is transformed. Transforms apply in order; the result is
    stored as ``storage`` (default fp32 for tagged slots). Nothing is read until the .bin is written."""

    slot: str
    from_: str | list[str] | None = Field(
        default=None, alias="from", description="checkpoint tensor name template, or several to concatenate"
    )
    concat_axis: int = Field(
        default=0, description="with several `from` tensors: the axis they are joined on"
    )
    checkpoint: str | None = Field(default=None, description="entry of `checkpoints` (default: the only one)")
    transforms: list[Any] = Field(default_factory=list, description="transpose, reshape, repeat_interleave")
    scale: float | None = None
    storage: Literal["fp32", "fp16", "bf16"] | None = None


class WeightAction(_Strict):
    weight: WeightOp
    layer: str | None = Field(default=None, description="pattern rules: the %capture of the layer to act on")


class AxisFromTorch(_Strict):
    """Set an axis param from a PyTorch dim, converted by graphsurgeon.layout for the tensor's torch rank
    and batch dim (``batch: null`` when the tensor has none)."""

    param: str = "axis"
    dim: int
    rank: int = Field(ge=1, le=5)
    batch: int | None = 0


class AxisAction(_Strict):
    axis_from_torch: AxisFromTorch
    layer: str | None = Field(default=None, description="pattern rules: the %capture of the layer to act on")


class RewireAction(_Strict):
    """Make the input with role ``role`` (the catalog's name for that bottom, e.g. MatMul ``B``) read ``to``
    (a blob name or a %capture)."""

    rewire: dict[str, str] = Field(description="role: blob")
    layer: str | None = Field(default=None, description="pattern rules: the %capture of the layer to act on")


class RenameBlobAction(_Strict):
    rename_blob: dict[str, str] = Field(description="old blob (name or %capture): new name")
    layer: str | None = None


class ReplaceAction(_Strict):
    """Replace the whole matched subgraph with layer lines (captures substituted; other blob names in the
    snippet are new and made unique). Weights of the new layers come from ``move_weight`` or ``weight``."""

    replace: str
    layer: str | None = None


class InsertAction(_Strict):
    """Insert layer lines before the target layer (captures substituted, new blob names made unique)."""

    insert: str
    layer: str | None = None


class MoveWeight(_Strict):
    from_: str = Field(alias="from", description="%capture.slot of a matched layer, e.g. %const.data")
    to: str = Field(description="%capture.slot of the layer receiving it (a replaced-in layer's name works)")
    storage: Literal["fp32", "fp16", "bf16"] | None = None


class MoveWeightAction(_Strict):
    move_weight: MoveWeight
    layer: str | None = None


Action = (
    SetAction
    | UnsetAction
    | RemoveAction
    | RenameAction
    | WeightAction
    | AxisAction
    | RewireAction
    | RenameBlobAction
    | ReplaceAction
    | InsertAction
    | MoveWeightAction
)


class PatternSpec(_Strict):
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


class Rule(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    match: Annotated[
        Annotated[Selector, Tag("selector")] | Annotated[PatternSpec, Tag("pattern")],
        Discriminator(lambda v: "pattern" if _has(v, "pattern") else "selector"),
    ]
    expect: Expect
    do: list[
        Annotated[
            Annotated[SetAction, Tag("set")]
            | Annotated[UnsetAction, Tag("unset")]
            | Annotated[RemoveAction, Tag("remove")]
            | Annotated[RenameAction, Tag("rename")]
            | Annotated[WeightAction, Tag("weight")]
            | Annotated[AxisAction, Tag("axis_from_torch")]
            | Annotated[RewireAction, Tag("rewire")]
            | Annotated[RenameBlobAction, Tag("rename_blob")]
            | Annotated[ReplaceAction, Tag("replace")]
            | Annotated[InsertAction, Tag("insert")]
            | Annotated[MoveWeightAction, Tag("move_weight")],
            Discriminator(_action_kind),
        ]
    ] = Field(min_length=1)


class PassStep(_Strict):
    """A whole-graph clean-up between rules: insert Splits for fan-out, remove dead layers (outputs that
    are neither read nor interface), merge chained Splits, re-sort topologically, or extract the subgraph
    between given blobs (``inputs`` become Input layers; only what ``outputs`` need is kept)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    pass_: Literal["insert_splits", "remove_dead", "merge_splits", "toposort", "extract"] = Field(
        alias="pass"
    )
    inputs: list[str] = Field(default_factory=list, description="extract: the new graph inputs")
    outputs: list[str] = Field(default_factory=list, description="extract: the blobs to keep computing")


class GraphSpec(_Strict):
    input: str = Field(default="model", description="which entry of `inputs` this graph rewrites")
    interface: list[str] = Field(default_factory=list, description="blob names no rule may remove or rename")
    rules: list[
        Annotated[
            Annotated[Rule, Tag("rule")] | Annotated[PassStep, Tag("pass")],
            Discriminator(lambda v: "pass" if _has(v, "pass") or _has(v, "pass_") else "rule"),
        ]
    ] = Field(default_factory=list)


class Outputs(_Strict):
    dir: str | None = Field(default=None, description="output folder (the command's --out wins)")


class RuleFile(_Strict):
    version: Literal[1]
    name: str
    description: str = ""
    vars: dict[str, str | int | float] = Field(default_factory=dict)
    inputs: dict[str, ModelInput] = Field(default_factory=dict)
    checkpoints: dict[str, CheckpointInput] = Field(default_factory=dict)
    graphs: dict[str, GraphSpec]
    outputs: Outputs = Outputs()
