"""Everything ``apply`` needs before the first rule runs: the rule file opened, the command line's model
added as input ``model``, the export source's sub-models exported by pnnx into a work folder, the rule
file finished (its graphs may read facts about those models), and its checkpoints opened.

The work folder belongs to the run: ``Prepared.close`` removes it, unless it is kept (``--keep-work``).

The export is one run of the worker (``export.worker``), one build of the source's models: it also saves
the calibration samples (the source's ``ExportSpec.calibration``, or its example inputs) of every exported
input a graph will calibrate on (``RuleProgram.calibrated_inputs``). ``Prepared.calibration`` loads them
when a graph asks; ``release_sources`` forgets them before writing.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.export.errors import ExportError
from graphsurgeon.export.job import PlainValue
from graphsurgeon.formats.safetensors import Checkpoint, checkpoint_path
from graphsurgeon.pipeline.checkpoint_pool import CheckpointPool
from graphsurgeon.pipeline.work_folder import WorkFolder, make_work_folder
from graphsurgeon.progress import Progress
from graphsurgeon.rewrite.loader import RuleProgram, open_rule_file
from graphsurgeon.rewrite.read_scope import ReadScope
from graphsurgeon.rewrite.rule_facts import code_notice
from graphsurgeon.rewrite.rulefile import RuleFile
from graphsurgeon.rewrite.sections import ModelInput

#: Calibration samples of one exported input: each a tuple of arrays without the batch dim.
Samples = Callable[[], list[tuple[np.ndarray, ...]]]


class _LazyVars(Mapping[str, Any]):
    """The rule file's variables as an export source sees them: each evaluated when read."""

    def __init__(self, program: RuleProgram) -> None:
        self._program = program

    def __getitem__(self, key: str) -> Any:
        if key not in self._program.scope.names:
            raise KeyError(key)
        return self._program.scope.var(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._program.scope.names)

    def __len__(self) -> int:
        return len(self._program.scope.names)


@dataclass
class Prepared:
    rules: RuleFile
    inputs: dict[str, ModelInput]
    checkpoints: dict[str, Checkpoint]
    work: Path | None = None
    keep_work: bool = False
    exported: list[str] = field(default_factory=list)
    calibration: dict[str, Samples] = field(default_factory=dict)  # input name -> its samples, on demand
    rule_files: list[str] = field(default_factory=list)  # the rule file and every file it includes
    path_vars: list[str] = field(default_factory=list)  # the values of its {path: …} variables
    pool: CheckpointPool = field(default_factory=CheckpointPool)  # every checkpoint the run opens, once
    work_lock: WorkFolder | None = None  # the work folder's lock, held while the run lives
    read_scope: ReadScope | None = None  # what the rule file may read, and the paths the user gave
    outputs_where: str = ""  # the file and line of the rule file's outputs.dir (for errors)
    cleanups: list[Callable[[], None]] = field(default_factory=list)  # run by close (scratch the run made)

    def read_paths(self) -> list[str]:
        """Every file or folder the run reads (none of them may be an output): the rule files, the models,
        the source checkpoint and the checkpoints (with the folder of a sharded one), path variables, and
        the side files' templates, schemas, copy sources and weight-map checkpoints."""
        rf = self.rules
        paths = [*self.rule_files, *self.path_vars]
        paths += [p for m in self.inputs.values() for p in (m.param, m.bin) if p is not None]
        if rf.source is not None and rf.source.checkpoint:
            paths.append(rf.source.checkpoint)
        for c in rf.checkpoints.values():
            paths += [c.path, str(Path(c.path).parent)] if c.path.endswith(".json") else [c.path]
        for side in rf.side_files:
            paths += [p for p in (side.copy_, side.weight_map, side.schema_) if p is not None]
            if side.template is not None:
                paths.append(side.template)
        return paths

    def release_sources(self) -> None:
        """Drop the calibration sources (and what they keep alive)."""
        self.calibration.clear()

    def close(self) -> str | None:
        """Close the checkpoints; remove the work folder unless it is kept (--keep-work); returns its path
        when it is kept."""
        self.release_sources()
        self.pool.close()
        while self.cleanups:
            self.cleanups.pop()()
        if self.work_lock is not None:
            self.work_lock.close(keep=self.keep_work)
            self.work_lock = None
        elif self.work is not None and not self.keep_work:
            shutil.rmtree(self.work, ignore_errors=True)
        if self.work is None or not self.work.exists() or not self.keep_work:
            return None
        return str(self.work)


def prepare(
    rule_path: str,
    param: str | None,
    bin_path: str | None,
    sets: dict[str, str],
    *,
    work_parent: str | None,
    keep_work: bool = False,
    progress: Progress | None = None,
    notice: Callable[[str], None] | None = None,
    trusted: bool = False,
) -> Prepared:
    """Open, export and finish the rule file (see the module docstring). Before an export source runs,
    ``notice`` is told (the source is Python code the rule file names; nothing else in a rule file runs
    code). Unless ``trusted``, the paths the rule file names are confined (``rewrite.read_scope``)."""
    program = open_rule_file(rule_path, sets, notice=notice, trusted=trusted)
    inputs = dict(program.sections.inputs)
    if param is not None:
        inputs["model"] = ModelInput(param=param, bin=bin_path)
        program.provide_model("model", param)
    elif bin_path is not None:
        raise GsurgError("--bin needs an input .param on the command line")
    unread = program.unread_inputs()  # read only by graphs whose when: is false
    exports = {name: entry.export for name, entry in inputs.items() if entry.export is not None}
    wanted = {name: sub for name, sub in exports.items() if name not in unread}
    work_lock = make_work_folder(work_parent) if wanted else None
    work = work_lock.path if work_lock is not None else None
    calibration: dict[str, Samples] = {}
    pool = CheckpointPool()
    try:
        if work is not None:
            if notice is not None:
                notice(_export_notice(program))
            calibration = _export(program, inputs, wanted, work, progress)
        rules = program.finish()
        checkpoints = {name: pool.get(checkpoint_path(c.path)) for name, c in rules.checkpoints.items()}
    except BaseException as err:
        pool.close()
        if work_lock is not None:
            work_lock.close(keep=keep_work)
        removed = work is not None and not keep_work
        if removed and isinstance(err, ExportError) and str(work) in str(err):  # it names a removed file
            raise ExportError(f"{err} (the work folder is removed; --keep-work keeps it)") from None
        raise
    rule_files = [src.path for src in program.files]
    path_vars = [str(v) for v in program.scope.path_values()]
    return Prepared(
        rules,
        inputs,
        checkpoints,
        work,
        keep_work,
        sorted(wanted),
        calibration,
        rule_files,
        path_vars,
        pool,
        work_lock,
        read_scope=program.read_scope,
        outputs_where=_outputs_where(program),
    )


def _outputs_where(program: RuleProgram) -> str:
    src = program.origins.get(("outputs",))
    return src.where(("outputs", "dir")) if src is not None else program.path


def _export_notice(program: RuleProgram) -> str:
    ref = program.sections.source.export if program.sections.source is not None else None
    return code_notice(program.path, f"its export source {ref} (source.export)")


def _plain_vars(program: RuleProgram) -> dict[str, PlainValue]:
    """The variables an export source sees: every one that can be computed before the export (a variable
    reading facts about the exported models cannot) and is plain data."""
    out: dict[str, PlainValue] = {}
    for name in program.scope.names:
        try:
            value = program.scope.var(name)
        except GsurgError:
            continue
        if isinstance(value, str | int | float | bool) or value is None:
            out[name] = value
    return out


def _export(
    program: RuleProgram,
    inputs: dict[str, ModelInput],
    wanted: dict[str, str],
    work: Path,
    progress: Progress | None,
) -> dict[str, Samples]:
    """Export the wanted sub-models in one child process (the source's PyTorch models never live in this
    one), saving on the way the samples of the inputs a graph calibrates on; returns how to load those."""
    source = program.sections.source
    if source is None:
        names = ", ".join(sorted(wanted))
        raise GsurgError(f"{program.path}: inputs {names} are exports, but the rule file has no source")
    from graphsurgeon.export.job import ExportJob
    from graphsurgeon.export.worker import run_job

    if source.checkpoint and not Path(source.checkpoint).exists():
        raise GsurgError(f"{source.checkpoint}: the source checkpoint does not exist")
    calibrated = program.calibrated_inputs()
    job = ExportJob(
        source=source.export,
        base=str(Path(program.path).resolve().parent),
        checkpoint=source.checkpoint,
        variables=_plain_vars(program),
        names=sorted(set(wanted.values())),
        calibrate=sorted({sub for name, sub in wanted.items() if name in calibrated}),
        work=str(work),
        result=str(work / "export.result.json"),
    )
    exported = run_job(job, progress)
    for name, sub in wanted.items():
        model = exported.models[sub]
        inputs[name] = ModelInput(param=model.param, bin=model.bin, repeat=inputs[name].repeat)
        program.provide_model(name, model.param)
    return {
        name: exported.calibration[sub].load for name, sub in wanted.items() if sub in exported.calibration
    }
