#!/usr/bin/env python3
"""Benchmark gsurg's core I/O paths: text .param parse/emit and the .bin synth/walk/re-emit.

Every case runs in a fresh subprocess, so its peak RSS is its own: the driver reads the child's
``ru_maxrss`` from ``os.wait4`` and Python children also print their own ``VmHWM``. Baselines are measured
in the same run so ratios are comparable across machines:

* parse time vs a naive ``text.split()`` of the same file (what one-off scripts do);
* ``walk_bin`` vs a raw sequential ``readinto`` of the same .bin in 8 MiB chunks (the I/O floor);
* ``read_bin`` + ``write_bin`` vs ``shutil.copyfile`` (+ ``fsync``, since ``write_bin`` fsyncs);
* peak RSS vs a bare ``python -c "import numpy"``.

Run ``python benchmarks/bench_core.py`` (full, needs ~6 GiB free in /tmp) or ``--quick`` (no 2 GiB case,
10k generated layers); ``--json OUT`` writes every figure. See benchmarks/README.md.

The driver itself imports only the standard library (no numpy, no graphsurgeon) so that it stays small:
a vfork()ed child's ``ru_maxrss`` can include the parent's resident size.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from page_cache import drop_from_page_cache

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
QWEN_PARAM = CORPUS / "llm" / "qwen3_0.6b_decoder.ncnn.param"

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
CHUNK = 8 * MiB
REPEATS = 5
RSS_LIMIT_MB = 512.0
MIN_FREE_DISK = 6 * GiB
BIG_LAYERS = 40  # InnerProduct 4096x4096 + bias: 64 MiB + 16 KiB + 4 bytes each, 2.5 GiB in all
BIG_DIM = 4096
RESULT_MARK = "BENCH_RESULT "
MAGIC = 7767517


# --------------------------------------------------------------------------------------------------------
# Helpers shared by driver and children (standard library only)
# --------------------------------------------------------------------------------------------------------


def vm_hwm_kib() -> int:
    """This process's peak resident set size (VmHWM) in KiB, or -1 where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def emit_result(payload: dict[str, Any]) -> None:
    """Print a child's result as one marked JSON line (the driver looks for the mark)."""
    payload["vm_hwm_kib"] = vm_hwm_kib()
    print(RESULT_MARK + json.dumps(payload), flush=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall and CPU time of ``fn()``. On a machine shared with other jobs, the CPU time of a
    single-threaded call leaves out the time other processes held the core."""
    c0, t0 = time.process_time(), time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, time.process_time() - c0, value


def mb(kib: float) -> float:
    return kib / 1024.0


# --------------------------------------------------------------------------------------------------------
# Generated inputs
# --------------------------------------------------------------------------------------------------------


def _line(layer_type: str, name: str, bottoms: Sequence[str], tops: Sequence[str], params: str) -> str:
    """One layer line in the column layout ncnn's converters and pnnx write."""
    head = f"{layer_type:<24} {name:<24} {len(bottoms)} {len(tops)}"
    blobs = " ".join([*bottoms, *tops])
    return f"{head} {blobs} {params}".rstrip()


def generate_mixed_param(path: Path, n_layers: int) -> tuple[int, int]:
    """Write a text .param of exactly ``n_layers`` layers: one Input, then repeated blocks of
    Convolution (int params, a float and an old-style float array) -> ReLU (float slope) -> Split (1 -> 2)
    -> InnerProduct -> BinaryOp add (residual, two bottoms) -> BinaryOp mul by a scalar float, topped up
    with ReLU layers. Returns (layers, blobs) as written in the header."""
    if n_layers < 2:
        raise ValueError("need at least 2 layers")
    lines: list[str] = [_line("Input", "in0", [], ["in0"], "0=8 1=8 2=16")]
    blobs = 1
    cur = "in0"
    block = 0
    while len(lines) + 6 <= n_layers:
        k = block
        conv, relu, sa, sb, fc, add, mul = (f"{p}{k}" for p in ("c", "r", "sa", "sb", "f", "a", "m"))
        lines += [
            _line(
                "Convolution",
                f"conv_{k}",
                [cur],
                [conv],
                "0=16 1=3 11=3 3=1 4=1 14=1 5=1 6=2304 9=2 -23310=1,1.000000e-01",
            ),
            _line("ReLU", f"relu_{k}", [conv], [relu], "0=1.000000e-02"),
            _line("Split", f"splitncnn_{k}", [relu], [sa, sb], ""),
            _line("InnerProduct", f"fc_{k}", [sa], [fc], "0=1024 1=1 2=1048576 9=3 -23310=2,-1.0,6.0"),
            _line("BinaryOp", f"add_{k}", [fc, sb], [add], "0=0"),
            _line("BinaryOp", f"mul_{k}", [add], [mul], f"0=2 1=1 2={0.5 + (k % 7) * 0.125:.6e}"),
        ]
        blobs += 7
        cur = mul
        block += 1
    extra = 0
    while len(lines) < n_layers:
        top = f"t{extra}"
        lines.append(_line("ReLU", f"relu_tail_{extra}", [cur], [top], ""))
        cur = top
        blobs += 1
        extra += 1
    text = f"{MAGIC}\n{len(lines)} {blobs}\n" + "\n".join(lines) + "\n"
    path.write_text(text, encoding="ascii")
    return len(lines), blobs


def generate_big_ip_param(path: Path, n_layers: int = BIG_LAYERS, dim: int = BIG_DIM) -> int:
    """Write Input + ``n_layers`` InnerProduct dim x dim with bias; returns the fp32 .bin size in bytes."""
    lines = [_line("Input", "in0", [], ["in0"], f"0={dim}")]
    prev = "in0"
    for i in range(n_layers):
        lines.append(_line("InnerProduct", f"fc{i}", [prev], [f"fc{i}"], f"0={dim} 1=1 2={dim * dim}"))
        prev = f"fc{i}"
    text = f"{MAGIC}\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n"
    path.write_text(text, encoding="ascii")
    return n_layers * (4 + dim * dim * 4 + dim * 4)


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


def child_walk(param: str, bin_path: str) -> None:
    from graphsurgeon.formats.model_bin import walk_bin
    from graphsurgeon.formats.param_text import read_param_text

    graph = read_param_text(param)
    dt, records = timed(lambda: walk_bin(graph, bin_path))
    end = records[-1].offset + records[-1].nbytes if records else 0
    emit_result({"walk_s": dt, "records": len(records), "end": end})


def child_reemit(param: str, bin_path: str, out: str) -> None:
    from graphsurgeon.formats.model_bin import read_bin, write_bin
    from graphsurgeon.formats.param_text import read_param_text

    graph = read_param_text(param)
    t_read, records = timed(lambda: read_bin(graph, bin_path))
    hwm_read = vm_hwm_kib()
    t_write, plan = timed(lambda: write_bin(graph, out))
    emit_result(
        {
            "read_bin_s": t_read,
            "write_bin_s": t_write,
            "records": len(records),
            "written": len(plan),
            "vm_hwm_after_read_kib": hwm_read,
        }
    )


def child_readinto(bin_path: str) -> None:
    """The I/O floor: one sequential pass with readinto into a reused 8 MiB buffer."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)

    def read_all() -> int:
        total = 0
        with open(bin_path, "rb", buffering=0) as fh:
            while True:
                got = fh.readinto(view)
                if not got:
                    return total
                total += got

    dt, total = timed(read_all)
    emit_result({"readinto_s": dt, "bytes": total})


def child_copyfile(bin_path: str, out: str) -> None:
    """The copy floor: shutil.copyfile, then fsync of the copy (write_bin fsyncs its output too)."""
    t_copy, _ = timed(lambda: shutil.copyfile(bin_path, out))

    def sync() -> None:
        fd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    t_sync, _ = timed(sync)
    emit_result({"copyfile_s": t_copy, "fsync_s": t_sync})


def child_compare(a: str, b: str) -> None:
    """Not a benchmark: check that the re-emitted .bin is byte-identical to the source."""
    same = os.path.getsize(a) == os.path.getsize(b)
    if same:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                ca, cb = fa.read(CHUNK), fb.read(CHUNK)
                if ca != cb:
                    same = False
                    break
                if not ca:
                    break
    emit_result({"identical": same})


def child_evict(*paths: str) -> None:
    """Drop the files' clean pages from the page cache."""
    drop_from_page_cache(*paths)
    emit_result({})


def child_gen_mixed(path: str, n_layers: str) -> None:
    layers, blobs = generate_mixed_param(Path(path), int(n_layers))
    emit_result({"layers": layers, "blobs": blobs})


CHILDREN: dict[str, Callable[..., None]] = {
    "gen_mixed": child_gen_mixed,
    "parse_emit": child_parse_emit,
    "split": child_split,
    "walk": child_walk,
    "reemit": child_reemit,
    "readinto": child_readinto,
    "copyfile": child_copyfile,
    "compare": child_compare,
    "evict": child_evict,
}


# --------------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------------


@dataclass
class Proc:
    """One finished subprocess: wall time, peak RSS (wait4 ru_maxrss) and the child's result, if any."""

    cmd: list[str]
    wall_s: float
    maxrss_kib: int
    driver_hwm_kib: int
    output: str
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def rss_mb(self) -> float:
        """Peak RSS in MB: the child's own VmHWM when it reports one (exact: it counts only the child's
        address space after exec), else wait4's ru_maxrss. On Linux ru_maxrss of a vfork()ed child also
        folds in the parent's high-water mark, which is why the driver stays small."""
        hwm = int(self.result.get("vm_hwm_kib", -1))
        return mb(hwm if hwm > 0 else self.maxrss_kib)

    @property
    def rss_is_floor(self) -> bool:
        """True when the figure came from ru_maxrss and may be the driver's own size, not the child's."""
        return int(self.result.get("vm_hwm_kib", -1)) <= 0 and self.maxrss_kib <= self.driver_hwm_kib


@dataclass
class Row:
    case: str
    wall_s: float | None
    rss_mb: float | None
    ratio: str
    note: str


def run_proc(cmd: list[str]) -> Proc:
    """Run ``cmd`` to completion; its own peak RSS comes from os.wait4 (per child, unlike
    getrusage(RUSAGE_CHILDREN), which is the maximum over all children so far)."""
    driver_hwm = vm_hwm_kib()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    output = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{output}")
    result: dict[str, Any] = {}
    for line in output.splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK) :])
    return Proc(cmd, wall, int(usage.ru_maxrss), driver_hwm, output, result)


def run_child(name: str, *args: str | int | os.PathLike[str]) -> Proc:
    return run_proc([sys.executable, str(Path(__file__).resolve()), "--child", name, *map(str, args)])


def gsurg_cmd() -> list[str]:
    exe = shutil.which("gsurg")
    if exe is not None:
        return [exe]
    return [sys.executable, "-c", "import sys; from graphsurgeon.cli import main; sys.exit(main())"]


def fmt_ratio(value: float, what: str) -> str:
    return f"{value:.2f}× {what}" if value < 10 else f"{value:.0f}× {what}"


def rss_ratio(rss: float, base: float) -> str:
    return f"RSS {rss / base:.2f}× numpy"


class Bench:
    def __init__(self, quick: bool, tmp: Path, cold: bool) -> None:
        self.quick = quick
        self.tmp = tmp
        self.cold = cold
        self.rows: list[Row] = []
        self.raw: dict[str, Any] = {}
        self.numpy_rss = 0.0
        self.rss_verdict: str | None = None

    def log(self, msg: str) -> None:
        print(f"[bench] {msg}", flush=True)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        wall = "-" if row.wall_s is None else f"{row.wall_s:.4f} s"
        rss = "-" if row.rss_mb is None else f"{row.rss_mb:.1f} MB"
        self.log(f"{row.case}: {wall}, peak RSS {rss}, {row.ratio}; {row.note}")

    # -- baselines --------------------------------------------------------------------------------------

    def numpy_baseline(self) -> None:
        runs = [run_proc([sys.executable, "-c", "import numpy"]) for _ in range(3)]
        rss = statistics.median(mb(p.maxrss_kib) for p in runs)
        wall = statistics.median(p.wall_s for p in runs)
        self.numpy_rss = rss
        self.raw["numpy_import"] = {"rss_mb": [mb(p.maxrss_kib) for p in runs], "wall_s": wall}
        self.add(
            Row(
                'baseline: python -c "import numpy"',
                wall,
                rss,
                "RSS baseline",
                "process wall incl. interpreter start; median of 3 processes; RSS from wait4 ru_maxrss"
                + (" (may be the driver's own size)" if any(p.rss_is_floor for p in runs) else ""),
            )
        )

    # -- cases 1 and 2: text .param ---------------------------------------------------------------------

    def param_case(self, label: str, param: Path) -> None:
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
        self.raw[label] = {
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
        self.add(
            Row(
                f"{label}: text.split() baseline",
                t_split,
                split.rss_mb,
                "time baseline",
                f"{split.result['tokens']} tokens, {kib:.0f} KiB; median of {REPEATS}",
            )
        )
        self.add(
            Row(
                f"{label}: read_param_text",
                t_parse,
                rss_parse,
                f"{fmt_ratio(t_parse / t_split, 'split')}; {rss_ratio(rss_parse, self.numpy_rss)}",
                f"{r['layers']} layers, {r['layers'] / t_parse:,.0f} layers/s; median of {REPEATS} "
                f"(first call {r['parse_s'][0]:.3f} s incl. grammar build); CPU {cpu_parse:.3g} s = "
                f"{fmt_ratio(cpu_parse / cpu_split, 'split CPU')}; RSS = VmHWM after parsing",
            )
        )
        self.add(
            Row(
                f"{label}: emit_param_text",
                t_emit,
                pe.rss_mb,
                f"{fmt_ratio(t_emit / t_split, 'split')}; {rss_ratio(pe.rss_mb, self.numpy_rss)}",
                f"{r['emit_chars'] / t_emit / MiB:.1f} MiB/s of text; median of {REPEATS}; "
                "RSS = whole process (parse + emit)",
            )
        )

    # -- case 3: 2 GiB .bin -----------------------------------------------------------------------------

    def evict(self, *paths: Path) -> None:
        if self.cold:
            run_child("evict", *paths)

    def big_bin_case(self) -> None:
        free = shutil.disk_usage(self.tmp).free
        self.raw["tmp_free_bytes"] = free
        if free < MIN_FREE_DISK:
            msg = (
                f"SKIPPED case 3 (2 GiB .bin): only {free / GiB:.1f} GiB free in {self.tmp}, "
                f"need {MIN_FREE_DISK / GiB:.0f} GiB"
            )
            self.log(msg)
            self.add(Row("2 GiB .bin cases", None, None, "-", msg))
            return
        param = self.tmp / "big_ip.param"
        bin_path = self.tmp / "big_ip.bin"
        copy_out = self.tmp / "big_ip.reemit.bin"
        floor_out = self.tmp / "big_ip.copyfile.bin"
        expect = generate_big_ip_param(param)
        self.log(f"synth-bin {BIG_LAYERS} x InnerProduct {BIG_DIM}x{BIG_DIM} -> {expect / GiB:.2f} GiB")
        synth = run_proc([*gsurg_cmd(), "synth-bin", str(param), "-o", str(bin_path), "--seed", "0"])
        size = bin_path.stat().st_size
        if size != expect or size < 2 * GiB:
            raise RuntimeError(f"synth-bin wrote {size} bytes, expected {expect} (>= 2 GiB)")
        gib = size / GiB
        raw: dict[str, Any] = {"bin_bytes": size, "cold_cache": self.cold}
        raw["synth_bin"] = {"wall_s": synth.wall_s, "rss_mb": synth.rss_mb}
        self.add(
            Row(
                f"2 GiB: gsurg synth-bin ({gib:.2f} GiB fp32)",
                synth.wall_s,
                synth.rss_mb,
                rss_ratio(synth.rss_mb, self.numpy_rss),
                f"CLI process wall; {gib / synth.wall_s:.2f} GiB/s written incl. RNG + fsync + re-walk; "
                "RSS from wait4 ru_maxrss"
                + (" (may be the driver's own size)" if synth.rss_is_floor else ""),
            )
        )

        self.evict(bin_path)
        floor = run_child("readinto", bin_path)
        t_floor = floor.result["readinto_s"]
        raw["readinto"] = {"s": t_floor, "rss_mb": floor.rss_mb, "bytes": floor.result["bytes"]}
        self.add(
            Row(
                "2 GiB: readinto 8 MiB baseline",
                t_floor,
                floor.rss_mb,
                "I/O floor",
                f"{gib / t_floor:.2f} GiB/s sequential read"
                + ("; page cache dropped first" if self.cold else "; warm page cache"),
            )
        )

        self.evict(bin_path)
        walk = run_child("walk", param, bin_path)
        t_walk = walk.result["walk_s"]
        ok = walk.rss_mb < RSS_LIMIT_MB
        self.rss_verdict = (
            f"{'PASS' if ok else 'FAIL'}: walk_bin of {gib:.2f} GiB peak RSS {walk.rss_mb:.1f} MB "
            f"({'<' if ok else '>='} {RSS_LIMIT_MB:.0f} MB)"
        )
        raw["walk"] = {"s": t_walk, "rss_mb": walk.rss_mb, "proc_wall_s": walk.wall_s, "pass": ok}
        self.add(
            Row(
                "2 GiB: walk_bin",
                t_walk,
                walk.rss_mb,
                f"{fmt_ratio(t_walk / t_floor, 'readinto')}; {rss_ratio(walk.rss_mb, self.numpy_rss)}",
                f"{'PASS' if ok else 'FAIL'} RSS < {RSS_LIMIT_MB:.0f} MB; {walk.result['records']} records; "
                f"process wall {walk.wall_s:.2f} s",
            )
        )

        self.evict(bin_path)
        re = run_child("reemit", param, bin_path, copy_out)
        t_re = re.result["read_bin_s"] + re.result["write_bin_s"]
        same = run_child("compare", bin_path, copy_out).result["identical"]
        copy_out.unlink()
        raw["reemit"] = {
            "read_bin_s": re.result["read_bin_s"],
            "write_bin_s": re.result["write_bin_s"],
            "rss_mb": re.rss_mb,
            "proc_wall_s": re.wall_s,
            "identical": same,
        }

        self.evict(bin_path)
        cp = run_child("copyfile", bin_path, floor_out)
        floor_out.unlink()
        t_cp = cp.result["copyfile_s"] + cp.result["fsync_s"]
        raw["copyfile"] = {"copyfile_s": cp.result["copyfile_s"], "fsync_s": cp.result["fsync_s"]}
        raw["copyfile"]["rss_mb"] = cp.rss_mb

        self.add(
            Row(
                "2 GiB: read_bin + write_bin",
                t_re,
                re.rss_mb,
                f"{fmt_ratio(t_re / t_cp, 'copyfile+fsync')}; {rss_ratio(re.rss_mb, self.numpy_rss)}",
                f"read_bin {re.result['read_bin_s']:.3f} s + write_bin {re.result['write_bin_s']:.2f} s "
                f"(copy, fsync, re-walk); byte-exact: {'yes' if same else 'NO'}",
            )
        )
        self.add(
            Row(
                "2 GiB: shutil.copyfile baseline",
                t_cp,
                cp.rss_mb,
                "copy floor",
                f"copyfile {cp.result['copyfile_s']:.2f} s + fsync {cp.result['fsync_s']:.2f} s; "
                f"{gib / t_cp:.2f} GiB/s",
            )
        )
        self.raw["big_bin"] = raw
        bin_path.unlink()

    # -- report -----------------------------------------------------------------------------------------

    def table(self) -> str:
        out = [
            "| case | wall s | peak RSS MB | ratio vs baseline | note |",
            "|---|---:|---:|---|---|",
        ]
        for r in self.rows:
            wall = "-" if r.wall_s is None else (f"{r.wall_s:.3g}" if r.wall_s < 1 else f"{r.wall_s:.2f}")
            rss = "-" if r.rss_mb is None else f"{r.rss_mb:.1f}"
            out.append(f"| {r.case} | {wall} | {rss} | {r.ratio} | {r.note} |")
        return "\n".join(out)


def machine() -> dict[str, Any]:
    mem = ""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            mem = fh.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "mem_total": mem,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["--child"]:
        CHILDREN[args_list[1]](*args_list[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="skip the 2 GiB case; 10k generated layers")
    parser.add_argument("--json", metavar="OUT", type=Path, help="also write every figure as JSON")
    parser.add_argument("--layers", type=int, help="generated param size (default 100000, quick 10000)")
    parser.add_argument(
        "--cold", action="store_true", help="drop the .bin from the page cache before each read case"
    )
    args = parser.parse_args(args_list)
    n_layers = args.layers or (10_000 if args.quick else 100_000)

    tmp = Path(tempfile.mkdtemp(prefix="gsurg-bench-", dir="/tmp"))
    bench = Bench(args.quick, tmp, args.cold)
    bench.raw["machine"] = machine()
    bench.raw["options"] = {"quick": args.quick, "layers": n_layers, "cold": args.cold}
    try:
        bench.numpy_baseline()
        if QWEN_PARAM.is_file():
            bench.param_case("qwen3-0.6b decoder", QWEN_PARAM)
        else:
            bench.log(f"SKIPPED case 1: {QWEN_PARAM} not found")
            bench.add(Row("qwen3-0.6b decoder", None, None, "-", f"SKIPPED: {QWEN_PARAM} not found"))
        gen = tmp / f"mixed_{n_layers}.param"
        made = run_child("gen_mixed", gen, n_layers).result  # in a child: keeps the driver small
        layers, blobs = made["layers"], made["blobs"]
        bench.log(f"generated {gen.name}: {layers} layers, {blobs} blobs, {gen.stat().st_size / MiB:.1f} MiB")
        bench.param_case(f"generated {layers // 1000}k layers", gen)
        gen.unlink()
        if args.quick:
            bench.log("--quick: 2 GiB .bin case skipped")
        else:
            bench.big_bin_case()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    bench.raw["driver_vm_hwm_kib"] = vm_hwm_kib()
    print()
    print(bench.table())
    if bench.rss_verdict:
        print()
        print(bench.rss_verdict)
    if args.json:
        doc = {"rows": [asdict(r) for r in bench.rows], "raw": bench.raw, "rss_verdict": bench.rss_verdict}
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 0 if bench.rss_verdict is None or bench.rss_verdict.startswith("PASS") else 1


if __name__ == "__main__":
    sys.exit(main())
