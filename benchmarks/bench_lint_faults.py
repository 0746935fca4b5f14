#!/usr/bin/env python3
"""Fault-injection table for ``gsurg lint``: which faults lint catches and which ones ncnn itself rejects.

Every fault class of ``graphsurgeon.testing.lint_faults`` (the injection code the tests use, the same
sites: picked from gsurg's walk records and layer lines) is injected into a copy of each corpus model that
ships real weights (squeezenet_v1.1, nanodet_m, mnet.25-opt). For each faulty copy the script records

* whether ``gsurg lint --bin`` catches it: exit 1 and an error with the expected check id at the expected
  layer / line / offset;
* what the ``ncnn`` wheel's loader returns (``load_param``, then ``load_model`` only if that succeeded);
* for copies ncnn loads: whether they compute the same numbers as the unmodified model on one fixed random
  input (fp32 options, lightmode on as by default), run in a child process so a crash is a result, not the
  end of the run. Nothing is extracted from a model that failed to load.

It prints a markdown table (and the lint time on the unmodified models) and exits 1 if lint misses any
fault. ``--json OUT`` also writes every figure; ``--no-run`` skips the numeric comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from graphsurgeon.testing.lint_faults import FAULTS, Model, caught, lint_json, ncnn_load, write_fault
from graphsurgeon.testing.lint_faults import load_model as _load

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO.parent / "shared" / "corpus" / "ncnn-assets"
MODELS = ("squeezenet_v1.1", "nanodet_m", "mnet.25-opt")


def load_model(name: str) -> Model:
    return _load(ASSETS / f"{name}.param", ASSETS / f"{name}.bin")


INPUT_SHAPES = {  # (c, h, w) of each model's single Input
    "squeezenet_v1.1": (3, 227, 227),
    "nanodet_m": (3, 320, 320),
    "mnet.25-opt": (3, 320, 320),
}
SHORT = {"squeezenet_v1.1": "squeezenet", "nanodet_m": "nanodet", "mnet.25-opt": "mnet.25"}
RUN_TIMEOUT = 300

_RUNNER = r"""
import json, sys
import ncnn
import numpy as np
param, weights, spec, out = sys.argv[1:5]
spec = json.loads(spec)
net = ncnn.Net()
opt = net.opt
opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = opt.use_bf16_storage = False
opt.use_packing_layout = False
opt.num_threads = 1
if net.load_param(param) != 0 or net.load_model(weights) != 0:
    print(json.dumps({"loaded": False}))
    sys.exit(0)
x = np.random.default_rng(0).uniform(-1, 1, spec["shape"]).astype(np.float32)
rets, arrays = {}, {}
with net.create_extractor() as ex:
    ex.input(spec["input"], ncnn.Mat(x).clone())
    for name in spec["outputs"]:
        ret, mat = ex.extract(name)
        rets[name] = ret
        if ret == 0:
            arrays[name] = np.array(mat)
np.savez(out, **{f"o{i}": arrays[n] for i, n in enumerate(spec["outputs"]) if n in arrays})
print(json.dumps({"loaded": True, "rets": rets}))
"""


def run_in_ncnn(param: Path, weights: Path, model: str, out: Path) -> dict[str, Any]:
    """Outputs of a model that loaded, from a child process; a crash or timeout is reported, not raised."""
    m = load_model(model)
    spec = {
        "input": m.graph.input_blobs()[0].name,
        "shape": INPUT_SHAPES[model],
        "outputs": [b.name for b in m.graph.output_blobs()],
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _RUNNER, str(param), str(weights), json.dumps(spec), str(out)],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    if proc.returncode != 0:
        return {"status": "crash", "returncode": proc.returncode}
    result = json.loads(proc.stdout.splitlines()[-1])
    if not result["loaded"]:
        return {"status": "not-loaded"}
    import numpy as np

    with np.load(out) as npz:
        arrays = {name: npz[f"o{i}"] for i, name in enumerate(spec["outputs"]) if f"o{i}" in npz}
    failed = {n: ret for n, ret in result["rets"].items() if ret != 0}
    return {"status": "ran", "failed": failed, "arrays": arrays}


def compare(base: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """same / wrong (max |Δ|, NaN) / extract-failed / crash, against the unmodified model's outputs."""
    import numpy as np

    if got["status"] != "ran":
        return {"verdict": got["status"], **{k: v for k, v in got.items() if k != "status"}}
    if got["failed"]:
        return {"verdict": "extract-failed", "returns": sorted(set(got["failed"].values()))}
    worst, nan = 0.0, 0
    for name, ref in base["arrays"].items():
        arr = got["arrays"][name]
        if arr.shape != ref.shape:
            return {"verdict": "wrong", "detail": f"{name} shape {arr.shape} vs {ref.shape}"}
        nan += int(np.count_nonzero(~np.isfinite(arr)))
        finite = np.isfinite(arr) & np.isfinite(ref)
        if finite.any():
            worst = max(worst, float(np.max(np.abs(arr[finite] - ref[finite]))))
    if nan == 0 and worst == 0.0:
        return {"verdict": "same"}
    return {"verdict": "wrong", "max_abs_diff": worst, "non_finite": nan}


def ncnn_cell(load: dict[str, Any]) -> str:
    if load.get("crash"):
        return f"crash ({load['crash']})"
    if load["load_param"] != 0:
        return f"yes: load_param {load['load_param']}"
    if load["load_model"] != 0:
        return f"yes: load_model {load['load_model']}"
    return "no (loads)"


def note(results: list[dict[str, Any]]) -> str:
    """One phrase for what ncnn does with this fault across the models."""
    rejected = [r for r in results if r["ncnn_rejects"]]
    if len(rejected) == len(results):
        return "ncnn refuses to load it"
    runs = [r["numbers"] for r in results if not r["ncnn_rejects"]]
    if not runs or any(run is None for run in runs):
        return f"ncnn loads it in {len(results) - len(rejected)}/{len(results)} models"
    counts: dict[str, int] = {}
    for run in runs:
        counts[run["verdict"]] = counts.get(run["verdict"], 0) + 1
    parts = []
    if counts.get("wrong"):
        nan = sum(1 for run in runs if run["verdict"] == "wrong" and run.get("non_finite"))
        extra = f", NaN/Inf in {nan}" if nan else ""
        parts.append(f"computes wrong numbers ({counts['wrong']}/{len(runs)}{extra})")
    if counts.get("same"):
        parts.append(f"computes the same numbers ({counts['same']}/{len(runs)})")
    if counts.get("extract-failed"):
        rets = sorted({v for run in runs for v in run.get("returns", [])})
        codes = " or ".join(str(v) for v in rets)
        parts.append(f"extract returns {codes} in {counts['extract-failed']}/{len(runs)}")
    for verdict, phrase in (("crash", "crashes in extract"), ("timeout", "times out in extract")):
        if counts.get(verdict):
            parts.append(f"{phrase} ({counts[verdict]}/{len(runs)})")
    lead = "ncnn loads it and " if not rejected else f"ncnn loads it in {len(runs)}/{len(results)} and "
    return lead + "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--no-run", action="store_true", help="skip running loadable faulty models in ncnn")
    parser.add_argument("--sites", action="store_true", help="also list where each fault was injected")
    args = parser.parse_args()
    started = time.perf_counter()

    lint_times: dict[str, float] = {}
    baselines: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gsurg-lint-faults-") as tmp:
        root = Path(tmp)
        for model in MODELS:
            param, weights = ASSETS / f"{model}.param", ASSETS / f"{model}.bin"
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                code, report = lint_json(param, weights)
                times.append(time.perf_counter() - t0)
            if code != 0:
                print(f"unmodified {model} does not lint clean: {report['findings']}", file=sys.stderr)
                return 1
            lint_times[model] = statistics.median(times)
            if not args.no_run:
                baselines[model] = run_in_ncnn(param, weights, model, root / f"{model}.base.npz")
                if baselines[model]["status"] != "ran" or baselines[model]["failed"]:
                    print(f"unmodified {model} does not run in ncnn: {baselines[model]}", file=sys.stderr)
                    return 1
        for fault in FAULTS:
            results: list[dict[str, Any]] = []
            for model in MODELS:
                folder = root / fault.inject.__name__ / model
                param, weights, injected = write_fault(fault, load_model(model), folder)
                code, report = lint_json(param, weights)
                hit = caught(injected.expect, report["findings"]) if code == 1 else None
                load = ncnn_load(param, weights)
                rejects = bool(load.get("crash")) or load["load_param"] != 0 or load["load_model"] != 0
                numbers = None
                if not rejects and not args.no_run:
                    numbers = compare(baselines[model], run_in_ncnn(param, weights, model, folder / "o.npz"))
                results.append(
                    {
                        "model": model,
                        "site": injected.site,
                        "expect": injected.expect.__dict__,
                        "lint_exit": code,
                        "caught": hit is not None,
                        "finding": hit,
                        "ncnn_load": load,
                        "ncnn_rejects": rejects,
                        "numbers": numbers,
                    }
                )
            rows.append({"fault": fault.name, "check": results[0]["expect"]["check"], "results": results})

    header = (
        ["fault class", "expected check"]
        + [f"lint: {SHORT[m]}" for m in MODELS]
        + [f"ncnn rejects: {SHORT[m]}" for m in MODELS]
        + ["what ncnn does"]
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        lint_cells = ["✓" if r["caught"] else "**✗ missed**" for r in row["results"]]
        ncnn_cells = [ncnn_cell(r["ncnn_load"]) for r in row["results"]]
        cells = [row["fault"], f"`{row['check']}`", *lint_cells, *ncnn_cells, note(row["results"])]
        print("| " + " | ".join(cells) + " |")
    total = sum(len(r["results"]) for r in rows)
    hits = sum(x["caught"] for r in rows for x in r["results"])
    loads = sum(not x["ncnn_rejects"] for r in rows for x in r["results"])
    print()
    print(
        f"gsurg lint caught {hits}/{total} injected faults; "
        f"ncnn loaded {loads}/{total} of them with return 0."
    )
    print()
    print("| model | layers | weights | `gsurg lint --bin` wall (unmodified, median of 3) |")
    print("|---|---:|---:|---:|")
    for model in MODELS:
        m = load_model(model)
        print(f"| {model} | {len(m.graph.layers)} | {len(m.records)} | {lint_times[model]:.3f} s |")
    print()
    if args.sites:
        print("| fault class | " + " | ".join(f"site: {SHORT[m]}" for m in MODELS) + " |")
        print("|---|" + "---|" * len(MODELS))
        for row in rows:
            print(f"| {row['fault']} | " + " | ".join(x["site"] for x in row["results"]) + " |")
        print()
    missed = [
        f"{r['fault']} / {x['model']} ({x['site']})" for r in rows for x in r["results"] if not x["caught"]
    ]
    for miss in missed:
        print(f"MISSED: {miss}")
    print(f"({time.perf_counter() - started:.1f} s)")

    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "lint_seconds": lint_times}, indent=2, default=str) + "\n"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
