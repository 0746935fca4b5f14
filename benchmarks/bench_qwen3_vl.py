#!/usr/bin/env python3
"""Qwen3-VL at its real dimensions: write a random-weight checkpoint with Qwen3-VL-2B-Instruct's exact config
(``docs/qwen3-vl.md`` §1 of the shared docs; transformers 5 style, bf16, one ``model.safetensors``, written by
HF's own ``Qwen3VLForConditionalGeneration(config).save_pretrained``; the tiny model's tokenizer and chat
template, whose ids lie inside the real 151936-row vocabulary), then in one run:

* ``gsurg apply rules/qwen3_vl.yaml --set checkpoint=DIR`` in its own process, the memory of its whole
  process tree (private, and with mapped file pages) sampled from /proc every 0.2 s
  (``bench_penguin_vl.RssSampler``) and split at its progress lines into four stages: tracing (the export
  worker loads HF's model and traces every net), pnnx (the worker's pnnx runs; also split per net), rules
  (the graphs' rules) and writing;
* a plain copy + fsync of the bytes apply wrote (the I/O floor of the writing stage), same run;
* ``gsurg verify`` on one non-square corpus image (720×520, resized by the processor to 704×512: a 32×44
  patch grid, 352 image tokens) and one prompt, plus verify's own text-only case (peak RSS: the HF
  reference and the ncnn nets run one after the other and must fit the machine).

    python benchmarks/bench_qwen3_vl.py [--keep DIR] [--tokens 8] [--skip-verify]

Needs about 25 GB of free disk and most of the machine's 24 GiB of memory.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: this checkout's package first
    sys.path.insert(0, str(REPO))

from bench_penguin_vl import RssSampler  # noqa: E402

IMAGE = REPO.parent / "shared" / "corpus" / "images" / "photo_20180413_3.jpg"
CHECKPOINT_NAME = "qwen3-vl-2b-random"

TEXT_CONFIG: dict[str, Any] = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 262144,
    "attention_bias": False,
    "vocab_size": 151936,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
    },
    "tie_word_embeddings": True,
}
VISION_CONFIG: dict[str, Any] = {
    "depth": 24,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_heads": 16,
    "hidden_act": "gelu_pytorch_tanh",
    "in_channels": 3,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": 2048,
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [5, 11, 17],
}
MIN_PIXELS, MAX_PIXELS = 65536, 16777216
"""The 2B's image budget (``size``: shortest_edge / longest_edge, 64 to 16384 merged tokens; §4.2)."""
PARAMETERS = 2_127_532_032
"""§1's parameter count of the 2B, the tied head counted once: the written model must have exactly this."""


def write_checkpoint(folder: Path, seed: int = 0) -> None:
    """Qwen3-VL-2B-Instruct's config over the tiny tokenizer (``tiny_tokenizer.write_tokenizer``: the special
    tokens get ids 512..518, which the config's token ids are set to; the config's own loader cross-checks
    them with tokenizer.json), the 2B's image budget, and HF's model built directly in bf16 with HF's own
    init after ``torch.manual_seed(seed)``: matrices N(0, 0.02) (0.9/sqrt(fan_in) at width 2048: activations
    stay near unit size), then every norm gain redrawn as 1 + 0.1 N(0,1) and every bias as 0.02 N(0,1) (HF
    sets them to exactly 1 and 0, which a conversion that dropped them would still match). Saved by
    ``save_pretrained`` as one bf16 ``model.safetensors`` (tied: no ``lm_head.weight``)."""
    import torch
    import transformers

    from graphsurgeon.models.qwen3_vl.make_tiny import VISION_CONFIG as TINY_VISION
    from graphsurgeon.models.qwen3_vl.tiny_tokenizer import (
        ENDOFTEXT,
        IM_END,
        IMAGE_PAD,
        VIDEO_PAD,
        VISION_END,
        VISION_START,
        write_tokenizer,
    )

    folder.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(folder)
    transformers.Qwen2VLImageProcessorPil(  # as make_tiny's, with the 2B's budget
        patch_size=TINY_VISION["patch_size"],
        temporal_patch_size=TINY_VISION["temporal_patch_size"],
        merge_size=TINY_VISION["spatial_merge_size"],
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
    ).save_pretrained(str(folder))
    config = transformers.Qwen3VLConfig(
        text_config=dict(TEXT_CONFIG),
        vision_config=dict(VISION_CONFIG),
        image_token_id=ids[IMAGE_PAD],
        video_token_id=ids[VIDEO_PAD],
        vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16: ~4.3 GB, never an fp32 copy
    try:
        model = transformers.Qwen3VLForConditionalGeneration(config).eval()
    finally:
        torch.set_default_dtype(before)
    count = sum(p.numel() for p in model.parameters())  # parameters() yields the tied matrix once
    if count != PARAMETERS:
        raise SystemExit(f"the model has {count:,} parameters, not the 2B's {PARAMETERS:,}")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.02)
            elif param.dim() == 1:  # RMSNorm / LayerNorm gains
                param.normal_(1.0, 0.1)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=ids[ENDOFTEXT], eos_token_id=[ids[IM_END], ids[ENDOFTEXT]], pad_token_id=ids[ENDOFTEXT]
    )
    model.save_pretrained(str(folder), max_shard_size="100GB")
    (folder / "model.safetensors").chmod(0o644)
    del model
    gc.collect()


def run_measured(argv: list[str]) -> tuple[float, RssSampler, list[tuple[float, str]], str]:
    """Wall time, the RSS samples, every stderr line with the time it appeared (the last: ``("end")``, when
    the process exited), and stdout (verify's table)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    sampler = RssSampler(proc.pid)
    lines: list[tuple[float, str]] = []
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stderr:
        sys.stderr.write(line)
        lines.append((time.perf_counter(), line.rstrip("\n")))
    report = proc.stdout.read()
    code = proc.wait()
    lines.append((time.perf_counter(), "end"))
    sampler.stop()
    sys.stdout.write(report)
    if code not in (0, 1) or (code == 1 and argv[3] != "verify"):
        raise SystemExit(f"{argv[3]} exited {code}")
    if code == 1:
        print("verify FAILED (exit 1): see the table above", file=sys.stderr)
    return time.perf_counter() - start, sampler, lines, report


def stage_starts(lines: list[tuple[float, str]], start: float) -> dict[str, float]:
    """When each apply stage began: tracing (the start), pnnx (the first ``export NAME: pnnx`` line), rules
    (the first ``graph NAME:`` line), writing (``writing N graph(s)``), end."""

    def first(test: str) -> float:
        return next((t for t, line in lines if test in line), start)

    return {
        "tracing": start,
        "pnnx": first(": pnnx"),
        "rules": first("gsurg: graph "),
        "writing": first("gsurg: writing "),
        "end": lines[-1][0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--skip-verify", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="K=V", help="passed to apply (repeatable)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="gsurg-bench-qwen3-vl-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        ckpt = work / CHECKPOINT_NAME
        if not (ckpt / "model.safetensors").exists():
            t0 = time.perf_counter()
            write_checkpoint(ckpt)
            print(f"checkpoint written in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        ckpt_bytes = (ckpt / "model.safetensors").stat().st_size
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        gsurg = [sys.executable, "-m", "graphsurgeon.cli"]
        argv = [*gsurg, "apply", str(REPO / "rules" / "qwen3_vl.yaml"), "-v", "--out", str(out)]
        t_start = time.perf_counter()
        extra = [x for setting in args.set for x in ("--set", setting)]
        wall, rss, lines, _ = run_measured([*argv, "--set", f"checkpoint={ckpt}", *extra])
        marks = stage_starts(lines, t_start)
        written = [p for p in out.iterdir() if p.is_file()]
        out_bytes = sum(p.stat().st_size for p in written)
        copy = work / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        copy.mkdir()
        t0 = time.perf_counter()
        for p in written:
            shutil.copyfile(p, copy / p.name)
            fd = os.open(copy / p.name, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        floor = time.perf_counter() - t0
        shutil.rmtree(copy)
        names = ["tracing", "pnnx", "rules", "writing"]
        print("\n| stage | figure |\n|---|---|")
        print(f"| checkpoint (Qwen3-VL-2B config, random bf16, one file) | {ckpt_bytes / 1e9:.2f} GB |")
        print(f"| `gsurg apply rules/qwen3_vl.yaml`, wall | {wall:.0f} s |")
        print("| stage: wall, peak memory private (with mapped file pages) | |")
        for name, nxt in zip(names, [*names[1:], "end"], strict=True):
            a, b = marks[name], marks[nxt]
            print(f"| {name} | {b - a:.0f} s, {rss.gb(a, b)} |")
        pnnx = [(t, line.split(":")[1].split()[-1]) for t, line in lines if ": pnnx" in line]
        for (a, name), b in zip(pnnx, [t for t, _ in pnnx[1:]] + [marks["rules"]], strict=True):
            print(f"| pnnx of {name} | {b - a:.0f} s, {rss.gb(a, b)} |")
        print(f"| whole apply, peak memory | {rss.gb()} |")
        print(f"| bytes written | {out_bytes / 1e9:.2f} GB ({len(written)} files) |")
        write_time = marks["end"] - marks["writing"]
        print(
            f"| writing stage / a plain copy + fsync of the same bytes | {write_time:.0f} s / {floor:.0f} s "
            f"= {write_time / floor:.2f} |"
        )
        if not args.skip_verify:
            vargv = [*gsurg, "verify", str(out), "-v", "--tokens", str(args.tokens), "--threads", "2"]
            vargv += ["--image", str(IMAGE), "--prompt", "Describe the picture."]
            vwall, vrss, _, _ = run_measured(vargv)
            case = f"1 image + text only, {args.tokens} tokens each"
            print(f"| `gsurg verify` ({case}), wall | {vwall:.0f} s |")
            print(f"| peak memory of verify | {vrss.gb()} |")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
