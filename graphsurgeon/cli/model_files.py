"""``gsurg fmt``, ``gsurg synth-bin`` and ``gsurg lint``: commands on one model's files."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from graphsurgeon.check.context import LintOptions
from graphsurgeon.check.lint import run_lint
from graphsurgeon.cli.common import (
    UsageError,
    add_report_options,
    names,
    path_arg,
    prepare_outputs,
    record_json,
    report_text,
    same_file,
    warn,
)
from graphsurgeon.formats.atomic import AtomicGroup
from graphsurgeon.formats.emit_text import write_param_text
from graphsurgeon.formats.model_bin import WeightRecord, read_bin, write_bin
from graphsurgeon.formats.param_any import read_param
from graphsurgeon.formats.param_bin import write_param_bin
from graphsurgeon.formats.recovery import warn_pending
from graphsurgeon.ir.weights import Storage
from graphsurgeon.synth import synthesize_weights


def _wants_binary(path: str, form: str) -> bool:
    return form == "bin" or (form == "auto" and path.endswith(".param.bin"))


def cmd_fmt(args: argparse.Namespace) -> int:
    if (args.bin is None) != (args.out_bin is None):
        raise UsageError("--bin and --out-bin go together")
    prepare_outputs(args.output, args.input, args.bin)
    if args.out_bin:
        prepare_outputs(args.out_bin, args.input, args.bin)
        if same_file(args.output, args.out_bin) or os.path.abspath(args.output) == os.path.abspath(
            args.out_bin
        ):
            raise UsageError("-o and --out-bin must be different files")
    warn_pending(args.input, args.bin)
    graph = read_param(args.input)
    warn(graph)
    records: list[WeightRecord] = []
    with AtomicGroup() as outputs:  # the .param and .bin appear together or not at all
        if args.bin:
            records = read_bin(graph, args.bin)
            write_bin(graph, args.out_bin, outputs)
        if _wants_binary(args.output, args.to):
            write_param_bin(graph, args.output, outputs)
        else:
            write_param_text(graph, args.output, outputs)
    summary = {
        "output": args.output,
        "layers": len(graph.layers),
        "blobs": len(graph.blobs),
        "notes": graph.notes,
        "weights": [record_json(r) for r in records] if args.bin else None,
        "out_bin": args.out_bin,
    }
    extra = f", {len(records)} weights" if args.bin else ""
    text = f"wrote {args.output} ({len(graph.layers)} layers, {len(graph.blobs)} blobs{extra})"
    report_text(args, text, json.dumps(summary, indent=2))
    return 0


def cmd_synth_bin(args: argparse.Namespace) -> int:
    prepare_outputs(args.output, args.input)
    warn_pending(args.input)
    graph = read_param(args.input)
    warn(graph)
    n = synthesize_weights(graph, seed=args.seed, storage=Storage(args.storage))
    records = write_bin(graph, args.output)
    size = records[-1].offset + records[-1].nbytes if records else 0
    data = {"output": args.output, "seed": args.seed, "weights": [record_json(r) for r in records]}
    report_text(args, f"wrote {args.output} ({n} weights, {size} bytes, seed {args.seed})", json.dumps(data))
    return 0


def cmd_lint(args: argparse.Namespace) -> int:
    options = LintOptions(bin_path=args.bin, inputs=names(args.inputs), outputs=names(args.outputs))
    warn_pending(args.input, args.bin)
    try:
        report = run_lint(args.input, options, custom=args.custom or [])
    except OSError as err:
        raise UsageError(f"{args.input}: cannot read: {err.strerror}") from None
    report_text(args, report.to_text(), report.to_json())
    return report.exit_code


def register(sub: Any) -> None:
    fmt = sub.add_parser(
        "fmt",
        help="re-emit a model through the IR (canonical .param; weights byte-exact through the writer)",
        description="Parse a .param (text or .param.bin) and write it canonically; with --bin, walk the "
        "weights at exact offsets and write them back through the checked writer.",
    )
    fmt.add_argument("input", type=path_arg, help="input .param or .param.bin")
    fmt.add_argument(
        "-o", "--output", required=True, type=path_arg, help="output .param (.param.bin for the binary form)"
    )
    fmt.add_argument("--bin", type=path_arg, help="input .bin to walk and re-emit")
    fmt.add_argument("--out-bin", type=path_arg, help="output .bin (with --bin)")
    fmt.add_argument("--to", choices=["auto", "text", "bin"], default="auto", help="output param form")
    add_report_options(
        fmt,
        format_help="report format (json: every weight's layer, slot, offset, tag, storage, shape, size)",
    )
    fmt.set_defaults(func=cmd_fmt)

    lint = sub.add_parser(
        "lint",
        help="check a model for everything ncnn does not (exit 1 on errors)",
        description="Collect every independent finding in one run: header counts, SSA blobs, fan-out "
        "without Split, literal types against the layer catalog, unconverted ops, per-layer rules, the "
        "declared interface and, with --bin, the exact-offset weight walk and every weight's values.",
    )
    lint.add_argument("input", type=path_arg, help="the .param (text or .param.bin)")
    lint.add_argument("--bin", type=path_arg, help="the .bin to walk and scan")
    lint.add_argument("--inputs", action="append", metavar="A,B", help="declared input blobs")
    lint.add_argument("--outputs", action="append", metavar="X,Y", help="declared output blobs")
    lint.add_argument(
        "--custom",
        action="append",
        metavar="TYPE[:SLOT=LOAD(EXPR),...]",
        help="declare a custom layer type and its weight loads (LOAD tagged|raw, EXPR over p0..p29)",
    )
    add_report_options(lint)
    lint.set_defaults(func=cmd_lint)

    synth = sub.add_parser(
        "synth-bin",
        help="write deterministic random weights for any .param",
        description="Write a .bin whose size is exactly what the .param's layers load, filled with "
        "seeded random values (like ncnnoptimize with a null bin, but reproducible).",
    )
    synth.add_argument("input", type=path_arg, help="input .param or .param.bin")
    synth.add_argument("-o", "--output", required=True, type=path_arg, help="output .bin")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument(
        "--storage", choices=["fp32", "fp16", "bf16"], default="fp32", help="tagged-slot storage"
    )
    add_report_options(synth)
    synth.set_defaults(func=cmd_synth_bin)
