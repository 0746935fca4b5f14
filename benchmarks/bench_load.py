#!/usr/bin/env python3
"""Load time of a converted Penguin-VL-2B (real dimensions, random weights) in ``penguin_vl_run`` against
the fp32 PyTorch reference loading its checkpoint, warm and cold page cache, in one script run:

* PyTorch: ``examples/penguin_vl/model.py`` ``load_model`` on the bf16 checkpoint (read, widened to fp32,
  put in the model), in a child that has already imported torch; the time of that call;
* ``penguin_vl_run`` on each conversion given, with one image and ``--gen 1``, so that every net is loaded
  (the LLM nets at start, the vision nets on first use); its ``--verbose`` ``load`` figure, which covers
  both; once with the weights memory-mapped (the default) and once with ``--no-mmap`` (every .bin read
  into buffers ncnn allocates: how the runtime loaded before); with ``--hugetlb`` once more mapped under
  ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc backs large allocations, such as the buffers Gemm
  repacks its weights into, with transparent huge pages where the kernel's THP mode is ``madvise``);
* warm: every file of the case read once just before; cold: the case's files dropped from the page cache
  (``POSIX_FADV_DONTNEED``) just before, so the load reads the disk;
* each run in its own child, the cases interleaved round by round, medians over ``--repeat`` rounds, and
  the child's peak RSS (``ru_maxrss``, mapped file pages included).

    python benchmarks/bench_load.py [--work DIR] [--runner PATH] [--repeat 3]
        [--models out,out-int8,out-int4] [--modes warm,cold] [--hugetlb]

``--work`` is the folder ``bench_penguin_vl_run.py`` uses (checkpoint and conversions made when missing).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for extra in (REPO, REPO / "benchmarks"):
    if str(extra) not in sys.path:  # run as a script: examples/ and the sibling benchmarks are not installed
        sys.path.insert(0, str(extra))

from bench_beside_llamacpp import prepare_page_cache  # noqa: E402
from bench_penguin_vl_run import ensure_checkpoint, ensure_model, ensure_runner, make_image, run_child  # noqa: E402

_LOAD = re.compile(r"^load:.*?([0-9.]+) s\b", re.M)


def torch_child(checkpoint: Path) -> int:
    import torch  # noqa: F401  (imported before the clock starts: the load, not the import, is timed)

    from examples.penguin_vl.config import load_files
    from examples.penguin_vl.model import load_model

    t0 = time.perf_counter()
    load_model(checkpoint, load_files(checkpoint))
    print(json.dumps({"load": time.perf_counter() - t0}))
    return 0


def files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--torch-child":
        return torch_child(Path(sys.argv[2]))

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "gsurg-bench-penguin-run")
    ap.add_argument("--runner", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", default="out", help="conversion folders under --work (out-X: storage X)")
    ap.add_argument("--modes", default="warm,cold")
    ap.add_argument("--hugetlb", action="store_true", help="also the mapped runs with glibc.malloc.hugetlb=1")
    args = ap.parse_args()
    runner = ensure_runner(args.runner)
    ckpt = ensure_checkpoint(args.work)
    image = make_image(args.work)
    models = {}
    for name in args.models.split(","):
        storage = "fp32" if name == "out" else name.removeprefix("out-")
        models[name] = ensure_model(ckpt, args.work / name, storage)
    cases: list[tuple[str, list[str], list[Path]]] = [
        ("PyTorch fp32 reference", [sys.executable, __file__, "--torch-child", str(ckpt)], files_of(ckpt))
    ]
    for name, folder in models.items():
        argv = [str(runner), "--model", str(folder), "--image", str(image), "--prompt", "Hi", "--gen", "1"]
        argv += ["--threads", "2", "--verbose"]
        cases.append((f"penguin_vl_run {name}, mapped", argv, files_of(folder)))
        cases.append((f"penguin_vl_run {name}, --no-mmap", [*argv, "--no-mmap"], files_of(folder)))
        if args.hugetlb:
            tuned = ["env", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", *argv]
            cases.append((f"penguin_vl_run {name}, mapped, hugetlb=1", tuned, files_of(folder)))
    results: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for _ in range(args.repeat):
        for mode in args.modes.split(","):
            for label, argv, files in cases:
                prepare_page_cache(files, cold=mode == "cold")
                _, rss, stdout, stderr = run_child(argv)
                if "--torch-child" in argv:
                    load = float(json.loads(stdout.strip().splitlines()[-1])["load"])
                else:
                    match = _LOAD.search(stderr)
                    if match is None:
                        raise SystemExit(f"no load line from {label}:\n{stderr[-2000:]}")
                    load = float(match.group(1))
                print(f"{mode} {label}: load {load:.2f} s, peak RSS {rss / 1e9:.2f} GB", file=sys.stderr)
                results.setdefault((mode, label), []).append((load, rss))
    print(f"\nmedians of {args.repeat}; (×r): PyTorch's load time / this row's (above 1: faster)\n")
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
