"""The shipped conversions by name: ``gsurg conversions`` lists the model families (what each converts and
needs), and ``gsurg apply NAME`` finds a family's rule file through ``graphsurgeon.registry``, so an
installed wheel converts a model without a checkout's paths."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from graphsurgeon.cli.common import UsageError, add_report_options, report_text
from graphsurgeon.registry import Family, RegistryError, families, find_family

#: Where ``gsurg apply NAME`` writes without ``--out``: ``out/NAME`` under the current folder.
DEFAULT_OUT = "out"


def looks_like_name(text: str) -> bool:
    """Whether ``gsurg apply``'s first argument names a conversion rather than a rule file: no folder
    separator, no YAML suffix, and no such file in the current folder."""
    if os.sep in text or "/" in text or text.endswith((".yaml", ".yml")):
        return False
    return not os.path.exists(text)


def resolve_rules(args: argparse.Namespace) -> None:
    """Turn ``gsurg apply NAME`` into its family's rule file, with ``--out`` defaulting to ``out/NAME``;
    fold ``--checkpoint DIR`` (or ``--trained``: the family's trained fixture) into the variables as
    ``--set checkpoint=DIR``."""
    if getattr(args, "trained", False):
        if args.checkpoint is not None:
            raise UsageError("give --trained or --checkpoint DIR, not both")
        if not looks_like_name(args.rules):
            raise UsageError(f"--trained: {args.rules} is a rule file; --trained takes a conversion name")
        try:
            family = find_family(args.rules)
        except RegistryError as err:
            raise UsageError(f"{args.rules}: not a conversion name ({err})") from None
        if family.trained_checkpoint is None:
            raise UsageError(f"--trained: conversion {family.name!r} ships no trained fixture")
        args.checkpoint = str(family.trained_checkpoint)
    if args.checkpoint is not None:
        if any(item.split("=", 1)[0].strip() == "checkpoint" for item in args.set or []):
            raise UsageError("give the checkpoint once: --checkpoint DIR or --set checkpoint=DIR")
        args.set = [*(args.set or []), f"checkpoint={args.checkpoint}"]
    if not looks_like_name(args.rules):
        return
    try:
        family = find_family(args.rules)
    except RegistryError as err:
        raise UsageError(f"{args.rules}: neither a rule file nor a conversion name ({err})") from None
    args.rules = str(family.rules)
    if args.out is None:
        args.out = os.path.join(DEFAULT_OUT, family.name)


def _entry(family: Family) -> dict[str, Any]:
    return {
        "name": family.name,
        "title": family.title,
        "summary": family.summary,
        "rules": str(family.rules),
        "needs": family.needs,
        "default_checkpoint": None if family.default_checkpoint is None else str(family.default_checkpoint),
        "trained_checkpoint": None if family.trained_checkpoint is None else str(family.trained_checkpoint),
        "eval_sets": list(family.eval_sets),
        "model_types": list(family.model_types),
    }


def _text(found: tuple[Family, ...]) -> str:
    lines: list[str] = []
    for family in found:
        default = "the embedded tiny checkpoint" if family.default_checkpoint else "none: --checkpoint needed"
        lines += [
            f"{family.name}: {family.title}",
            f"  converts: {family.summary}",
            f"  needs:    {family.needs} (--checkpoint DIR; default: {default})",
            f"  command:  gsurg apply {family.name} [--checkpoint DIR] [--out DIR] [--set storage=...]",
            *(
                [f"  trained:  gsurg apply {family.name} --trained, then gsurg eval DIR --set {sets[0]}"]
                if family.trained_checkpoint is not None and (sets := family.eval_sets)
                else []
            ),
            "",
        ]
    lines.append(f"{len(found)} conversions")
    return "\n".join(lines)


def cmd_conversions(args: argparse.Namespace) -> int:
    found = families()
    report_text(args, _text(found), json.dumps({"conversions": [_entry(f) for f in found]}, indent=2))
    return 0


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "conversions",
        help="list the model conversions that ship with gsurg, with what each needs",
        description="List the model families gsurg converts by name (gsurg apply NAME): what each converts, "
        "the checkpoint folder it needs, and its rule file.",
    )
    add_report_options(parser)
    parser.set_defaults(func=cmd_conversions)
