"""Benchmark the pairing behind a ``weight_map`` side file against the least any value-based pairing must do,
in one run: read every stored weight and every candidate tensor once.

A generated model: ``--tensors`` MemoryData weights of ``--rows`` x 1024 fp32 values stored in a shuffled
order (so pairing cannot follow file order), and a bf16 safetensors checkpoint holding the same values
(widened exactly) plus as many unrelated tensors of the same size (every weight has 2x candidates). Cases,
interleaved, median of ``--repeat``:

* ``pairing``: ``weight_map_side.build_maps`` (probe every candidate, compare the probed matches in full,
  resolve);
* ``read + sha256``: the baseline: read both files in the same chunks and digest the bytes once, nothing
  else;
* ``read + max|a-b|``: what a diff-bin pass over the same pairs costs in numpy (pairs known beforehand).

    python benchmarks/bench_weight_map.py [--tensors 64] [--rows 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import struct
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from graphsurgeon.formats.model_bin import read_bin
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.pipeline.weight_map_side import WrittenGraph, build_maps

WIDTH = 1024
CHUNK = 1 << 20


def write_bf16_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> dict[str, int]:
    """A safetensors file of bf16 tensors (given as uint16 bits); returns each tensor's data offset."""
    header: dict[str, object] = {}
    pos = 0
    for name, bits in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(bits.shape), "data_offsets": [pos, pos + bits.nbytes]}
        pos += bits.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for bits in tensors.values():
            fh.write(bits.astype("<u2").tobytes())
    base = 8 + len(text)
    return {name: base + int(meta["data_offsets"][0]) for name, meta in header.items()}  # type: ignore[index]


def make(folder: Path, tensors: int, rows: int) -> tuple[Path, Path, Path, list[tuple[int, int]]]:
    """The model and checkpoint; returns their paths and, per stored weight, (.bin offset, tensor offset)."""
    rng = np.random.default_rng(0)
    count = rows * WIDTH
    bits = [
        (rng.standard_normal(count).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        for _ in range(tensors)
    ]
    order = rng.permutation(tensors)
    lines = ["7767517", f"{tensors} {tensors}"]
    with open(folder / "m.bin", "wb") as fh:
        for k, i in enumerate(order):
            lines.append(f"MemoryData m{k} 0 1 b{k} 0={WIDTH} 1={rows}")
            fh.write((bits[i].astype(np.uint32) << 16).view(np.float32).tobytes())  # bf16 widened exactly
    (folder / "m.param").write_text("\n".join(lines) + "\n")
    ckpt: dict[str, np.ndarray] = {}
    for i, b in enumerate(bits):
        ckpt[f"model.layers.{i}.weight"] = b.reshape(rows, WIDTH)
        other = rng.standard_normal(count).astype(np.float32).view(np.uint32) >> 16
        ckpt[f"model.other.{i}.weight"] = other.astype(np.uint16).reshape(rows, WIDTH)
    offsets = write_bf16_safetensors(folder / "model.safetensors", ckpt)
    pairs = [(4 * count * k, offsets[f"model.layers.{i}.weight"]) for k, i in enumerate(order)]
    return folder / "m.param", folder / "m.bin", folder / "model.safetensors", pairs


def pairing(param: Path, bin_path: Path, ckpt: Path, peaks: list[int]) -> float:
    graph = read_param_text(param)
    records = read_bin(graph, bin_path)
    tracemalloc.start()  # numpy's allocations included
    t0 = time.perf_counter()
    (m,) = build_maps(str(ckpt), [WrittenGraph("m", graph, "m.bin", records)], "{graph}.yaml", None)
    elapsed = time.perf_counter() - t0
    peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    assert len(m.pairings) == len(records) and all(p.tensor.startswith("model.layers.") for p in m.pairings)
    return elapsed


def read_digest(bin_path: Path, ckpt: Path) -> float:
    t0 = time.perf_counter()
    for path in (bin_path, ckpt):
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(4 * CHUNK):
                h.update(chunk)
    return time.perf_counter() - t0


def read_diff(bin_path: Path, ckpt: Path, pairs: list[tuple[int, int]], count: int) -> float:
    t0 = time.perf_counter()
    worst = 0.0
    with open(bin_path, "rb") as fa, open(ckpt, "rb") as fb:
        for off_a, off_b in pairs:
            for start in range(0, count, CHUNK):
                n = min(CHUNK, count - start)
                fa.seek(off_a + 4 * start)
                fb.seek(off_b + 2 * start)
                x = np.frombuffer(fa.read(4 * n), "<f4")
                y = (np.frombuffer(fb.read(2 * n), "<u2").astype(np.uint32) << 16).view(np.float32)
                worst = max(worst, float(np.abs(x - y).max()))
    assert worst == 0.0
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_weight_map_") as tmp:
        param, bin_path, ckpt, pairs = make(Path(tmp), args.tensors, args.rows)
        mb = (bin_path.stat().st_size + ckpt.stat().st_size) / 1e6
        peaks: list[int] = []
        times: dict[str, list[float]] = {"pairing": [], "read + sha256": [], "read + max|a-b|": []}
        for _ in range(args.repeat):
            times["pairing"].append(pairing(param, bin_path, ckpt, peaks))
            times["read + sha256"].append(read_digest(bin_path, ckpt))
            times["read + max|a-b|"].append(read_diff(bin_path, ckpt, pairs, args.rows * WIDTH))
        base = statistics.median(times["read + sha256"])
        print(
            f"{args.tensors} fp32 weights of {args.rows}x{WIDTH}, checkpoint of 2x as many bf16 tensors: "
            f"{mb:.0f} MB in all"
        )
        print("| case | median | vs read + sha256 |")
        print("|---|---:|---:|")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"| {name} | {median:.2f} s | {median / base:.2f}x |")
        weight = 4 * args.rows * WIDTH / 1e6
        heap = max(peaks) / 1e6
        print(f"heap peak while pairing (tracemalloc, with numpy): {heap:.1f} MB; a weight: {weight:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
