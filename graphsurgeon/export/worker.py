"""Export jobs in a child process, so the PyTorch models an export source builds (and pnnx's memory) are
gone before ``apply`` rewrites and writes the graphs: the surgery's peak memory stays the size of what it
streams, not the size of the model.

``run_job(job, work)`` writes the job as JSON into the work folder, runs ``python -m
graphsurgeon.export.worker JOBFILE`` and returns its result. A job is either

* ``{"kind": "export", "source", "base", "checkpoint", "variables", "names"}``: call the source, trace the
  named sub-models, free the modules, then convert each trace with pnnx (so the worker's model and pnnx's
  copy of the weights are never in memory together); the result maps each name to its ``.param`` and
  ``.bin``;
* ``{"kind": "calibration", ...same..., "names"}``: call the source again and save each named sub-model's
  calibration samples (``calibration_inputs``) as ``<name>.calibration.npz`` in the work folder.

The child's progress lines pass through on stderr; a GsurgError in the child becomes the same one-line
error in the parent (an ``ExportError``), anything else its last line.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.export.errors import ExportError, one_line

PROGRESS_MARK = "gsurg-export-progress: "


def run_job(job: Mapping[str, Any], work: Path, progress: Callable[[str], None] | None = None) -> Any:
    """Run ``job`` in a child Python and return its ``result`` (see the module docstring)."""
    kind = job["kind"]
    job_file = work / f"{kind}.job.json"
    result_file = work / f"{kind}.result.json"
    job_file.write_text(json.dumps({**job, "result": str(result_file)}), encoding="utf-8")
    result_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphsurgeon.export.worker", str(job_file)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    tail: list[str] = []
    for line in proc.stderr:
        line = line.rstrip("\n")
        if line.startswith(PROGRESS_MARK):
            if progress is not None:
                progress(line[len(PROGRESS_MARK) :])
        elif line.strip():
            tail = [*tail[-20:], line]
    code = proc.wait()
    if result_file.exists():
        doc = json.loads(result_file.read_text(encoding="utf-8"))
        if "error" in doc:
            raise ExportError(doc["error"])
        if code == 0:
            return doc["result"]
    last = tail[-1] if tail else f"exit code {code}"
    raise ExportError(f"the export worker failed ({kind}): {last}")


def _progress(message: str) -> None:
    print(PROGRESS_MARK + message, file=sys.stderr, flush=True)


def _specs(job: Mapping[str, Any]) -> Any:
    from graphsurgeon.export.spec import call_source, load_source

    build = load_source(job["source"], Path(job["base"]))
    checkpoint = Path(job["checkpoint"]) if job.get("checkpoint") else None
    specs = call_source(build, job["source"], job["variables"], checkpoint)
    made = {spec.name for spec in specs}
    missing = sorted(set(job["names"]) - made)
    if missing:
        raise ExportError(
            f"{job['source']}: returned sub-models {sorted(made)}; the rule file's inputs also need {missing}"
        )
    return [spec for spec in specs if spec.name in set(job["names"])]


def _trace_job(job: Mapping[str, Any], work: Path) -> Any:
    """Build the source's modules, trace the named ones into ``work``; the modules die with this frame."""
    from graphsurgeon.export.pnnx_run import trace_all

    return trace_all(_specs(job), work, progress=_progress)


def _work(job: Mapping[str, Any]) -> Any:
    work = Path(job["work"])
    if job["kind"] == "export":
        from graphsurgeon.export.pnnx_run import convert_all

        traced = _trace_job(job, work)
        gc.collect()  # the modules (a whole model in fp32) are unreachable now: free them before pnnx runs
        exported = convert_all(traced, work, progress=_progress)
        return {name: {"param": os.fspath(m.param), "bin": os.fspath(m.bin)} for name, m in exported.items()}
    if job["kind"] == "calibration":
        from graphsurgeon.export.calibration_inputs import calibration_arrays

        saved = {}
        for spec in _specs(job):
            _progress(f"calibration samples of {spec.name}")
            samples = calibration_arrays(spec.name, spec.inputs, spec.calibration)
            path = work / f"{spec.name}.calibration.npz"
            arrays: dict[str, Any] = {
                f"s{k}_{i}": a for k, sample in enumerate(samples) for i, a in enumerate(sample)
            }
            np.savez(path, **arrays)
            saved[spec.name] = {"path": os.fspath(path), "samples": len(samples), "inputs": len(samples[0])}
        return saved
    raise ValueError(f"unknown export job kind {job['kind']!r}")


def load_samples(entry: Mapping[str, Any]) -> list[tuple[np.ndarray, ...]]:
    """The samples a calibration job saved for one sub-model."""
    with np.load(entry["path"]) as data:
        return [tuple(data[f"s{k}_{i}"] for i in range(entry["inputs"])) for k in range(entry["samples"])]


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    result_file = Path(job["result"])
    try:
        result = _work(job)
    except GsurgError as err:
        result_file.write_text(json.dumps({"error": str(err)}), encoding="utf-8")
        return 2
    except Exception as err:
        result_file.write_text(json.dumps({"error": f"the export failed: {one_line(err)}"}), encoding="utf-8")
        raise
    result_file.write_text(json.dumps({"result": result}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
