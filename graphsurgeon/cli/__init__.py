"""The ``gsurg`` command line. Exit codes: 0 success, 1 findings, 2 usage, parse or I/O error.

Every error a user can cause is a ``GsurgError`` and is printed as one line naming the place; warnings a
reader found (ignored trailing layers, custom layer types) go to stderr too. Each module here registers
its commands: ``model_files`` (fmt, synth-bin, lint), ``diff`` (diff-bin), ``rules`` (apply, verify,
schema), ``conversions`` (conversions), ``rope`` (rope), ``evaluate`` (eval).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from graphsurgeon import __version__
from graphsurgeon.cli import conversions, diff, evaluate, model_files, rope, rules
from graphsurgeon.cli.common import UsageError
from graphsurgeon.errors import GsurgError, clipped

__all__ = ["UsageError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gsurg", description="Declarative graph surgery for ncnn models (.param + .bin)."
    )
    parser.add_argument("--version", action="version", version=f"gsurg {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    model_files.register(sub)
    diff.register(sub)
    rules.register(sub)
    conversions.register(sub)
    rope.register(sub)
    evaluate.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except GsurgError as err:
        print(clipped(f"gsurg: error: {err}"), file=sys.stderr)
        return err.exit_code
    except OSError as err:  # a last resort: every known failure is a GsurgError naming its path
        name = err.filename  # a path, or (os.fdopen's) a file descriptor, which names nothing
        where = f"{os.fsdecode(name)}: " if isinstance(name, str | bytes | os.PathLike) else ""
        print(clipped(f"gsurg: error: {where}{err.strerror or err}"), file=sys.stderr)
        return 2
