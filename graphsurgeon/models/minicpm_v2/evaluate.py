"""``gsurg eval``'s way into a MiniCPM-V-2 conversion (``rules/minicpm_v2.yaml``'s nets in the ncnn wheel): a
visual question is asked as a runtime asks it, from the conversion folder's own files. The image goes
through the family's image processor (``processor.preprocess``, bit-exact with the official one) with
``model.json``'s ``image_processor`` slicing settings (LLaVA-UHD: the overview, then the slices of the
grid the image's size gives, if any); the prompt is the official ``chat``'s one user turn, the image's
placeholder (``<image>`` + ``query_num`` x ``<unk>`` + ``</image>`` for the overview, then one
``<slice>`` ... ``</slice>`` around the slices' ones), ``"\\n"``, then the question, then ``<AI>``
(``prompt.chat_prompt``), encoded with the folder's ``tokenizer.json`` (HF tokenizers); every sub-image
runs through the vision, position-table and resampler nets on its own, the features overwrite the image
spans' rows in ``image_processor.slice_order``, and the answer is decoded greedily through the KV-cache
decoder up to an EOS of ``model.json`` (``ncnn_chain.MiniCPMV2Ncnn``), or fed the reference's tokens
(teacher forcing).

An item without an image (a text question) is asked as a text-only prompt (the same turn, no placeholder).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.evaluation.answers import Answer, Question
from graphsurgeon.evaluation.errors import EvalError
from graphsurgeon.evaluation.runner_batch import image_request
from graphsurgeon.formats.model_json import check_model_json
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.ncnn_fp32 import Precision

from .ncnn_chain import FAMILIES, MiniCPMV2Ncnn
from .processor import ProcessedImage, preprocess
from .prompt import chat_prompt
from .slicing import SliceConfig

#: The ``image_processor`` values ``processor.preprocess`` implements (it takes no others).
FIXED_SETTINGS: dict[str, Any] = {
    "slice_mode": True,
    "resample": "bicubic",
    "resize_pass_order": "horizontal-first",
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "do_convert_rgb": True,
}


def slice_config(settings: dict[str, Any], where: str) -> SliceConfig:
    """model.json's ``image_processor`` as the processor's slicing settings; a value the processor does not
    implement is an ``EvalError``."""
    for key, want in FIXED_SETTINGS.items():
        if settings.get(key) != want:
            raise EvalError(f"{where}: image_processor.{key} is {settings.get(key)!r}, not {want!r}")
    if abs(float(settings.get("rescale_factor", 0.0)) * 255.0 - 1.0) > 1e-6:
        raise EvalError(
            f"{where}: image_processor.rescale_factor {settings.get('rescale_factor')!r} is not 1/255"
        )
    return SliceConfig(
        scale_resolution=int(settings["scale_resolution"]),
        max_slice_nums=int(settings["max_slice_nums"]),
        patch_size=int(settings["patch_size"]),
    )


def _tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception for a missing or unreadable file
        raise EvalError(f"{path}: cannot load the tokenizer: {err}") from None


def prompt_ids(tokenizer: Any, question: str, processed: ProcessedImage | None) -> list[int]:
    """The ids of the official chat's one user turn: the image's placeholder (none without an image), then
    the question, then the assistant marker."""
    placeholder = None if processed is None else processed.placeholder
    return [int(t) for t in tokenizer.encode(chat_prompt([("user", question)], placeholder)).ids]


class MiniCPMV2Answerer:
    """The conversion in ``folder``: its nets, its slicing settings and its tokenizer."""

    def __init__(self, folder: Path, doc: dict[str, Any], precision: Precision, threads: int) -> None:
        where = str(folder / "model.json")
        doc = check_model_json(doc, where, FAMILIES, error=EvalError)
        self.slicing = slice_config(doc["image_processor"], where)
        self.query_num = int(doc["resampler"]["query_num"])
        self.tokenizer = _tokenizer(folder / str(doc.get("tokenizer", {}).get("json", "tokenizer.json")))
        try:
            self.chain = MiniCPMV2Ncnn(folder, doc, num_threads=threads, precision=precision)
        except VerifyError as err:
            raise EvalError(str(err)) from None

    def embeddings(self, item: Question) -> tuple[np.ndarray | None, str]:
        """The fused prompt embeddings of ``item`` and "", or None and why they could not be computed."""
        image = getattr(item, "image", None)
        processed = None
        features: list[np.ndarray] = []
        if image is not None:
            try:
                processed = preprocess(image, self.slicing, self.query_num)
            except GsurgError as err:  # the processor's refusals (an empty image, an unconvertible mode)
                return None, f"the processor: {err}"
            for k, pixels in enumerate(processed.pixel_values):
                got = self.chain.encode_image(pixels)
                if got.features is None:
                    part = "the overview" if k == 0 else f"slice {k}"
                    return None, f"{part}: {got.error}"
                features.append(got.features)
            features = self.chain.ordered(features, processed.plan.grid)
        ids = prompt_ids(self.tokenizer, item.question, processed)
        try:
            return self.chain.fuse(ids, features), ""
        except VerifyError as err:
            return None, str(err)

    def answer(self, item: Question, max_tokens: int, forced: Sequence[int] | None = None) -> Answer:
        embeds, error = self.embeddings(item)
        if embeds is None:
            return Answer("", error=error)
        run = self.chain.generate(embeds, max_tokens, forced)
        logits = [] if run.prefill_logits is None else [run.prefill_logits, *run.decode_logits]
        stop = next((k for k, t in enumerate(run.tokens) if t in self.chain.eos_ids), len(run.tokens))
        text = self.tokenizer.decode(run.tokens[:stop], skip_special_tokens=True)
        return Answer(str(text), list(run.tokens), logits, run.error)

    def close(self) -> None:
        self.chain.close()


def open_conversion(
    folder: Path, doc: dict[str, Any], *, precision: Precision, threads: int
) -> MiniCPMV2Answerer:
    return MiniCPMV2Answerer(folder, doc, precision, threads)


def batch_request(item: Question, workdir: Path) -> dict[str, Any]:
    """``gsurg eval --runner``'s request for an item: the question as the prompt, which the runtime's
    minicpm_v2 family wraps in the same chat turn (``family_minicpm_v2_prompt.cpp``: the image's
    placeholder with its slices, ``"\\n"``, the text, ``<AI>``), and the item's image written losslessly
    (PNG) into ``workdir``, named by its pixels' digest (equal images, such as the blank ones of one size,
    share a file). A text question has no image."""
    return image_request(item, workdir)


def reference_answers(
    folder: Path, items: Sequence[Question], max_tokens: int
) -> list[tuple[str, list[int]]]:
    """The oracle the conversions' answers are checked against: each item's greedy answer (text, tokens with
    the EOS kept) from the checkpoint in ``folder`` through the family's fp32 PyTorch reference
    (``model.MiniCPMV2.generate``, KV cache, checked against the official code), one item at a time, its
    inputs made as the official ``chat`` makes them: the checkpoint's slicing settings (``config.json``),
    ``processor.preprocess``, ``prompt.chat_prompt`` encoded with the checkpoint's ``tokenizer.json``. Greedy,
    stopping at the checkpoint's EOS ids. The text is the tokens before the first EOS, decoded without
    special tokens and stripped."""
    import torch

    from .config import load_config
    from .model import load_model

    try:
        cfg = load_config(folder)
        model = load_model(folder)
    except GsurgError as err:
        raise EvalError(str(err)) from None
    tokenizer = _tokenizer(folder / "tokenizer.json")
    eos = set(cfg.eos_token_ids)
    out = []
    with torch.no_grad():
        for item in items:
            image = getattr(item, "image", None)
            processed = None if image is None else preprocess(image, cfg.slicing, cfg.resampler.query_num)
            ids = prompt_ids(tokenizer, item.question, processed)
            pixels = [] if processed is None else list(processed.pixel_values)
            tokens = list(model.generate(ids, pixels, max_tokens).tokens)
            stop = next((k for k, t in enumerate(tokens) if t in eos), len(tokens))
            text = tokenizer.decode(tokens[:stop], skip_special_tokens=True)
            out.append((str(text).strip(), tokens))
    return out
