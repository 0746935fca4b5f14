"""What every benchmark case of ``bench_core.py`` shares: running a case in its own process, reading its peak
RSS, and collecting rows for the report. Standard library only, so that the driver stays small (a vfork()ed
child's ``ru_maxrss`` can include the parent's resident size).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
RESULT_MARK = "BENCH_RESULT "
MAGIC = 7767517
CHILD_SCRIPT = Path(__file__).resolve().with_name("bench_core.py")


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


def layer_line(layer_type: str, name: str, bottoms: Sequence[str], tops: Sequence[str], params: str) -> str:
    """One layer line in the column layout ncnn's converters and pnnx write."""
    head = f"{layer_type:<24} {name:<24} {len(bottoms)} {len(tops)}"
    blobs = " ".join([*bottoms, *tops])
    return f"{head} {blobs} {params}".rstrip()


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
    """Run child ``name`` of bench_core.py (``bench_core.py --child NAME ARGS...``) in a fresh interpreter."""
    return run_proc([sys.executable, str(CHILD_SCRIPT), "--child", name, *map(str, args)])


def gsurg_cmd() -> list[str]:
    exe = shutil.which("gsurg")
    if exe is not None:
        return [exe]
    return [sys.executable, "-c", "import sys; from graphsurgeon.cli import main; sys.exit(main())"]


def fmt_ratio(value: float, what: str) -> str:
    return f"{value:.2f}× {what}" if value < 10 else f"{value:.0f}× {what}"


def rss_ratio(rss: float, base: float) -> str:
    return f"RSS {rss / base:.2f}× numpy"


class Report:
    """The rows of one benchmark run, the raw figures for --json, and the RSS baseline every case uses."""

    def __init__(self, tmp: Path, cold: bool) -> None:
        self.tmp = tmp
        self.cold = cold
        self.rows: list[Row] = []
        self.raw: dict[str, Any] = {}
        self.numpy_rss = 0.0
        self.verdicts: list[str] = []

    def log(self, msg: str) -> None:
        print(f"[bench] {msg}", flush=True)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        wall = "-" if row.wall_s is None else f"{row.wall_s:.4f} s"
        rss = "-" if row.rss_mb is None else f"{row.rss_mb:.1f} MB"
        self.log(f"{row.case}: {wall}, peak RSS {rss}, {row.ratio}; {row.note}")

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
        "load_avg": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
