"""The export job is typed at the process boundary, and one worker run (one build of the source's models)
exports and saves the calibration samples a graph will need (issue 15, items 3 and 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from graphsurgeon.export.job import ExportJob, ExportResult, SampleFile, WorkerReply
from graphsurgeon.rewrite.loader import open_rule_file

JOB = {
    "source": "source.py:build",
    "base": "/x",
    "names": ["a", "b"],
    "calibrate": ["b"],
    "work": "/w",
    "result": "/w/r.json",
}


def test_a_job_crosses_the_boundary_as_itself() -> None:
    job = ExportJob.model_validate(JOB)
    assert ExportJob.model_validate_json(job.model_dump_json()) == job
    with pytest.raises(ValidationError, match="not exported"):
        ExportJob.model_validate({**JOB, "calibrate": ["c"]})
    with pytest.raises(ValidationError, match="kind"):
        ExportJob.model_validate({**JOB, "kind": "export"})  # the old untyped field: refused, not ignored
    with pytest.raises(ValidationError):
        WorkerReply.model_validate_json('{"result": {"models": {"a": {"param": "p"}}}}')  # no bin


def test_samples_load_as_they_were_saved(tmp_path: Path) -> None:
    samples = [(np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2], np.int32)) for _ in range(3)]
    saved = SampleFile.save(tmp_path / "s.npz", samples)
    again = ExportResult.model_validate_json(
        ExportResult(models={}, calibration={"x": saved}).model_dump_json()
    )
    loaded = again.calibration["x"].load()
    assert len(loaded) == 3 and all(len(s) == 2 for s in loaded)
    for got, want in zip(loaded, samples, strict=True):
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and np.array_equal(g, w)


RULES = """
version: 1
name: t
vars: {storage: fp32}
inputs: {a: {export: a}, b: {export: b}}
graphs:
  ga:
    input: a
    storage: {calibrate: {when: "${storage == 'fp16'}"}}
    rules: []
  gb:
    input: b
    storage: {calibrate: {when: "${inputs.b.layer_count > 3}"}}
    rules: []
  gc:
    input: b
    rules: []
"""


def test_which_inputs_calibrate_is_known_before_the_export(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(RULES)
    # gb's `when` reads a fact about its exported input: it cannot be told yet, so b counts as calibrating
    assert open_rule_file(str(path)).calibrated_inputs() == {"b"}
    assert open_rule_file(str(path), {"storage": "fp16"}).calibrated_inputs() == {"a", "b"}
    path.write_text(RULES.replace("${inputs.b.layer_count > 3}", "false"))
    assert open_rule_file(str(path)).calibrated_inputs() == set()


def test_one_worker_run_exports_and_saves_the_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("pnnx")
    from graphsurgeon.cli import main
    from graphsurgeon.export import worker
    from tests.test_storage_calibration import RULES as TINY_RULES
    from tests.test_storage_calibration import SOURCE

    jobs: list[ExportJob] = []
    real = worker.run_job

    def recording(job: ExportJob, progress: Any = None) -> ExportResult:
        jobs.append(job)
        return real(job, progress)

    monkeypatch.setattr(worker, "run_job", recording)
    (tmp_path / "source.py").write_text(SOURCE)
    (tmp_path / "rules.yaml").write_text(TINY_RULES)
    rules = str(tmp_path / "rules.yaml")
    assert main(["apply", rules, "--out", str(tmp_path / "fp32")]) == 0
    assert [(j.names, j.calibrate) for j in jobs] == [(["tiny"], [])]  # no samples made when none is needed
    assert main(["apply", rules, "--out", str(tmp_path / "fp16"), "--set", "storage=fp16"]) == 0
    assert [(j.names, j.calibrate) for j in jobs[1:]] == [(["tiny"], ["tiny"])]
    marked = [line for line in (tmp_path / "fp16" / "tiny.param").read_text().splitlines() if " 31=3" in line]
    assert marked, "calibration marked no layer: the samples did not reach it"
