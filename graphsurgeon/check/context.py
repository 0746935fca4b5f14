"""What every lint check receives: the graph, the user's declarations, and the shapes the file states."""

from __future__ import annotations

from dataclasses import dataclass, field

from graphsurgeon.check.shapes import Shape
from graphsurgeon.ir.graph import Graph


@dataclass
class LintOptions:
    """The user's declarations: expected graph inputs/outputs and custom layer types they registered."""

    bin_path: str | None = None
    inputs: list[str] | None = None
    outputs: list[str] | None = None
    custom_types: set[str] = field(default_factory=set)


@dataclass
class LintContext:
    graph: Graph
    options: LintOptions
    shapes: dict[str, Shape]
