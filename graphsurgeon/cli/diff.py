"""``gsurg diff-bin``: its arguments and output; the comparison itself is ``check.diff_bin``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from graphsurgeon.check.diff_bin import DiffOptionError, diff_bins
from graphsurgeon.check.diff_report import render_md, render_text
from graphsurgeon.check.diff_stats import CHUNK_ELEMS, MAX_CHUNK_ELEMS
from graphsurgeon.cli.common import UsageError, add_report_options, path_arg
from graphsurgeon.formats.recovery import warn_pending

#: How the command line spells the options ``diff_bins`` errors name.
FLAGS = {
    "atol": "--atol",
    "rtol": "--rtol",
    "map_path": "--map",
    "param_a": "--param-a",
    "param_b": "--param-b",
}


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "a", type=path_arg, help="first .bin (or a .safetensors / .safetensors.index.json checkpoint)"
    )
    parser.add_argument("b", type=path_arg, help="second .bin, the reference for rtol (or a checkpoint)")
    parser.add_argument("--param-a", type=path_arg, help="the .param of a (default: beside it, same stem)")
    parser.add_argument("--param-b", type=path_arg, help="the .param of b (default: beside it, same stem)")
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    parser.add_argument(
        "--rtol", type=float, default=1e-5, help="relative tolerance, times |b| (default 1e-5)"
    )
    parser.add_argument(
        "--map", type=path_arg, help="YAML map `layer.slot: tensor` (needed with a checkpoint side)"
    )
    add_report_options(parser, formats=("text", "json", "md"))
    parser.add_argument(
        "--fail-on-diff",
        action="store_true",
        help="exit 1 when a pair fails the tolerance or differs in size, or a weight is unpaired",
    )
    parser.add_argument("--chunk", type=int, default=CHUNK_ELEMS, help=argparse.SUPPRESS)
    parser.set_defaults(func=cmd_diff_bin)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff-bin",
        help="compare two .bin files (or a .bin and a safetensors checkpoint) weight by weight",
        description="Pair the weights of two ncnn .bin files by (layer, slot), then by position, or a .bin "
        "and a safetensors checkpoint through --map, and report per pair: cosine, max |a-b| and where, "
        "max relative difference, mean |a-b|, NaN/Inf counts, the first differing byte, and the minimum "
        "atol/rtol that would pass |a-b| <= atol + rtol*|b|. A block-quantized weight paired with float "
        "values (its checkpoint tensor, or the same weight stored as floats) is checked in quantization "
        "steps instead, with its scales: each value the level nearest the float value or saturated on its "
        "side; --atol/--rtol do not apply to it.",
    )
    _configure(parser)


def cmd_diff_bin(args: argparse.Namespace) -> int:
    warn_pending(args.a, args.b, args.param_a, args.param_b)  # it only reads: a pending commit is a warning
    if not 1 <= args.chunk <= MAX_CHUNK_ELEMS:
        raise UsageError(f"--chunk must be in 1..{MAX_CHUNK_ELEMS}")
    try:
        report = diff_bins(
            args.a,
            args.b,
            param_a=args.param_a,
            param_b=args.param_b,
            atol=args.atol,
            rtol=args.rtol,
            map_path=args.map,
            chunk=args.chunk,
        )
    except DiffOptionError as err:
        raise UsageError(err.spelled(FLAGS)) from None
    for warning in report.warnings:
        print(f"gsurg: warning: {warning}", file=sys.stderr)
    if args.quiet:
        pass
    elif args.format == "json":
        print(json.dumps(report.to_json(), indent=2))
    elif args.format == "md":
        sys.stdout.write(render_md(report))
    else:
        sys.stdout.write(render_text(report))
    return 1 if args.fail_on_diff and not report.passed else 0
