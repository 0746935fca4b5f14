"""Export jobs in a child process, so the PyTorch models an export source builds (and pnnx's memory) are
gone before ``apply`` rewrites and writes the graphs: the surgery's peak memory stays the size of what it
streams, not the size of the model.

``run_job(job)`` writes the ``ExportJob`` (``export.job``) as JSON into the work folder, runs ``python -m
graphsurgeon.export.worker JOBFILE`` and returns the ``ExportResult`` the child wrote. The child builds the
source's models once: it traces the named sub-models, saves the calibration samples of those the job names
in ``calibrate`` (``calibration_inputs``) as ``<name>.calibration.npz``, frees the modules, then converts
each trace with pnnx (so the models and pnnx's copy of the weights are never in memory together).

The child's progress lines pass through on stderr; a GsurgError in the child becomes the same one-line
error in the parent (an ``ExportError``), anything else its last line.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from graphsurgeon.errors import GsurgError
from graphsurgeon.export.errors import ExportError, one_line
from graphsurgeon.export.job import ExportedFiles, ExportJob, ExportResult, SampleFile, WorkerReply

if TYPE_CHECKING:
    from graphsurgeon.export.pnnx_run import TracedModel
    from graphsurgeon.export.spec import ExportSpec

PROGRESS_MARK = "gsurg-export-progress: "


def run_job(job: ExportJob, progress: Callable[[str], None] | None = None) -> ExportResult:
    """Run ``job`` in a child Python and return its result (see the module docstring)."""
    job_file = Path(job.work) / "export.job.json"
    result_file = Path(job.result)
    job_file.write_text(job.model_dump_json(), encoding="utf-8")
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
        reply = WorkerReply.model_validate_json(result_file.read_text(encoding="utf-8"))
        if reply.error is not None:
            raise ExportError(reply.error)
        if code == 0 and reply.result is not None:
            return reply.result
    last = tail[-1] if tail else f"exit code {code}"
    raise ExportError(f"the export worker failed: {last}")


def _progress(message: str) -> None:
    print(PROGRESS_MARK + message, file=sys.stderr, flush=True)


def _specs(job: ExportJob) -> list[ExportSpec]:
    from graphsurgeon.export.spec import call_source, load_source

    build = load_source(job.source, Path(job.base))
    checkpoint = Path(job.checkpoint) if job.checkpoint else None
    specs = call_source(build, job.source, job.variables, checkpoint)
    made = {spec.name for spec in specs}
    missing = sorted(set(job.names) - made)
    if missing:
        raise ExportError(
            f"{job.source}: returned sub-models {sorted(made)}; the rule file's inputs also need {missing}"
        )
    return [spec for spec in specs if spec.name in set(job.names)]


def _trace_job(job: ExportJob, work: Path) -> tuple[list[TracedModel], dict[str, SampleFile]]:
    """Build the source's modules once: trace the named ones into ``work``, then save the calibration
    samples the job asks for; the modules die with this frame."""
    from graphsurgeon.export.calibration_inputs import calibration_arrays
    from graphsurgeon.export.pnnx_run import trace_all

    specs = _specs(job)
    traced = trace_all(specs, work, progress=_progress)
    saved: dict[str, SampleFile] = {}
    for spec in specs:
        if spec.name in job.calibrate:
            _progress(f"calibration samples of {spec.name}")
            samples = calibration_arrays(spec.name, spec.inputs, spec.calibration)
            saved[spec.name] = SampleFile.save(work / f"{spec.name}.calibration.npz", samples)
    return traced, saved


def _work(job: ExportJob) -> ExportResult:
    from graphsurgeon.export.pnnx_run import convert_all

    work = Path(job.work)
    traced, samples = _trace_job(job, work)
    gc.collect()  # the modules (a whole model in fp32) are unreachable now: free them before pnnx runs
    exported = convert_all(traced, work, progress=_progress)
    models = {
        name: ExportedFiles(param=os.fspath(m.param), bin=os.fspath(m.bin)) for name, m in exported.items()
    }
    return ExportResult(models=models, calibration=samples)


def main(argv: list[str]) -> int:
    job = ExportJob.model_validate_json(Path(argv[0]).read_text(encoding="utf-8"))
    result_file = Path(job.result)
    try:
        reply = WorkerReply(result=_work(job))
    except GsurgError as err:
        result_file.write_text(WorkerReply(error=str(err)).model_dump_json(), encoding="utf-8")
        return 2
    except Exception as err:
        failed = WorkerReply(error=f"the export failed: {one_line(err)}")
        result_file.write_text(failed.model_dump_json(), encoding="utf-8")
        raise
    result_file.write_text(reply.model_dump_json(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
