"""What the ``gsurg`` commands share: the usage error, the report options, output checks, reader warnings,
record JSON."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.atomic import prepare_output
from graphsurgeon.formats.model_bin import WeightRecord, custom_layer_note
from graphsurgeon.ir.graph import Graph


class UsageError(GsurgError):
    """Bad command-line use (exit 2)."""


def path_arg(text: str) -> str:
    """An argparse ``type`` for a path: the empty string names no file, and is an error naming the option
    (``--bin ''`` once read as "no --bin", and ``gsurg fmt`` exited 0 without touching the weights)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file")
    return text


def add_report_options(
    parser: argparse.ArgumentParser,
    *,
    formats: Sequence[str] = ("text", "json"),
    format_help: str = "report format",
) -> None:
    """The one ``report`` option group every reporting command has: ``--format`` (``text`` first, the
    default) and ``-q/--quiet`` (print nothing on success; the exit code and stderr still tell)."""
    group = parser.add_argument_group("report")
    choices = list(formats)
    group.add_argument(
        "--format", choices=choices, default=choices[0], help=f"{format_help} (default {choices[0]})"
    )
    group.add_argument(
        "-q", "--quiet", action="store_true", help="print no report; the exit code and stderr still tell"
    )


def report_text(args: argparse.Namespace, text: str, data: str) -> None:
    """Print a command's report as ``--format`` and ``-q`` ask: ``data`` (JSON text) for json, ``text``
    otherwise, nothing with ``-q``."""
    if args.quiet:
        return
    print(data if args.format == "json" else text)


def same_file(a: str, b: str) -> bool:
    return os.path.exists(b) and os.path.exists(a) and os.path.samefile(a, b)


def prepare_outputs(out: str, *inputs: str | None) -> None:
    """Refuse an output that is an input or a folder; create its folder (errors name ``out``) and finish
    interrupted runs there."""
    for inp in inputs:
        if inp is not None and same_file(inp, out):
            raise UsageError(f"{out}: refusing to overwrite an input; choose another output path")
    if os.path.isdir(out):
        raise UsageError(f"{out}: is a folder; give a file path")
    prepare_output(out)


def warn(graph: Graph) -> None:
    notes = list(graph.notes)
    custom = custom_layer_note(graph)
    if custom:
        notes.append(custom)
    for note in notes:
        print(f"gsurg: warning: {note}", file=sys.stderr)


def record_json(rec: WeightRecord) -> dict[str, object]:
    return {
        "layer": rec.layer,
        "type": rec.layer_type,
        "slot": rec.slot,
        "offset": rec.offset,
        "tag": None if rec.tag is None else f"0x{rec.tag:08x}",
        "storage": rec.storage.value,
        "shape": list(rec.shape),
        "view": None if rec.view is None else list(rec.view),
        "nbytes": rec.nbytes,
    }


def names(values: list[str] | None) -> list[str] | None:
    """``--inputs a,b --inputs c`` → ["a", "b", "c"]."""
    if values is None:
        return None
    return [name for value in values for name in value.split(",") if name]
