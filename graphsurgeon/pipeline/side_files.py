"""Side files: what a runtime needs beside the models (``model.json``, tokenizer files), written by a rule
file's ``side_files`` into the same atomic output group as the models.

A ``template`` is rendered by jinja2 in a bounded sandbox (``template_sandbox``: no code runs, undefined
names are errors) with:

* ``vars`` — the run's variables; ``data`` — the entry's own ``data`` mapping; ``rule_set`` — the name;
* ``graphs`` — per graph: ``param``/``bin`` (file names in the output folder), ``inputs``/``outputs`` (the
  interface blob names in graph order) and ``weights[layer][slot]`` with ``offset`` (of the record, tag
  included), ``data_offset`` (of the first value), ``tag``, ``storage``, ``shape``, ``nbytes`` and
  ``load_type`` (ncnn's load type: 4/6/8 for block-quantized codes) — so a runtime can read a weight straight
  from a ``.bin``.

A template entry with a ``schema`` (a JSON Schema file, ``formats.json_schema``) has its rendered text
parsed and checked against it before it is staged; a file that breaks it fails the run with the side file,
the key and why, and nothing is written.

The ``json`` filter writes a value as JSON. A ``copy`` entry copies a file as it is. A ``weight_map``
entry writes one ``gsurg diff-bin`` map per graph with weights (``weight_map_side``).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox

from graphsurgeon.errors import GsurgError, one_line
from graphsurgeon.formats.atomic import AtomicGroup, atomic_output, atomic_write_bytes
from graphsurgeon.formats.json_schema import SchemaFileError, check_json_text, load_schema
from graphsurgeon.formats.model_bin import WeightRecord
from graphsurgeon.formats.outpaths import kind
from graphsurgeon.pipeline.checkpoint_pool import CheckpointPool
from graphsurgeon.pipeline.output_guard import OutputGuard
from graphsurgeon.pipeline.template_sandbox import TemplateLimit
from graphsurgeon.pipeline.template_sandbox import environment as sandbox_environment
from graphsurgeon.pipeline.template_sandbox import render as render_template
from graphsurgeon.pipeline.weight_map_side import WeightMap, WrittenGraph, build_maps, render
from graphsurgeon.rewrite.sections import SideFile

COPY_CHUNK = 8 << 20
#: The largest indent the ``json`` filter takes.
MAX_INDENT = 64


class SideFileError(GsurgError):
    """A side file that cannot be rendered or copied; names the template or file."""


@dataclass
class GraphResult:
    """What a side file sees of one written graph."""

    param: str
    bin: str | None
    inputs: list[str]
    outputs: list[str]
    weights: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @staticmethod
    def weight_table(records: list[WeightRecord]) -> dict[str, dict[str, dict[str, Any]]]:
        table: dict[str, dict[str, dict[str, Any]]] = {}
        for rec in records:
            table.setdefault(rec.layer, {})[rec.slot] = {
                "offset": rec.offset,
                "data_offset": rec.offset + (4 if rec.tag is not None else 0),
                "tag": rec.tag,
                "storage": rec.storage.value,
                "shape": list(rec.shape),
                "nbytes": rec.nbytes,
                "load_type": rec.load_type,
            }
        return table

    def as_dict(self) -> dict[str, Any]:
        return {
            "param": self.param,
            "bin": self.bin,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "weights": self.weights,
        }


def _json(value: Any, indent: int | None = None) -> str:
    if indent is not None and not 0 <= indent <= MAX_INDENT:
        raise TemplateLimit(f"json indent {indent} is not in 0..{MAX_INDENT}")
    return json.dumps(value, indent=indent, sort_keys=False)


def _environment(template: Path) -> jinja2.Environment:
    env = sandbox_environment([str(template.parent)])  # the loader made the path absolute
    env.filters["json"] = _json
    return env


def render_side_file(side: SideFile, context: dict[str, Any]) -> bytes:
    """The bytes of a template side file."""
    assert side.template is not None
    template = Path(side.template)
    name = template.name if template.is_absolute() else side.template
    try:
        text = render_template(_environment(template).get_template(name), {**context, "data": side.data})
    except jinja2.TemplateNotFound:
        raise SideFileError(f"side file {side.output}: template {side.template} not found") from None
    except jinja2.TemplateSyntaxError as err:
        raise SideFileError(
            f"{err.filename or side.template}:{err.lineno}: template syntax: {err.message}"
        ) from None
    except (
        jinja2.UndefinedError,
        jinja2.sandbox.SecurityError,
        TemplateLimit,
        TypeError,
        ValueError,
        LookupError,
        AttributeError,
        ArithmeticError,
        MemoryError,
        RecursionError,
    ) as err:
        why = "macros or includes nest too deeply" if isinstance(err, RecursionError) else one_line(err)
        at = _template_line(err)
        raise SideFileError(f"side file {side.output}: template {at or side.template}: {why}") from None
    return text.encode("utf-8")


def _template_line(err: BaseException) -> str | None:
    """``file:line`` of the innermost template frame of ``err`` (jinja2 rewrites a rendering error's
    traceback to show template files and lines), or None."""
    found = None
    tb = err.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.endswith(".py") and os.path.isfile(filename):
            found = f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def write_side_files(
    sides: list[SideFile],
    guard: OutputGuard,
    context: dict[str, Any],
    group: AtomicGroup,
    graphs: Sequence[WrittenGraph] = (),
    pool: CheckpointPool | None = None,
) -> tuple[list[str], list[WeightMap]]:
    """Render, copy or map every side file whose ``when`` holds into ``guard``'s folder (within ``group``;
    each target checked by ``guard``); returns the files written and the weight maps among them."""
    written: list[str] = []
    maps: list[WeightMap] = []
    bins = {g.name: g.bin_name for g in graphs}
    for side in sides:
        if not side.when:
            continue
        if side.weight_map is not None:
            for m in build_maps(side.weight_map, list(graphs), side.output, side.graphs, pool):
                target = guard.target(m.output)
                target.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(target, render(m, str(bins[m.graph])), group)
                written.append(m.output)
                maps.append(m)
            continue
        target = guard.target(side.output)
        target.parent.mkdir(parents=True, exist_ok=True)
        if side.template is not None:
            atomic_write_bytes(target, _checked(side, render_side_file(side, context)), group)
        else:
            assert side.copy_ is not None
            _copy(Path(side.copy_), target, group, side.output)
        written.append(side.output)
    return written, maps


def _checked(side: SideFile, text: bytes) -> bytes:
    """``text`` when the entry names no schema or ``text`` holds to it; else SideFileError."""
    if side.schema_ is not None:
        try:
            schema = load_schema(side.schema_)
        except SchemaFileError as err:
            raise SideFileError(f"side file {side.output}: {err}") from None
        where = f"side file {side.output} (template {side.template})"
        check_json_text(text, schema, where, error=SideFileError)
    return text


def _copy(source: Path, target: Path, group: AtomicGroup, label: str) -> None:
    """Copy a regular file as it is: its size when opened, never more (a FIFO, a device such as
    ``/dev/zero`` or a folder is refused rather than read forever)."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting for a writer
    except OSError as err:
        raise SideFileError(f"side file {label}: cannot read {source}: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SideFileError(f"side file {label}: copy source {source} is {kind(str(source))}, not a file")
        left = st.st_size
        with atomic_output(target, group=group) as out:
            while left > 0 and (chunk := os.read(fd, min(COPY_CHUNK, left))):
                out.write(chunk)
                left -= len(chunk)
    finally:
        os.close(fd)
