#!/usr/bin/env python3
"""``qwen3_vl_run`` (the C++ runtime) against HF transformers' own ``Qwen3VLForConditionalGeneration`` in fp32
at Qwen3-VL-2B's real dimensions (random weights, ``bench_qwen3_vl.py``'s checkpoint), in one script run:

* one 448×448 image (a corpus photo resized with Pillow; smart_resize keeps it: a 28×28 patch grid, 196
  image tokens) and one prompt, 32 new tokens, 2 threads on both sides;
* for each side: load time (weights read from a warm page cache), vision time, prefill time, decode
  tokens/s, the whole run's wall time (the HF child's includes importing torch and transformers) and its
  peak RSS (``ru_maxrss`` of the child process; each side runs in its own child so neither counts the
  other), and the 32 greedy tokens, compared.

How each figure is taken. ``qwen3_vl_run --verbose`` prints its own stage times on stderr (load: the nets and
tables; vision: patch embed to fused rows and DeepStack features; prefill: the decoder over the prompt and the
logits of its last row; decode: the 31 one-token steps after the first token; ``--ignore-eos``). The HF child
times ``Qwen3VLForConditionalGeneration.from_pretrained(DIR, dtype=torch.float32)`` (load, the bf16 checkpoint
widened) and the checkpoint's processor (``processor.load_processor`` + ``chat_inputs``: preprocess), then
runs ``generate(max_new_tokens=32, min_new_tokens=32, do_sample=False)`` once with forward hooks taking the
clock on ``model.model.visual`` and on the top model. transformers 5.24's ``generate`` encodes the image
before its loop (``get_image_features``, handed to the first forward as ``mm_encoder_outputs``): vision = the
visual module's one call; prefill = the first top-level forward (the embedding lookup, the image rows
scattered in, the MRoPE cos/sin tables, the 28 layers with the DeepStack additions, the logits); decode = from
the end of the first forward to the end of the last (31 calls and generate's own work between them, as the
runtime's decode loop includes its sampler). The MRoPE index generate computes between vision and prefill is
in neither, as the runtime's positions are outside its timed stages. ``min_new_tokens`` masks EOS for 32
tokens, as ``--ignore-eos`` lets the runtime run on: the tokens can differ only where EOS is the argmax.

    python benchmarks/bench_qwen3_vl_run.py [--work DIR] [--runner PATH] [--gen 32] [--threads 2]
        [--repeat 3] [--storages fp32,int8,int4]

``--work`` is reused: the checkpoint (``DIR/qwen3-vl-2b-random``, as ``bench_qwen3_vl.py --keep DIR``
writes it), the fp32 conversion (``DIR/out``) and the others (``DIR/out-STORAGE``, ``--set
storage=STORAGE``; each runs at ``--precision fp32``, its int Gemms through their kernels) are made only
when missing. Without ``--runner``: the
``qwen3_vl_run`` that ``runtime_cpp/scripts/build_and_test.sh`` built for the main checkout
(``DEFAULT_RUNNER``) when it is there, else one built with ``--linux-only --no-test`` into
``<repo>/build``. Needs about 25 GB of free disk and most of 24 GiB of memory (the reference holds the 2B
model in fp32, ~8.5 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The folder the checkpoint and conversions live in unless --work says otherwise (other benchmarks share it).
DEFAULT_WORK = Path(tempfile.gettempdir()) / "gsurg-bench-qwen3-vl-run"
if str(REPO) not in sys.path:  # run as a script: this checkout's package first
    sys.path.insert(0, str(REPO))

from bench_penguin_vl_run import (  # noqa: E402
    PROMPT,
    Side,
    median_side,
    print_rounds,
    report,
    run_child,
    warm_page_cache,
)
from bench_penguin_vl_run import measure_runner as measure_penguin_runner  # noqa: E402
from bench_qwen3_vl import CHECKPOINT_NAME  # noqa: E402

SOURCE_IMAGE = REPO.parent / "shared" / "corpus" / "images" / "photo_20180413_3.jpg"
SIDE = 448  # pixels; 28 patches of 16, 14 merged tokens per side: 196 image tokens
GRID = SIDE // 16
DEFAULT_RUNNER = Path.home() / ".cache/gsurg/runtime-build/0e87d353e4a7/linux/runner/qwen3_vl_run"
"""Where ``build_and_test.sh`` builds /work/main's runtime (its build folder is keyed by the checkout)."""


# --- the HF side (runs in a child: python bench_qwen3_vl_run.py --torch-child ...) -------------------------


def torch_child(checkpoint: Path, image: Path, gen: int, threads: int) -> int:
    """Time HF's fp32 model stage by stage (see the module docstring); print one JSON line."""
    import torch
    import transformers

    from graphsurgeon.models.qwen3_vl.processor import chat_inputs, load_processor

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(str(checkpoint), dtype=torch.float32)
    model.eval()
    stages = {"load": time.perf_counter() - t0}
    t0 = time.perf_counter()
    inputs = chat_inputs(load_processor(checkpoint), [image], PROMPT)
    stages["preprocess"] = time.perf_counter() - t0
    calls: list[list[float]] = []  # [start, end] of each top-level forward
    vision: list[list[float]] = []

    def opener(into: list[list[float]]) -> Any:
        return lambda *_: into.append([time.perf_counter(), 0.0])

    def closer(into: list[list[float]]) -> Any:
        def close(*_: Any) -> None:
            into[-1][1] = time.perf_counter()

        return close

    model.register_forward_pre_hook(opener(calls))
    model.register_forward_hook(closer(calls))
    model.model.visual.register_forward_pre_hook(opener(vision))
    model.model.visual.register_forward_hook(closer(vision))
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=gen, min_new_tokens=gen, do_sample=False)
    if len(vision) != 1 or not vision[0][0] <= vision[0][1] <= calls[0][0]:
        raise SystemExit(f"expected one vision call before the prefill call: {vision} / {calls[:2]}")
    stages["vision"] = vision[0][1] - vision[0][0]
    stages["prefill"] = calls[0][1] - calls[0][0]
    stages["decode"] = calls[-1][1] - calls[0][1]
    prompt = int(inputs["input_ids"].shape[1])
    tokens = [int(t) for t in out[0, prompt:]]
    grid = [int(v) for v in inputs["image_grid_thw"][0, 1:]]
    print(json.dumps({"grid": grid, "prompt_tokens": prompt, "tokens": tokens, "stages": stages}))
    return 0


def measure_torch(checkpoint: Path, image: Path, gen: int, threads: int) -> Side:
    warm_page_cache(checkpoint)
    argv = [sys.executable, __file__, "--torch-child", str(checkpoint), str(image), str(gen), str(threads)]
    wall, rss, stdout, _ = run_child(argv)
    data = json.loads(stdout.strip().splitlines()[-1])
    if data["grid"] != [GRID, GRID]:
        raise SystemExit(f"the image gave a {data['grid']} grid, not {GRID}x{GRID}")
    return Side("HF transformers fp32", wall, rss, data["stages"], data["prompt_tokens"], data["tokens"])


# --- the C++ side ------------------------------------------------------------------------------------------


def measure_runner(runner: Path, model: Path, image: Path, gen: int, threads: int, storage: str) -> Side:
    """``qwen3_vl_run`` measured as ``bench_penguin_vl_run`` measures its runner (the same flags and
    ``--verbose`` stage lines; the program is one main under two names)."""
    return measure_penguin_runner(runner, model, image, gen, threads, f"qwen3_vl_run, {storage} storage")


# --- inputs ------------------------------------------------------------------------------------------------


def make_image(work: Path) -> Path:
    """The corpus photo resized (bicubic, no crop) to exactly 448×448, saved as PNG."""
    from PIL import Image

    path = work / f"bench_{SIDE}x{SIDE}.png"
    if not path.exists():
        with Image.open(SOURCE_IMAGE) as img:
            img.convert("RGB").resize((SIDE, SIDE), Image.Resampling.BICUBIC).save(path)
    return path


def ensure_checkpoint(work: Path) -> Path:
    from bench_qwen3_vl import write_checkpoint

    ckpt = work / CHECKPOINT_NAME
    if not (ckpt / "model.safetensors").exists():
        print(f"writing the random-weight checkpoint into {ckpt}", file=sys.stderr)
        write_checkpoint(ckpt)
    return ckpt


def ensure_model(ckpt: Path, out: Path, storage: str = "fp32") -> Path:
    from bench_penguin_vl_run import convert_once

    return convert_once("qwen3_vl.yaml", ckpt, out, storage)


def ensure_runner(runner: Path | None) -> Path:
    if runner is not None:
        return runner
    if DEFAULT_RUNNER.is_file():
        return DEFAULT_RUNNER
    build = REPO / "build"
    script = REPO / "runtime_cpp" / "scripts" / "build_and_test.sh"
    env = os.environ | {"GSURG_BUILD_DIR": str(build)}
    subprocess.run([str(script), "--linux-only", "--no-test"], check=True, env=env)
    return build / "linux" / "runner" / "qwen3_vl_run"


# --- report ------------------------------------------------------------------------------------------------


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--torch-child":
        return torch_child(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument(
        "--runner", type=Path, help=f"a built qwen3_vl_run (default: {DEFAULT_RUNNER} or a build)"
    )
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="runs per side; the table shows medians")
    ap.add_argument("--storages", default="fp32,int8,int4", help="the conversions to run (out, out-STORAGE)")
    ap.add_argument(
        "--checkpoint", type=Path, help="another checkpoint (e.g. the tiny one, to try the script)"
    )
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    runner = ensure_runner(args.runner)
    ckpt = args.checkpoint.resolve() if args.checkpoint else ensure_checkpoint(args.work)
    image = make_image(args.work)
    storages = args.storages.split(",")
    models = {s: ensure_model(ckpt, args.work / ("out" if s == "fp32" else f"out-{s}"), s) for s in storages}
    runs: dict[str, list[Side]] = {"HF": []}
    for k in range(args.repeat):  # the sides interleaved, so a slow spell of the machine hits all of them
        t0 = time.perf_counter()
        runs["HF"].append(measure_torch(ckpt, image, args.gen, args.threads))
        for storage, model in models.items():
            runs.setdefault(storage, []).append(
                measure_runner(runner, model, image, args.gen, args.threads, storage)
            )
        print(f"round {k + 1}/{args.repeat}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    report([median_side(r) for r in runs.values()], args.threads, args.repeat, ref="HF", grid=GRID)
    print_rounds(runs, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
