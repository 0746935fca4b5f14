"""The .bin cases of ``bench_core.py``: synth-bin's peak RSS for one large weight in each storage, and
synth-bin, walk and re-emit of a 2.5 GiB model, the re-emit timed against ``copyfile`` + ``fsync`` in
interleaved pairs. The processes they start are in ``bin_children.py``.
"""

from __future__ import annotations

import os
import shutil
import statistics
from pathlib import Path
from typing import Any

from harness import (
    MAGIC,
    GiB,
    Report,
    Row,
    fmt_ratio,
    gsurg_cmd,
    layer_line,
    rss_ratio,
    run_child,
    run_proc,
    timed,
)

RSS_LIMIT_MB = 512.0  # walk_bin of the 2.5 GiB file
MIN_FREE_DISK = 6 * GiB
BIG_LAYERS = 40  # InnerProduct 4096x4096 + bias: 64 MiB + 16 KiB + 4 bytes each, 2.5 GiB in all
BIG_DIM = 4096
ONE_ROWS, ONE_COLS = 151936, 1024  # qwen3-0.6B's lm_head: 155.6M elements, 622 MB fp32, 311 MB fp16/bf16
SYNTH_RSS_LIMIT_MB = 256.0  # synth-bin of that weight, any storage: under the size of the weight itself
REEMIT_RATIO_LIMIT = 1.5  # read_bin + write_bin vs copyfile + fsync, median of the pairs
MANY_LAYERS = 20_000  # 40k records of 1 KiB and 64 bytes: what every record costs besides its bytes


# --------------------------------------------------------------------------------------------------------
# Generated params
# --------------------------------------------------------------------------------------------------------


def generate_big_ip_param(path: Path, n_layers: int = BIG_LAYERS, dim: int = BIG_DIM) -> int:
    """Write Input + ``n_layers`` InnerProduct dim x dim with bias; returns the fp32 .bin size in bytes."""
    lines = [layer_line("Input", "in0", [], ["in0"], f"0={dim}")]
    prev = "in0"
    for i in range(n_layers):
        lines.append(layer_line("InnerProduct", f"fc{i}", [prev], [f"fc{i}"], f"0={dim} 1=1 2={dim * dim}"))
        prev = f"fc{i}"
    text = f"{MAGIC}\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n"
    path.write_text(text, encoding="ascii")
    return n_layers * (4 + dim * dim * 4 + dim * 4)


def generate_many_records_param(path: Path, n_layers: int = MANY_LAYERS, dim: int = 16) -> int:
    """Write Input + ``n_layers`` InnerProduct dim x dim with bias (two small records each, as in the many
    per-layer norms and projections of an LLM); returns the fp32 .bin size in bytes."""
    lines = [layer_line("Input", "in0", [], ["x0"], f"0={dim}")]
    for i in range(n_layers):
        lines.append(
            layer_line("InnerProduct", f"fc{i}", [f"x{i}"], [f"x{i + 1}"], f"0={dim} 1=1 2={dim * dim}")
        )
    path.write_text(f"{MAGIC}\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n", encoding="ascii")
    return n_layers * (4 + 4 * dim * dim + 4 * dim)


def generate_one_weight_param(path: Path, rows: int, cols: int) -> int:
    """Write Input + one InnerProduct rows x cols without bias (a single tagged weight); returns its count."""
    lines = [
        layer_line("Input", "in0", [], ["in0"], f"0={cols}"),
        layer_line("InnerProduct", "head", ["in0"], ["out0"], f"0={rows} 1=0 2={rows * cols}"),
    ]
    path.write_text(f"{MAGIC}\n2 2\n" + "\n".join(lines) + "\n", encoding="ascii")
    return rows * cols


# --------------------------------------------------------------------------------------------------------
# Cases (driver side)
# --------------------------------------------------------------------------------------------------------


def synth_rss_case(report: Report) -> None:
    """Peak RSS of synth-bin for one weight of 155.6M elements and for one 4x smaller, per storage."""
    sizes = {}
    for rows in (ONE_ROWS // 4, ONE_ROWS):
        param = report.tmp / f"one_{rows}.param"
        generate_one_weight_param(param, rows, ONE_COLS)
        for storage in ("fp32", "fp16", "bf16"):
            out = report.tmp / f"one_{rows}_{storage}.bin"
            proc = run_child("synth_rss", param, out, storage)
            sizes[rows, storage] = (proc.result["synth_s"], proc.rss_mb, out.stat().st_size)
            out.unlink()
    report.raw["synth_rss"] = {f"{rows}x{ONE_COLS} {st}": v for (rows, st), v in sizes.items()}
    worst = 0.0
    for storage in ("fp32", "fp16", "bf16"):
        wall, rss, nbytes = sizes[ONE_ROWS, storage]
        small_rss, small_bytes = sizes[ONE_ROWS // 4, storage][1:]
        worst = max(worst, rss)
        report.add(
            Row(
                f"synth-bin one {ONE_ROWS}×{ONE_COLS} weight, {storage} ({nbytes / 1e6:.0f} MB)",
                wall,
                rss,
                rss_ratio(rss, report.numpy_rss),
                f"in-process wall of the command; a 4× smaller weight ({small_bytes / 1e6:.0f} MB): "
                f"{small_rss:.1f} MB peak, so {rss - small_rss:+.1f} MB for 4× the size",
            )
        )
    ok = worst < SYNTH_RSS_LIMIT_MB
    bound = f"{'<' if ok else '>='} {SYNTH_RSS_LIMIT_MB:.0f} MB"
    report.verdicts.append(
        f"{'PASS' if ok else 'FAIL'}: synth-bin of a {ONE_ROWS * ONE_COLS / 1e6:.1f}M-element weight "
        f"peaks at {worst:.1f} MB at most over fp32/fp16/bf16 ({bound})"
    )


def big_bin_case(report: Report, pairs: int) -> None:
    free = shutil.disk_usage(report.tmp).free
    report.raw["tmp_free_bytes"] = free
    if free < MIN_FREE_DISK:
        msg = (
            f"SKIPPED the 2 GiB .bin cases: only {free / GiB:.1f} GiB free in {report.tmp}, "
            f"need {MIN_FREE_DISK / GiB:.0f} GiB"
        )
        report.log(msg)
        report.add(Row("2 GiB .bin cases", None, None, "-", msg))
        return
    param = report.tmp / "big_ip.param"
    bin_path = report.tmp / "big_ip.bin"
    expect = generate_big_ip_param(param)
    report.log(f"synth-bin {BIG_LAYERS} x InnerProduct {BIG_DIM}x{BIG_DIM} -> {expect / GiB:.2f} GiB")
    synth = run_proc([*gsurg_cmd(), "synth-bin", str(param), "-o", str(bin_path), "--seed", "0"])
    size = bin_path.stat().st_size
    if size != expect or size < 2 * GiB:
        raise RuntimeError(f"synth-bin wrote {size} bytes, expected {expect} (>= 2 GiB)")
    gib = size / GiB
    raw: dict[str, Any] = {"bin_bytes": size, "cold_cache": report.cold}
    raw["synth_bin"] = {"wall_s": synth.wall_s, "rss_mb": synth.rss_mb}
    report.add(
        Row(
            f"2 GiB: gsurg synth-bin ({gib:.2f} GiB fp32)",
            synth.wall_s,
            synth.rss_mb,
            rss_ratio(synth.rss_mb, report.numpy_rss),
            f"CLI process wall; {gib / synth.wall_s:.2f} GiB/s written incl. RNG + fsync + re-walk; "
            "RSS from wait4 ru_maxrss" + (" (may be the driver's own size)" if synth.rss_is_floor else ""),
        )
    )

    if report.cold:
        run_child("evict", bin_path)
    floor = run_child("readinto", bin_path)
    t_floor = floor.result["readinto_s"]
    raw["readinto"] = {"s": t_floor, "rss_mb": floor.rss_mb, "bytes": floor.result["bytes"]}
    report.add(
        Row(
            "2 GiB: readinto 8 MiB baseline",
            t_floor,
            floor.rss_mb,
            "I/O floor",
            f"{gib / t_floor:.2f} GiB/s sequential read"
            + ("; page cache dropped first" if report.cold else "; warm page cache"),
        )
    )

    if report.cold:
        run_child("evict", bin_path)
    walk = run_child("walk", param, bin_path)
    t_walk = walk.result["walk_s"]
    ok = walk.rss_mb < RSS_LIMIT_MB
    report.verdicts.append(
        f"{'PASS' if ok else 'FAIL'}: walk_bin of {gib:.2f} GiB peak RSS {walk.rss_mb:.1f} MB "
        f"({'<' if ok else '>='} {RSS_LIMIT_MB:.0f} MB)"
    )
    raw["walk"] = {"s": t_walk, "rss_mb": walk.rss_mb, "proc_wall_s": walk.wall_s, "pass": ok}
    report.add(
        Row(
            "2 GiB: walk_bin",
            t_walk,
            walk.rss_mb,
            f"{fmt_ratio(t_walk / t_floor, 'readinto')}; {rss_ratio(walk.rss_mb, report.numpy_rss)}",
            f"{'PASS' if ok else 'FAIL'} RSS < {RSS_LIMIT_MB:.0f} MB; {walk.result['records']} records; "
            f"process wall {walk.wall_s:.2f} s",
        )
    )

    run_child("readinto", bin_path)  # the warm pairs start from a cached source
    for cache in ("warm", "cold"):
        raw[f"reemit_{cache}"] = _reemit_pairs(report, param, bin_path, cache, pairs, gib)
    report.raw["big_bin"] = raw
    bin_path.unlink()


def dirty_kib() -> tuple[int, int]:
    """(Dirty, Writeback) from /proc/meminfo in KiB: page-cache data not yet on disk, machine-wide."""
    found = {"Dirty:": -1, "Writeback:": -1}
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                key = line.split(maxsplit=1)[0]
                if key in found:
                    found[key] = int(line.split()[1])
    except OSError:
        pass
    return found["Dirty:"], found["Writeback:"]


def settle() -> dict[str, Any]:
    """Start a timed run from a clean write-back state: os.sync() (machine-wide, so other users' dirty
    pages too, and the previous run's unlinked output) before it, outside its timing. Without it, each
    run pays for whatever the one before left in write-back, and the order of subject and baseline
    decides the ratio. Returns the dirty/write-back figures before and after, for the JSON."""
    before = dirty_kib()
    t_sync, _ = timed(os.sync)
    after = dirty_kib()
    return {"dirty_before_sync_kib": before[0], "dirty_after_sync_kib": after[0], "sync_s": t_sync}


def _reemit_pairs(
    report: Report, param: Path, bin_path: Path, cache: str, pairs: int, gib: float, verdict: bool = True
) -> Any:
    """``pairs`` runs each of read_bin + write_bin and of copyfile + fsync on the same file, interleaved
    (AB, BA, AB, ...: neither always runs first), every run in a fresh process, after ``settle()`` and, for
    ``cold``, after dropping the source from the page cache. Reports the median of the per-pair ratios and
    their range."""
    out = bin_path.with_suffix(".out.bin")
    label = f"{gib:.2f} GiB" if gib >= 1 else f"{gib * 1024:.0f} MiB"
    runs: dict[str, list[dict[str, Any]]] = {"reemit": [], "copyfile": []}
    same: bool | None = None
    for i in range(pairs):
        for which in ("reemit", "copyfile") if i % 2 == 0 else ("copyfile", "reemit"):
            settled = settle()
            if cache == "cold":
                run_child("evict", bin_path)
            if which == "reemit":
                proc = run_child("reemit", param, bin_path, out)
                if same is None:
                    same = run_child("compare", bin_path, out).result["identical"]
            else:
                proc = run_child("copyfile", bin_path, out)
            runs[which].append({**proc.result, "rss_mb": proc.rss_mb, **settled})
            out.unlink()
    subject = [r["read_bin_s"] + r["write_bin_s"] for r in runs["reemit"]]
    base = [r["copyfile_s"] + r["fsync_s"] for r in runs["copyfile"]]
    ratios = [s / b for s, b in zip(subject, base, strict=True)]
    ratio = statistics.median(ratios)

    def med(key: str, which: str = "reemit") -> float:
        return statistics.median(r[key] for r in runs[which])

    rss = max(r["rss_mb"] for r in runs["reemit"])
    records = runs["reemit"][0]["records"]
    ok = ratio <= REEMIT_RATIO_LIMIT
    if verdict:
        report.verdicts.append(
            f"{'PASS' if ok else 'FAIL'}: re-emit of {label}, {cache} cache: median {ratio:.2f}× "
            f"copyfile+fsync over {pairs} pairs ({'<=' if ok else '>'} {REEMIT_RATIO_LIMIT}×)"
        )
    report.add(
        Row(
            f"{label} ({records} records), {cache} cache: read_bin + write_bin",
            statistics.median(subject),
            rss,
            f"{ratio:.2f}× copyfile+fsync (median of {pairs} pairs, {min(ratios):.2f}–{max(ratios):.2f}); "
            f"{rss_ratio(rss, report.numpy_rss)}",
            f"medians: read_bin {med('read_bin_s'):.3f} s, write_bin {med('write_bin_s'):.2f} s = "
            f"plan + copy {med('plan_copy_s'):.2f} + fsync {med('fsync_s'):.2f} + re-walk "
            f"{med('rewalk_s'):.3f}; byte-exact: {'yes' if same else 'NO'}",
        )
    )
    report.add(
        Row(
            f"{label}, {cache} cache: shutil.copyfile + fsync baseline",
            statistics.median(base),
            max(r["rss_mb"] for r in runs["copyfile"]),
            "copy floor",
            f"medians: copyfile {med('copyfile_s', 'copyfile'):.2f} s + fsync "
            f"{med('fsync_s', 'copyfile'):.2f} s; {gib / statistics.median(base):.2f} GiB/s",
        )
    )
    return {"runs": runs, "ratios": ratios, "median_ratio": ratio, "identical": same}


def many_records_case(report: Report, pairs: int) -> None:
    """Re-emit of a small model with 40k records vs copyfile + fsync, warm: the per-record cost of the
    writer (catalog evaluation, planning, re-walk), which the 2.5 GiB case's 80 records do not show."""
    param = report.tmp / "many.param"
    bin_path = report.tmp / "many.bin"
    generate_many_records_param(param)
    run_proc([*gsurg_cmd(), "synth-bin", str(param), "-o", str(bin_path), "-q"])
    raw = _reemit_pairs(report, param, bin_path, "warm", pairs, bin_path.stat().st_size / GiB, verdict=False)
    report.raw["many_records"] = raw
    bin_path.unlink()
