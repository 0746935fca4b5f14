"""Write a Graph as a text .param through the jinja2 template ``emit/ncnn_param.j2``.

Safe-writer rules (what ncnn 1.0.20261020's ``ParamDict::load_param`` reads without guessing): one line per
layer with single spaces; ints without '.'; every float with '.' or an exponent, as the shortest text that
reads back to the same float32 (≤ 15 characters); arrays old style (``-233KK=N,…``) with one element type;
strings quoted when they need it; exact counts. Params are written in id order, so the output is canonical:
``emit(parse(emit(parse(x))))`` is ``emit(parse(x))``.
"""

from __future__ import annotations

import math
import os
import re
from functools import lru_cache

import jinja2
import numpy as np

from graphsurgeon.errors import EmitError
from graphsurgeon.formats.atomic import AtomicGroup, atomic_write_bytes
from graphsurgeon.formats.param_text import MAGIC, MAX_NAME, MAX_STRING, OLD_ARRAY_BASE
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.ir.params import Param
from graphsurgeon.resources import resource_dir
from graphsurgeon.schema.catalog import ValueType

_BARE_STRING = re.compile(r"[A-Za-z][^\s,]*")  # also read by HEAD, whose value token stops at commas
_BARE_ANY = re.compile(r"[A-Za-z]\S*")
_LINE_BREAK = re.compile(r"[\r\n]")
_BAD_NAME = re.compile(r"[\s=]")


def format_float(value: float, where: str) -> str:
    """Shortest text that reads back to the same float32, always with '.' or an exponent."""
    if not math.isfinite(value):
        raise EmitError(
            f"{where}: {value} cannot be written (ncnn reads inf/nan as strings); use ±3.4028235e+38"
        )
    text = str(np.float32(value))
    if "." not in text and "e" not in text:
        text += ".0"
    if len(text) > 15:
        raise EmitError(f"{where}: float literal {text} is longer than 15 characters")
    return text


def format_param(pid: int, param: Param, where: str) -> str:
    """One ``id=value`` token in safe-writer form."""
    kind, value = param.kind, param.value
    if isinstance(value, int):
        return f"{pid}={value}"
    if isinstance(value, float):
        return f"{pid}={format_float(value, where)}"
    if isinstance(value, tuple):
        if kind is ValueType.FLOAT_ARRAY:
            elements = [format_float(float(v), where) for v in value]
        else:
            elements = [str(int(v)) for v in value]
        return f"{OLD_ARRAY_BASE - pid}={','.join([str(len(value)), *elements])}"
    text = str(value)
    if len(text) > MAX_STRING:
        raise EmitError(f"{where}: string of {len(text)} characters; ncnn reads at most {MAX_STRING}")
    if _BARE_STRING.fullmatch(text):
        return f"{pid}={text}"
    if '"' not in text and not _LINE_BREAK.search(text):
        return f'{pid}="{text}"'
    if _BARE_ANY.fullmatch(text):
        return f"{pid}={text}"  # has a quote and a comma: only the bare form can hold it (R1020 reads it)
    raise EmitError(f"{where}: string {text!r} cannot be written in a .param")


def _check_name(name: str, what: str) -> str:
    if not name or len(name) > MAX_NAME or _BAD_NAME.search(name):
        raise EmitError(f"{what} {name!r} must be 1..{MAX_NAME} characters without whitespace or '='")
    return name


def _layer_view(layer: Layer) -> dict[str, object]:
    where = f"layer {layer.name}"
    return {
        "type": _check_name(layer.type, "layer type"),
        "name": _check_name(layer.name, "layer name"),
        "bottoms": [_check_name(b.name, "blob name") for b in layer.inputs],
        "tops": [_check_name(b.name, "blob name") for b in layer.outputs],
        "params": [
            format_param(pid, layer.params[pid], f"{where} param {pid}") for pid in sorted(layer.params)
        ],
    }


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("emit"))),
        autoescape=False,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("ncnn_param.j2")


def emit_param_text(graph: Graph) -> str:
    """The canonical text .param of ``graph``."""
    if not graph.layers:
        raise EmitError("an ncnn .param needs at least one layer")
    return _template().render(
        magic=MAGIC,
        layer_count=len(graph.layers),
        blob_count=len(graph.blobs),
        layers=[_layer_view(layer) for layer in graph.layers],
    )


def write_param_text(graph: Graph, path: str | os.PathLike[str], group: AtomicGroup | None = None) -> None:
    """Write ``graph`` as a text .param atomically (temp file, fsync, rename; with ``group`` when given)."""
    atomic_write_bytes(path, emit_param_text(graph).encode("utf-8"), group)
