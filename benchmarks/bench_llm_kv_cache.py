#!/usr/bin/env python3
"""Convert a checkpoint with Qwen3-0.6B's exact config (random bf16 weights, 3 shards) through
``rules/llm-kv-cache.yaml`` and check the result, reporting, in one run:

* the conversion (``gsurg apply``, in its own process): wall time and peak RSS, against the checkpoint's
  size and a plain copy of the written bytes made in the same run (the I/O floor of the writing stage);
* the output bytes of each sub-model;
* the converted decoder against the PyTorch reference over a prefill and decode steps (max |diff| / scale)
  and greedy tokens through embed -> decoder -> lm_head against PyTorch's.

    python benchmarks/bench_llm_kv_cache.py [--keep DIR] [--tokens 8] [--threads 2]

Needs about 8 GiB of free disk in the work folder (checkpoint 1.2 GB, exports and outputs ~2.4 GB each).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "rules" / "llm-kv-cache.yaml"


def timed_child(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak < before:
        peak = before
    return wall, peak / 1024


def copy_floor(files: list[Path], target: Path) -> float:
    """Seconds to copy ``files`` into ``target`` and fsync each: the bytes the conversion writes."""
    import os

    target.mkdir()
    start = time.perf_counter()
    for f in files:
        dest = target / f.name
        shutil.copyfile(f, dest)
        fd = os.open(dest, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    ap.add_argument("--tokens", type=int, default=8, help="greedy tokens to compare")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="gsurg-bench-llm-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        ckpt = work / "qwen3-0.6b-random"
        if not (ckpt / "config.json").exists():
            t, rss = timed_child(
                [sys.executable, "-m", "graphsurgeon.models.qwen3_llm.make_tiny", str(ckpt), "--qwen3-0.6b"]
            )
            print(f"checkpoint written in {t:.1f} s (peak RSS {rss:.0f} MB)")
        ckpt_bytes = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        apply_argv = [sys.executable, "-m", "graphsurgeon.cli", "apply", str(RULES), "--out", str(out)]
        wall, rss = timed_child([*apply_argv, "--set", f"checkpoint={ckpt}"])
        written = sorted(p for p in out.iterdir() if p.suffix in (".bin", ".param", ".json"))
        out_bytes = sum(p.stat().st_size for p in written)
        floor = copy_floor(written, work / "copy")
        shutil.rmtree(work / "copy")
        print("\n| stage | figure |\n|---|---|")
        print(f"| checkpoint (bf16, 3 shards) | {ckpt_bytes / 1e9:.2f} GB |")
        print(f"| `gsurg apply rules/llm-kv-cache.yaml` (export + rules + write) | {wall:.1f} s |")
        print(f"| peak RSS of apply | {rss:.0f} MB ({rss * 1e6 / ckpt_bytes:.2f}x the checkpoint) |")
        print(f"| bytes written | {out_bytes / 1e9:.2f} GB |")
        print(
            f"| plain copy + fsync of the same bytes (same run) | {floor:.1f} s "
            f"(apply = {wall / floor:.1f}x) |"
        )
        for name in ("embed", "decoder", "lm_head"):
            size = (out / f"{name}.ncnn.bin").stat().st_size
            print(f"| {name}.ncnn.bin | {size / 1e6:.1f} MB |")
        check(ckpt, out, args.tokens, args.threads)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def check(ckpt: Path, out: Path, tokens: int, threads: int) -> None:
    import numpy as np
    import torch

    from graphsurgeon.models.common.qwen3_llm_model import KVCache, causal_mask, load_model, rope_tables
    from graphsurgeon.verify.llm_chain import LlmChain

    torch.set_num_threads(threads)
    model = load_model(ckpt)
    cfg = model.config
    hidden = torch.randn(1, 20, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    worst = 0.0
    with LlmChain(out, families=("qwen3_llm",), num_threads=threads) as chain:
        with chain.session() as session, torch.no_grad():
            cache, start = KVCache(), 0
            for i, n in enumerate((16, 1, 1, 1, 1)):
                x = hidden[:, start : start + n]
                cos, sin = rope_tables(cfg, start, n)
                want, cache = model.decode(x, causal_mask(start, n), cos, sin, cache)
                step = session.prefill(x[0].numpy()) if i == 0 else session.append(x[0].numpy())
                worst = max(worst, float(np.abs(step.hidden - want[0].numpy()).max() / want.abs().max()))
                start += n
        prompt = [151644, 872, 198, 9707, 11, 1879, 0]
        t0 = time.perf_counter()
        ours = chain.greedy(prompt, tokens)
        t_ncnn = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = model.generate(prompt, tokens)
    t_torch = time.perf_counter() - t0
    print(f"| decoder max abs diff / scale (prefill 16 + 4 steps) | {worst:.2e} |")
    print(f"| greedy tokens equal ({tokens}) | {ours == ref} |")
    print(
        f"| greedy {tokens} tokens: ncnn / torch wall ({threads} threads) | "
        f"{t_ncnn:.2f} s / {t_torch:.2f} s |"
    )


if __name__ == "__main__":
    raise SystemExit(main())
