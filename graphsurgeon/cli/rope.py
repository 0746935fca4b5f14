"""``gsurg rope``: the MRoPE angles of a prompt layout under one or more layouts, and how they differ. The
computation is ``verify.mrope``, the settings file reader ``verify.mrope_settings``; this module holds the
arguments and the text, JSON and markdown output."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from graphsurgeon.cli.common import UsageError, add_report_options
from graphsurgeon.verify.mrope import AXES, LAYOUTS, RopeSettings, parse_layout
from graphsurgeon.verify.mrope_compare import Comparison, Difference, RopeReport, rope_report
from graphsurgeon.verify.mrope_settings import load_settings

OTHER = {"interleaved": "block", "block": "interleaved"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rope",
        help="MRoPE positions and angles of a prompt layout; compare interleaved, block and 1-D layouts",
        description="Compute the 3-D MRoPE position (t, h, w) of every token of a prompt layout (HF's "
        "get_rope_index counter), the axis each rotary frequency slot reads under each layout and the angle "
        "pos*inv_freq; compare the first layout with the others: slots each layout can vary across an image, "
        "the largest |delta angle| with its token, slot and position. Settings from a model.json, a "
        "checkpoint's config.json (or its folder), or the flags.",
    )
    parser.add_argument(
        "settings",
        nargs="?",
        metavar="SETTINGS",
        help="model.json, config.json or a checkpoint folder (optional with --theta, --head-dim and "
        "--mrope-section)",
    )
    parser.add_argument(
        "--layout",
        required=True,
        metavar="LAYOUT",
        help="the prompt, e.g. text:3,image:1x8x6,text:2; an image is its patch grid TxHxW as "
        "image_grid_thw (t=1; h, w multiples of the spatial merge)",
    )
    parser.add_argument(
        "--compare",
        metavar="A,B[,C]",
        help=f"layouts to show, the first compared with each other one: {', '.join(LAYOUTS)} (default: the "
        "model's layout and the other MRoPE one, else interleaved,block)",
    )
    parser.add_argument("--theta", metavar="X", help="override the RoPE base")
    parser.add_argument("--head-dim", metavar="N", help="override head_dim (slots = head_dim/2)")
    parser.add_argument(
        "--mrope-section", metavar="T,H,W", help="override mrope_section as T,H,W (summing to head_dim/2)"
    )
    parser.add_argument(
        "--merge", metavar="N", help="override the spatial merge (default: the settings', else 2)"
    )
    parser.add_argument(
        "--top", default="5", metavar="N", help="largest differences listed per comparison (default 5)"
    )
    add_report_options(parser, formats=("text", "json", "md"))
    parser.set_defaults(func=cmd_rope)


def _int(flag: str, value: str, least: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"{flag}: expected an integer, got {value!r}") from None
    if number < least:
        raise UsageError(f"{flag}: must be >= {least}, got {number}")
    return number


def _settings(args: argparse.Namespace) -> RopeSettings:
    overrides: dict[str, Any] = {}
    where: dict[str, str] = {}
    if args.theta is not None:
        try:
            overrides["theta"] = float(args.theta)
        except ValueError:
            raise UsageError(f"--theta: expected a number, got {args.theta!r}") from None
        where["theta"] = "--theta"
    if args.head_dim is not None:
        overrides["head_dim"], where["head_dim"] = _int("--head-dim", args.head_dim, 2), "--head-dim"
    if args.mrope_section is not None:
        parts = args.mrope_section.split(",")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise UsageError(f"--mrope-section: expected three integers T,H,W, got {args.mrope_section!r}")
        overrides["mrope_section"] = tuple(int(p) for p in parts)
        where["mrope_section"] = "--mrope-section"
    if args.merge is not None:
        overrides["merge"], where["merge"] = _int("--merge", args.merge, 1), "--merge"
    if args.settings is None:
        needed = (("--theta", "theta"), ("--head-dim", "head_dim"), ("--mrope-section", "mrope_section"))
        missing = [flag for flag, key in needed if key not in overrides]
        if missing:
            raise UsageError(
                "give SETTINGS (a model.json, config.json or checkpoint folder) or --theta, --head-dim and "
                f"--mrope-section (missing: {', '.join(missing)})"
            )
        base = RopeSettings(overrides["theta"], overrides["head_dim"], overrides["mrope_section"])
    else:
        base = load_settings(args.settings)
    flags = ", ".join(where.values())
    source = base.source if not flags else (f"{base.source} with {flags}" if args.settings else "flags")
    return replace(base, **overrides, where={**base.where, **where}, source=source).validate()


def _layouts(args: argparse.Namespace, settings: RopeSettings) -> list[str]:
    if args.compare is None:
        first = settings.layout or "interleaved"
        return [first, OTHER[first]]
    names = [n.strip() for n in args.compare.split(",")]
    for name in names:
        if name not in LAYOUTS:
            raise UsageError(f"--compare: unknown layout {name!r} (known: {', '.join(LAYOUTS)})")
    if len(set(names)) != len(names):
        raise UsageError(f"--compare: a layout is named twice in {args.compare!r}")
    return names


def cmd_rope(args: argparse.Namespace) -> int:
    settings = _settings(args)
    layouts = _layouts(args, settings)
    top = _int("--top", args.top, 1)
    segments = parse_layout(args.layout, settings.merge, flag="--layout")
    report = rope_report(settings, segments, layouts, top=top)
    for note in report.notes:
        print(f"gsurg: note: {note}", file=sys.stderr)
    if args.quiet:
        return 0
    if args.format == "json":
        print(json.dumps(report.to_json()))  # compact: the per-token lists are long
    elif args.format == "md":
        sys.stdout.write(render_md(report))
    else:
        sys.stdout.write(render_text(report))
    return 0


def _g(x: float) -> str:
    return f"{x:.6g}"


def _pos(p: tuple[int, int, int] | list[int]) -> str:
    return "({},{},{})".format(*p)


def _diff_line(d: Difference, a: str, b: str) -> str:
    tok = d.token
    return (
        f"|Δangle| {_g(abs(d.delta))} rad at token {tok.index} ({tok.label()}, position {_pos(tok.position)})"
        f" slot {d.slot}: {a} {d.axis_a}={d.coord_a} -> {_g(d.angle_a)}, {b} {d.axis_b}={d.coord_b} -> "
        f"{_g(d.angle_b)}"
    )


def _variation_text(report: RopeReport, name: str, image: int) -> str:
    v = report.variations[name][image]
    parts = [f"{a} {v.by_axis[a]} (max span {_g(v.span[a])} rad, slot {v.span_slot[a]})" for a in AXES]
    axes = ", ".join(part for a, part in zip(AXES, parts, strict=True) if v.by_axis[a])
    return f"{name} varies {v.varying_slots} slots ({2 * v.varying_slots} dims){': ' + axes if axes else ''}"


def _summary(c: Comparison, total: int) -> str:
    return (
        f"{c.a} vs {c.b}: {c.slots_other_axis} slots read another axis; {c.tokens_changed} of {total} "
        f"tokens and {c.angles_changed} angles change"
    )


def render_text(report: RopeReport) -> str:
    s, prompt = report.settings, report.prompt
    lines = [
        f"rope: theta {_g(float(s.theta))}, head_dim {s.head_dim} ({s.slots} slots), mrope_section "
        f"[{','.join(map(str, s.mrope_section))}], merge {s.merge}; model layout {s.layout or 'unknown'} "
        f"(from {s.source})",
        f"prompt: {len(prompt.tokens)} tokens, next position {prompt.next_position} "
        f"(rope delta {prompt.rope_delta}), {len(prompt.images)} image(s)",
        "slots per axis: " + " | ".join(f"{t.name} {_counts(t.axis_counts())}" for t in report.tables),
    ]
    for img in prompt.images:
        last = img.first + img.count - 1
        lines.append(
            f"image {img.image}: tokens {img.first}-{last}, grid {'x'.join(map(str, img.grid))} -> tokens "
            f"{'x'.join(map(str, img.tokens))}"
        )
        lines.extend(f"  {_variation_text(report, t.name, img.image)}" for t in report.tables)
    for c in report.comparisons:
        lines.append(_summary(c, len(prompt.tokens)))
        if c.largest is None:
            lines.append("  no angle differs")
            continue
        lines.append(f"  largest {_diff_line(c.largest, c.a, c.b)}")
        lines.extend(f"  then    {_diff_line(d, c.a, c.b)}" for d in c.top[1:])
    lines.append("(per-token tables: --format json or md)")
    return "\n".join(lines) + "\n"


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{a}{n}" for a, n in counts.items())


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_md(report: RopeReport) -> str:
    s, prompt = report.settings, report.prompt
    names = [t.name for t in report.tables]
    out = [
        "# gsurg rope",
        "",
        f"theta {_g(float(s.theta))}, head_dim {s.head_dim} ({s.slots} slots), mrope_section "
        f"[{','.join(map(str, s.mrope_section))}], spatial merge {s.merge}, model layout "
        f"{s.layout or 'unknown'} (from {s.source}).",
        "",
        f"{len(prompt.tokens)} tokens; the next (decode) position is {prompt.next_position} on all axes "
        f"(rope delta {prompt.rope_delta}).",
        "",
    ]
    out.extend(f"- note: {note}" for note in report.notes)
    if report.notes:
        out.append("")
    if prompt.images:
        out += ["## Images", "", _row(["image", "tokens", "grid", "token grid", *names])]
        out.append(_row(["---"] * (4 + len(names))))
        for img in prompt.images:
            cells = []
            for name in names:
                v = report.variations[name][img.image]
                per = " ".join(f"{a}{v.by_axis[a]}" for a in AXES if v.by_axis[a])
                cells.append(f"{v.varying_slots} slots ({per or 'none'})")
            last = img.first + img.count - 1
            grids = ["x".join(map(str, img.grid)), "x".join(map(str, img.tokens))]
            out.append(_row([str(img.image), f"{img.first}-{last}", *grids, *cells]))
        out.append("")
    if report.comparisons:
        out += ["## Comparisons", ""]
        head = ["a", "b", "slots on another axis", "tokens changed", "largest abs Δangle", "token", "kind"]
        head += ["position (t,h,w)", "slot", "a: axis=coord angle", "b: axis=coord angle"]
        out += [_row(head), _row(["---"] * len(head))]
        for c in report.comparisons:
            d = c.largest
            if d is None:
                out.append(_row([c.a, c.b, str(c.slots_other_axis), "0", "0", *["-"] * (len(head) - 5)]))
                continue
            cells = [c.a, c.b, str(c.slots_other_axis), str(c.tokens_changed), _g(abs(d.delta))]
            cells += [str(d.token.index), d.token.label(), _pos(d.token.position), str(d.slot)]
            cells += [f"{d.axis_a}={d.coord_a} {_g(d.angle_a)}", f"{d.axis_b}={d.coord_b} {_g(d.angle_b)}"]
            out.append(_row(cells))
        out.append("")
    out += ["## Slots", "", _row(["slot", "inv_freq", *names]), _row(["---"] * (2 + len(names)))]
    for i in range(s.slots):
        out.append(_row([str(i), _g(float(report.inv_freq[i])), *(AXES[t.axes[i]] for t in report.tables)]))
    out.append("")
    for t in report.tables:
        out += [f"## Tokens, {t.name}", "", "Each slot's cell: axis=coordinate angle.", ""]
        out.append(_row(["token", "kind", "t", "h", "w", *(f"s{i}" for i in range(s.slots))]))
        out.append(_row(["---"] * (5 + s.slots)))
        for tok in prompt.tokens:
            cells = [
                f"{AXES[t.axes[i]]}={t.coords[tok.index, i]} {_g(float(t.angles[tok.index, i]))}"
                for i in range(s.slots)
            ]
            out.append(_row([str(tok.index), tok.label(), *map(str, tok.position), *cells]))
        out.append("")
    return "\n".join(out)
