#!/usr/bin/env python3
"""Benchmark gsurg's core I/O paths: text .param parse/emit and the .bin synth/walk/re-emit.

Every case runs in a fresh subprocess, so its peak RSS is its own: the driver reads the child's
``ru_maxrss`` from ``os.wait4`` and Python children also print their own ``VmHWM``. Baselines are measured
in the same run so ratios are comparable across machines:

* parse time vs a naive ``text.split()`` of the same file (what one-off scripts do);
* ``walk_bin`` vs a raw sequential ``readinto`` of the same .bin in 8 MiB chunks (the I/O floor);
* ``read_bin`` + ``write_bin`` vs ``shutil.copyfile`` + ``fsync`` (``write_bin`` fsyncs too), in interleaved
  pairs with a warm and with a cold page cache;
* peak RSS vs a bare ``python -c "import numpy"``.

Run ``python benchmarks/bench_core.py`` (full, needs ~6 GiB free in /tmp) or ``--quick`` (no .bin cases,
10k generated layers); ``--json OUT`` writes every figure. See benchmarks/README.md. The .bin cases live in
``bin_cases.py``, the process and report plumbing in ``harness.py``.

The driver itself imports only the standard library (no numpy, no graphsurgeon) so that it stays small:
a vfork()ed child's ``ru_maxrss`` can include the parent's resident size.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import bin_cases
import bin_children
from harness import (
    MAGIC,
    KiB,
    MiB,
    Report,
    Row,
    emit_result,
    fmt_ratio,
    layer_line,
    machine,
    mb,
    rss_ratio,
    run_child,
    timed,
    timed_cpu,
    vm_hwm_kib,
)

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
QWEN_PARAM = CORPUS / "llm" / "qwen3_0.6b_decoder.ncnn.param"
REPEATS = 5
PAIRS = 5


# --------------------------------------------------------------------------------------------------------
# Generated input
# --------------------------------------------------------------------------------------------------------


def generate_mixed_param(path: Path, n_layers: int) -> tuple[int, int]:
    """Write a text .param of exactly ``n_layers`` layers: one Input, then repeated blocks of
    Convolution (int params, a float and an old-style float array) -> ReLU (float slope) -> Split (1 -> 2)
    -> InnerProduct -> BinaryOp add (residual, two bottoms) -> BinaryOp mul by a scalar float, topped up
    with ReLU layers. Returns (layers, blobs) as written in the header."""
    if n_layers < 2:
        raise ValueError("need at least 2 layers")
    lines: list[str] = [layer_line("Input", "in0", [], ["in0"], "0=8 1=8 2=16")]
    blobs = 1
    cur = "in0"
    block = 0
    while len(lines) + 6 <= n_layers:
        k = block
        conv, relu, sa, sb, fc, add, mul = (f"{p}{k}" for p in ("c", "r", "sa", "sb", "f", "a", "m"))
        lines += [
            layer_line(
                "Convolution",
                f"conv_{k}",
                [cur],
                [conv],
                "0=16 1=3 11=3 3=1 4=1 14=1 5=1 6=2304 9=2 -23310=1,1.000000e-01",
            ),
            layer_line("ReLU", f"relu_{k}", [conv], [relu], "0=1.000000e-02"),
            layer_line("Split", f"splitncnn_{k}", [relu], [sa, sb], ""),
            layer_line("InnerProduct", f"fc_{k}", [sa], [fc], "0=1024 1=1 2=1048576 9=3 -23310=2,-1.0,6.0"),
            layer_line("BinaryOp", f"add_{k}", [fc, sb], [add], "0=0"),
            layer_line("BinaryOp", f"mul_{k}", [add], [mul], f"0=2 1=1 2={0.5 + (k % 7) * 0.125:.6e}"),
        ]
        blobs += 7
        cur = mul
        block += 1
    extra = 0
    while len(lines) < n_layers:
        top = f"t{extra}"
        lines.append(layer_line("ReLU", f"relu_tail_{extra}", [cur], [top], ""))
        cur = top
        blobs += 1
        extra += 1
    text = f"{MAGIC}\n{len(lines)} {blobs}\n" + "\n".join(lines) + "\n"
    path.write_text(text, encoding="ascii")
    return len(lines), blobs


# --------------------------------------------------------------------------------------------------------
# Children: each runs in its own interpreter (``bench_core.py --child NAME ARGS...``)
# --------------------------------------------------------------------------------------------------------


def child_parse_emit(param: str, repeats: str) -> None:
    """Median-of-N read_param_text, then median-of-N emit_param_text of the last graph."""
    from graphsurgeon.formats.emit_text import emit_param_text
    from graphsurgeon.formats.param_text import read_param_text

    n = int(repeats)
    parse_times: list[float] = []
    parse_cpu: list[float] = []
    graph: Any = None
    for _ in range(n):
        graph = None  # hold at most one graph at a time
        gc.collect()
        dt, cpu, graph = timed_cpu(lambda: read_param_text(param))
        parse_times.append(dt)
        parse_cpu.append(cpu)
    hwm_parse = vm_hwm_kib()
    emit_times: list[float] = []
    text = ""
    for _ in range(n):
        text = ""
        dt, text = timed(lambda: emit_param_text(graph))
        emit_times.append(dt)
    emit_result(
        {
            "parse_s": parse_times,
            "parse_cpu_s": parse_cpu,
            "emit_s": emit_times,
            "layers": len(graph.layers),
            "blobs": len(graph.blobs),
            "emit_chars": len(text),
            "vm_hwm_after_parse_kib": hwm_parse,
        }
    )


def child_split(param: str, repeats: str) -> None:
    """The naive baseline: read + decode + ``str.split()`` of the same file."""

    def naive() -> list[str]:
        with open(param, "rb") as fh:
            return fh.read().decode("utf-8").split()

    times: list[float] = []
    cpu_times: list[float] = []
    tokens: list[str] = []
    for _ in range(int(repeats)):
        tokens = []
        dt, cpu, tokens = timed_cpu(naive)
        times.append(dt)
        cpu_times.append(cpu)
    emit_result({"split_s": times, "split_cpu_s": cpu_times, "tokens": len(tokens)})


def child_gen_mixed(path: str, n_layers: str) -> None:
    layers, blobs = generate_mixed_param(Path(path), int(n_layers))
    emit_result({"layers": layers, "blobs": blobs})


CHILDREN: dict[str, Callable[..., None]] = {
    "gen_mixed": child_gen_mixed,
    "parse_emit": child_parse_emit,
    "split": child_split,
    **bin_children.CHILDREN,
}


# --------------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------------


def param_case(report: Report, label: str, param: Path) -> None:
    size = param.stat().st_size
    split = run_child("split", param, REPEATS)
    pe = run_child("parse_emit", param, REPEATS)
    r = pe.result
    t_split = statistics.median(split.result["split_s"])
    t_parse = statistics.median(r["parse_s"])
    t_emit = statistics.median(r["emit_s"])
    cpu_split = statistics.median(split.result["split_cpu_s"])
    cpu_parse = statistics.median(r["parse_cpu_s"])
    rss_parse = mb(r["vm_hwm_after_parse_kib"])
    report.raw[label] = {
        "bytes": size,
        "layers": r["layers"],
        "blobs": r["blobs"],
        "tokens": split.result["tokens"],
        "split_s": split.result["split_s"],
        "split_cpu_s": split.result["split_cpu_s"],
        "parse_s": r["parse_s"],
        "parse_cpu_s": r["parse_cpu_s"],
        "emit_s": r["emit_s"],
        "split_rss_mb": split.rss_mb,
        "parse_rss_mb": rss_parse,
        "parse_emit_rss_mb": pe.rss_mb,
        "parse_emit_proc_wall_s": pe.wall_s,
    }
    kib = size / KiB
    report.add(
        Row(
            f"{label}: text.split() baseline",
            t_split,
            split.rss_mb,
            "time baseline",
            f"{split.result['tokens']} tokens, {kib:.0f} KiB; median of {REPEATS}",
        )
    )
    report.add(
        Row(
            f"{label}: read_param_text",
            t_parse,
            rss_parse,
            f"{fmt_ratio(t_parse / t_split, 'split')}; {rss_ratio(rss_parse, report.numpy_rss)}",
            f"{r['layers']} layers, {r['layers'] / t_parse:,.0f} layers/s; median of {REPEATS} "
            f"(first call {r['parse_s'][0]:.3f} s incl. grammar build); CPU {cpu_parse:.3g} s = "
            f"{fmt_ratio(cpu_parse / cpu_split, 'split CPU')}; RSS = VmHWM after parsing",
        )
    )
    report.add(
        Row(
            f"{label}: emit_param_text",
            t_emit,
            pe.rss_mb,
            f"{fmt_ratio(t_emit / t_split, 'split')}; {rss_ratio(pe.rss_mb, report.numpy_rss)}",
            f"{r['emit_chars'] / t_emit / MiB:.1f} MiB/s of text; median of {REPEATS}; "
            "RSS = whole process (parse + emit)",
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["--child"]:
        CHILDREN[args_list[1]](*args_list[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="skip the .bin cases; 10k generated layers")
    parser.add_argument("--json", metavar="OUT", type=Path, help="also write every figure as JSON")
    parser.add_argument("--layers", type=int, help="generated param size (default 100000, quick 10000)")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="drop the .bin from the page cache before the readinto and walk cases",
    )
    parser.add_argument(
        "--pairs", type=int, default=PAIRS, help=f"re-emit/copyfile pairs per cache state (default {PAIRS})"
    )
    args = parser.parse_args(args_list)
    n_layers = args.layers or (10_000 if args.quick else 100_000)

    tmp = Path(tempfile.mkdtemp(prefix="gsurg-bench-", dir="/tmp"))
    report = Report(tmp, args.cold)
    report.raw["machine"] = machine()
    report.raw["options"] = {"quick": args.quick, "layers": n_layers, "cold": args.cold, "pairs": args.pairs}
    try:
        report.numpy_baseline()
        if QWEN_PARAM.is_file():
            param_case(report, "qwen3-0.6b decoder", QWEN_PARAM)
        else:
            report.log(f"SKIPPED case 1: {QWEN_PARAM} not found")
            report.add(Row("qwen3-0.6b decoder", None, None, "-", f"SKIPPED: {QWEN_PARAM} not found"))
        gen = tmp / f"mixed_{n_layers}.param"
        made = run_child("gen_mixed", gen, n_layers).result  # in a child: keeps the driver small
        layers, blobs = made["layers"], made["blobs"]
        report.log(
            f"generated {gen.name}: {layers} layers, {blobs} blobs, {gen.stat().st_size / MiB:.1f} MiB"
        )
        param_case(report, f"generated {layers // 1000}k layers", gen)
        gen.unlink()
        if args.quick:
            report.log("--quick: .bin cases skipped")
        else:
            bin_cases.synth_rss_case(report)
            bin_cases.many_records_case(report, args.pairs)
            bin_cases.big_bin_case(report, args.pairs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    report.raw["driver_vm_hwm_kib"] = vm_hwm_kib()
    report.raw["load_avg_end"] = list(os.getloadavg())
    print()
    print(report.table())
    if report.verdicts:
        print()
        print("\n".join(report.verdicts))
    if args.json:
        doc = {"rows": [asdict(r) for r in report.rows], "raw": report.raw, "verdicts": report.verdicts}
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 0 if all(v.startswith("PASS") for v in report.verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
