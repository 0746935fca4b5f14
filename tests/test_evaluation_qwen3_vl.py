"""``gsurg eval`` on Qwen3-VL conversions with the visual question sets (``vqa``, ``vqa-blank``): the family's
evaluator (``graphsurgeon/models/qwen3_vl/evaluate.py``) asks each question as the runtime does, image
through model.json's image processor settings, prompt through the folder's chat template, answer greedily
through the KV-cache decoder (DeepStack features and MRoPE included).

Oracle: transformers' own ``Qwen3VLForConditionalGeneration.generate`` (``evaluate.reference_answers``,
independent of the ncnn nets) answering the same items from the same checkpoint with the checkpoint's
processor. The tiny random-weight checkpoint is used here: its answers are not right, but they are a
specific token sequence each, which the fp32 conversion must reproduce item by item; the C++ runner's
batch mode must reproduce the wheel's (skipped when this checkout's runner is not built:
``tests/runtime_build.py``).

Everything runs on one thread (torch's for the reference, ncnn's for the nets and the runner): on a
two-core machine with another process busy, two OpenMP threads made these tiny nets 60 to 600 times
slower (their threads spin waiting for each other)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("pnnx")
pytest.importorskip("transformers")

from graphsurgeon.cli import main
from graphsurgeon.evaluation import vqa
from graphsurgeon.evaluation.answers import Question
from graphsurgeon.evaluation.runner_batch import RunnerOptions, runner_answers
from graphsurgeon.models.qwen3_vl.evaluate import batch_request, open_conversion, reference_answers
from graphsurgeon.registry import find_family
from tests.runtime_build import fresh_runner
from tests.vqa_batch_checks import check_batch_requests

pytestmark = pytest.mark.usefixtures("shared_exports")

TINY = find_family("qwen3_vl").default_checkpoint
LIMIT = 30  # the first held-out items: every kind and every image size among them
BLANKED = 7  # one item of each kind, for the check that the image is read
TOKENS = 6
THREADS = 1  # see the module docstring


@pytest.fixture(scope="module")
def conversions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval-qwen3-vl")
    out = {}
    for storage in ("fp32", "int8"):
        folder = root / storage
        assert main(["apply", "qwen3_vl", "--set", f"storage={storage}", "--out", str(folder), "-q"]) == 0
        out[storage] = folder
    return out


@pytest.fixture(scope="module")
def items() -> list[vqa.VqaItem]:
    return list(vqa.eval_items(LIMIT))


def _reference(items: Sequence[Question]) -> list[tuple[str, list[int]]]:
    import torch

    assert TINY is not None
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return reference_answers(TINY, items, TOKENS)
    finally:
        torch.set_num_threads(threads)


def _eval(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> dict[str, Any]:
    argv = ["eval", *args, "--set", name, "--limit", str(LIMIT), "--tokens", str(TOKENS), "--format", "json"]
    assert main(argv) == 0, capsys.readouterr().err
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _doc(folder: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((folder / "model.json").read_text())
    return doc


def _wheel(folder: Path, items: Sequence[Question]) -> list[Any]:
    answerer = open_conversion(folder, _doc(folder), precision="fp32", threads=THREADS)
    try:
        return [answerer.answer(item, TOKENS) for item in items]
    finally:
        answerer.close()


def test_the_items_cover_every_kind_and_image_size(items: list[vqa.VqaItem]) -> None:
    assert {i.kind for i in items} == set(vqa.KINDS)
    assert len({i.size for i in items}) >= 5
    assert {i.kind for i in items[:BLANKED]} == set(vqa.KINDS)


def test_fp32_conversion_answers_each_item_as_the_reference_does(
    conversions: dict[str, Path], items: list[vqa.VqaItem]
) -> None:
    want = _reference(items)
    got = _wheel(conversions["fp32"], items)
    assert [a.error for a in got] == [""] * LIMIT
    assert [a.tokens for a in got] == [tokens for _, tokens in want]
    assert [a.text.strip() for a in got] == [text for text, _ in want]
    # the image is read: blanking it changes some answer (random weights, but the features reach the LLM)
    blank = _reference([vqa.blank(i) for i in items[:BLANKED]])
    assert [t for _, t in blank] != [t for _, t in want[:BLANKED]]


def test_a_text_question_is_asked_without_an_image(conversions: dict[str, Path]) -> None:
    from graphsurgeon.evaluation.text_tasks import TextItem

    item = TextItem("what is two plus two?", "four", "sum", ("four",))
    (want,) = _reference([item])
    (got,) = _wheel(conversions["fp32"], [item])
    assert got.error == "" and got.tokens == want[1] and got.text.strip() == want[0]


def test_eval_reports_both_sets_and_scores_int8_against_fp32(
    conversions: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fp32, int8 = str(conversions["fp32"]), str(conversions["int8"])
    doc = _eval(capsys, "vqa", fp32, int8, "--reference", fp32)
    same, quantized = doc["rows"]
    assert same["errors"] == [] and same["forced_steps"] >= LIMIT
    assert same["agreement"] == 1.0 and same["mean_kl"] < 1e-9 and same["same_answers"] == LIMIT
    assert same["same_tokens"] == LIMIT
    assert quantized["storage"] == "int8" and quantized["errors"] == []
    assert quantized["mean_kl"] > 0.0 and quantized["forced_steps"] >= LIMIT
    assert sum(k["items"] for k in quantized["by_kind"].values()) == LIMIT
    assert doc["chance_accuracy"] == pytest.approx(vqa.chance_accuracy(vqa.eval_items(LIMIT)))
    blank = _eval(capsys, "vqa-blank", fp32)
    assert blank["set"] == "vqa-blank" and blank["rows"][0]["errors"] == []


def test_batch_requests_write_each_image_once(tmp_path: Path, items: list[vqa.VqaItem]) -> None:
    check_batch_requests(batch_request, items, tmp_path)


def test_the_wheel_prompt_is_the_runtime_prompt(
    conversions: dict[str, Path], items: list[vqa.VqaItem]
) -> None:
    """The runner builds its prompt in C++ (``family_qwen3_vl_prompt.cpp``: the turn written out, not the
    folder's chat template): the wheel's chat template gives the same text, the image's pads expanded."""
    from graphsurgeon.models.qwen3_vl.evaluate import conversion_processor, prompt_inputs

    folder = conversions["fp32"]
    doc = _doc(folder)
    processor = conversion_processor(folder, doc)
    merge = int(doc["vision"]["merge_size"])
    for item in items[:: len(vqa.KINDS)]:
        inputs = prompt_inputs(processor, item)
        _t, gh, gw = (int(v) for v in inputs["image_grid_thw"][0])
        pads = "<|image_pad|>" * ((gh // merge) * (gw // merge))
        text = f"<|im_start|>user\n<|vision_start|>{pads}<|vision_end|>{item.question}<|im_end|>\n"
        runtime = processor.tokenizer.encode(text + "<|im_start|>assistant\n", add_special_tokens=False)
        assert [int(t) for t in inputs["input_ids"][0]] == runtime


def test_the_runner_answers_each_item_as_the_wheel_does(
    conversions: dict[str, Path], items: list[vqa.VqaItem]
) -> None:
    runner = fresh_runner("gsurg_run")
    folder = conversions["fp32"]
    got = runner_answers(
        folder,
        "qwen3_vl",
        items,
        runner=RunnerOptions(runner),
        precision="fp32",
        threads=THREADS,
        max_tokens=TOKENS,
    )
    want = _wheel(folder, items)
    assert [a.error for a in got] == [""] * LIMIT
    assert [a.tokens for a in got] == [a.tokens for a in want]
