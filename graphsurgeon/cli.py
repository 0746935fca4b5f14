"""The ``gsurg`` command line. Exit codes: 0 success, 1 findings, 2 usage, parse or I/O error.

Every error a user can cause is a ``GsurgError`` and is printed as one line naming the place; warnings a
reader found (ignored trailing layers, custom layer types) go to stderr too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from graphsurgeon import __version__
from graphsurgeon.check.context import LintOptions
from graphsurgeon.check.diff_bin import add_parser as add_diff_bin_parser
from graphsurgeon.check.lint import run_lint
from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.atomic import AtomicGroup, prepare_output
from graphsurgeon.formats.emit_text import write_param_text
from graphsurgeon.formats.model_bin import WeightRecord, custom_layer_note, read_bin, write_bin
from graphsurgeon.formats.param_any import read_param
from graphsurgeon.formats.param_bin import write_param_bin
from graphsurgeon.formats.recovery import warn_pending
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.weights import Storage
from graphsurgeon.rewrite.apply import explain_rule, parse_sets, run_apply, summary
from graphsurgeon.rewrite.loader import json_schema as rules_json_schema
from graphsurgeon.synth import synthesize_weights


class UsageError(GsurgError):
    """Bad command-line use (exit 2)."""


def _wants_binary(path: str, form: str) -> bool:
    return form == "bin" or (form == "auto" and path.endswith(".param.bin"))


def _same_file(a: str, b: str) -> bool:
    return os.path.exists(b) and os.path.exists(a) and os.path.samefile(a, b)


def _prepare_output(out: str, *inputs: str | None) -> None:
    """Refuse an output that is an input or a folder; create its folder (errors name ``out``) and finish
    interrupted runs there."""
    for inp in inputs:
        if inp is not None and _same_file(inp, out):
            raise UsageError(f"{out}: refusing to overwrite an input; choose another output path")
    if os.path.isdir(out):
        raise UsageError(f"{out}: is a folder; give a file path")
    prepare_output(out)


def _warn(graph: Graph) -> None:
    notes = list(graph.notes)
    custom = custom_layer_note(graph)
    if custom:
        notes.append(custom)
    for note in notes:
        print(f"gsurg: warning: {note}", file=sys.stderr)


def cmd_fmt(args: argparse.Namespace) -> int:
    if (args.bin is None) != (args.out_bin is None):
        raise UsageError("--bin and --out-bin go together")
    _prepare_output(args.output, args.input, args.bin)
    if args.out_bin:
        _prepare_output(args.out_bin, args.input, args.bin)
        if _same_file(args.output, args.out_bin) or os.path.abspath(args.output) == os.path.abspath(
            args.out_bin
        ):
            raise UsageError("-o and --out-bin must be different files")
    warn_pending(args.input, args.bin)
    graph = read_param(args.input)
    _warn(graph)
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
        "weights": [_record_json(r) for r in records] if args.bin else None,
        "out_bin": args.out_bin,
    }
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    elif not args.quiet:
        extra = f", {len(records)} weights" if args.bin else ""
        print(f"wrote {args.output} ({len(graph.layers)} layers, {len(graph.blobs)} blobs{extra})")
    return 0


def _record_json(rec: WeightRecord) -> dict[str, object]:
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


def cmd_synth_bin(args: argparse.Namespace) -> int:
    _prepare_output(args.output, args.input)
    warn_pending(args.input)
    graph = read_param(args.input)
    _warn(graph)
    n = synthesize_weights(graph, seed=args.seed, storage=Storage(args.storage))
    records = write_bin(graph, args.output)
    if args.format == "json":
        print(
            json.dumps(
                {"output": args.output, "seed": args.seed, "weights": [_record_json(r) for r in records]}
            )
        )
    elif not args.quiet:
        size = records[-1].offset + records[-1].nbytes if records else 0
        print(f"wrote {args.output} ({n} weights, {size} bytes, seed {args.seed})")
    return 0


def _names(values: list[str] | None) -> list[str] | None:
    """``--inputs a,b --inputs c`` → ["a", "b", "c"]."""
    if values is None:
        return None
    return [name for value in values for name in value.split(",") if name]


def cmd_lint(args: argparse.Namespace) -> int:
    options = LintOptions(bin_path=args.bin, inputs=_names(args.inputs), outputs=_names(args.outputs))
    warn_pending(args.input, args.bin)
    try:
        report = run_lint(args.input, options, custom=args.custom or [])
    except OSError as err:
        raise UsageError(f"{args.input}: cannot read: {err.strerror}") from None
    print(report.to_json() if args.format == "json" else report.to_text())
    return report.exit_code


def cmd_apply(args: argparse.Namespace) -> int:
    sets = parse_sets(args.set or [])
    if args.explain:
        print(explain_rule(args.rules, args.explain, args.input, args.bin, sets, strict=args.strict))
        return 0

    def progress(message: str) -> None:
        print(f"gsurg: {message}", file=sys.stderr)

    runs = run_apply(
        args.rules,
        args.input,
        args.bin,
        sets,
        args.out,
        strict=args.strict,
        dry_run=args.dry_run,
        keep_work=args.keep_work,
        progress=progress if args.verbose else None,
    )
    print(summary(runs))
    print("dry run: nothing written" if args.dry_run else f"wrote {args.out or 'outputs.dir'}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from graphsurgeon.verify.run import VerifyOptions, run_verify  # ncnn and the reference load here

    def progress(message: str) -> None:
        if sys.stderr.isatty() or args.verbose:
            print(f"gsurg: {message}", file=sys.stderr)

    options = VerifyOptions(
        checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        images=[Path(p) for p in args.image or []],
        prompts=list(args.prompt or []),
        tokens=args.tokens,
        threads=args.threads,
        progress=progress,
    )
    report = run_verify(Path(args.folder), options)
    print(report.to_json() if args.format == "json" else report.to_text())
    return report.exit_code


def cmd_schema(args: argparse.Namespace) -> int:
    print(rules_json_schema())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gsurg", description="Declarative graph surgery for ncnn models (.param + .bin)."
    )
    parser.add_argument("--version", action="version", version=f"gsurg {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    fmt = sub.add_parser(
        "fmt",
        help="re-emit a model through the IR (canonical .param; weights byte-exact through the writer)",
        description="Parse a .param (text or .param.bin) and write it canonically; with --bin, walk the "
        "weights at exact offsets and write them back through the checked writer.",
    )
    fmt.add_argument("input", help="input .param or .param.bin")
    fmt.add_argument("-o", "--output", required=True, help="output .param (.param.bin for the binary form)")
    fmt.add_argument("--bin", help="input .bin to walk and re-emit")
    fmt.add_argument("--out-bin", help="output .bin (with --bin)")
    fmt.add_argument("--to", choices=["auto", "text", "bin"], default="auto", help="output param form")
    fmt.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="report format (json lists every weight's layer, slot, offset, tag, storage, shape and size)",
    )
    fmt.add_argument("-q", "--quiet", action="store_true")
    fmt.set_defaults(func=cmd_fmt)

    lint = sub.add_parser(
        "lint",
        help="check a model for everything ncnn does not (exit 1 on errors)",
        description="Collect every independent finding in one run: header counts, SSA blobs, fan-out "
        "without Split, literal types against the layer catalog, unconverted ops, per-layer rules, the "
        "declared interface and, with --bin, the exact-offset weight walk and every weight's values.",
    )
    lint.add_argument("input", help="the .param (text or .param.bin)")
    lint.add_argument("--bin", help="the .bin to walk and scan")
    lint.add_argument("--inputs", action="append", metavar="A,B", help="declared input blobs")
    lint.add_argument("--outputs", action="append", metavar="X,Y", help="declared output blobs")
    lint.add_argument(
        "--custom",
        action="append",
        metavar="TYPE[:SLOT=LOAD(EXPR),...]",
        help="declare a custom layer type and its weight loads (LOAD tagged|raw, EXPR over p0..p29)",
    )
    lint.add_argument("--format", choices=["text", "json"], default="text")
    lint.set_defaults(func=cmd_lint)

    add_diff_bin_parser(sub)

    apply = sub.add_parser(
        "apply",
        help="run a rule file on a model (or the models it names)",
        description="Load a YAML rule file, run each graph's rules in order (each to a fixed point, with "
        "expected match counts), and write the results with their original file names into --out, with a "
        "*.gsurg.json provenance sidecar.",
    )
    apply.add_argument("rules", help="the rule file (YAML)")
    apply.add_argument("input", nargs="?", help="the model's .param, available to the rules as input 'model'")
    apply.add_argument("--bin", help="the model's .bin")
    apply.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a rule-file variable")
    apply.add_argument("--out", help="output folder")
    apply.add_argument(
        "--strict", action="store_true", help="re-lint after every rule; stop at the first break"
    )
    apply.add_argument("--dry-run", action="store_true", help="run the rules, write nothing")
    apply.add_argument(
        "--explain", metavar="RULE", help="show every candidate layer of RULE and why it matched"
    )
    apply.add_argument(
        "--keep-work", action="store_true", help="keep the work folder of pnnx exports (removed by default)"
    )
    apply.add_argument("-v", "--verbose", action="store_true", help="report each step on stderr")
    apply.set_defaults(func=cmd_apply)

    verify = sub.add_parser(
        "verify",
        help="run a converted model in the ncnn wheel against its PyTorch reference, stage by stage",
        description="Load the models a rule file wrote (DIR/model.json names them and the verifier that "
        "knows the model), run them with exact fp32 options beside the PyTorch reference, and print each "
        "stage's cosine, max |diff| and NaN count, and greedy tokens side by side. Exit 1 when a stage is "
        "below cosine 0.99999, has NaN/Inf, or tokens differ.",
    )
    verify.add_argument("folder", help="the output folder of gsurg apply")
    verify.add_argument("--checkpoint", help="the reference checkpoint (default: the one converted)")
    verify.add_argument("--image", action="append", help="an image (repeat for several)")
    verify.add_argument("--prompt", action="append", help="a prompt (repeat for several)")
    verify.add_argument("--tokens", type=int, default=32, help="greedy tokens per case (default 32)")
    verify.add_argument("--threads", type=int, default=1)
    verify.add_argument("--format", choices=["text", "json"], default="text")
    verify.add_argument("-v", "--verbose", action="store_true", help="report each step on stderr")
    verify.set_defaults(func=cmd_verify)

    schema = sub.add_parser("schema", help="print the JSON Schema of the rule-file language")
    schema.add_argument("what", choices=["rules"])
    schema.set_defaults(func=cmd_schema)

    synth = sub.add_parser(
        "synth-bin",
        help="write deterministic random weights for any .param",
        description="Write a .bin whose size is exactly what the .param's layers load, filled with "
        "seeded random values (like ncnnoptimize with a null bin, but reproducible).",
    )
    synth.add_argument("input", help="input .param or .param.bin")
    synth.add_argument("-o", "--output", required=True, help="output .bin")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument(
        "--storage", choices=["fp32", "fp16", "bf16"], default="fp32", help="tagged-slot storage"
    )
    synth.add_argument("--format", choices=["text", "json"], default="text", help="report format")
    synth.add_argument("-q", "--quiet", action="store_true")
    synth.set_defaults(func=cmd_synth_bin)
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
    if args.command == "diff-bin":  # its command lives in check/diff_bin.py; it only reads
        warn_pending(args.a, args.b, args.param_a, args.param_b)
    try:
        return int(args.func(args))
    except GsurgError as err:
        print(f"gsurg: error: {err}", file=sys.stderr)
        return err.exit_code
    except OSError as err:  # a last resort: every known failure is a GsurgError naming its path
        where = f"{os.fsdecode(err.filename)}: " if err.filename is not None else ""
        print(f"gsurg: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
