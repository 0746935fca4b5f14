"""``gsurg apply``, ``gsurg verify`` and ``gsurg schema``: running rule files and checking their results."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from graphsurgeon.cli.apply_text import (
    explanation_json,
    explanation_text,
    parse_sets,
    runs_json,
    summary,
    table,
)
from graphsurgeon.cli.common import add_report_options, path_arg, report_text
from graphsurgeon.cli.conversions import resolve_rules
from graphsurgeon.pipeline.apply import explain_rule, run_apply
from graphsurgeon.progress import Progress
from graphsurgeon.rewrite.read_scope import TRUST_FLAG
from graphsurgeon.rewrite.rulefile import json_schema as rules_json_schema


def cmd_apply(args: argparse.Namespace) -> int:
    resolve_rules(args)
    sets = parse_sets(args.set or [])
    progress = Progress(verbose=args.verbose)
    notes: list[str] = []

    def notice(message: str) -> None:
        """Before an export source runs: a line of --dry-run's output (printed before the code runs), a
        progress line otherwise (stderr, on a terminal or with -v), so error output stays one line."""
        notes.append(message)
        if args.dry_run and args.format == "text" and not args.quiet:
            print(f"note: {message}", flush=True)
        else:
            progress(f"note: {message}")

    if args.explain:
        found = explain_rule(
            args.rules,
            args.explain,
            args.input,
            args.bin,
            sets,
            strict=args.strict,
            notice=progress,
            trusted=args.trust_rule_file,
        )
        report_text(args, explanation_text(found), explanation_json(found))
        return 0

    reads: list[str] = []
    runs = run_apply(
        args.rules,
        args.input,
        args.bin,
        sets,
        args.out,
        strict=args.strict,
        dry_run=args.dry_run,
        keep_work=args.keep_work,
        progress=progress,
        notice=notice,
        trusted=args.trust_rule_file,
        reads=reads,
    )
    folder = next((run.folder for run in runs if run.folder is not None), args.out)
    lines = [summary(runs)]
    if args.dry_run:
        ran = "its source: Python code ran" if notes else "no code ran"
        lines += [f"reads: {path}" for path in reads]
        lines.append(f"dry run: nothing written; {ran}")
    else:
        lines += [table(runs), f"wrote {folder}"]
    report_text(
        args, "\n".join(lines), runs_json(runs, folder, dry_run=args.dry_run, notes=notes, reads=reads)
    )
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from graphsurgeon.verify.run import VerifyOptions, run_verify  # ncnn and the reference load here

    progress = Progress(verbose=args.verbose)
    options = VerifyOptions(
        checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        images=[Path(p) for p in args.image or []],
        prompts=list(args.prompt or []),
        tokens=args.tokens,
        threads=args.threads,
        progress=progress,
        precision=args.precision,
    )
    report = run_verify(Path(args.folder), options)
    report_text(args, report.to_text(), report.to_json())
    return report.exit_code


def cmd_schema(args: argparse.Namespace) -> int:
    print(rules_json_schema())
    return 0


def register(sub: Any) -> None:
    apply = sub.add_parser(
        "apply",
        help="run a rule file, or a shipped conversion by name, on a model (or the models it names)",
        description="Load a YAML rule file (or the rule file of a conversion named as gsurg conversions "
        "lists them), run each graph's rules in order (each to a fixed point, with expected match counts), "
        "and write the results with their original file names into --out, with a *.gsurg.json provenance "
        "sidecar.",
    )
    apply.add_argument(
        "rules",
        metavar="RULES|NAME",
        help="the rule file (YAML), or a conversion's name (gsurg conversions; --out defaults to out/NAME)",
    )
    apply.add_argument(
        "input", nargs="?", type=path_arg, help="the model's .param, available to the rules as input 'model'"
    )
    apply.add_argument("--bin", type=path_arg, help="the model's .bin")
    apply.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a rule-file variable")
    apply.add_argument("--out", type=path_arg, help="output folder")
    apply.add_argument(
        "--checkpoint",
        type=path_arg,
        metavar="DIR",
        help="the checkpoint to convert (the same as --set checkpoint=DIR)",
    )
    apply.add_argument(
        "--trained",
        action="store_true",
        help="with NAME: convert the family's trained fixture (gsurg conversions says which ship one)",
    )
    apply.add_argument(
        "--strict", action="store_true", help="re-lint after every rule; stop at the first break"
    )
    apply.add_argument(
        "--dry-run",
        action="store_true",
        help="run the rules, write nothing; list the files the rule file reads",
    )
    apply.add_argument(
        TRUST_FLAG,
        action="store_true",
        help="let the rule file read files outside its folder, gsurg's own files and the paths given on the "
        "command line, and write to an outputs.dir outside the working folder",
    )
    apply.add_argument(
        "--explain", metavar="RULE", help="show every candidate layer of RULE and why it matched"
    )
    apply.add_argument(
        "--keep-work", action="store_true", help="keep the work folder of pnnx exports (removed by default)"
    )
    apply.add_argument("-v", "--verbose", action="store_true", help="report each step on stderr")
    add_report_options(apply)
    apply.set_defaults(func=cmd_apply)

    verify = sub.add_parser(
        "verify",
        help="run a converted model in the ncnn wheel against its PyTorch reference, stage by stage",
        description="Load the models a rule file wrote (DIR/model.json names them and the verifier that "
        "knows the model), run them (exact fp32 options unless --precision says otherwise) beside the "
        "PyTorch reference, and print each stage's cosine, max |diff| and NaN count, and tokens side by "
        "side (the ncnn argmax at each step, fed the reference's tokens) with their agreement and KL "
        "divergence. Exit 1 below the criteria of the precision and the conversion's weight storage: for "
        "exact fp32, a stage below cosine 0.99999, NaN/Inf, or tokens that differ. A conversion whose "
        "fp16/bf16 weights the weight maps show to be the checkpoint's own values (a bf16 checkpoint "
        "stored bf16) is held to the exact criteria at fp32 too.",
    )
    verify.add_argument("folder", help="the output folder of gsurg apply")
    verify.add_argument("--checkpoint", help="the reference checkpoint (default: the one converted)")
    verify.add_argument("--image", action="append", help="an image (repeat for several)")
    verify.add_argument("--prompt", action="append", help="a prompt (repeat for several)")
    verify.add_argument("--tokens", type=int, default=32, help="greedy tokens per case (default 32)")
    verify.add_argument("--threads", type=int, default=1)
    verify.add_argument(
        "--precision",
        choices=("fp32", "fp16", "auto"),  # verify.ncnn_fp32.PRECISIONS, without importing ncnn here
        default="fp32",
        help="how the ncnn wheel runs the nets: fp32 (exact; the default), fp16 (fp16 storage, packing and "
        "arithmetic except in the layers calibration marked), auto (ncnn's defaults for this CPU); "
        "block-quantized weights run their int kernels at every precision. The pass criteria follow "
        "the precision and the conversion's weight storage",
    )
    add_report_options(verify)
    verify.add_argument("-v", "--verbose", action="store_true", help="report each step on stderr")
    verify.set_defaults(func=cmd_verify)

    schema = sub.add_parser("schema", help="print the JSON Schema of the rule-file language")
    schema.add_argument("what", choices=["rules"])
    schema.set_defaults(func=cmd_schema)
