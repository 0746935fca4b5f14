#!/usr/bin/env python3
"""Load time of a converted VLM at its real dimensions (random weights: Penguin-VL-2B, or Qwen3-VL-2B with
``--family qwen3_vl``) in its runner against the fp32 PyTorch reference loading its checkpoint, warm and
cold page cache, in one script run:

* the reference: for Penguin-VL ``graphsurgeon/models/penguin_vl/model.py`` ``load_model`` on the bf16
  checkpoint (read, widened to fp32, put in the model); for Qwen3-VL HF transformers'
  ``Qwen3VLForConditionalGeneration.from_pretrained(dtype=torch.float32)``; in a child that has already
  imported torch (and transformers); the time of that call;
* the runner (``penguin_vl_run`` / ``qwen3_vl_run``) on each conversion given, with one image and ``--gen
  1``, so that every net is loaded (the LLM nets at start, the vision nets on first use); its ``--verbose``
  ``load`` figure, which covers both; once with the weights memory-mapped (the default) and once with
  ``--no-mmap`` (every .bin read into buffers ncnn allocates: how the runtime loaded before); with
  ``--huge-pages`` once more mapped with the runner's ``--huge-pages`` (transparent huge pages advised
  for its large buffers, those Gemm repacks its weights into among them:
  runtime_cpp/kernels/include/gsurg/huge_pages.hpp), and with ``--hugetlb`` once more mapped under
  ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc's own way to the same pages, for comparison);
* warm: every file of the case read once just before; cold: the case's files dropped from the page cache
  (``POSIX_FADV_DONTNEED``) just before, so the load reads the disk; either way the other cases' files
  are dropped first, so that every run starts from the same page cache whatever ran before it;
* each run in its own child, the cases interleaved round by round, medians over ``--repeat`` rounds, and
  the child's peak RSS (``ru_maxrss``, mapped file pages included); before them ``--warmup`` rounds (1)
  that are printed but not counted: on this machine (a VM) the first process to fault in ~9 GB after an
  idle spell runs up to 3x slower whatever it is, the same case at once again at its usual speed.

    python benchmarks/bench_load.py [--family penguin_vl|qwen3_vl] [--work DIR] [--runner PATH]
        [--repeat 3] [--warmup 1] [--models out,out-int8,out-int4] [--modes warm,cold] [--huge-pages]
        [--hugetlb] [--no-read]

``--work`` is the folder ``bench_penguin_vl_run.py`` (or ``bench_qwen3_vl_run.py``) uses: the checkpoint
and the conversions are made when missing. ``--no-read`` leaves out the ``--no-mmap`` runs.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for extra in (REPO, REPO / "benchmarks"):
    if str(extra) not in sys.path:  # run as a script: this checkout and the sibling benchmarks
        sys.path.insert(0, str(extra))

import bench_penguin_vl_run as penguin  # noqa: E402
import bench_qwen3_vl_run as qwen3_vl  # noqa: E402
from bench_beside_llamacpp import prepare_page_cache  # noqa: E402
from bench_penguin_vl_run import run_child  # noqa: E402
from page_cache import drop_from_page_cache  # noqa: E402

_LOAD = re.compile(r"^load:.*?([0-9.]+) s\b", re.M)


def torch_child(family: str, checkpoint: Path) -> int:
    import torch  # (imported before the clock starts: the load, not the import, is timed)

    if family == "qwen3_vl":
        import transformers

        t0 = time.perf_counter()
        model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(
            str(checkpoint), dtype=torch.float32
        )
        model.eval()
    else:
        from graphsurgeon.models.penguin_vl.config import load_files
        from graphsurgeon.models.penguin_vl.model import load_model

        t0 = time.perf_counter()
        load_model(checkpoint, load_files(checkpoint))
    print(json.dumps({"load": time.perf_counter() - t0}))
    return 0


def files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--torch-child":
        return torch_child(sys.argv[2], Path(sys.argv[3]))

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=["penguin_vl", "qwen3_vl"], default="penguin_vl")
    ap.add_argument("--work", type=Path, help="default: the family's run benchmark's folder in the temp dir")
    ap.add_argument("--runner", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted")
    ap.add_argument("--models", default="out", help="conversion folders under --work (out-X: storage X)")
    ap.add_argument("--modes", default="warm,cold")
    ap.add_argument("--huge-pages", action="store_true", help="also the mapped runs with --huge-pages")
    ap.add_argument("--hugetlb", action="store_true", help="also mapped under glibc.malloc.hugetlb=1")
    ap.add_argument("--no-read", action="store_true", help="leave out the --no-mmap runs")
    args = ap.parse_args()
    side = qwen3_vl if args.family == "qwen3_vl" else penguin
    program = "qwen3_vl_run" if args.family == "qwen3_vl" else "penguin_vl_run"
    work = args.work or side.DEFAULT_WORK
    runner = side.ensure_runner(args.runner)
    ckpt = side.ensure_checkpoint(work)
    image = side.make_image(work)
    models = {}
    for name in args.models.split(","):
        storage = "fp32" if name == "out" else name.removeprefix("out-")
        models[name] = side.ensure_model(ckpt, work / name, storage)
    reference = "PyTorch fp32 reference" if args.family == "penguin_vl" else "HF transformers fp32"
    torch_argv = [sys.executable, __file__, "--torch-child", args.family, str(ckpt)]
    cases: list[tuple[str, list[str], list[Path]]] = [(reference, torch_argv, files_of(ckpt))]
    for name, folder in models.items():
        argv = [str(runner), "--model", str(folder), "--image", str(image), "--prompt", "Hi", "--gen", "1"]
        argv += ["--threads", "2", "--verbose"]
        cases.append((f"{program} {name}, mapped", argv, files_of(folder)))
        if not args.no_read:
            cases.append((f"{program} {name}, --no-mmap", [*argv, "--no-mmap"], files_of(folder)))
        if args.huge_pages:
            label = f"{program} {name}, mapped, --huge-pages"
            cases.append((label, [*argv, "--huge-pages"], files_of(folder)))
        if args.hugetlb:
            tuned = ["env", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", *argv]
            cases.append((f"{program} {name}, mapped, glibc hugetlb=1", tuned, files_of(folder)))
    every_file = sorted({path for _, _, files in cases for path in files})
    results: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for round_no in range(args.warmup + args.repeat):
        counted = round_no >= args.warmup
        for mode in args.modes.split(","):
            for label, argv, files in cases:
                drop_from_page_cache(*(set(every_file) - set(files)))
                prepare_page_cache(files, cold=mode == "cold")
                _, rss, stdout, stderr = run_child(argv)
                if "--torch-child" in argv:
                    load = float(json.loads(stdout.strip().splitlines()[-1])["load"])
                else:
                    match = _LOAD.search(stderr)
                    if match is None:
                        raise SystemExit(f"no load line from {label}:\n{stderr[-2000:]}")
                    load = float(match.group(1))
                note = "" if counted else " (warm-up, not counted)"
                line = f"{mode} {label}: load {load:.2f} s, peak RSS {rss / 1e9:.2f} GB{note}"
                print(line, file=sys.stderr)
                if counted:
                    results.setdefault((mode, label), []).append((load, rss))
    print(f"\nmedians of {args.repeat}; (×r): the reference's load time / this row's (above 1: faster)\n")
    print("| page cache | run | load | peak RSS | every round |\n|---|---|---|---|---|")
    for mode in args.modes.split(","):
        base = statistics.median(t for t, _ in results[(mode, cases[0][0])])
        for label, _, _ in cases:
            rows = results[(mode, label)]
            t = statistics.median(r[0] for r in rows)
            peak = statistics.median(float(r[1]) for r in rows)
            every = " / ".join(f"{r[0]:.2f}" for r in rows)
            print(f"| {mode} | {label} | {t:.2f} s (×{base / t:.2f}) | {peak / 1e9:.2f} GB | {every} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
