"""Build a Graph from layer records under ncnn's file-level rules: the one place both .param readers use.

The text reader (``param_text``) and the binary reader (``param_bin``) differ in how they get layer records
and in how they name a place (``file:line:column`` or a byte offset); what the file as a whole must satisfy
is checked here, so the two cannot drift apart:

- the magic, and header counts in 1..max_net_count;
- at least as many layer records as the header counts (more are ignored with a warning, as ncnn does);
- SSA tops: a top that another layer already produced, or that a layer lists twice (``duplicate-top``), and
  a blob read before the layer that produces it, by an earlier layer or by the producing layer itself
  (``use-before-def``; ncnn's text loader gives the reader an empty orphan blob, its binary loader follows
  the index and refuses a layer that reads its own output as a cycle);
- enough blob slots for the blobs the layers name (too few corrupts ncnn's memory; spare ones warn).

Strict (the default for reading): the first problem raises the reader's error at its place. Lenient (lint):
each problem is a ``ParseIssue`` in ``graph.issues``, warnings included, and the graph is built the way ncnn
would build it: a top that repeats a name, or defines a name a layer already read, gets a distinct name
(``name#2``), as ncnn gives it a fresh slot while lookups keep finding the first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from graphsurgeon.errors import GsurgError, ParamBinError, ParamSyntaxError
from graphsurgeon.formats.param_literals import ParseIssue, shown_int
from graphsurgeon.input_files import TEXT_LIMIT
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.names import fresh_name
from graphsurgeon.ir.params import Param

MAGIC = 7767517
MAX_NET_COUNT = 1_000_000  # R1020 max_net_count for layer and blob counts
#: The largest .param, text or binary, that is read at all: a real 2B model's is a few MB.
PARAM_LIMIT = TEXT_LIMIT


@dataclass(frozen=True, slots=True)
class Place:
    """Where something is: a line and column of a text .param, or a byte offset in a .param.bin."""

    line: int = 0
    column: int = 0
    offset: int | None = None


class LayerRecord(Protocol):
    """One layer as a reader found it (a text layer line, or a binary layer with blob indices as names)."""

    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: dict[int, Param]
    line: int


R = TypeVar("R", bound=LayerRecord)


@dataclass(frozen=True, slots=True)
class Header:
    """The three header numbers and where each one is. ``magic`` is as written (a text token keeps its
    spelling: ``07767517`` is not the magic)."""

    magic: str
    layer_count: int
    blob_count: int
    magic_at: Place
    layer_count_at: Place
    blob_count_at: Place


class Diagnostics:
    """Raise (strict) or record (lenient) each problem a reader finds, naming the file and the place."""

    def __init__(self, graph: Graph, path: str, *, strict: bool, form: str) -> None:
        self.graph, self.path, self.strict = graph, path, strict
        self.form = form  # "text .param" or ".param.bin", for messages

    def error(self, message: str, at: Place) -> GsurgError:
        if at.offset is not None:
            return ParamBinError(f"{self.path}: offset {at.offset}: {message}")
        return ParamSyntaxError(message, path=self.path, line=at.line, column=at.column)

    def problem(self, code: str, message: str, at: Place, layer: str | None = None) -> None:
        """Something ncnn rejects or misreads."""
        if self.strict:
            raise self.error(message, at)
        self.graph.issues.append(ParseIssue(code, message, at.line, at.column, layer, offset=at.offset))

    def hazard(self, code: str, message: str, at: Place, layer: str | None = None) -> None:
        """Something ncnn tolerates: a note in strict mode, a warning issue in lenient mode."""
        if self.strict:
            where = f" offset {at.offset}" if at.offset is not None else str(at.line)
            self.graph.notes.append(f"{self.path}:{where}: {message}")
        else:
            issue = ParseIssue(code, message, at.line, at.column, layer, warning=True, offset=at.offset)
            self.graph.issues.append(issue)


def build_graph(
    diag: Diagnostics,
    header: Header,
    records: Iterable[R],
    place: Callable[[R, int | None], Place],
    *,
    fresh_slots: bool,
) -> Graph:
    """Check the header, then (reading ``records`` only now, so header problems come first) add the
    records to ``diag.graph`` in file order under the SSA rules, then check the blob count.
    ``place(record, k)`` is where top ``k`` of a record is (``k`` None: the record); ``fresh_slots``: every
    top takes a new blob slot (the text form, where blobs are names) rather than the slot its index names
    (the binary form)."""
    _check_header(diag, header)
    records = list(records)
    layer_count = header.layer_count
    if len(records) < layer_count:
        diag.problem(
            "layer-count",
            f"header says {shown_int(layer_count)} layers but the file has only {len(records)} "
            "(ncnn fails to load it)",
            header.layer_count_at,
        )
    if len(records) > layer_count > 0:
        first = records[layer_count]
        diag.hazard(
            "extra-layers",
            f"{len(records) - layer_count} layer(s) after the {layer_count} the header counts are ignored, "
            f"as ncnn ignores them (first: {first.type} {first.name})",
            place(first, None),
            first.name,
        )
        records = records[:layer_count]
    renamed = _add_layers(diag, records, place)
    slots = len(diag.graph.blobs) - (0 if fresh_slots else renamed)
    count, at = header.blob_count, header.blob_count_at
    if count < slots:
        diag.problem(
            "blob-count",
            f"header says {shown_int(count)} blobs but the layers name {slots} "
            "(too few blob slots corrupts ncnn's memory)",
            at,
        )
    if count > slots:
        diag.hazard("spare-blobs", f"header says {shown_int(count)} blobs but the layers name {slots}", at)
    return diag.graph


def _check_header(diag: Diagnostics, header: Header) -> None:
    if header.magic != str(MAGIC):
        message = f"bad magic {header.magic} (an ncnn {diag.form} starts with {MAGIC})"
        diag.problem("magic", message, header.magic_at)
    for count, at in ((header.layer_count, header.layer_count_at), (header.blob_count, header.blob_count_at)):
        if not 0 < count <= MAX_NET_COUNT:
            diag.problem(
                "header-count",
                f"layer and blob counts must be in 1..{MAX_NET_COUNT} (ncnn's max_net_count), "
                f"not {shown_int(count)}",
                at,
            )


def _add_layers(diag: Diagnostics, records: Sequence[R], place: Callable[[R, int | None], Place]) -> int:
    """Add the layers; returns how many tops were renamed (lenient mode) to keep blobs SSA."""
    graph = diag.graph
    renamed = 0
    for rec in records:
        tops: list[str] = []
        for k, top in enumerate(rec.tops):
            blob = graph.blobs.get(top)
            producer = blob.producer if blob is not None else None
            reader = blob.consumers[0] if blob is not None and blob.consumers else None
            if producer is not None or top in tops:
                by = (
                    f"is already produced by layer {producer.name}"
                    if producer
                    else "is listed as the same top twice"
                )
                message = f"duplicate top: layer {rec.name}: blob {top!r} {by}"
                diag.problem("duplicate-top", message, place(rec, k), rec.name)
            elif reader is not None or top in rec.bottoms:
                who = f"layer {rec.name} itself" if reader is None else f"layer {reader.name}"
                if reader is not None and reader.line:
                    who += f" (line {reader.line})"
                message = f"blob {top!r} is read by {who} before layer {rec.name} produces it; "
                message += _consequence(diag.form)
                diag.problem("use-before-def", message, place(rec, k), rec.name)
            else:
                tops.append(top)
                continue
            tops.append(fresh_name(top, {top}, graph.blobs, tops, sep="#"))  # never the name itself
            renamed += 1
        layer = graph.add_layer(rec.type, rec.name, rec.bottoms, tops, rec.params)
        layer.line = rec.line
    return renamed


def _consequence(form: str) -> str:
    """What reading a blob before its producer does, in each form."""
    if form == ".param.bin":
        return (
            "ncnn's binary loader follows the index (a layer reading its own output is a cycle it refuses), "
            "but the text form reads an empty orphan there, and gsurg needs every blob produced before it "
            "is read"
        )
    return "ncnn gives the reader an empty orphan blob"
