"""The VLM families' trained fixtures (``graphsurgeon/models/FAMILY/trained``) held to issue 38's bar, and
``gsurg eval`` on their conversions.

Oracle: each family's PyTorch reference (``evaluate.reference_answers``: Penguin-VL's official processor
and ``PenguinVL.generate``; transformers' Qwen3-VL processor and ``generate``; independent of the ncnn
nets) answering the 500 held-out visual questions, whose
right answers come from the scenes Pillow drew (``graphsurgeon.evaluation.vqa``). The fixture must answer
at least 90 % of them, and with every image blanked it must fall to near chance (the image matters); both
figures are the ones its ``training.json`` records. The fp32 conversion must answer as the reference does,
item by item; the quantized conversions are scored against it, and pass ``gsurg verify``'s criteria when
asked about their task (``vqa_cases``)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("pnnx")
pytest.importorskip("tokenizers")

from graphsurgeon.cli import main
from graphsurgeon.evaluation import vqa
from graphsurgeon.evaluation.vqa_cases import verify_arguments
from graphsurgeon.registry import find_family

pytestmark = pytest.mark.usefixtures("shared_exports")

FAMILIES = ["penguin_vl", "qwen3_vl"]  # the VLM families that ship a trained fixture
TOKENS = 4  # two answer words and EOS fit (the trainer's MAX_ANSWER)
LIMIT = 70  # items the ncnn runs answer here: every kind and image size among them


def _accuracy(answers: list[str], items: list[vqa.VqaItem]) -> float:
    return sum(a.split() == i.answer.split() for a, i in zip(answers, items, strict=True)) / len(items)


def _trained(family: str) -> Path:
    folder = find_family(family).trained_checkpoint
    assert folder is not None, f"{family}'s family.yaml names no trained_checkpoint"
    return folder


def _reference(family: str) -> Callable[[Sequence[vqa.VqaItem]], list[str]]:
    module = importlib.import_module(f"graphsurgeon.models.{family}.evaluate")
    return lambda items: [text for text, _ in module.reference_answers(_trained(family), items, TOKENS)]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_fixture_answers_90_percent_and_needs_the_image(family: str) -> None:
    items = list(vqa.eval_items())
    answers = _reference(family)(items)
    blank = _reference(family)([vqa.blank(i) for i in items])
    accuracy, blank_accuracy = _accuracy(answers, items), _accuracy(blank, items)
    chance = vqa.chance_accuracy(items)
    assert len(items) == 500 and accuracy >= 0.9
    assert abs(blank_accuracy - chance) <= 0.1, (blank_accuracy, chance)
    recorded = json.loads((_trained(family) / "training.json").read_text())["result"]
    assert recorded["eval_accuracy"] == pytest.approx(accuracy)
    assert recorded["blank_accuracy"] == pytest.approx(blank_accuracy)
    assert recorded["chance_accuracy"] == pytest.approx(chance)


@pytest.fixture(scope="module", params=FAMILIES)
def conversions(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The family's trained fixture converted at fp32, int8 and int4 (``name`` holds the family)."""
    family = request.param
    root = tmp_path_factory.mktemp(f"eval-trained-{family}")
    out = {"name": root / family}
    for storage in ("fp32", "int8", "int4"):
        folder = root / storage
        argv = ["apply", family, "--trained", "--set", f"storage={storage}", "--out", str(folder), "-q"]
        assert main(argv) == 0
        out[storage] = folder
    return out


def _eval(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> dict[str, Any]:
    argv = ["eval", *args, "--set", name, "--limit", str(LIMIT), "--tokens", str(TOKENS), "--format", "json"]
    assert main(argv) == 0, capsys.readouterr().err
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_the_fp32_conversion_answers_as_the_reference_does(
    conversions: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    items = list(vqa.eval_items(LIMIT))
    want = _reference(conversions["name"].name)(items)
    doc = _eval(capsys, "vqa", str(conversions["fp32"]))
    (row,) = doc["rows"]
    assert row["errors"] == [] and row["correct"] == round(_accuracy(want, items) * LIMIT)
    assert row["accuracy"] >= 0.85  # the fixture's 90 % on all 500, on the first 70
    blank = _eval(capsys, "vqa-blank", str(conversions["fp32"]))["rows"][0]
    assert blank["accuracy"] <= doc["chance_accuracy"] + 0.15


def test_quantized_conversions_are_scored_against_fp32(
    conversions: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fp32 = str(conversions["fp32"])
    doc = _eval(capsys, "vqa", str(conversions["int8"]), str(conversions["int4"]), "--reference", fp32)
    int8, int4 = doc["rows"]
    assert (int8["storage"], int4["storage"]) == ("int8", "int4")
    assert int8["errors"] == [] and int4["errors"] == []
    assert 0.0 < int8["mean_kl"] < int4["mean_kl"]
    assert int8["accuracy"] >= doc["reference_accuracy"] - 0.05


@pytest.mark.parametrize("storage", ["int8", "int4"])
def test_quantized_conversions_pass_verify_asked_about_their_task(
    conversions: dict[str, Path], storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """verify's criteria, set from the trained LLM fixture, hold on the VLM fixtures when the cases are their
    task's (``vqa_cases``): the default cases (corpus photographs, generic prompts) are out of distribution
    for them, near-flat logits where int8 missed the KL bound by a hair (docs/precision.md)."""
    capsys.readouterr()
    argv = ["verify", str(conversions[storage]), *verify_arguments(tmp_path), "--tokens", str(TOKENS)]
    code = main([*argv, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["criteria"].startswith(f"fp32 x {storage}:")
    assert code == 0 and doc["passed"], doc["summary"]
    # every prompt of every image, the first prompt alone (and with two images, where the family takes two)
    assert len(doc["tokens"]) in (5 * 5 + 1, 5 * 5 + 2)
    assert all(not st["error"] and st["nonfinite"] == 0 for st in doc["stages"])
