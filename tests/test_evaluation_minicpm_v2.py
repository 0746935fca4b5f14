"""``gsurg eval`` on MiniCPM-V-2 conversions with the visual question sets (``vqa``, ``vqa-blank``): the
family's evaluator (``graphsurgeon/models/minicpm_v2/evaluate.py``) asks each question as the runtime does,
the image through the family's processor with model.json's slicing settings (LLaVA-UHD: an overview, and
slices when the image is large enough), the prompt as the official ``chat`` writes it, the answer greedily
through the KV-cache decoder.

Oracle: the family's fp32 PyTorch reference (``model.py``, checked against the official code in
tests/test_minicpm_v2_reference.py), through ``evaluate.reference_answers``, independent of the ncnn nets,
answering the same items from the same checkpoint. The tiny random-weight checkpoint is used here: its
answers are not right, but they are a specific token sequence each, which the fp32 conversion must reproduce
item by item. The tiny config slices at 448 px (``scale_resolution``): of the vqa sizes only 720x520 slices
(a 2x1 grid), so items at 520x720 (1x2) and 1400x1300 (3x3, nine slices) are added. The C++ runner's batch
mode must reproduce the wheel's answers (skipped when this checkout's runner is not built:
``tests/runtime_build.py``).

Everything runs on one thread (torch's for the reference, ncnn's for the nets and the runner)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("pnnx")

from graphsurgeon.cli import main
from graphsurgeon.evaluation import vqa
from graphsurgeon.evaluation.answers import Question
from graphsurgeon.evaluation.errors import EvalError
from graphsurgeon.evaluation.runner_batch import RunnerOptions, runner_answers
from graphsurgeon.models.minicpm_v2.evaluate import (
    batch_request,
    open_conversion,
    prompt_ids,
    reference_answers,
    slice_config,
)
from graphsurgeon.registry import find_family
from tests.runtime_build import fresh_runner
from tests.vqa_batch_checks import check_batch_requests

pytestmark = pytest.mark.usefixtures("shared_exports")

TINY = find_family("minicpm_v2").default_checkpoint
LIMIT = 30  # the first held-out items: every kind and every vqa size among them
TOKENS = 6
THREADS = 1
#: Extra sizes and the (columns, rows) grid the official slicing gives them at scale_resolution 448,
#: max_slice_nums 9 (the tiny config), worked out by hand from the official get_sliced_grid.
SLICED = {(720, 520): (2, 1), (520, 720): (1, 2), (1400, 1300): (3, 3)}
QUERY_NUM = 4  # the tiny config's


@pytest.fixture(scope="module")
def conversions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval-minicpm-v2")
    out = {}
    for storage in ("fp32", "int8"):
        folder = root / storage
        assert main(["apply", "minicpm_v2", "--set", f"storage={storage}", "--out", str(folder), "-q"]) == 0
        out[storage] = folder
    return out


@pytest.fixture(scope="module")
def items() -> list[vqa.VqaItem]:
    return list(vqa.eval_items(LIMIT))


@pytest.fixture(scope="module")
def sliced() -> list[vqa.VqaItem]:
    """Items of every kind at each size of ``SLICED``."""
    return [item for size in SLICED for item in vqa.eval_items(len(vqa.KINDS), sizes=(size,))]


def _reference(items: Sequence[Question]) -> list[tuple[str, list[int]]]:
    import torch

    assert TINY is not None
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return reference_answers(TINY, items, TOKENS)
    finally:
        torch.set_num_threads(threads)


def _doc(folder: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((folder / "model.json").read_text(encoding="utf-8"))
    return doc


def _wheel(folder: Path, items: Sequence[Question]) -> list[Any]:
    answerer = open_conversion(folder, _doc(folder), precision="fp32", threads=THREADS)
    try:
        return [answerer.answer(item, TOKENS) for item in items]
    finally:
        answerer.close()


def _eval(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> dict[str, Any]:
    argv = ["eval", *args, "--set", name, "--limit", str(LIMIT), "--tokens", str(TOKENS), "--format", "json"]
    assert main(argv) == 0, capsys.readouterr().err
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_the_items_cover_every_kind_and_size_and_some_slice(items: list[vqa.VqaItem]) -> None:
    assert {i.kind for i in items} == set(vqa.KINDS)
    assert len({i.size for i in items}) >= 5
    assert (720, 520) in {i.size for i in items}


def test_fp32_conversion_answers_each_item_as_the_reference_does(
    conversions: dict[str, Path], items: list[vqa.VqaItem], sliced: list[vqa.VqaItem]
) -> None:
    asked = [*items, *sliced]
    want = _reference(asked)
    got = _wheel(conversions["fp32"], asked)
    assert [a.error for a in got] == [""] * len(asked)
    assert [a.tokens for a in got] == [tokens for _, tokens in want]
    assert [a.text.strip() for a in got] == [text for text, _ in want]
    # the image is read: blanking it changes some answer (random weights: on the tiny model only a few of
    # the items' answers depend on the image), and the wheel follows the reference there too
    blanks = [vqa.blank(i) for i in asked]
    blank = _reference(blanks)
    assert [t for _, t in blank] != [t for _, t in want]
    assert [a.tokens for a in _wheel(conversions["fp32"], blanks)] == [t for _, t in blank]


def test_sliced_images_fuse_the_reference_embeddings(
    conversions: dict[str, Path], sliced: list[vqa.VqaItem]
) -> None:
    """Every sub-image's features land on its own span: the wheel's fused prompt embeddings equal the
    reference's (``MiniCPMV2.fuse`` of its resampler outputs) for the sliced sizes."""
    import torch
    from tokenizers import Tokenizer

    from graphsurgeon.models.minicpm_v2.config import load_config
    from graphsurgeon.models.minicpm_v2.model import load_model
    from graphsurgeon.models.minicpm_v2.processor import preprocess

    assert TINY is not None
    cfg, model = load_config(TINY), load_model(TINY)
    tokenizer = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    folder = conversions["fp32"]
    answerer = open_conversion(folder, _doc(folder), precision="fp32", threads=THREADS)
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        for item in sliced[:: len(vqa.KINDS) // 2]:
            processed = preprocess(item.image, cfg.slicing, cfg.resampler.query_num)
            assert processed.plan.grid == SLICED[item.size]
            ids = prompt_ids(tokenizer, item.question, processed)
            with torch.no_grad():
                features = [model.encode_image(p).resampler for p in processed.pixel_values]
                want = model.fuse(ids, features).numpy()
            got, error = answerer.embeddings(item)
            assert error == "" and got is not None and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{item.size}")
    finally:
        torch.set_num_threads(threads)
        answerer.close()


def test_the_prompt_is_the_official_chat_turn(
    conversions: dict[str, Path], sliced: list[vqa.VqaItem]
) -> None:
    """The ids are those of the official chat text, written out here (and in the runtime's
    ``family_minicpm_v2_prompt.cpp``): the overview's span, one ``<slice>`` pair around the slices' spans
    (rows joined by a newline), a newline, the question, ``<AI>``."""
    from tokenizers import Tokenizer

    from graphsurgeon.models.minicpm_v2.processor import preprocess

    folder = conversions["fp32"]
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    doc = _doc(folder)
    settings = slice_config(doc["image_processor"], "model.json")
    image_start = int(doc["tokens"]["image_start"])
    assert tokenizer.token_to_id("<image>") == image_start
    one = "<image>" + "<unk>" * QUERY_NUM + "</image>"
    for item in sliced[:: len(vqa.KINDS)]:
        cols, rows = SLICED[item.size]
        slices = "<slice>" + "\n".join([one * cols] * rows) + "</slice>"
        text = f"<用户>{one}{slices}\n{item.question}<AI>"
        got = prompt_ids(tokenizer, item.question, preprocess(item.image, settings, QUERY_NUM))
        assert got == tokenizer.encode(text).ids
        assert got.count(image_start) == 1 + cols * rows
    plain = vqa.eval_items(1, sizes=((224, 224),))[0]
    got = prompt_ids(tokenizer, plain.question, preprocess(plain.image, settings, QUERY_NUM))
    assert got == tokenizer.encode("<用户>" + one + "\n" + plain.question + "<AI>").ids
    assert prompt_ids(tokenizer, "hi?", None) == tokenizer.encode("<用户>hi?<AI>").ids


def test_settings_the_processor_does_not_implement_are_refused(conversions: dict[str, Path]) -> None:
    settings = _doc(conversions["fp32"])["image_processor"]
    assert slice_config(settings, "m").scale_resolution == settings["scale_resolution"]
    for key, value in (("resample", "bilinear"), ("slice_mode", False), ("image_mean", [0.0, 0.0, 0.0])):
        with pytest.raises(EvalError, match=key):
            slice_config({**settings, key: value}, "m")


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
    assert 0.0 <= quantized["agreement"] <= 1.0 and 0.0 <= quantized["accuracy"] <= 1.0
    assert quantized["mean_kl"] > 0.0 and quantized["forced_steps"] >= LIMIT
    assert sum(k["items"] for k in quantized["by_kind"].values()) == LIMIT
    assert doc["chance_accuracy"] == pytest.approx(vqa.chance_accuracy(vqa.eval_items(LIMIT)))
    blank = _eval(capsys, "vqa-blank", fp32)
    assert blank["set"] == "vqa-blank" and blank["rows"][0]["errors"] == []


def test_batch_requests_write_each_image_once(tmp_path: Path, items: list[vqa.VqaItem]) -> None:
    check_batch_requests(batch_request, items, tmp_path)


def test_the_runner_answers_each_item_as_the_wheel_does(
    conversions: dict[str, Path], items: list[vqa.VqaItem], sliced: list[vqa.VqaItem]
) -> None:
    runner = fresh_runner("gsurg_run")
    folder = conversions["fp32"]
    asked = [*items, *sliced]
    got = runner_answers(
        folder,
        "minicpm_v2",
        asked,
        runner=RunnerOptions(runner),
        precision="fp32",
        threads=THREADS,
        max_tokens=TOKENS,
    )
    want = _wheel(folder, asked)
    assert [a.error for a in got] == [""] * len(asked)
    assert [a.tokens for a in got] == [a.tokens for a in want]
