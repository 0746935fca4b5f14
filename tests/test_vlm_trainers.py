"""The VLM fixtures' trainers (``graphsurgeon/models/{penguin_vl,qwen3_vl,minicpm_v2}/train.py``) on a few
steps:
the folder they write is a checkpoint of the family (its reference loads it), and the trainer's own
batched forward — right-padded batches of one grid, the image rows scattered in by hand for Penguin-VL,
transformers' model with an attention mask and the merger's rows captured for Qwen3-VL, every sub-image
(overview and slices) grouped by patch grid through the ViT and resampler for MiniCPM-V-2 — gives the same
greedy answers as the family's reference (``evaluate.reference_answers``, one item at a time through the
official generate) on that checkpoint. Barely trained weights make each answer an arbitrary token string,
so agreement item by item is a sharp check that training optimises the model the reference runs."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from graphsurgeon.evaluation import vqa  # noqa: E402
from graphsurgeon.evaluation.vqa_training import greedy_answers  # noqa: E402

TINY = {"steps": 2, "eval_every": 2, "eval_items": 7, "chunk": 14, "whiten_items": 14, "batch": 8}
ITEMS = 14  # two of every kind, several image sizes


def _trained(family: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    train = importlib.import_module(f"graphsurgeon.models.{family}.train")
    monkeypatch.setattr(train, "SETTINGS", dict(train.SETTINGS, **TINY))
    monkeypatch.setattr(train, "final_result", lambda answer: {"answers": answer(vqa.eval_items(2))})
    torch.set_num_threads(1)
    record = train.train(folder, "test")
    assert len(record.result["answers"]) == 2  # the reference loaded the folder it wrote
    return train


def _ids(tokens: list[int]) -> str:
    """Tokens as text for ``greedy_answers``' decode: the comparison is of ids, not of their decoding."""
    return " ".join(map(str, tokens))


def _compare(
    train: Any,
    family: str,
    folder: Path,
    next_tokens: Any,
    data: list[Any],
    eos: int,
    items: list[Any] | None = None,
) -> None:
    """The trainer's greedy answers on ``data`` (``next_tokens``: its batched step) against the family
    reference's on ``items`` (default: the first ``ITEMS`` held-out ones), token ids item by item."""
    mine = greedy_answers(next_tokens, _ids, data, eos, train.MAX_ANSWER)
    evaluate = importlib.import_module(f"graphsurgeon.models.{family}.evaluate")
    items = list(vqa.eval_items(ITEMS)) if items is None else items
    want = []
    for _, tokens in evaluate.reference_answers(folder, items, train.MAX_ANSWER):
        want.append(_ids(tokens[: tokens.index(eos)] if eos in tokens else tokens))
    assert mine == want
    assert len(set(want)) > 3  # arbitrary token strings, not one answer repeated


def test_penguin_trainer_forward_answers_as_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "penguin"
    train = _trained("penguin_vl", folder, monkeypatch)
    from tokenizers import Tokenizer

    from graphsurgeon.models.penguin_vl.config import load_files, processor_from_dict
    from graphsurgeon.models.penguin_vl.model import load_model
    from graphsurgeon.models.penguin_vl.tiny_tokenizer import IM_END

    model = load_model(folder, load_files(folder)).eval()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    processor = processor_from_dict(train.checkpoint_preprocessor())
    data = train.samples(tok, processor, vqa.eval_items(ITEMS))
    eos = tok.token_to_id(IM_END)
    assert eos is not None
    _compare(
        train, "penguin_vl", folder, lambda group, seqs: train.next_tokens(model, group, seqs, eos), data, eos
    )


def test_qwen3_vl_trainer_forward_answers_as_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    folder = tmp_path / "qwen3_vl"
    train = _trained("qwen3_vl", folder, monkeypatch)
    from graphsurgeon.models.qwen3_vl.processor import load_processor
    from graphsurgeon.models.qwen3_vl.tiny_tokenizer import ENDOFTEXT, IM_END

    model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32)
    processor = load_processor(folder)
    tok = processor.tokenizer
    data = train.samples(processor, vqa.eval_items(ITEMS))
    eos, pad = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(ENDOFTEXT)
    _compare(
        train,
        "qwen3_vl",
        folder,
        lambda group, seqs: train.next_tokens(model.eval(), group, seqs, pad),
        data,
        eos,
    )


def test_minicpm_v2_trainer_forward_answers_as_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "minicpm_v2"
    train = _trained("minicpm_v2", folder, monkeypatch)
    from tokenizers import Tokenizer

    from graphsurgeon.models.minicpm_v2.config import load_config
    from graphsurgeon.models.minicpm_v2.model import load_model
    from graphsurgeon.models.minicpm_v2.tiny_tokenizer import EOS

    model = load_model(folder)
    cfg = load_config(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    items = [*vqa.eval_items(ITEMS), *vqa.eval_items(21, sizes=vqa.SIZES[2:])]  # every size
    data = train.samples(tok, cfg, items)
    assert {s.item.size for s in data} == set(vqa.SIZES)
    assert {len(train.sub_grids(s, cfg)) for s in data} == {3}  # an overview and two slices each
    eos = tok.token_to_id(EOS)
    assert eos in cfg.eos_token_ids
    _compare(
        train,
        "minicpm_v2",
        folder,
        lambda group, seqs: train.next_tokens(model, group, seqs, eos),
        data,
        eos,
        items,
    )


def test_qwen3_vl_patch_targets_follow_the_processors_patch_order() -> None:
    """The ViT's per-patch targets are put in the order of the processor's pixel rows: an image whose
    16-px patches are each one grey level (their row-major index) comes out of transformers' processor in
    the order ``merge_block_order`` gives, checked also against the order written out by hand."""
    from PIL import Image

    from graphsurgeon.models.qwen3_vl.train import image_processor, merge_block_order

    gh, gw = 4, 6
    levels = (np.arange(gh * gw) * 10).reshape(gh, gw).astype(np.uint8)
    image = Image.fromarray(np.kron(levels, np.ones((16, 16), dtype=np.uint8))).convert("RGB")
    processor = image_processor()
    processor.size = {"shortest_edge": 16 * 16 * gh * gw, "longest_edge": 16 * 16 * gh * gw}
    got = processor(images=[image], return_tensors="np")
    assert [int(v) for v in got["image_grid_thw"][0]] == [1, gh, gw]
    first = got["pixel_values"][:, 0]  # the red channel's first pixel of each patch row
    seen = np.argsort(np.argsort(first))  # the rank of each row's grey level = its row-major index
    want = merge_block_order(np.arange(gh * gw)[:, None], gh, gw)[:, 0]
    assert seen.tolist() == want.tolist()
    assert want[:8].tolist() == [0, 1, 6, 7, 2, 3, 8, 9]


def test_minicpm_v2_region_targets_cut_the_grid_as_the_queries_do() -> None:
    """Query ``k`` of the resampler stands for cell ``k`` of a ``side x side`` cut of the sub-image's patch
    grid; its targets are those of the first patch of the region's most common colour, background when the
    region holds none. A 4x6 grid cut 2x2, written out by hand."""
    from graphsurgeon.evaluation.lm_training import IGNORE
    from graphsurgeon.models.minicpm_v2.train import region_targets

    colours = np.array(
        [
            [0, 3, 3, 0, 0, 0],
            [0, 5, 3, 0, 0, 0],
            [2, 2, 0, 4, 4, 4],
            [2, 0, 0, 4, 4, 1],
        ]
    )
    patches = np.full((24, 5), IGNORE, dtype=np.int64)
    patches[:, 0] = colours.ravel()
    patches[:, 1] = np.arange(24)  # which patch a region's row came from
    got = region_targets(patches, (4, 6), 2)
    assert got[:, 0].tolist() == [3, 0, 2, 4]
    assert got[:, 1].tolist() == [1, IGNORE, 12, 15]  # the first patch of the colour; none: background
    assert (got[1, 2:] == IGNORE).all()
