"""``gsurg verify --precision`` and the criteria per precision x weight storage (issue 17, items 2 and 3).

Unit parts: the KL divergence against closed forms, the judging of a report (exact runs unchanged,
approximate ones judged on the aggregates), the storage read from a conversion's files. Slow parts: the
trained Qwen3 LLM fixture converted at every storage passes its storage's criteria (which were set from
it) at fp32, fp16 and auto precision; the random-weight tiny LLM and VLMs, whose near-flat logits flip on
every rounding, are held to their own measured figures (docs/precision.md, "Stress figures: random-weight
tiny models"), so a regression in the quantizer, the runtime's embedding rows or the chains shows. The
oracle is HF transformers / the PyTorch references the verifiers already use.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphsurgeon.cli import main
from graphsurgeon.verify.criteria import EXACT, criteria_for, kl_divergence
from graphsurgeon.verify.report import StageResult, TokenResult, VerifyReport
from graphsurgeon.verify.run import judged

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("shared_exports")


def test_kl_divergence_matches_closed_forms() -> None:
    assert kl_divergence([0.0, 0.0], [0.0, 0.0]) == 0.0
    # p = (1/2, 1/2), q = softmax(log 3, 0) = (3/4, 1/4): KL = 1/2 log(2/3) + 1/2 log 2
    expected = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    assert kl_divergence([1.0, 1.0], [math.log(3.0), 0.0]) == pytest.approx(expected, rel=1e-12)
    # shifting logits changes nothing; large logits stay finite
    assert kl_divergence([1000.0, 0.0], [1000.0 + 5, 5.0]) == pytest.approx(0.0, abs=1e-12)


def _report(cosines: list[float], ours: list[list[int]], ref: list[list[int]], kl: float) -> VerifyReport:
    r = VerifyReport("m")
    r.stages = [StageResult(f"s{i}", c, 0.0, 1.0, 0) for i, c in enumerate(cosines)]
    r.tokens = [
        TokenResult(f"c{i}", o, t, kl=[kl] * len(t)) for i, (o, t) in enumerate(zip(ours, ref, strict=True))
    ]
    return r


def test_an_exact_run_keeps_demanding_equal_tokens_and_every_stage() -> None:
    r = judged(_report([1.0, 0.99998], [[1, 2]], [[1, 2]], 0.0), EXACT)
    assert r.exact and not r.passed  # one stage below 0.99999
    assert not judged(_report([1.0], [[1, 3]], [[1, 2]], 0.0), EXACT).passed
    assert judged(_report([1.0], [[1, 2]], [[1, 2]], 0.0), EXACT).passed


def test_an_approximate_run_is_judged_on_the_aggregates() -> None:
    int8 = criteria_for("fp32", "int8")
    ref = [list(range(1, 11)), list(range(11, 21))]
    one_off = [ref[0], [*ref[1][:-1], 99]]
    ok = judged(_report([0.9999, 0.9975], one_off, ref, 0.001), int8)
    assert not ok.exact and ok.passed  # one stage below min_cosine, one token off: the means hold
    assert ok.agreement == 19 / 20 and ok.mean_kl == pytest.approx(0.001)
    two_off = [ref[0], [*ref[1][:-2], 99, 99]]
    assert not judged(_report([1.0], two_off, ref, 0.0), int8).passed  # 90 % < 95 %
    high_kl = judged(_report([1.0], [[1, 2]], [[1, 2]], 0.003), int8)
    assert not high_kl.passed
    incomplete = judged(_report([1.0], [[1]], [[1, 2]], 0.0), int8)
    assert not incomplete.passed
    nan = _report([1.0], [[1, 2]], [[1, 2]], 0.0)
    nan.stages.append(StageResult("bad", 1.0, 0.0, 1.0, 3))
    assert not judged(nan, int8).passed
    text = ok.to_text()
    assert "teacher-forced agreement 95.0% (>= 95%)" in text and "PASSED" in text
    doc = json.loads(ok.to_json())
    assert doc["summary"]["agreement"] == 19 / 20 and doc["exact"] is False


def test_criteria_grow_looser_with_fewer_bits() -> None:
    order = [criteria_for("fp32", s) for s in ("fp16", "int8", "int6", "int4")]
    for a, b in itertools.pairwise(order):
        assert a.min_cosine >= b.min_cosine and a.min_agreement >= b.min_agreement
        assert a.max_mean_kl <= b.max_mean_kl
    assert criteria_for("fp32", "fp32") is EXACT
    assert not criteria_for("fp16", "fp32").exact


def _apply(rules: str, out: Path, storage: str) -> None:
    argv = ["apply", str(REPO / "rules" / rules), "--out", str(out), "--set", f"storage={storage}", "-q"]
    assert main(argv) == 0


def _verify(folder: Path, precision: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["verify", str(folder), "--precision", precision, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def trained_conversions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The trained LLM fixture at every rounded storage: verify's criteria were set from these."""
    root = tmp_path_factory.mktemp("trained_storages")
    out = {}
    for storage in ("fp16", "bf16", "int8", "int6", "int4"):
        argv = ["apply", "qwen3_llm", "--trained", "--out", str(root / storage), "--set"]
        argv.append(f"storage={storage}")
        assert main([*argv, "-q"]) == 0
        out[storage] = root / storage
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("storage", "precision"),
    [
        ("fp16", "fp32"),
        ("fp16", "fp16"),
        ("bf16", "fp32"),
        ("int8", "fp32"),
        ("int8", "fp16"),
        ("int6", "fp32"),
        ("int4", "fp32"),
        ("int4", "auto"),
    ],
)
def test_the_trained_llm_passes_its_storages_criteria(
    trained_conversions: dict[str, Path], storage: str, precision: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = _verify(trained_conversions[storage], precision, capsys)
    assert doc["criteria"].startswith(f"{precision} x {storage}:")
    assert code == 0 and doc["passed"], doc["summary"]
    assert not doc["exact"]
    steps = sum(len(t["reference"]) for t in doc["tokens"])
    assert steps == 3 * 32 and all(len(t["kl"]) == len(t["reference"]) for t in doc["tokens"])


#: The random-weight tiny LLM's own figures (docs/precision.md; 0.99980 / 94.8 % / 0.0031 at int8, 0.97527 /
#: 62.5 % / 0.28 at int4, fp32 precision), with a margin: its near-flat logits miss verify's criteria, which
#: are the trained fixture's, so it is held to these as a regression bound for the quantizer and the chains.
RANDOM_LLM_BOUNDS = {"int8": (0.999, 0.85, 0.02), "int4": (0.95, 0.5, 0.5)}


@pytest.fixture(scope="module")
def random_llm_conversions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llm_storages")
    out = {}
    for storage in RANDOM_LLM_BOUNDS:
        _apply("llm-kv-cache.yaml", root / storage, storage)
        out[storage] = root / storage
    return out


@pytest.mark.slow
@pytest.mark.parametrize("storage", sorted(RANDOM_LLM_BOUNDS))
def test_the_random_tiny_llm_stays_within_its_measured_bounds(
    random_llm_conversions: dict[str, Path], storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = _verify(random_llm_conversions[storage], "fp32", capsys)
    cosine, agreement, kl = RANDOM_LLM_BOUNDS[storage]
    s = doc["summary"]
    assert s["mean_cosine"] >= cosine and s["agreement"] >= agreement and s["mean_kl"] <= kl, s
    assert code == (0 if doc["passed"] else 1)


#: The tiny VLMs' own figures at int8 (README table; measured at fp32 precision on x86, at the default block:
#: 128 since 2026-12-04, and block 64's figures lay within these too): mean stage cosine, teacher-forced
#: agreement and mean KL, each with a margin: a worse run is a regression.
VLM_INT8_BOUNDS = {"penguin_vl": (0.85, 0.40, 2.0), "qwen3_vl": (0.96, 0.55, 0.6)}


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(VLM_INT8_BOUNDS))
def test_the_tiny_vlms_int8_conversions_stay_within_their_measured_bounds(
    tmp_path: Path, model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _apply(f"{model}.yaml", tmp_path / model, "int8")
    code, doc = _verify(tmp_path / model, "fp32", capsys)
    cosine, agreement, kl = VLM_INT8_BOUNDS[model]
    s = doc["summary"]
    assert s["mean_cosine"] >= cosine and s["agreement"] >= agreement and s["mean_kl"] <= kl, s
    assert all(not st["error"] and st["nonfinite"] == 0 for st in doc["stages"])
    # every vision stage stays close: the amplification is the random LLM half's
    vision = [st["cosine"] for st in doc["stages"] if "logits" not in st["stage"]]
    assert min(vision) > 0.98
    assert code == (0 if doc["passed"] else 1)


def test_verify_names_the_storage_it_read_from_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from graphsurgeon.verify.conversion_storage import conversion_storage, net_storages

    _apply("llm-kv-cache.yaml", tmp_path / "i6", "int6")
    doc = json.loads((tmp_path / "i6" / "model.json").read_text())
    assert conversion_storage(tmp_path / "i6", doc) == "int6"
    assert net_storages(tmp_path / "i6", doc) == {"decoder": "int6", "lm_head": "int6"}  # embed: a table
    del doc["nets"]["decoder"], doc["nets"]["lm_head"]  # the embed net alone holds fp32
    assert conversion_storage(tmp_path / "i6", doc) == "fp32"
    assert np.isfinite(criteria_for("auto", "int6").min_cosine)
