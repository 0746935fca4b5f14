"""Benchmark rules/gqa-native.yaml on the corpus Qwen3-0.6B decoder: decode-step latency (median of many
steps) and KV-cache bytes, before vs after, in one run of the ncnn wheel with synthesized weights.

    python benchmarks/bench_gqa_native.py [--steps 32] [--prompt 16] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from graphsurgeon.verify.kv_session import KVDecoder

REPO = Path(__file__).resolve().parents[1]

PARAM = REPO.parent / "shared" / "corpus" / "llm" / "qwen3_0.6b_decoder.ncnn.param"


def gsurg(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "graphsurgeon.cli", *args], check=True, cwd=REPO)


def decode_latencies(decoder: KVDecoder, x: np.ndarray, prompt: int) -> tuple[list[float], int]:
    """Prefill ``prompt`` rows, then time each single-token decode step; return the step times and the
    logical KV-cache bytes held at the end."""
    times = []
    with decoder.session() as session:
        session.prefill(x[:prompt])
        for pos in range(prompt, len(x)):
            t0 = time.perf_counter()
            step = session.decode_step(x[pos : pos + 1])
            times.append(time.perf_counter() - t0)
        return times, step.cache_bytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=32, help="decode steps to time (>= 20)")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_gqa_") as tmp:
        model, out = Path(tmp) / "qwen3.bin", Path(tmp) / "out"
        gsurg("synth-bin", str(PARAM), "-o", str(model), "--seed", "0", "--storage", "fp16", "-q")
        gsurg("apply", str(REPO / "rules" / "gqa-native.yaml"), str(PARAM), "--out", str(out), "--strict")
        x = 0.1 * np.random.default_rng(0).standard_normal((args.prompt + args.steps, 1024)).astype(
            np.float32
        )
        rows = []
        for label, param in (("before (Tile-expanded k/v)", PARAM), ("after gqa-native", out / PARAM.name)):
            with KVDecoder(param, model, num_threads=args.threads) as decoder:
                decode_latencies(decoder, x[: args.prompt + 2], args.prompt)  # warm-up
                times, cache = decode_latencies(decoder, x, args.prompt)
            rows.append((label, statistics.median(times), cache))
    (_, t0, c0), (_, t1, c1) = rows
    print(
        f"Qwen3-0.6B decoder (synthesized fp16 weights), prompt {args.prompt}, {args.steps} decode steps, "
        f"{args.threads} thread(s)"
    )
    print("| graph | median decode step | KV cache after the last step |")
    print("|---|---:|---:|")
    for label, t, c in rows:
        print(f"| {label} | {t * 1000:.2f} ms | {c / 2**20:.2f} MiB |")
    print(f"| ratio after/before | {t1 / t0:.3f} | {c1 / c0:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
