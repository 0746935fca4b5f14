"""``gsurg eval``: conversions answering a held-out evaluation set in the ncnn wheel or, with ``--runner``,
through the C++ runner's batch mode (``graphsurgeon.evaluation``), reported as text, JSON or a Markdown
table."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from graphsurgeon.cli.common import UsageError, add_report_options, path_arg
from graphsurgeon.progress import Progress

PRECISIONS = ("fp32", "fp16", "auto")  # verify.ncnn_fp32.PRECISIONS, without importing ncnn here


def _precisions(text: str) -> list[str]:
    values = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in values if p not in PRECISIONS]
    if not values or bad:
        raise UsageError(f"--precision: {bad[0] if bad else text!r} is not one of {', '.join(PRECISIONS)}")
    return values


def cmd_eval(args: argparse.Namespace) -> int:
    from graphsurgeon.evaluation.report import to_markdown, to_text
    from graphsurgeon.evaluation.run import evaluate, report_json
    from graphsurgeon.evaluation.runner_batch import RunnerOptions
    from graphsurgeon.evaluation.sets import find_set

    eval_set = find_set(args.set)
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit: expected a positive count, got {args.limit}")
    if args.tokens < 1 or args.threads < 1:
        bad = min(args.tokens, args.threads)
        raise UsageError(f"--tokens and --threads take a positive count, not {bad}")
    runner = None
    if args.runner is not None:
        program = Path(args.runner)
        if not program.is_file() or not os.access(program, os.X_OK):
            raise UsageError(f"--runner: {program} is not an executable file (the C++ runner, gsurg_run)")
        runner = RunnerOptions(program, args.int4_activations or "fp32")
    elif args.int4_activations is not None:
        raise UsageError("--int4-activations goes with --runner: only the C++ runner computes 4-bit Gemms so")
    folders = [Path(f) for f in args.folders]
    for folder in [*folders, *([Path(args.reference)] if args.reference else [])]:
        if not (folder / "model.json").is_file():
            raise UsageError(f"{folder}: no model.json (not a folder gsurg apply wrote)")
    items = eval_set.load(args.limit)
    report = evaluate(
        folders,
        items,
        set_name=eval_set.name,
        chance=eval_set.chance(items),
        reference=Path(args.reference) if args.reference else None,
        precisions=_precisions(args.precision),
        max_tokens=args.tokens,
        threads=args.threads,
        progress=Progress(verbose=args.verbose),
        runner=runner,
    )
    if not args.quiet:
        if args.format == "json":
            print(json.dumps(report_json(report), indent=1))
        elif args.format == "markdown":
            print(to_markdown(report))
        else:
            print(to_text(report))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="run conversions over a held-out evaluation set: task accuracy, agreement and KL",
        description="Run each conversion folder's nets in the ncnn wheel over the evaluation set (its family "
        "turns a question into prompt ids), greedily, and report the share of answers that are right. With "
        "--reference (normally the fp32 conversion of the same checkpoint) each conversion is also fed the "
        "reference's answer tokens: the share of steps whose argmax is the reference's token (agreement) and "
        "the mean KL(reference || conversion) of the next-token distributions. With --runner the conversions "
        "answer through the C++ runner's batch mode instead (one run per conversion and precision; the "
        "reference still in the wheel): accuracy and the answers equal to the reference's, no agreement "
        "or KL (the runner gives no logits).",
    )
    p.add_argument(
        "folders", nargs="+", type=path_arg, metavar="DIR", help="conversion folders (gsurg apply's --out)"
    )
    p.add_argument(
        "--set", required=True, metavar="NAME", help="the evaluation set (text-tasks, vqa, vqa-blank)"
    )
    p.add_argument(
        "--reference",
        type=path_arg,
        metavar="DIR",
        help="the conversion agreement and KL are measured against",
    )
    p.add_argument(
        "--precision",
        default="fp32",
        metavar="P[,P]",
        help="how the ncnn wheel runs the nets, one or more of fp32, fp16, auto (default fp32)",
    )
    p.add_argument("--limit", type=int, help="the first N items only")
    p.add_argument("--tokens", type=int, default=8, help="answer tokens at most (default 8)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--runner",
        type=path_arg,
        metavar="PATH",
        help="answer through this C++ runner (gsurg_run, runtime_cpp/) instead of the ncnn wheel",
    )
    p.add_argument(
        "--int4-activations",
        choices=("fp32", "int8"),
        help="with --runner: int8 runs 4-bit Gemms on inputs rounded to 8 bits (the runner's w4a8 kernel)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="report progress on stderr")
    add_report_options(p, formats=("text", "json", "markdown"))
    p.set_defaults(func=cmd_eval)
