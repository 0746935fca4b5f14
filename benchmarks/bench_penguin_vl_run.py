#!/usr/bin/env python3
"""``penguin_vl_run`` (the C++ runtime) against the fp32 PyTorch reference at Penguin-VL-2B's real
dimensions (random weights), in one script run:

* one 196×196 image (a 14×14 patch grid: 196 image tokens, about 223 prompt tokens with the chat template)
  and one prompt, 32 new tokens (EOS ignored on both sides), 2 threads on both sides;
* for each side: load time (weights read from a warm page cache), vision time, prefill time, decode
  tokens/s, the whole run's wall time (the PyTorch child's includes importing torch) and its peak RSS
  (``ru_maxrss`` of the child process; each side runs in its own child so neither counts the other);
* ``penguin_vl_run`` on the conversions at each ``--storages`` (default fp32, fp16, int8, int4: ``--set
  storage=...``), run at ``--precision fp32``; the reference is fp32 eager PyTorch on the bf16 checkpoint
  widened to fp32 (``graphsurgeon/models/penguin_vl/model.py``, with a KV cache).

    python benchmarks/bench_penguin_vl_run.py [--work DIR] [--runner PATH] [--gen 32] [--threads 2]
        [--repeat 3] [--storages fp32,fp16,int8,int4]

``--work`` is reused: the checkpoint (``DIR/penguin-vl-2b-random``, as ``bench_penguin_vl.py --keep DIR``
writes it), the fp32 conversion (``DIR/out``) and the others (``DIR/out-STORAGE``) are made only when
missing. Without ``--runner`` the runtime is built with ``runtime_cpp/scripts/build_and_test.sh
--linux-only --no-test`` into ``<repo>/build``. Needs about 30 GB of free disk and most of 24 GiB of memory
(the reference holds the 2B model in fp32, ~8.5 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The folder the checkpoint and conversions live in unless --work says otherwise (other benchmarks share it).
DEFAULT_WORK = Path(tempfile.gettempdir()) / "gsurg-bench-penguin-run"
if str(REPO) not in sys.path:  # run as a script: this checkout's package first
    sys.path.insert(0, str(REPO))

SOURCE_IMAGE = REPO.parent / "shared" / "corpus" / "images" / "photo_20180413_3.jpg"
PROMPT = "Describe the picture in detail."
GRID = 14  # patches per side: 196 image tokens


@dataclass
class Side:
    """One measured run: stage times in seconds, peak RSS in bytes, the new tokens."""

    name: str
    wall: float = 0.0
    peak_rss: int = 0
    stages: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    tokens: list[int] = field(default_factory=list)

    @property
    def decode_rate(self) -> float:
        steps = max(len(self.tokens) - 1, 0)  # the first new token comes from the prefill's logits
        return steps / self.stages["decode"] if self.stages.get("decode") else 0.0


def warm_page_cache(folder: Path) -> None:
    """Read every file of ``folder`` once, so each side loads its weights from memory, not from the disk
    (the runs between evict each other's files: a cold load doubled the runtime's load time here)."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                while fh.read(1 << 24):
                    pass


#: Runs argv[2:] and writes its wall time and wait4 peak RSS as JSON to argv[1]. A child the driver starts
#: directly inherits the driver's RSS high-water mark in ru_maxrss (CPython spawns with vfork, and exec
#: carries the old address space's mark into the new one's), so a driver that wrote a 4 GB checkpoint
#: reported 3.69 GB for every later runner; the relay is a fresh interpreter (-S -I: a few MB), and the
#: child it starts inherits only that.
_RELAY = (
    "import json, os, subprocess, sys, time\n"
    "t0 = time.perf_counter()\n"
    "proc = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(proc.pid, 0)\n"
    "wall = time.perf_counter() - t0\n"
    "code = os.waitstatus_to_exitcode(status)\n"
    "with open(sys.argv[1], 'w') as fh:\n"
    "    json.dump({'wall': wall, 'maxrss_kib': usage.ru_maxrss, 'exit': code}, fh)\n"
)


def run_child(argv: list[str]) -> tuple[float, int, str, str]:
    """Run ``argv`` to the end -> (wall seconds, peak RSS bytes of that child, stdout, stderr). The child is
    started by a small relay interpreter (``_RELAY``), so its peak RSS is its own, whatever the driver's."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryDirectory() as tmp,
    ):
        report = Path(tmp) / "child.json"
        relay = [sys.executable, "-S", "-I", "-c", _RELAY, str(report), *argv]
        code = subprocess.run(relay, stdout=out, stderr=err, check=False).returncode
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        result = json.loads(report.read_text()) if report.exists() else {"exit": code}
    if code != 0 or result["exit"] != 0:
        raise SystemExit(f"{argv[0]} failed (exit {result['exit']}):\n{stderr[-4000:]}")
    return float(result["wall"]), int(result["maxrss_kib"]) * 1024, stdout, stderr


# --- the PyTorch side (runs in a child: python bench_penguin_vl_run.py --torch-child ...) -------------


def torch_child(checkpoint: Path, image: Path, gen: int, threads: int) -> int:
    """Time the fp32 reference stage by stage, as ``PenguinVL.generate`` runs it; print one JSON line."""
    import torch

    from graphsurgeon.models.penguin_vl.config import load_files
    from graphsurgeon.models.penguin_vl.model import KVCache, load_model
    from graphsurgeon.models.penguin_vl.processor import PenguinTokenizer, load_and_preprocess, prompt_ids

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    files = load_files(checkpoint)
    model = load_model(checkpoint, files)
    tokenizer = PenguinTokenizer(files)
    stages = {"load": time.perf_counter() - t0}
    t0 = time.perf_counter()
    img = load_and_preprocess(image, files.processor)
    ids = prompt_ids(tokenizer, PROMPT, [img])
    stages["preprocess"] = time.perf_counter() - t0
    tokens: list[int] = []
    with torch.no_grad():
        t0 = time.perf_counter()
        vision = model.encode_image(torch.from_numpy(img.pixel_values), img.grid)
        stages["vision"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        embeds = model.fuse(ids, [vision.projector])
        hidden, cache = model.decode(embeds, KVCache())
        logits = model.logits(hidden[-1])
        tokens.append(int(logits.argmax()))
        stages["prefill"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        while len(tokens) < gen:
            step, cache = model.decode(model.model.embed_tokens(torch.tensor([tokens[-1]])), cache)
            tokens.append(int(model.logits(step[-1]).argmax()))
        stages["decode"] = time.perf_counter() - t0
    print(json.dumps({"grid": list(img.grid), "prompt_tokens": len(ids), "tokens": tokens, "stages": stages}))
    return 0


def measure_torch(checkpoint: Path, image: Path, gen: int, threads: int) -> Side:
    warm_page_cache(checkpoint)
    argv = [sys.executable, __file__, "--torch-child", str(checkpoint), str(image), str(gen), str(threads)]
    wall, rss, stdout, _ = run_child(argv)
    data = json.loads(stdout.strip().splitlines()[-1])
    if data["grid"] != [GRID, GRID]:
        raise SystemExit(f"the image gave a {data['grid']} grid, not {GRID}x{GRID}")
    return Side("PyTorch fp32 reference", wall, rss, data["stages"], data["prompt_tokens"], data["tokens"])


# --- the C++ side --------------------------------------------------------------------------------------

_STAGE_LINE = re.compile(r"^(load|preprocess|vision|prefill|decode):.*?([0-9.]+) s\b", re.M)


def measure_runner(runner: Path, model: Path, image: Path, gen: int, threads: int, name: str) -> Side:
    argv = [str(runner), "--model", str(model), "--image", str(image), "--prompt", PROMPT, "--gen", str(gen)]
    argv += ["--threads", str(threads), "--ignore-eos", "--print-ids", "--verbose"]
    warm_page_cache(model)
    wall, rss, stdout, stderr = run_child(argv)
    stages = {m.group(1): float(m.group(2)) for m in _STAGE_LINE.finditer(stderr)}
    ids = json.loads(stdout.strip().splitlines()[-1])
    return Side(name, wall, rss, stages, ids["prompt_tokens"], ids["tokens"])


# --- inputs ----------------------------------------------------------------------------------------------


def make_image(work: Path) -> Path:
    """A 196×196 crop-free resize of a corpus photo: the processor keeps it, a 14×14 patch grid."""
    from PIL import Image

    path = work / "bench_196x196.png"
    if not path.exists():
        with Image.open(SOURCE_IMAGE) as img:
            img.convert("RGB").resize((GRID * 14, GRID * 14), Image.Resampling.BICUBIC).save(path)
    return path


def ensure_checkpoint(work: Path) -> Path:
    from bench_penguin_vl import write_checkpoint

    ckpt = work / "penguin-vl-2b-random"
    if not (ckpt / "model.safetensors").exists():
        print(f"writing the random-weight checkpoint into {ckpt}", file=sys.stderr)
        write_checkpoint(ckpt)
    return ckpt


def convert_once(rules: str, ckpt: Path, out: Path, storage: str) -> Path:
    """``gsurg apply rules/RULES`` of ``ckpt`` at ``storage`` into ``out``, unless ``out`` has one already."""
    if not (out / "model.json").exists():
        print(f"converting ({storage}) into {out}", file=sys.stderr)
        argv = [sys.executable, "-m", "graphsurgeon.cli", "apply", str(REPO / "rules" / rules)]
        argv += ["--out", str(out), "--set", f"checkpoint={ckpt}", "--set", f"storage={storage}"]
        subprocess.run(argv, check=True)
    return out


def ensure_model(ckpt: Path, out: Path, storage: str) -> Path:
    return convert_once("penguin_vl.yaml", ckpt, out, storage)


def ensure_runner(runner: Path | None) -> Path:
    if runner is not None:
        return runner
    build = REPO / "build"
    found = build / "linux" / "runner" / "penguin_vl_run"
    script = REPO / "runtime_cpp" / "scripts" / "build_and_test.sh"
    env = os.environ | {"GSURG_BUILD_DIR": str(build)}
    subprocess.run([str(script), "--linux-only", "--no-test"], check=True, env=env)
    return found


# --- report ----------------------------------------------------------------------------------------------


def _ratio(ref: float, mine: float) -> str:
    """`` (×r)`` with r = the reference's figure / this run's (above 1: faster or smaller)."""
    return f" (×{ref / mine:.2f})" if mine > 0 else ""


def report(
    sides: list[Side], threads: int, repeat: int, ref: str = "PyTorch", grid: int | str = GRID
) -> None:
    """The table of ``sides`` against the first (``ref``'s), then each side's tokens against its tokens.
    ``grid``: patches per side of the one image, or words that say what the image gave."""
    base = sides[0]
    image = f"{grid}x{grid} image grid" if isinstance(grid, int) else grid
    print(
        f"\nprompt: {base.prompt_tokens} tokens ({image}), {len(base.tokens)} new tokens, "
        f"{threads} threads, median of {repeat} runs per row; (×r): {ref}'s time or memory / this row's, "
        f"or this row's tok/s / {ref}'s\n"
    )
    print("| run | load | vision | prefill | decode | whole run (wall) | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for side in sides:
        s, b, first = side.stages, base.stages, side is base
        cells = [
            f"{s['load']:.2f} s" + ("" if first else _ratio(b["load"], s["load"])),
            f"{s['vision']:.2f} s" + ("" if first else _ratio(b["vision"], s["vision"])),
            f"{s['prefill']:.2f} s" + ("" if first else _ratio(b["prefill"], s["prefill"])),
            f"{side.decode_rate:.2f} tok/s" + ("" if first else _ratio(side.decode_rate, base.decode_rate)),
            f"{side.wall:.1f} s" + ("" if first else _ratio(base.wall, side.wall)),
            f"{side.peak_rss / 1e9:.2f} GB" + ("" if first else _ratio(base.peak_rss, side.peak_rss)),
        ]
        print(f"| {side.name} | " + " | ".join(cells) + " |")
    for side in sides[1:]:
        differ = next(
            (i for i, (a, b) in enumerate(zip(side.tokens, base.tokens, strict=False)) if a != b), None
        )
        agree = f"all {len(base.tokens)}" if differ is None else f"the first {differ}"
        print(f"{side.name}: {agree} greedy tokens equal {ref}'s")
        if differ is not None:
            print(f"  {ref}: {base.tokens}\n  this: {side.tokens}")


def print_rounds(runs: dict[str, list[Side]], repeat: int) -> None:
    """Every round of every side, in the order they ran: the spread says how noisy the medians are."""
    print("\neach run (the spread says how noisy the medians are)")
    for k in range(repeat):
        for side in (r[k] for r in runs.values()):
            s = side.stages
            print(
                f"  run {k + 1} {side.name}: load {s['load']:.2f} s, vision {s['vision']:.2f} s, prefill "
                f"{s['prefill']:.2f} s, decode {side.decode_rate:.2f} tok/s, wall {side.wall:.1f} s, "
                f"peak RSS {side.peak_rss / 1e9:.2f} GB"
            )


def median_side(runs: list[Side]) -> Side:
    """The median of each figure over repeated runs of one side (their tokens must agree)."""
    first = runs[0]
    if any(r.tokens != first.tokens for r in runs):
        raise SystemExit(f"{first.name}: repeated runs gave different tokens")

    def mid(values: list[float]) -> float:
        return float(statistics.median(values))

    stages = {k: mid([r.stages[k] for r in runs]) for k in first.stages}
    wall, rss = mid([r.wall for r in runs]), int(mid([r.peak_rss for r in runs]))
    return Side(first.name, wall, rss, stages, first.prompt_tokens, first.tokens)


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--torch-child":
        return torch_child(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument(
        "--runner", type=Path, help="a built penguin_vl_run (default: build one into <repo>/build)"
    )
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--storages", default="fp32,fp16,int8,int4", help="the conversions to run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per side; the table shows medians")
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
    runs: dict[str, list[Side]] = {}
    for _ in range(args.repeat):  # the sides interleaved, so a slow spell of the machine hits all of them
        runs.setdefault("torch", []).append(measure_torch(ckpt, image, args.gen, args.threads))
        for storage, model in models.items():
            name = f"penguin_vl_run, {storage} storage"
            runs.setdefault(storage, []).append(
                measure_runner(runner, model, image, args.gen, args.threads, name)
            )
    report([median_side(r) for r in runs.values()], args.threads, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
