"""Trace sub-models and convert them with the pnnx executable: ``export_all(specs, work_dir)``, or its two
phases ``trace_all`` (needs the modules) and ``convert_all`` (needs only the saved traces, so a caller can
free the PyTorch model before pnnx, a second copy of every weight, runs).

For each spec (all checked first, see ``trace_inputs``): ``torch.jit.trace`` (``strict=False``, so outputs
may be lists or dicts; no ``check_trace`` rerun), then the traced module runs at the second shape and must
agree with the eager module there (a trace that froze a size or a Python value would otherwise convert
silently into a wrong model); the trace is saved as ``work_dir/NAME.pt`` and pnnx runs on it with
``fp16=0`` (fp32 weights), ``inputshape=`` and ``inputshape2=`` (when a dim is dynamic), every output path
inside ``work_dir`` (``NAME.ncnn.param``/``.ncnn.bin``, ``NAME.pnnx.*``, ``NAME_pnnx.py``, ``NAME_ncnn.py``)
and its output in ``NAME.pnnx.log``. The ``.ncnn.param`` is then read with gsurg's strict reader, refused if
it holds ops pnnx left unconverted (types with a dot or ``::``: ``F.*``, ``torch.*``, ``Tensor.*``,
``pnnx.*``, ``nn.*``, ``aten::*``), and its ``.bin`` is walked at exact offsets. After a sub-model converts,
the files that repeat every weight (``NAME.pt``, ``NAME.pnnx.bin``, ``NAME.pnnx.onnx``) are removed, so the
work folder holds each model's weights once; the small ones stay for debugging. After a failure everything
stays.

The executable is the one inside the pnnx wheel (``<package>/pnnx``), else ``pnnx`` on ``PATH``.
Every failure is an ``ExportError`` naming the sub-model: pnnx missing or not executable, a trace failing
(torch's message), pnnx exiting non-zero or killed (its last meaningful output line), unconverted ops (with
pnnx's own reasons from its ``ignore ...`` lines).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.export.errors import ExportError, one_line
from graphsurgeon.export.spec import ExportSpec
from graphsurgeon.export.trace_inputs import TracePlan, plan_all
from graphsurgeon.formats.model_bin import walk_bin
from graphsurgeon.formats.param_text import read_param_text

if TYPE_CHECKING:
    import torch

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ExportedModel:
    """One converted sub-model: its ``.ncnn.param`` and ``.ncnn.bin`` inside the work folder."""

    name: str
    param: Path
    bin: Path


def find_pnnx() -> Path:
    """The pnnx executable: the wheel's own, else ``pnnx`` on PATH."""
    try:
        import pnnx
    except ImportError:
        pnnx = None
    if pnnx is not None and getattr(pnnx, "__file__", None):
        exe = Path(pnnx.__file__).parent / ("pnnx.exe" if os.name == "nt" else "pnnx")
        if exe.is_file():
            if not os.access(exe, os.X_OK):
                raise ExportError(f"pnnx is not executable: {exe} (reinstall the pnnx wheel)")
            return exe
    found = shutil.which("pnnx")
    if found is None:
        raise ExportError(
            "pnnx is not installed: no pnnx package with its executable and no pnnx on PATH "
            "(pip install -e '.[export]', or pip install pnnx==20261020)"
        )
    return Path(found)


def _trace(plan: TracePlan) -> torch.jit.ScriptModule:
    import torch

    name, spec = plan.spec.name, plan.spec
    with torch.no_grad(), warnings.catch_warnings():
        # torch 2.13 deprecates TorchScript, but pnnx's torch frontend reads exactly that
        warnings.filterwarnings("ignore", r"`torch\.jit\.trace", DeprecationWarning)
        try:
            traced = torch.jit.trace(spec.module, spec.inputs, strict=False, check_trace=False)
        except Exception as err:
            raise ExportError(f"sub-model {name}: torch.jit.trace failed: {one_line(err)}") from err
        if plan.sizes:
            _check_second_shape(plan, traced)
    return traced


def _tensors(value: Any) -> list[torch.Tensor]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _check_second_shape(plan: TracePlan, traced: torch.jit.ScriptModule) -> None:
    """The trace must run at the second shape and agree with the eager module there."""
    import torch

    name, where = plan.spec.name, plan.describe_second()
    try:
        got = _tensors(traced(*plan.second_inputs))
    except Exception as err:
        raise ExportError(
            f"sub-model {name}: the traced module fails at the second shape ({where}): {one_line(err)}"
        ) from err
    try:
        want = _tensors(plan.spec.module(*plan.second_inputs))
    except Exception as err:
        raise ExportError(
            f"sub-model {name}: the module fails at the second shape ({where}), so its dims cannot be "
            f"dynamic there: {one_line(err)}"
        ) from err
    if len(got) != len(want):
        raise ExportError(f"sub-model {name}: the trace returns {len(got)} tensors, the module {len(want)}")
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        scale = float(b.abs().max()) if b.numel() and b.is_floating_point() else 0.0
        same = a.shape == b.shape and torch.allclose(
            a, b, rtol=1e-4, atol=1e-5 * max(scale, 1.0), equal_nan=True
        )
        if not same:
            raise ExportError(
                f"sub-model {name}: at the second shape ({where}) output {k} of the trace differs from the "
                "module's (the trace froze a size or a Python value: compute it from tensor shapes)"
            )


def _last_message(log: str) -> str:
    for line in reversed(log.splitlines()):
        text = line.strip()
        if text and not text.startswith(("####", "----")):
            return text
    return "(no output)"


@dataclass(frozen=True)
class TracedModel:
    """One sub-model traced and saved as ``pt``, with pnnx's shape arguments: all ``convert_all`` needs."""

    name: str
    pt: Path
    inputshape: str
    inputshape2: str | None
    second: str  # "seq 8 -> 11": the dynamic dims, for progress lines ("" when none)


def _run_pnnx(exe: Path, traced: TracedModel, work_dir: Path) -> tuple[Path, Path, str]:
    name, pt = traced.name, traced.pt
    stem = work_dir / name
    param, bin_ = Path(f"{stem}.ncnn.param"), Path(f"{stem}.ncnn.bin")
    args = [str(exe), str(pt), "fp16=0", f"inputshape={traced.inputshape}"]
    if traced.inputshape2 is not None:
        args.append(f"inputshape2={traced.inputshape2}")
    args += [
        f"pnnxparam={stem}.pnnx.param",
        f"pnnxbin={stem}.pnnx.bin",
        f"pnnxpy={stem}_pnnx.py",
        f"pnnxonnx={stem}.pnnx.onnx",
        f"ncnnparam={param}",
        f"ncnnbin={bin_}",
        f"ncnnpy={stem}_ncnn.py",
    ]
    for stale in (param, bin_):
        stale.unlink(missing_ok=True)
    log_path = Path(f"{stem}.pnnx.log")
    try:
        proc = subprocess.run(
            args, cwd=work_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False
        )
    except OSError as err:
        raise ExportError(f"sub-model {name}: cannot run pnnx ({exe}): {err.strerror}") from None
    log = proc.stdout.decode("utf-8", errors="replace")
    log_path.write_text(log, encoding="utf-8")
    if proc.returncode != 0:
        how = (
            f"was killed by {signal.Signals(-proc.returncode).name}"
            if proc.returncode < 0
            else f"exited with code {proc.returncode}"
        )
        raise ExportError(f"sub-model {name}: pnnx {how}: {_last_message(log)} (log: {log_path})")
    if not param.is_file() or not bin_.is_file():
        raise ExportError(f"sub-model {name}: pnnx exited 0 but wrote no {param.name}: {_last_message(log)}")
    return param, bin_, log


def _ignore_reasons(log: str) -> dict[str, list[str]]:
    """pnnx's ``ignore TYPE NAME REASON`` lines, as reasons per type."""
    reasons: dict[str, list[str]] = {}
    for line in log.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and parts[0] == "ignore":
            seen = reasons.setdefault(parts[1], [])
            if parts[3] not in seen:
                seen.append(parts[3])
    return reasons


def _check_output(name: str, param: Path, bin_: Path, log: str) -> None:
    try:
        graph = read_param_text(param)
    except GsurgError as err:
        raise ExportError(f"sub-model {name}: pnnx wrote a .param gsurg cannot read: {err}") from None
    counts: dict[str, int] = {}
    for layer in graph.layers:
        if "." in layer.type or "::" in layer.type:
            counts[layer.type] = counts.get(layer.type, 0) + 1
    if counts:
        reasons = _ignore_reasons(log)
        listed = []
        for op, n in counts.items():
            why = reasons.get(op, [])
            listed.append(f"{op} x{n}" + (f" (pnnx ignored: {', '.join(why[:3])})" if why else ""))
        raise ExportError(
            f"sub-model {name}: pnnx left ops ncnn does not have: {'; '.join(listed)}; see {param}"
        )
    try:
        walk_bin(graph, bin_)
    except GsurgError as err:
        raise ExportError(f"sub-model {name}: the .bin pnnx wrote does not match its .param: {err}") from None


def trace_all(
    specs: Sequence[ExportSpec], work_dir: Path, *, progress: Progress | None = None
) -> list[TracedModel]:
    """Check every spec, then trace each and save it as ``work_dir/NAME.pt`` (created if missing). Fails
    early when pnnx is missing, before any trace."""
    say = progress or (lambda _msg: None)
    plans = plan_all(specs)
    find_pnnx()
    work_dir = Path(work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    traced: list[TracedModel] = []
    for plan in plans:
        name = plan.spec.name
        say(f"export {name}: tracing ({plan.inputshape})")
        pt = work_dir / f"{name}.pt"
        _trace(plan).save(str(pt))
        second = plan.describe_second() if plan.sizes else ""
        traced.append(TracedModel(name, pt, plan.inputshape, plan.inputshape2, second))
    return traced


def convert_all(
    traced: Sequence[TracedModel], work_dir: Path, *, progress: Progress | None = None
) -> dict[str, ExportedModel]:
    """Run pnnx on each saved trace and check what it wrote; returns the models by sub-model name. The
    files that hold every weight again (``.pt``, ``.pnnx.bin``, ``.pnnx.onnx``) go once a model converts."""
    say = progress or (lambda _msg: None)
    exe = find_pnnx()
    work_dir = Path(work_dir).resolve()
    out: dict[str, ExportedModel] = {}
    for model in traced:
        name = model.name
        say(f"export {name}: pnnx" + (f" (second shape: {model.second})" if model.second else ""))
        param, bin_, log = _run_pnnx(exe, model, work_dir)
        _check_output(name, param, bin_, log)
        for bulky in (model.pt, Path(f"{work_dir / name}.pnnx.bin"), Path(f"{work_dir / name}.pnnx.onnx")):
            bulky.unlink(missing_ok=True)  # each holds every weight again (GBs for an LLM)
        out[name] = ExportedModel(name=name, param=param, bin=bin_)
    return out


def export_all(
    specs: Sequence[ExportSpec], work_dir: Path, *, progress: Progress | None = None
) -> dict[str, ExportedModel]:
    """Trace every spec, then convert each with pnnx (``trace_all`` then ``convert_all``)."""
    return convert_all(trace_all(specs, work_dir, progress=progress), work_dir, progress=progress)
