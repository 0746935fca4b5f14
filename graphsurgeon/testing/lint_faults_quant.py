"""Fault injection for lint's block-quantization checks: faults in a Gemm whose B is block-quantized
(``quantize_term`` 4xy / 6xy / 8xy), the lint finding each must give (or, for a form ncnn accepts at these
bits, the absence of any finding), and what the ``ncnn`` wheel does with the faulty file: refuses it, or
loads it and computes NaN, wrong values or the clean model's values.

Used by ``tests/test_lint_quantized.py``, which builds the clean models by hand (an Input feeding one
block-quantized Gemm with a constant bias; one model per bit width, with and without input scales) and
checks that docs/lint.md holds the table ``render_table`` makes from the results. Sites come from gsurg's
reading of the clean model (the Gemm's layer line and walk records), as in ``lint_faults``.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.formats.model_bin import WeightRecord
from graphsurgeon.ir.graph import Layer
from graphsurgeon.testing.lint_faults import Model, lint_json

ROWS = 3  # rows of the input the probe feeds the Gemm


# --- the clean model's quantized Gemm ---------------------------------------------------------------------


def quantized_gemm(m: Model) -> Layer:
    """The model's (first) block-quantized Gemm."""
    return next(x for x in m.graph.layers if x.type == "Gemm" and x.env()["weight_block_quantize"])


def bits_of(m: Model) -> int:
    return int(quantized_gemm(m).env()["weight_block_quantize_bits"])


def record(m: Model, slot: str) -> WeightRecord:
    layer = quantized_gemm(m).name
    return next(r for r in m.records if r.layer == layer and r.slot == slot)


@dataclass(frozen=True)
class QExpect:
    """The finding lint must report; a field left None is not compared."""

    check: str
    level: str = "error"
    layer: str | None = None
    line: int | None = None
    weight: str | None = None
    offset: int | None = None


@dataclass(frozen=True)
class QInjected:
    text: str
    data: bytes
    expect: QExpect | None  # None: ncnn accepts this form at these bits, and lint must report nothing
    site: str


@dataclass(frozen=True)
class QFault:
    name: str
    check: str
    inject: Callable[[Model], QInjected]
    input_scales: bool = False  # injected into the model with input scales (format digit 1)
    compare: bool = False  # run the loaded model and compare its output with the clean model's


# --- .param faults: one param of the quantized Gemm's line set ---------------------------------------------


def _with_param(m: Model, name: str, value: int) -> tuple[str, Layer]:
    layer = quantized_gemm(m)
    assert layer.spec is not None
    pid = layer.spec.param(name).id
    lines = m.text.splitlines()
    tokens = [t for t in lines[layer.line - 1].split() if not t.startswith(f"{pid}=")]
    lines[layer.line - 1] = " ".join([*tokens, f"{pid}={value}"])
    return "\n".join(lines) + "\n", layer


def _term_fault(term: Callable[[int], int]) -> Callable[[Model], QInjected]:
    def inject(m: Model) -> QInjected:
        value = term(bits_of(m))
        text, layer = _with_param(m, "quantize_term", value)
        expect = QExpect("gemm-quantize-term", layer=layer.name, line=layer.line)
        return QInjected(text, m.data, expect, f"{layer.name}: 18={value}")

    return inject


def _form_fault(name: str, value: int, valid_at_8: bool = False) -> Callable[[Model], QInjected]:
    def inject(m: Model) -> QInjected:
        text, layer = _with_param(m, name, value)
        valid = valid_at_8 and bits_of(m) == 8
        expect = None if valid else QExpect("gemm-block-quantize", layer=layer.name, line=layer.line)
        return QInjected(text, m.data, expect, f"{layer.name}: {name} {value}")

    return inject


# --- .bin faults: sites from the walk records -------------------------------------------------------------


def _scale_fault(slot: str, check: str, value: float | None) -> Callable[[Model], QInjected]:
    """The middle scale of ``slot`` set to ``value`` (None: negated)."""

    def inject(m: Model) -> QInjected:
        rec = record(m, slot)
        index = math.prod(rec.shape) // 2
        at = rec.offset + 4 * index
        old = struct.unpack_from("<f", m.data, at)[0]
        new = -old if value is None else value
        data = m.data[:at] + struct.pack("<f", new) + m.data[at + 4 :]
        level = "warning" if value is None else "error"
        expect = QExpect(check, level, layer=rec.layer, weight=rec.slot, offset=rec.offset)
        return QInjected(m.text, data, expect, f"{rec.layer}.{rec.slot}[{index}] at {at}: {old:g} -> {new:g}")

    return inject


def four_bytes_short(m: Model) -> QInjected:
    last = m.records[-1]
    expect = QExpect("bin-walk", layer=last.layer, weight=last.slot, offset=last.offset)
    return QInjected(m.text, m.data[:-4], expect, f"last 4 bytes of {last.layer}.{last.slot} cut")


def rows_one_byte_long(m: Model) -> QInjected:
    """B's packed rows written one byte too long each (a writer's row length off by one); the record after
    it must be tagged for the walk to notice there."""
    layer = quantized_gemm(m)
    i = next(i for i, r in enumerate(m.records) if r.layer == layer.name and r.slot == "B")
    codes, after = m.records[i], m.records[i + 1]
    assert after.tag is not None, "the fault needs a tagged record after B (a constant bias C)"
    n, width = codes.shape
    rows = [m.data[codes.offset + r * width : codes.offset + (r + 1) * width] + b"\0" for r in range(n)]
    body = b"".join(rows)
    body += bytes(-len(body) % 4)
    data = m.data[: codes.offset] + body + m.data[codes.offset + codes.nbytes :]
    expect = QExpect("bin-walk", layer=after.layer, weight=after.slot, offset=after.offset)
    return QInjected(m.text, data, expect, f"{layer.name}.B rows {width} -> {width + 1} bytes")


def _scale_faults(
    what: str, slot: str, check: str, values: Sequence[tuple[str, float | None]]
) -> tuple[QFault, ...]:
    """One fault per (name, value) of ``values`` in the middle scale of ``slot``, run and compared."""
    inputs = slot == "B_input_scales"
    return tuple(QFault(f"{what} {n}", check, _scale_fault(slot, check, v), inputs, True) for n, v in values)


SCALE_VALUES = (("0", 0.0), ("NaN", math.nan), ("Inf", math.inf), ("negated", None))
FAULTS: tuple[QFault, ...] = (
    QFault("quantize_term 5", "gemm-quantize-term", _term_fault(lambda bits: 5)),
    QFault("quantize_term format digit 2 (x20)", "gemm-quantize-term", _term_fault(lambda b: b * 100 + 20)),
    QFault("quantize_term block digit 3 (x03)", "gemm-quantize-term", _term_fault(lambda b: b * 100 + 3)),
    QFault("constantA 1", "gemm-block-quantize", _form_fault("constantA", 1)),
    QFault("constantB 0", "gemm-block-quantize", _form_fault("constantB", 0)),
    QFault("transB 0", "gemm-block-quantize", _form_fault("transB", 0)),
    QFault("transA 1", "gemm-block-quantize", _form_fault("transA", 1, valid_at_8=True)),
    QFault("output_N1M 1", "gemm-block-quantize", _form_fault("output_N1M", 1, valid_at_8=True)),
    QFault("output_elempack 4", "gemm-block-quantize", _form_fault("output_elempack", 4, valid_at_8=True)),
    QFault("output_elemtype 2", "gemm-block-quantize", _form_fault("output_elemtype", 2)),
    QFault("output_transpose 1", "gemm-block-quantize", _form_fault("output_transpose", 1, valid_at_8=True)),
    *_scale_faults("block scale", "B_quantize_scales", "quant-scale", SCALE_VALUES),
    # a zero input scale drops its input: a choice, not a fault
    *_scale_faults("input scale", "B_input_scales", "quant-input-scale", SCALE_VALUES[1:]),
    QFault("quantized .bin 4 bytes short", "bin-walk", four_bytes_short, compare=True),
    QFault("packed rows one byte too long", "bin-walk", rows_one_byte_long, compare=True),
)


def write_fault(fault: QFault, model: Model, folder: Path) -> tuple[Path, Path, QInjected]:
    """Inject ``fault`` into ``model`` and write the faulty copy into ``folder`` (same file names)."""
    injected = fault.inject(model)
    folder.mkdir(parents=True, exist_ok=True)
    param, weights = folder / f"{model.name}.param", folder / f"{model.name}.bin"
    param.write_text(injected.text)
    weights.write_bytes(injected.data)
    return param, weights, injected


# --- lint ---------------------------------------------------------------------------------------------------


def matches(expect: QExpect, finding: dict) -> bool:
    if finding["level"] != expect.level or finding["check"] != expect.check:
        return False
    places: tuple[tuple[str, object], ...] = (
        ("layer", expect.layer),
        ("line", expect.line),
        ("weight", expect.weight),
        ("offset", expect.offset),
    )
    return all(want is None or finding.get(key) == want for key, want in places)


def lint_verdict(param: Path, weights: Path, expect: QExpect | None) -> bool:
    """Does lint do what ``expect`` says: the expected finding (and exit 1 for an error), or, with None,
    no finding at all and exit 0?"""
    code, report = lint_json(param, weights)
    findings = report["findings"]
    if expect is None:
        return code == 0 and findings == []
    return code == (1 if expect.level == "error" else 0) and any(matches(expect, f) for f in findings)


# --- the ncnn wheel ---------------------------------------------------------------------------------------

_NCNN_RUN = r"""
import json, sys
import ncnn
import numpy as np
for job in json.loads(sys.stdin.read()):
    net = ncnn.Net()
    opt = net.opt
    opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = False
    opt.use_bf16_storage = False
    opt.use_packing_layout = False
    opt.num_threads = 1
    p = net.load_param(job["param"])
    m = net.load_model(job["weights"]) if p == 0 else None
    result = {"load_param": p, "load_model": m}
    if p == 0 and m == 0 and job["run"]:
        x = np.random.default_rng(0).uniform(-1, 1, job["shape"]).astype(np.float32)
        with net.create_extractor() as ex:
            ex.input(job["input"], ncnn.Mat(x).clone())
            ret, mat = ex.extract(job["output"])
        result["extract"] = ret
        if ret == 0:
            np.save(job["out"], np.array(mat))
    print(json.dumps(result), flush=True)
"""


@dataclass(frozen=True)
class Run:
    """One file pair for the wheel: ``run`` also extracts the output for a fixed random input."""

    param: Path
    weights: Path
    model: Model
    run: bool


def ncnn_run(jobs: Sequence[Run]) -> list[dict]:
    """What the ncnn wheel (fp32 options) does with each file pair: its loader's returns and, for a job
    that runs and loads, the output (``output``, an array). One child process runs the jobs in turn; if it
    dies, the job it was on is reported as ``crash`` and a new child goes on with the rest."""
    specs: list[dict[str, Any]] = []
    for job in jobs:
        k = int(quantized_gemm(job.model).get("constantK"))
        specs.append(
            {
                "param": str(job.param),
                "weights": str(job.weights),
                "input": job.model.graph.input_blobs()[0].name,
                "output": job.model.graph.output_blobs()[0].name,
                "shape": [ROWS, k],
                "run": job.run,
                "out": str(job.param.with_suffix(".out.npy")),
            }
        )
    results: list[dict] = []
    while len(results) < len(specs):
        todo = specs[len(results) :]
        proc = subprocess.run(
            [sys.executable, "-c", _NCNN_RUN], input=json.dumps(todo), capture_output=True, text=True
        )
        done = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        results += done
        if len(results) < len(specs):
            if proc.returncode == 0:
                raise RuntimeError(f"the ncnn child stopped early: {proc.stderr[-2000:]}")
            results.append({"crash": proc.returncode})
    for spec, result in zip(specs, results, strict=True):
        if result.get("extract") == 0:
            result["output"] = np.load(spec["out"])
    return results


def ncnn_verdict(result: dict, clean: np.ndarray | None) -> str:
    """One cell of the table: how ncnn refused the file, or what it computed against ``clean``."""
    if "crash" in result:
        return f"crash ({result['crash']})"
    if result["load_param"] != 0:
        return f"load_param {result['load_param']}"
    if result["load_model"] != 0:
        return f"load_model {result['load_model']}"
    if "extract" in result and result["extract"] != 0:
        return f"extract {result['extract']}"
    out = result.get("output")
    if out is None or clean is None:
        return "loads"
    bad = int(np.count_nonzero(~np.isfinite(out)))
    if bad:
        return f"NaN/Inf ({bad}/{out.size})"
    return "same" if np.array_equal(out, clean) else "wrong"


# --- the table in docs/lint.md -----------------------------------------------------------------------------


def _lint_cell(ok: bool, expect: QExpect | None) -> str:
    if not ok:
        return "✗"
    return "✓ none (valid)" if expect is None else f"✓ {expect.level}"


Outcome = tuple[bool, QExpect | None, str]  # lint's verdict, the expectation, ncnn's cell


def render_table(results: dict[tuple[str, int], Outcome], bits: Sequence[int]) -> str:
    """The markdown table of ``results`` (per fault name and bit width: lint's verdict, the expectation and
    ncnn's cell), with a closing count."""
    head = ["fault", "check", *(f"lint: {b}-bit" for b in bits), *(f"ncnn: {b}-bit" for b in bits)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    caught = faults = loaded = 0
    for fault in FAULTS:
        row = [fault.name, f"`{fault.check}`"]
        cells = [results[fault.name, b] for b in bits]
        row += [_lint_cell(ok, expect) for ok, expect, _ in cells]
        row += [ncnn for _, _, ncnn in cells]
        lines.append("| " + " | ".join(row) + " |")
        for ok, expect, ncnn in cells:
            if expect is not None:
                faults += 1
                caught += ok
                loaded += not ncnn.startswith(("load_param", "load_model", "crash"))
    lines.append("")
    lines.append(
        f"gsurg lint reported {caught}/{faults} injected faults; ncnn loaded {loaded}/{faults} of them with "
        "return 0."
    )
    return "\n".join(lines)
