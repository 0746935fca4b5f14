"""Compare gsurg's weight-only block quantizer (``graphsurgeon.quant.blocks``: ``minmax`` and ``clip``) with
ncnn's own tool for the same format, ``ncnnllm2int`` (``method=minmax`` and ``method=mseclip``), on the same
float weights, for ncnn 1.0.20261020's Gemm ``quantize_term`` 4xy / 6xy / 8xy at blocks of 32, 64 and 128.

Weights:

* ``tiny decoder``: every Gemm weight gsurg's catalog lets it quantize in the fp32 conversion of
  ``gsurg apply rules/llm-kv-cache.yaml`` (the embedded tiny Qwen3: 14 matrices of 64x64 to 128x64, random
  initialisation); ``ncnnllm2int`` runs on that conversion's ``decoder.ncnn.param``/``.bin`` itself;
* synthetic one-Gemm models (``Input`` + ``Gemm`` with a constant ``B[N, K]``, ``transB=1``), written as
  .param/.bin so both read the same bytes: Gaussian and Student-t with 3 degrees of freedom (heavy tails:
  outliers in many blocks), 2048x2048 and 6144x2048.

For each weight set and format, each method's relative squared error of the dequantized weights
(``sum (w - deq)^2 / sum w^2`` over all its matrices, ``deq = q * (1 / scale)`` as ncnn's kernel computes it),
the largest ``|w - deq|``, and the time, median of ``--repeat`` interleaved runs: gsurg's in process
(``quantize`` of every matrix: scales, codes and packing), ``ncnnllm2int``'s the whole process wall (loading
the fp32 .bin and writing its output included: its ``minmax`` rows are mostly that overhead). Figures are
ratios to gsurg ``minmax`` in the same run. Whether gsurg's minmax writes the same codes and scales as
ncnnllm2int's, byte for byte, how many block scales gsurg's clip and ncnn's mseclip choose differently, and
how many blocks clip moves off min-max's scale, are counted too. It also runs one int4 Gemm the tool wrote in
the ncnn wheel, as written and with its codes' int8 tag removed (see ``read_tool_output``).

ncnnllm2int is built from a Tencent/ncnn git repository against the pinned library by
``benchmarks/ncnnllm2int_build.sh`` (``--ncnn-git DIR``), or given as ``--ncnnllm2int PATH``; without either,
only gsurg's two methods run. Its ``awq`` and ``gptq`` methods need calibration data (a table made by
``ncnnllm2table`` from activation samples): the script asks the tool once and reports its answer.

    python benchmarks/bench_quantizer.py --ncnn-git DIR [--repeat 3] [--bits 4,6,8] [--json out.json]
    python benchmarks/bench_quantizer.py --quick ...   # tiny decoder + one 2048x2048 Gaussian, 1 run
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.errors import BinFormatError
from graphsurgeon.formats.model_bin import (
    Loads,
    WeightRecord,
    planned_loads,
    read_bin,
    walk_bin,
    walk_records,
)
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.ir.graph import Layer
from graphsurgeon.ir.weights import TAG_INT8, MappedBin
from graphsurgeon.pipeline.quantize_weights import quantizable
from graphsurgeon.quant.blocks import BLOCK_SIZES, BlockFormat, QuantMethod, dequantize, quantize, unpack
from graphsurgeon.schema.catalog import WeightQuantizeSpec
from graphsurgeon.schema.expr import evaluate_size

REPO = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO / "benchmarks" / "ncnnllm2int_build.sh"
GSURG_METHODS: tuple[QuantMethod, ...] = ("minmax", "clip")
NCNN_METHODS = ("minmax", "mseclip")
BASELINE = "gsurg minmax"
SYNTH_SEED = 17
SYNTH_STD = 0.02  # a transformer initialisation's scale; the relative figures do not depend on it


@dataclass
class WeightSet:
    """Float matrices ``[N, K]`` by Gemm layer name, and the model files ncnnllm2int reads them from."""

    name: str
    param: Path
    bin: Path
    matrices: dict[str, np.ndarray]

    @property
    def values(self) -> int:
        return sum(m.size for m in self.matrices.values())

    @property
    def shapes(self) -> str:
        shapes = sorted({f"{m.shape[0]}x{m.shape[1]}" for m in self.matrices.values()})
        return f"{len(self.matrices)} matrices ({', '.join(shapes)})"


@dataclass
class Run:
    """One method's output for one weight set and format: codes and scales per layer, and its times."""

    packed: dict[str, np.ndarray]
    scales: dict[str, np.ndarray]
    seconds: list[float] = field(default_factory=list)
    note: str = ""


@dataclass
class Row:
    """The figures of one weight set and format."""

    weights: str
    values: int
    bits: int
    block: int
    rel_mse: dict[str, float]
    max_err: dict[str, float]
    seconds: dict[str, float]
    clipped: str = ""
    minmax_same: str = ""
    clip_vs_mseclip: str = ""
    tool_layout: str = ""


# ---- weights -----------------------------------------------------------------------------------------------


def quantizable_matrices(graph_layers: list[Layer]) -> dict[str, tuple[Layer, WeightQuantizeSpec, int, int]]:
    """The layers whose weight gsurg's catalog lets it block-quantize now, with their ``[rows, cols]``."""
    found = {}
    for layer in graph_layers:
        spec = layer.spec
        wq = spec.weight_quantize if spec is not None else None
        if wq is None or quantizable(layer, wq.weight) is None:
            continue
        env = layer.env()
        found[layer.name] = (layer, wq, evaluate_size(wq.rows, env), evaluate_size(wq.cols, env))
    return found


def load_model_weights(name: str, param: Path, bin_path: Path) -> WeightSet:
    graph = read_param_text(param)
    read_bin(graph, bin_path)
    matrices = {}
    for lname, (layer, wq, rows, cols) in quantizable_matrices(graph.layers).items():
        matrices[lname] = np.array(layer.weights[wq.weight].numpy(), dtype=np.float32).reshape(rows, cols)
    if not matrices:
        raise SystemExit(f"bench_quantizer: {param} has no Gemm weight gsurg can block-quantize")
    return WeightSet(name, param, bin_path, matrices)


def gsurg_command() -> list[str]:
    exe = shutil.which("gsurg")
    return [exe] if exe else [sys.executable, "-m", "graphsurgeon.cli"]


def tiny_decoder(work: Path, given: Path | None) -> WeightSet:
    """The fp32 conversion's decoder: ``given`` (a folder ``gsurg apply`` wrote) or a fresh conversion."""
    folder = given
    if folder is None:
        folder = work / "llm"
        cmd = [
            *gsurg_command(),
            "apply",
            str(REPO / "rules" / "llm-kv-cache.yaml"),
            "--out",
            str(folder),
            "-q",
        ]
        print(f"# converting the tiny Qwen3: {' '.join(cmd[-5:])}", file=sys.stderr)
        subprocess.run(cmd, check=True, cwd=REPO)
    return load_model_weights("tiny decoder", folder / "decoder.ncnn.param", folder / "decoder.ncnn.bin")


def write_one_gemm(folder: Path, stem: str, w: np.ndarray) -> tuple[Path, Path]:
    """``Input`` -> ``Gemm`` with the constant ``B = w[N, K]`` (transB=1, no C), fp32 (tag 0)."""
    n, k = w.shape
    param = folder / f"{stem}.param"
    bin_path = folder / f"{stem}.bin"
    param.write_text(
        f"7767517\n2 2\nInput in0 0 1 in0\nGemm {stem} 1 1 in0 out0 2=0 3=1 4=0 5=1 6=0 7=0 8={n} 9={k}\n",
        encoding="ascii",
    )
    with open(bin_path, "wb") as fh:
        fh.write(struct.pack("<I", 0))
        fh.write(np.ascontiguousarray(w, dtype="<f4").tobytes())
    walk_bin(read_param_text(param), bin_path)  # gsurg's own check of the layout
    return param, bin_path


def synthetic(work: Path, dist: str, n: int, k: int) -> WeightSet:
    rng = np.random.default_rng([SYNTH_SEED, n, k, 0 if dist == "gauss" else 1])
    if dist == "gauss":
        w = rng.standard_normal((n, k), dtype=np.float32) * np.float32(SYNTH_STD)
        label = f"Gaussian {n}x{k}"
    else:
        w = (rng.standard_t(3, size=(n, k)) * SYNTH_STD).astype(np.float32)
        label = f"Student-t(3) {n}x{k}"
    stem = f"{dist}_{n}x{k}"
    param, bin_path = write_one_gemm(work, stem, w)
    return WeightSet(label, param, bin_path, {stem: w})


# ---- the two quantizers ------------------------------------------------------------------------------------


def run_gsurg(ws: WeightSet, fmt: BlockFormat, method: QuantMethod) -> tuple[Run, float]:
    packed, scales = {}, {}
    t0 = time.perf_counter()
    for name, w in ws.matrices.items():
        q = quantize(w, fmt, method)
        packed[name], scales[name] = q.packed, q.scales
    return Run(packed, scales), time.perf_counter() - t0


def tool_env() -> dict[str, str]:
    # its quantization loops run on one thread (make_weight_scales' num_threads defaults to 1); the loader's
    # OpenMP is held to one too, as gsurg's numpy runs on one
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def run_tool(tool: Path, ws: WeightSet, fmt: BlockFormat, method: str, out: Path) -> tuple[Run, float]:
    out.mkdir(parents=True, exist_ok=True)
    oparam, obin = out / "q.param", out / "q.bin"
    cmd = [str(tool), str(ws.param), str(ws.bin), str(oparam), str(obin)]
    cmd += [f"method={method}", f"bits={fmt.bits}", f"block={fmt.block_size}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=tool_env())
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_quantizer: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}")
    m = re.search(r"quantized (\d+) Gemm layers", proc.stderr)
    if not m or int(m.group(1)) != len(ws.matrices):
        raise SystemExit(
            f"bench_quantizer: ncnnllm2int quantized {m.group(1) if m else '?'} Gemm layers of {ws.name}, "
            f"gsurg's catalog {len(ws.matrices)}:\n{proc.stderr}"
        )
    packed, scales, layout = read_tool_output(oparam, obin, ws, fmt)
    return Run(packed, scales, note=layout), seconds


def read_tool_output(
    param: Path, bin_path: Path, ws: WeightSet, fmt: BlockFormat
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], str]:
    """ncnnllm2int's codes and scales for each of ``ws``'s layers, found by gsurg's exact-offset walk.

    ncnn 1.0.20261020's Gemm loads the packed codes with ``mb.load(packed_k_bytes, N, bits)``: raw bytes, no
    tag (gsurg's catalog says so). The tool's ``modelwriter.h`` may write them as a tagged int8 record (tag
    0x000D4B38, as a ``load(.., 0)`` reads): the walk is tried the release's way first, then with the codes
    tagged, and the layout found is returned with the first walk's error."""
    graph = read_param_text(param)
    loads = list(planned_loads(graph))
    packed: dict[str, np.ndarray] = {}
    scales: dict[str, np.ndarray] = {}
    with MappedBin(bin_path) as mb:
        try:
            records = walk_records(graph, mb, loads)
            layout = "untagged codes (R1020's layout)"
        except BinFormatError as err:
            tagged: Loads = [
                (layer, dataclasses.replace(aw, load_type=0) if aw.load_type in (4, 6, 8) else aw)
                for layer, aw in loads
            ]
            records = walk_records(graph, mb, tagged)
            layout = f"int8-tagged codes (R1020's walk: {err})"
        by_layer: dict[str, dict[str, WeightRecord]] = {}
        for rec in records:
            by_layer.setdefault(rec.layer, {})[rec.slot] = rec
        layers = {layer.name: layer for layer in graph.layers}
        for name, w in ws.matrices.items():
            layer = layers[name]
            spec = layer.spec
            wq = spec.weight_quantize if spec is not None else None
            if wq is None or layer.env()[wq.term] != fmt.quantize_term:
                raise SystemExit(
                    f"bench_quantizer: ncnnllm2int left {name} without quantize_term {fmt.quantize_term}"
                )
            rows, k = w.shape
            row_bytes = fmt.packed_row_bytes(k)
            code_rec = by_layer[name][wq.weight]
            if code_rec.tag is not None and code_rec.tag != TAG_INT8:
                raise SystemExit(f"bench_quantizer: {name}'s codes have tag 0x{code_rec.tag:08x}, not int8")
            start = code_rec.offset + (4 if code_rec.tag is not None else 0)
            packed[name] = mb.array("u1", start, rows * row_bytes).reshape(rows, row_bytes).copy()
            scale_rec = by_layer[name][wq.scales]
            nb = fmt.block_count(k)
            scales[name] = mb.array("<f4", scale_rec.offset, rows * nb).reshape(rows, nb).astype(np.float32)
    return packed, scales, layout


# ---- figures -----------------------------------------------------------------------------------------------


def errors(ws: WeightSet, run: Run, fmt: BlockFormat) -> tuple[float, float]:
    """``sum (w - deq)^2 / sum w^2`` over all matrices (float64), and the largest ``|w - deq|``."""
    num = den = worst = 0.0
    for name, w in ws.matrices.items():
        deq = dequantize(run.packed[name], run.scales[name], fmt, w.shape[1]).astype(np.float64)
        diff = w.astype(np.float64) - deq
        num += float(np.square(diff).sum())
        den += float(np.square(w.astype(np.float64)).sum())
        worst = max(worst, float(np.abs(diff).max()))
    return num / den, worst


def compare_runs(ws: WeightSet, a: Run, b: Run, fmt: BlockFormat) -> tuple[int, int, int, int, int]:
    """(scales that differ in their bits, scales, codes that differ, codes, packed bytes that differ)."""
    ds = ns = dc = nc = db = 0
    for name, w in ws.matrices.items():
        sa = a.scales[name].view(np.uint32)
        sb = b.scales[name].view(np.uint32)
        ds += int((sa != sb).sum())
        ns += sa.size
        qa = unpack(a.packed[name], fmt.bits, w.shape[1])
        qb = unpack(b.packed[name], fmt.bits, w.shape[1])
        dc += int((qa != qb).sum())
        nc += qa.size
        db += int((a.packed[name] != b.packed[name]).sum())
    return ds, ns, dc, nc, db


def measure(ws: WeightSet, fmt: BlockFormat, tool: Path | None, work: Path, repeat: int) -> Row:
    """Every method on ``ws`` in ``fmt``, ``repeat`` rounds interleaved (the method order rotates)."""
    jobs: dict[str, Callable[[], tuple[Run, float]]] = {}
    for gm in GSURG_METHODS:
        jobs[f"gsurg {gm}"] = functools.partial(run_gsurg, ws, fmt, gm)
    if tool is not None:
        for nm in NCNN_METHODS:
            jobs[f"ncnn {nm}"] = functools.partial(run_tool, tool, ws, fmt, nm, work / "out" / nm)
    runs: dict[str, Run] = {}
    names = list(jobs)
    for r in range(repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            run, seconds = jobs[name]()
            if name not in runs:
                runs[name] = run
            runs[name].seconds.append(seconds)
    row = Row(ws.name, ws.values, fmt.bits, fmt.block_size, {}, {}, {})
    for name, run in runs.items():
        row.rel_mse[name], row.max_err[name] = errors(ws, run, fmt)
        row.seconds[name] = statistics.median(run.seconds)
    ds, ns, dc, nc, _ = compare_runs(ws, runs["gsurg minmax"], runs["gsurg clip"], fmt)
    row.clipped = f"{ds}/{ns} blocks ({100.0 * ds / ns:.1f}%), {100.0 * dc / nc:.2f}% of codes"
    if "ncnn minmax" in runs:
        ds, ns, dc, nc, db = compare_runs(ws, runs["gsurg minmax"], runs["ncnn minmax"], fmt)
        row.minmax_same = "yes" if ds == dc == db == 0 else f"no: {ds}/{ns} scales, {dc}/{nc} codes differ"
        ds, ns, dc, nc, _ = compare_runs(ws, runs["gsurg clip"], runs["ncnn mseclip"], fmt)
        row.clip_vs_mseclip = f"{ds}/{ns} scales ({100.0 * ds / ns:.2f}%), {dc} codes"
        row.tool_layout = runs["ncnn minmax"].note
    return row


# ---- reporting ---------------------------------------------------------------------------------------------


def ratio(what: dict[str, float], name: str) -> str:
    """``what[name]`` over the baseline's; ``=`` when the two are the same float."""
    if name not in what:
        return "—"
    base = what[BASELINE]
    if what[name] == base:
        return "="
    return f"×{what[name] / base:.3f}" if base > 0 else "—"


def tables(rows: list[Row], methods: list[str]) -> str:
    others = [m for m in methods if m != BASELINE]
    head = ["weights", "bits", "block", "rel. MSE gsurg minmax"] + [f"MSE {m}" for m in others]
    head += ["max err gsurg minmax"] + [f"max err {m}" for m in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for r in rows:
        cells = [r.weights, str(r.bits), str(r.block), f"{r.rel_mse[BASELINE]:.4e}"]
        cells += [ratio(r.rel_mse, m) for m in others]
        cells += [f"{r.max_err[BASELINE]:.3e}"] + [ratio(r.max_err, m) for m in others]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    head = ["weights", "bits", "block", "time gsurg minmax"] + [f"time {m}" for m in others]
    head.append("gsurg clip: scale not minmax's")
    if "ncnn minmax" in methods:
        head += ["minmax: gsurg = ncnn, byte for byte", "clip vs mseclip: other scale chosen"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(others) + 1)]
    lines[-1] += "---|" * (len(head) - 4 - len(others))
    for r in rows:
        cells = [r.weights, str(r.bits), str(r.block), f"{r.seconds[BASELINE]:.3f} s"]
        cells += [ratio(r.seconds, m) for m in others]
        cells.append(r.clipped)
        if "ncnn minmax" in methods:
            cells += [r.minmax_same, r.clip_vs_mseclip]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


#: Weight sets this small take milliseconds to quantize: a process's start dwarfs that, so the summary's
#: time ratios leave them out.
TIMED_VALUES = 1_000_000


def summary(rows: list[Row], methods: list[str]) -> str:
    """Per bit width, the geometric mean over weight sets and blocks of each method's ratios (times: over
    the sets of at least ``TIMED_VALUES`` values)."""
    others = [m for m in methods if m != BASELINE]
    head = ["bits", "rows"] + [f"MSE {m}" for m in others] + [f"max err {m}" for m in others]
    head += [f"time {m}" for m in others]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 2)]
    for bits in sorted({r.bits for r in rows}):
        sel = [r for r in rows if r.bits == bits]
        timed = [r for r in sel if r.values >= TIMED_VALUES]
        cells = [str(bits), f"{len(sel)} ({len(timed)} timed)"]
        for what in ("rel_mse", "max_err", "seconds"):
            for m in others:
                vals = [
                    getattr(r, what)[m] / getattr(r, what)[BASELINE]
                    for r in (timed if what == "seconds" else sel)
                ]
                cells.append(f"×{geomean(vals):.3f}" if all(v > 0 for v in vals) else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---- ncnnllm2int: build, calibration-only methods, and what R1020 makes of its files ----------------------


def build_tool(ncnn_git: str | None) -> tuple[Path | None, str]:
    if not ncnn_git:
        return None, "not built: give --ncnn-git DIR (a Tencent/ncnn repository) or --ncnnllm2int PATH"
    proc = subprocess.run([str(BUILD_SCRIPT), "--ncnn-git", ncnn_git], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"did not build (exit {proc.returncode}):\n{proc.stderr.strip()}"
    path = Path(proc.stdout.strip().splitlines()[-1])
    stamp = path.parent.parent / "stamp.txt"
    first = stamp.read_text().splitlines()[0] if stamp.exists() else ""
    commit = re.search(r"ncnn-commit=(\w+)", first)
    return path, f"built: {path} (ncnn commit {commit.group(1)[:12] if commit else '?'})"


def calibration_methods(tool: Path, ws: WeightSet, out: Path) -> dict[str, str]:
    """What the tool says when asked for its calibrated methods without a table."""
    answers = {}
    for method in ("awq", "gptq"):
        cmd = [str(tool), str(ws.param), str(ws.bin), str(out / "c.param"), str(out / "c.bin")]
        cmd.append(f"method={method}")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=tool_env())
        answers[method] = f"exit {proc.returncode}: {proc.stderr.strip()}"
    return answers


def wheel_check(tool: Path, work: Path) -> str:
    """Run a one-Gemm int4 model the tool quantized in the ncnn wheel (R1020), as written and with the
    codes' 4-byte tag removed, against ``x @ deq.T`` from the tool's own codes and scales."""
    try:
        import ncnn
    except ImportError:
        return "ncnn wheel not importable: skipped"
    rng = np.random.default_rng(5)
    w = rng.standard_normal((64, 256), dtype=np.float32) * np.float32(SYNTH_STD)
    param, bin_path = write_one_gemm(work, "wheel", w)
    ws = WeightSet("wheel", param, bin_path, {"wheel": w})
    fmt = BlockFormat(4, 32)
    run, _ = run_tool(tool, ws, fmt, "minmax", work / "wheel_out")
    qparam, qbin = work / "wheel_out" / "q.param", work / "wheel_out" / "q.bin"
    raw = qbin.read_bytes()
    graph = read_param_text(qparam)
    codes_at = None
    if run.note.startswith("int8-tagged"):
        tagged: Loads = [
            (layer, dataclasses.replace(aw, load_type=0) if aw.load_type in (4, 6, 8) else aw)
            for layer, aw in planned_loads(graph)
        ]
        with MappedBin(qbin) as mb:
            codes_at = next(r.offset for r in walk_records(graph, mb, tagged) if r.tag == TAG_INT8)
    x = rng.standard_normal((1, 256), dtype=np.float32)
    deq = dequantize(run.packed["wheel"], run.scales["wheel"], fmt, 256).astype(np.float64)
    ref = x.astype(np.float64) @ deq.T
    results = []
    variants = [("as written", raw)]
    if codes_at is not None:
        variants.append(("codes' tag removed", raw[:codes_at] + raw[codes_at + 4 :]))
    for label, data in variants:
        path = work / "wheel_variant.bin"
        path.write_bytes(data)
        net = ncnn.Net()
        net.opt.use_fp16_storage = net.opt.use_fp16_packed = net.opt.use_fp16_arithmetic = False
        net.opt.use_packing_layout = False
        rc = (net.load_param(str(qparam)), net.load_model(str(path)))
        ex = net.create_extractor()
        ex.input("in0", ncnn.Mat(x))
        ret, out = ex.extract("out0")
        y = np.array(out, dtype=np.float64).reshape(ref.shape)
        err = float(np.abs(y - ref).max() / np.abs(ref).max())
        results.append(
            f"{label}: load_param, load_model {rc}, extract {ret}, max|y - x·deqᵀ| / max|y| {err:.2e}"
        )
    return "; ".join(results)


# ---- main --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--ncnn-git", default=os.environ.get("NCNN_GIT"), help="a Tencent/ncnn git repository")
    ap.add_argument("--ncnnllm2int", type=Path, help="an ncnnllm2int binary (instead of building one)")
    ap.add_argument("--decoder", type=Path, help="a folder `gsurg apply rules/llm-kv-cache.yaml` wrote")
    ap.add_argument("--bits", default="4,6,8", help="bit widths (default 4,6,8)")
    ap.add_argument("--blocks", default=",".join(map(str, BLOCK_SIZES)), help="blocks (default 32,64,128)")
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds per method (default 3)")
    ap.add_argument("--quick", action="store_true", help="tiny decoder + a 2048x2048 Gaussian, 1 round")
    ap.add_argument("--json", type=Path, help="also write every figure here")
    ap.add_argument("--work", type=Path, help="keep the generated models and outputs here")
    args = ap.parse_args(argv)
    bits = [int(b) for b in args.bits.split(",")]
    blocks = [int(b) for b in args.blocks.split(",")]
    repeat = 1 if args.quick else args.repeat

    if args.ncnnllm2int is not None:
        tool: Path | None = args.ncnnllm2int.resolve()
        tool_note = f"given: {tool}"
    else:
        tool, tool_note = build_tool(args.ncnn_git)
    load_start = os.getloadavg()

    own_work = args.work is None
    work = Path(tempfile.mkdtemp(prefix="gsurg-bench-quant-")) if own_work else args.work
    work.mkdir(parents=True, exist_ok=True)
    try:
        sets = [tiny_decoder(work, args.decoder)]
        shapes = [(2048, 2048)] if args.quick else [(2048, 2048), (6144, 2048)]
        dists = ["gauss"] if args.quick else ["gauss", "t3"]
        for n, k in shapes:
            for dist in dists:
                sets.append(synthetic(work, dist, n, k))
        methods = [f"gsurg {m}" for m in GSURG_METHODS]
        extra: dict[str, Any] = {}
        if tool is not None:
            methods += [f"ncnn {m}" for m in NCNN_METHODS]
            extra["calibration_methods"] = calibration_methods(tool, sets[0], work)
            extra["wheel_check"] = wheel_check(tool, work)
        rows = []
        for ws in sets:
            for b in bits:
                for block in blocks:
                    fmt = BlockFormat(b, block)
                    print(f"# {ws.name}, int{b} block {block}", file=sys.stderr)
                    rows.append(measure(ws, fmt, tool, work, repeat))
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    load_end = os.getloadavg()

    print(f"ncnnllm2int: {tool_note}")
    for ws in sets:
        print(f"- {ws.name}: {ws.shapes}, {ws.values:,} values")
    print(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}; "
        f"load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end; "
        f"times are medians of {repeat} interleaved round(s)"
    )
    if rows and rows[0].tool_layout:
        print(f"ncnnllm2int's output layout: {rows[0].tool_layout}")
    for method, answer in extra.get("calibration_methods", {}).items():
        print(f"ncnnllm2int method={method} without a table: {answer}")
    if "wheel_check" in extra:
        print(f"its output in the ncnn wheel (R1020), int4 block 32: {extra['wheel_check']}")
    print()
    print(tables(rows, methods))
    print()
    print(
        "Geometric means over the weight sets and blocks, per bit width (ratios to gsurg minmax; times over "
        f"the sets of at least {TIMED_VALUES:,} values):"
    )
    print()
    print(summary(rows, methods))
    if args.json is not None:
        payload = {
            "tool": tool_note,
            "sets": [{"name": ws.name, "shapes": ws.shapes, "values": ws.values} for ws in sets],
            "load_average": [load_start, load_end],
            "repeat": repeat,
            **extra,
            "rows": [dataclasses.asdict(r) for r in rows],
        }
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
