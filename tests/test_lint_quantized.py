"""Lint on block-quantized Gemm weights (ncnn 1.0.20261020 ``quantize_term`` 4xy/6xy/8xy; issue 17 item 1):
the quantize_terms and layer forms ncnn's ``load_param`` refuses, the scales' values, and the exact sizes
the walk already checks. The models are written here by hand from the format facts (codes at bit
``k * bits`` of each row, least significant bit first, rows of ``ceil(K * bits / 8)`` bytes padded to 4 as
a whole, then the bias, the per-(row, block) float32 scales and the per-input scales), checked against
numpy in the ``ncnn`` wheel, and the fault table of docs/lint.md is made from what lint and the wheel do
with each fault (``graphsurgeon.testing.lint_faults_quant``).
"""

from __future__ import annotations

import math
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.check.findings import Finding
from graphsurgeon.check.lint import lint_graph
from graphsurgeon.cli import main
from graphsurgeon.formats.param_text import parse_param_text
from graphsurgeon.testing.lint_faults import Model, lint_json
from graphsurgeon.testing.lint_faults import load_model as read_model
from graphsurgeon.testing.lint_faults_quant import (
    FAULTS,
    ROWS,
    Outcome,
    QFault,
    Run,
    lint_verdict,
    matches,
    ncnn_run,
    ncnn_verdict,
    render_table,
    write_fault,
)
from tests.conftest import REPO
from tests.lint_harness import lint, ncnn_load_param

BITS = (4, 6, 8)
BLOCKS = {4: 64, 6: 128, 8: 32}  # every block-size code, each with a short last block of K = 70
N, K = 6, 70
TAG_FP32 = bytes(4)
PARAM_CHECKS = ("gemm-quantize-term", "gemm-block-quantize")

pytestmark = pytest.mark.usefixtures("shared_exports")


# --- the clean models, by hand ----------------------------------------------------------------------------


def pack_row(codes: np.ndarray, bits: int) -> bytes:
    """One row of signed codes, value k at bit k * bits, least significant bit first, two's complement."""
    acc = 0
    for k, q in enumerate(codes.tolist()):
        acc |= (q & ((1 << bits) - 1)) << (k * bits)
    return acc.to_bytes((len(codes) * bits + 7) // 8, "little")


def quantize_term(bits: int, input_scales: bool) -> int:
    return bits * 100 + (10 if input_scales else 0) + {32: 0, 64: 1, 128: 2}[BLOCKS[bits]]


@dataclass(frozen=True)
class Built:
    param: Path
    weights: Path
    weight: np.ndarray  # the [N, K] values the codes and scales stand for
    bias: np.ndarray
    input_scales: np.ndarray | None


def build(folder: Path, bits: int, input_scales: bool, bias: bool = True) -> Built:
    rng = np.random.default_rng(100 * bits + input_scales)
    qmax = (1 << (bits - 1)) - 1
    codes = rng.integers(-qmax, qmax + 1, size=(N, K))
    blocks = math.ceil(K / BLOCKS[bits])
    scales = rng.uniform(4.0, 64.0, size=(N, blocks)).astype(np.float32)
    c = rng.uniform(-1.0, 1.0, size=N).astype(np.float32)
    ins = rng.uniform(0.5, 2.0, size=K).astype(np.float32) if input_scales else None
    body = b"".join(pack_row(row, bits) for row in codes)
    data = body + bytes(-len(body) % 4)
    data += TAG_FP32 + c.astype("<f4").tobytes() if bias else b""
    data += scales.astype("<f4").tobytes()
    data += ins.astype("<f4").tobytes() if ins is not None else b""
    c_params = "6=1 10=4" if bias else "6=1 10=-1"
    term = quantize_term(bits, input_scales)
    line = f"Gemm fc 1 1 in0 out0 2=0 3=1 4=0 5=1 {c_params} 7=0 8={N} 9={K} 18={term}"
    folder.mkdir(parents=True, exist_ok=True)
    param, weights = folder / "q.param", folder / "q.bin"
    param.write_text(f"7767517\n2 2\nInput in0 0 1 in0\n{line}\n")
    weights.write_bytes(data)
    per_value = np.repeat((np.float32(1.0) / scales).astype(np.float32), BLOCKS[bits], axis=1)[:, :K]
    return Built(param, weights, codes.astype(np.float32) * per_value, c if bias else np.zeros(N), ins)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, bool], Built]:
    root = tmp_path_factory.mktemp("quant")
    return {(b, x): build(root / f"int{b}-{int(x)}", b, x) for b in BITS for x in (False, True)}


def model_for(models: dict[tuple[int, bool], Built], fault: QFault, bits: int) -> Model:
    built = models[bits, fault.input_scales]
    return read_model(built.param, built.weights)


CASES = [pytest.param(f, b, id=f"{f.name}-{b}bit") for f in FAULTS for b in BITS]


# --- the clean models -------------------------------------------------------------------------------------


@pytest.mark.parametrize("input_scales", [False, True], ids=["block-scales", "input-scales"])
@pytest.mark.parametrize("bits", BITS)
def test_clean_models_lint_clean_and_compute_their_weights_in_ncnn(
    models: dict[tuple[int, bool], Built], bits: int, input_scales: bool
) -> None:
    """Format digit 1 (input scales, e.g. 811) is valid for ncnn, so lint accepts it though gsurg never
    writes it. At 4 and 6 bits ncnn computes with the dequantized weights exactly; at 8 bits its kernel
    quantizes the activations per block to int8 too, so it is only close."""
    built = models[bits, input_scales]
    code, report = lint_json(built.param, built.weights)
    assert (code, report["findings"]) == (0, []), report["findings"]
    assert report["summary"]["weights"] == 3 + input_scales
    [result] = ncnn_run([Run(built.param, built.weights, read_model(built.param, built.weights), run=True)])
    assert (result["load_param"], result["load_model"], result["extract"]) == (0, 0, 0)
    x = np.random.default_rng(0).uniform(-1, 1, (ROWS, K)).astype(np.float32)
    if built.input_scales is not None:
        x = x * built.input_scales
    want = x.astype(np.float64) @ built.weight.T.astype(np.float64) + built.bias
    tol = 1e-4 if bits < 8 else 0.05 * float(np.abs(want).max())
    np.testing.assert_allclose(result["output"], want, atol=tol, rtol=0)


# --- every fault: lint's finding, and what ncnn does ------------------------------------------------------


@pytest.mark.parametrize(("fault", "bits"), CASES)
def test_lint_reports_the_fault(
    models: dict[tuple[int, bool], Built], fault: QFault, bits: int, tmp_path: Path
) -> None:
    param, weights, injected = write_fault(fault, model_for(models, fault, bits), tmp_path)
    assert lint_verdict(param, weights, injected.expect), (injected.site, lint_json(param, weights)[1])


PARAM_CASES = [
    pytest.param(f, b, id=f"{f.name}-{b}bit") for f in FAULTS for b in BITS if f.check in PARAM_CHECKS
]


@pytest.mark.parametrize(("fault", "bits"), PARAM_CASES)
def test_param_faults_are_found_without_the_bin(
    models: dict[tuple[int, bool], Built], fault: QFault, bits: int, tmp_path: Path
) -> None:
    """Without --bin, the param fault is the one finding (none for a form ncnn accepts at these bits)."""
    param, _, injected = write_fault(fault, model_for(models, fault, bits), tmp_path)
    findings = lint(param).findings
    if injected.expect is None:
        assert findings == []
        return
    [f] = findings
    assert matches(injected.expect, {**asdict(f), "level": f.level.value}), f
    assert "load_param fails: 'Gemm unsupported" in f.message


@pytest.fixture(scope="module")
def outcomes(
    models: dict[tuple[int, bool], Built], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, int], Outcome]:
    """Every fault at every bit width: lint's verdict, the expectation and ncnn's cell (the wheel runs the
    faulty files in one child process)."""
    root = tmp_path_factory.mktemp("faults")
    keys = list(models)
    clean_runs = [Run(b.param, b.weights, read_model(b.param, b.weights), run=True) for b in models.values()]
    clean = {key: result.get("output") for key, result in zip(keys, ncnn_run(clean_runs), strict=True)}
    cases = [(f, b) for f in FAULTS for b in BITS]
    runs, lints = [], []
    for i, (fault, bits) in enumerate(cases):
        model = model_for(models, fault, bits)
        param, weights, injected = write_fault(fault, model, root / f"{i}")
        lints.append((lint_verdict(param, weights, injected.expect), injected.expect))
        runs.append(Run(param, weights, model, run=fault.compare))
    out: dict[tuple[str, int], Outcome] = {}
    for (fault, bits), (ok, expect), result in zip(cases, lints, ncnn_run(runs), strict=True):
        out[fault.name, bits] = (ok, expect, ncnn_verdict(result, clean[bits, fault.input_scales]))
    return out


def test_what_ncnn_does_with_each_fault(outcomes: dict[tuple[str, int], Outcome]) -> None:
    """A refused form or term fails load_param at those bits (and a form lint accepts loads); a bad scale
    loads and computes NaN or wrong values; a negated one loads and computes other values."""
    for fault in FAULTS:
        for bits in BITS:
            _, expect, cell = outcomes[fault.name, bits]
            where = (fault.name, bits, cell)
            if fault.check in PARAM_CHECKS:
                assert cell == ("loads" if expect is None else "load_param -1"), where
            elif fault.check == "bin-walk":
                assert cell != "same", where
            else:
                assert cell.startswith(("NaN/Inf", "wrong")), where


def test_the_fault_table_in_docs_is_what_lint_and_ncnn_do(
    outcomes: dict[tuple[str, int], Outcome],
) -> None:
    table = render_table(outcomes, BITS)
    doc = (REPO / "docs" / "lint.md").read_text()
    missing = [line for line in table.splitlines() if line and line not in doc]
    assert not missing, "docs/lint.md lacks these lines of the table:\n" + "\n".join(missing)
    assert all(ok for ok, _, _ in outcomes.values())


# --- load_param's accepted terms and forms, against the wheel --------------------------------------------


def param_findings(text: str) -> list[Finding]:
    """Lint's param checks on a .param in memory (what ``gsurg lint`` runs without --bin)."""
    return lint_graph(parse_param_text(text, strict=False))


def gemm_param(term: int, **params: int) -> str:
    values = {"2": 0, "3": 1, "4": 0, "5": 1, "6": 1, "7": 0, "8": N, "9": K, "10": -1, "18": term}
    values.update(params)
    line = "Gemm fc 1 1 in0 out0 " + " ".join(f"{k}={v}" for k, v in values.items())
    return f"7767517\n2 2\nInput in0 0 1 in0\n{line}\n"


def test_the_quantize_term_check_agrees_with_load_param() -> None:
    """Over every term from -1000 to 1000 and some larger: lint's gemm-quantize-term exactly where the
    wheel's load_param fails (the other params in the form block quantization needs)."""
    terms = [*range(-1000, 1001), 1001, 2000, 4000, 8000, 65536, 2**31 - 1]
    disagree = []
    for term in terms:
        text = gemm_param(term)
        flagged = any(f.check == "gemm-quantize-term" for f in param_findings(text))
        if flagged != (ncnn_load_param(text) != 0):
            disagree.append(term)
    assert disagree == []


FORM = {"2": "transA", "3": "transB", "4": "constantA", "5": "constantB", "11": "output_N1M"}
FORM |= {"12": "output_elempack", "13": "output_elemtype", "14": "output_transpose"}


@pytest.mark.parametrize("bits", BITS)
def test_the_form_check_agrees_with_load_param(bits: int) -> None:
    """Each param of the form, alone and in pairs, over -1..4 (output_elempack from 0: a negative one is
    refused for every Gemm, quantized or not, which this check leaves alone): a gemm-block-quantize finding
    for each param ncnn refuses, exactly when load_param fails."""
    cases: list[dict[str, int]] = [{a: v} for a in FORM for v in range(-1, 5)]
    cases += [{a: v, b: w} for a in FORM for b in FORM if a < b for v in (0, 1, 2) for w in (0, 1, 2)]
    disagree = []
    for case in cases:
        if case.get("12", 0) < 0:
            continue
        text = gemm_param(quantize_term(bits, False), **case)
        findings = [f for f in param_findings(text) if f.check == "gemm-block-quantize"]
        named = {FORM[k] for k in case if any(f"needs {FORM[k]} ({k}=)" in f.message for f in findings)}
        refused = ncnn_load_param(text) != 0
        if bool(findings) != refused or (refused and not named):
            disagree.append((case, refused, [f.message for f in findings]))
    assert disagree == []


# --- what lint leaves alone --------------------------------------------------------------------------------


def test_packed_codes_are_not_read_as_floats(tmp_path: Path) -> None:
    """Codes whose bytes, read as fp32 or fp16, are NaN, Inf or 1e38, and a scale of 1e12 (a block of tiny
    weights): no finding."""
    built = build(tmp_path, 4, False)
    data = bytearray(built.weights.read_bytes())
    row = (K * 4 + 7) // 8
    patterns = [b"\xff\xff\xff\xff", b"\x00\x00\x80\x7f", b"\x00\x00\xc0\x7f", struct.pack("<f", 1e38)]
    for i in range(N * row // 4):
        data[4 * i : 4 * i + 4] = patterns[i % len(patterns)]
    scales_at = len(data) - 4 * N * math.ceil(K / BLOCKS[4])
    struct.pack_into("<f", data, scales_at, 1e12)
    built.weights.write_bytes(bytes(data))
    code, report = lint_json(built.param, built.weights)
    assert (code, report["findings"]) == (0, [])


def test_a_row_length_off_with_nothing_tagged_after_it_is_found_at_the_end(tmp_path: Path) -> None:
    """Without a tagged record after B the walk finds the extra bytes at the end, naming the last weight."""
    built = build(tmp_path, 4, False, bias=False)
    data = built.weights.read_bytes()
    row = (K * 4 + 7) // 8
    rows = b"".join(data[r * row : (r + 1) * row] + b"\0" for r in range(N))
    body = rows + bytes(-len(rows) % 4)
    built.weights.write_bytes(body + data[N * row + (-(N * row) % 4) :])
    code, report = lint_json(built.param, built.weights)
    [finding] = report["findings"]
    expected_end = len(data)
    assert (code, finding["check"], finding["offset"]) == (1, "bin-walk", expected_end)
    assert "after fc.B_quantize_scales" in finding["message"]


# --- a real conversion ------------------------------------------------------------------------------------


@pytest.mark.slow  # a pnnx export of the tiny Qwen3-style LLM (about 10 s)
def test_an_int4_conversion_lints_clean(tmp_path: Path) -> None:
    out = tmp_path / "llm"
    rules = REPO / "rules" / "llm-kv-cache.yaml"
    assert main(["apply", str(rules), "--out", str(out), "--set", "storage=int4"]) == 0
    quantized = 0
    for param in sorted(out.glob("*.ncnn.param")):
        code, report = lint_json(param, param.with_suffix(".bin"))
        assert (code, report["findings"]) == (0, []), (param.name, report["findings"])
        quantized += "18=4" in param.read_text()
    assert quantized == 2  # the decoder and lm_head
