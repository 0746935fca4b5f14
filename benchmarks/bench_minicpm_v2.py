#!/usr/bin/env python3
"""MiniCPM-V-2 at its real dimensions: write a random-weight checkpoint with the real ``config.json`` values
(docs/minicpm-v-2.md §1: LLM 2304 wide, 40 layers, 36 heads, MLP 5760, vocabulary 122,753; the SigLIP
400M encoder, 26 of 27 blocks kept; 64 queries; bf16, two shards and an index as the real checkpoint is
stored), streamed tensor by tensor (never the whole model in memory), the tiny checkpoint's tokenizer files
beside it (their ids lie inside the real vocabulary). Then, in one run, each in its own process with the
memory of its whole process tree sampled from /proc every 0.2 s (``bench_penguin_vl.RssSampler``: private
memory, and with mapped file pages):

* ``gsurg apply rules/minicpm_v2.yaml --set checkpoint=DIR`` as shipped (the short export grown back:
  ``inputs.*.repeat`` and the whole-vocabulary rules), and with ``--trace-all`` also tracing the whole
  model (``export_*=0``: what every conversion did before), which needs more memory than this machine has
  (pnnx holds ~2.5x the 9.7 GB fp32 decoder); it is skipped unless asked for;
* ``gsurg verify`` on one corpus image and one prompt (``--skip-verify`` leaves it out).

    python benchmarks/bench_minicpm_v2.py [--keep DIR] [--tokens 8] [--skip-verify] [--trace-all]

Needs about 60 GB of free disk (the checkpoint, the fp32 nets, pnnx's work files).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: this checkout's package first
    sys.path.insert(0, str(REPO))

from bench_penguin_vl import RssSampler  # noqa: E402

IMAGE = REPO.parent / "shared" / "corpus" / "images" / "photo_20180413_3.jpg"
CHECKPOINT_NAME = "minicpm-v-2-random"
REAL: dict[str, Any] = {
    "hidden_size": 2304,
    "intermediate_size": 5760,
    "num_attention_heads": 36,
    "num_hidden_layers": 40,
    "num_key_value_heads": 36,
    "query_num": 64,
    "vision_encoder": "vit_so400m_patch14_siglip_384.webli",
    "vocab_size": 122753,
}
PARAMETERS = 3_434_965_792
"""docs/minicpm-v-2.md §2: the real checkpoint's total_size / 2 (every tensor bf16)."""
SHARD_BYTES = 5 << 30


def _bf16(values: np.ndarray) -> bytes:
    """float32 -> bf16 bytes, round to nearest even (as torch converts)."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def _draw(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """N(0, 1/fan_in) for matrices (o_proj/down_proj at twice that), norms around 1, biases small, the
    embedding at 0.1 — as make_tiny scales its draws — from a generator seeded by the name."""
    from graphsurgeon.models.minicpm_v2.make_tiny import _gain

    digest = hashlib.sha256(name.encode()).digest()
    rng = np.random.default_rng([seed, *struct.unpack("<4I", digest[:16])])
    scale, centre = _gain(name)
    if len(shape) >= 2 and name not in ("llm.model.embed_tokens.weight", "vpm.pos_embed", "resampler.query"):
        scale /= float(np.prod(shape[1:])) ** 0.5
    out = rng.standard_normal(shape, dtype=np.float32)
    out *= np.float32(scale)
    out += np.float32(centre)
    return out


def write_checkpoint(folder: Path, seed: int = 0) -> None:
    """The real config over the tiny tokenizer files, and random bf16 weights in shards of at most
    SHARD_BYTES, each tensor drawn, converted and written before the next."""
    from graphsurgeon.models.minicpm_v2.checkpoint import tensor_shapes
    from graphsurgeon.models.minicpm_v2.config import config_from_dict
    from graphsurgeon.models.minicpm_v2.make_tiny import SHIPPED
    from graphsurgeon.models.minicpm_v2.resampler import sincos_2d

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(SHIPPED / name, folder / name)
    shutil.copyfile(SHIPPED / "generation_config.json", folder / "generation_config.json")
    raw = json.loads((SHIPPED / "config.json").read_text())
    raw.update(REAL)
    (folder / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    cfg = config_from_dict(raw)
    shapes = tensor_shapes(cfg)
    count = sum(int(np.prod(s)) for s in shapes.values())
    if count != PARAMETERS:
        raise SystemExit(f"the config gives {count:,} parameters, not the real {PARAMETERS:,}")
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = 2 * int(np.prod(shape))
        if size + nbytes > SHARD_BYTES and shards[-1]:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    weight_map = {}
    for k, names in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name in names:
            nbytes = 2 * int(np.prod(shapes[name]))
            entry = {"dtype": "BF16", "shape": list(shapes[name]), "data_offsets": [offset, offset + nbytes]}
            header[name] = entry
            offset += nbytes
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(folder / file, "wb") as fh:
            fh.write(struct.pack("<Q", len(text)) + text)
            for name in names:
                if name == "resampler.pos_embed":
                    values = sincos_2d(shapes[name][1], (cfg.resampler.grid, cfg.resampler.grid)).numpy()
                else:
                    values = _draw(name, shapes[name], seed)
                fh.write(_bf16(values))
                weight_map[name] = file
        print(f"wrote {file} ({len(names)} tensors, {offset / 2**30:.2f} GiB)", file=sys.stderr)
    index = {"metadata": {"total_size": 2 * count}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def run_measured(argv: list[str]) -> tuple[float, RssSampler, str]:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    sampler = RssSampler(proc.pid)
    assert proc.stdout is not None
    out = proc.stdout.read()
    code = proc.wait()
    sampler.stop()
    sys.stdout.write(out[-4000:])
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(argv[:4])} exited {code}")
    return time.perf_counter() - start, sampler, out


def _row(what: str, seconds: float, sampler: RssSampler, weights: int) -> str:
    anon, total = sampler.peak(), sampler.peak(total=True)
    return (
        f"| {what} | {seconds:.0f} s | {anon / 2**30:.2f} GiB ({anon / weights:.2f}x) | "
        f"{total / 2**30:.2f} GiB |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--skip-verify", action="store_true")
    ap.add_argument("--trace-all", action="store_true", help="also convert tracing the whole model (before)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="gsurg-bench-minicpm-v2-"))
    work.mkdir(parents=True, exist_ok=True)
    gsurg = [sys.executable, "-m", "graphsurgeon.cli"]
    rows = []
    try:
        ckpt = work / CHECKPOINT_NAME
        if not (ckpt / "model.safetensors.index.json").exists():
            t0 = time.perf_counter()
            write_checkpoint(ckpt)
            print(f"checkpoint written in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        fp32_weights = 4 * PARAMETERS
        modes: list[tuple[str, list[str]]] = [("short export grown back (shipped)", [])]
        if args.trace_all:
            sets = ["export_llm_layers=0", "export_vision_layers=0", "export_vocab_rows=0"]
            modes.append(("whole model traced (before)", [x for s in sets for x in ("--set", s)]))
        for k, (what, extra) in enumerate(modes):
            out = work / f"out{k}"
            shutil.rmtree(out, ignore_errors=True)
            argv = [*gsurg, "apply", "minicpm_v2", "--checkpoint", str(ckpt), "--out", str(out), *extra]
            seconds, sampler, _ = run_measured(argv)
            rows.append(_row(f"apply, {what}", seconds, sampler, fp32_weights))
        if not args.skip_verify:
            image = ["--image", str(IMAGE)] if IMAGE.is_file() else []
            argv = [*gsurg, "verify", str(work / "out0"), "--checkpoint", str(ckpt)]
            argv += ["--tokens", str(args.tokens)]
            seconds, sampler, report = run_measured([*argv, *image, "--prompt", "Describe the image."])
            rows.append(_row("verify (reference, then ncnn)", seconds, sampler, fp32_weights))
            rows.append(f"verify: {report.strip().splitlines()[-1]}")
        print(
            f"\nMiniCPM-V-2, random weights at the real dimensions ({os.cpu_count()} CPUs); "
            f"the fp32 weights are {fp32_weights / 2**30:.2f} GiB"
        )
        print("| run | wall | peak private (x fp32 weights) | peak with mapped files |")
        print("|---|---|---|---|")
        print("\n".join(rows))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
