"""One pnnx export per distinct export, for the tests that convert the same tiny model many times.

Many tests apply a shipped rule file, or a rule file including one with a rule changed, to the same embedded
tiny checkpoint: every ``gsurg apply`` then starts the export worker (a Python with torch), builds the model,
traces it and runs pnnx, and each time gets the same files. ``ExportMemo.active()`` replaces the worker call
of ``apply`` (``graphsurgeon.export.worker.run_job``) while it is open: the first job runs in the worker as
always, and its work folder is kept; a later job the export cannot tell from it gets a copy of those files in
its own work folder (and the first run's progress lines), and ``apply`` goes on from there exactly as after
an export. Everything after the export (rules, interface, storage, weight maps, side files, writing) runs
for every test.

Two jobs cannot be told apart when they name the same source (a ``package.module:callable``, or a
``file.py:callable`` whose Python files have the same bytes: a file source reading other files beside it
must not opt in), a checkpoint with the same bytes (wherever it lies), the same sub-models, the same
environment and working folder, and the source read the same values of the rule file's variables: the
first run goes through ``tests/export_memo_source.py``, which notes every variable the real source asks
for, so a job that differs only in variables the export never reads (``storage`` for the LLM, a value only
model.json holds) gets the same export. A job asking for calibration samples reuses a run that saved at
least those.

A failed export is not kept. Its error is the real source's (the wrapper passes a GsurgError through
unchanged); an error that names the wrapper (a non-gsurg exception, which the worker words with the source's
reference) makes the memo run the job again as it is, so the error is the worker's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import graphsurgeon.export.worker as worker
from graphsurgeon.export.errors import ExportError
from graphsurgeon.export.job import ExportedFiles, ExportJob, ExportResult, PlainValue, SampleFile
from tests.export_memo_source import MEMO_BASE, MEMO_LOG, MEMO_SOURCE

WRAPPER = Path(__file__).resolve().with_name("export_memo_source.py")
#: Environment variables that change during the session without changing an export: pytest's, and the
#: default inductor cache folder torch sets in this process once something imports its compiler (the one a
#: child torch would pick itself).
_VOLATILE_ENV = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR"}
_MISSING = ("missing",)

Progress = Callable[[str], None] | None


def _value(value: PlainValue) -> tuple[Any, ...]:
    """A variable's value with its type: 1, 1.0 and True are different inputs to a source."""
    return (type(value).__name__, value)


def _fingerprint(path: str | None) -> str | None:
    """The sha256 of the checkpoint's bytes (every file under a folder, by relative path)."""
    if path is None:
        return None
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(root) if root.is_dir() else file.name).encode())
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def _environment() -> str:
    """The worker's environment variables and working folder."""
    env = {k: v for k, v in os.environ.items() if k not in _VOLATILE_ENV}
    return hashlib.sha256(json.dumps([env, os.getcwd()], sort_keys=True).encode()).hexdigest()


def _source(ref: str, base: str) -> str | None:
    """The source as the export sees it: a ``package.module:callable`` by its name (the package does not
    change during the session); a ``file.py:callable`` by its path and the bytes of every ``.py`` file in
    its folder and below (what it can import relatively), hidden folders (work folders) aside. None for a
    reference the worker will refuse."""
    target, colon, name = ref.rpartition(":")
    if not colon or not target:
        return None
    if not (target.endswith(".py") or "/" in target or "\\" in target):
        return ref
    path = (Path(base) / target).resolve()
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    for file in sorted(path.parent.rglob("*.py")):
        relative = file.relative_to(path.parent)
        if not any(part.startswith(".") for part in relative.parts):
            digest.update(str(relative).encode())
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return f"{path}:{name} {digest.hexdigest()}"


@dataclass(frozen=True)
class _Key:
    """What an export's result depends on besides the variables it read."""

    source: str
    checkpoint: str | None  # the bytes of the checkpoint: the export does not see where they lie
    names: tuple[str, ...]
    environment: str


@dataclass
class _Entry:
    key: _Key
    calibrate: frozenset[str]
    read: dict[str, tuple[Any, ...]] | None  # variable -> (type, value) or _MISSING; None: all of them
    variables: dict[str, PlainValue]
    folder: Path  # the first run's work folder, kept
    result: ExportResult  # its paths relative to ``folder``
    progress: list[str]

    def serves(self, key: _Key, job: ExportJob) -> bool:
        if key != self.key or not set(job.calibrate) <= self.calibrate:
            return False
        if self.read is None:
            return {k: _value(v) for k, v in job.variables.items()} == {
                k: _value(v) for k, v in self.variables.items()
            }
        return all(
            (_value(job.variables[name]) if name in job.variables else _MISSING) == value
            for name, value in self.read.items()
        )


def _relative(result: ExportResult, work: Path) -> ExportResult:
    def rel(path: str) -> str:
        return str(Path(path).relative_to(work))

    models = {n: ExportedFiles(param=rel(m.param), bin=rel(m.bin)) for n, m in result.models.items()}
    samples = {
        n: SampleFile(path=rel(s.path), samples=s.samples, inputs=s.inputs)
        for n, s in result.calibration.items()
    }
    return ExportResult(models=models, calibration=samples)


def _placed(result: ExportResult, work: Path, calibrate: list[str]) -> ExportResult:
    models = {
        n: ExportedFiles(param=str(work / m.param), bin=str(work / m.bin)) for n, m in result.models.items()
    }
    samples = {
        n: SampleFile(path=str(work / s.path), samples=s.samples, inputs=s.inputs)
        for n, s in result.calibration.items()
        if n in calibrate
    }
    return ExportResult(models=models, calibration=samples)


def _replay(lines: list[str], progress: Progress) -> None:
    if progress is not None:
        for line in lines:
            progress(line)


class ExportMemo:
    """See the module docstring. ``runs`` and ``reused`` count the worker runs and the jobs served."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.entries: list[_Entry] = []
        self.runs = 0
        self.reused = 0
        self._real = worker.run_job

    @contextlib.contextmanager
    def active(self) -> Iterator[ExportMemo]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(worker, "run_job", self.run_job)
            yield self

    def run_job(self, job: ExportJob, progress: Progress = None) -> ExportResult:
        source = _source(job.source, job.base)
        if source is None:
            return self._real(job, progress)
        key = _Key(
            source,
            _fingerprint(job.checkpoint),
            tuple(job.names),
            _environment(),
        )
        for entry in self.entries:
            if entry.serves(key, job):
                return self._reuse(entry, job, progress)
        return self._run(key, job, progress)

    def _reuse(self, entry: _Entry, job: ExportJob, progress: Progress) -> ExportResult:
        work = Path(job.work)
        shutil.copytree(entry.folder, work, dirs_exist_ok=True)
        _replay(entry.progress, progress)
        self.reused += 1
        return _placed(entry.result, work, job.calibrate)

    def _run(self, key: _Key, job: ExportJob, progress: Progress) -> ExportResult:
        n = len(self.entries)
        log = self.root / f"read{n}.json"
        variables = {**job.variables, MEMO_SOURCE: job.source, MEMO_BASE: job.base, MEMO_LOG: str(log)}
        wrapped = job.model_copy(update={"source": f"{WRAPPER}:build", "variables": variables})
        lines: list[str] = []
        try:
            result = self._real(wrapped, lines.append)
        except ExportError as err:
            if not any(mark in str(err) for mark in (WRAPPER.name, MEMO_SOURCE, MEMO_BASE, MEMO_LOG)):
                _replay(lines, progress)  # the source's own error: the same as without the memo
                raise
            for stale in Path(job.work).iterdir():  # an error naming the wrapper: the real job's instead
                if stale.is_dir():
                    shutil.rmtree(stale)
                else:
                    stale.unlink()
            return self._real(job, progress)
        self.runs += 1
        _replay(lines, progress)
        folder = self.root / f"export{n}"
        work = Path(job.work)
        shutil.copytree(work, folder, ignore=shutil.ignore_patterns("export.job.json", "export.result.json"))
        doc = json.loads(log.read_text(encoding="utf-8"))
        read = None
        if not doc["all"]:
            read = {
                name: (_value(job.variables[name]) if name in job.variables else _MISSING)
                for name in doc["read"]
            }
        entry = _Entry(
            key,
            frozenset(job.calibrate),
            read,
            dict(job.variables),
            folder,
            _relative(result, work),
            lines,
        )
        self.entries.append(entry)
        return result
