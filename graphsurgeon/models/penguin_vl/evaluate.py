"""``gsurg eval``'s way into a Penguin-VL conversion (``rules/penguin_vl.yaml``'s six nets in the ncnn wheel):
a visual question is asked as a runtime asks it, from the conversion folder's own files. The image goes
through the official processor with ``model.json``'s ``image_processor`` (resize to patch multiples, Pillow
bicubic, normalise, patches in raster order); the prompt is the chat template with one ``<image>`` token
per patch then the question (``processor.user_prompt``), tokenized with the folder's ``tokenizer.json``;
the patches run through the three vision nets, their features overwrite the ``<image>`` rows of the
embedded prompt, and the answer is decoded greedily through the KV-cache decoder up to an EOS of
``model.json`` (``ncnn_chain.PenguinNcnn``), or fed the reference's tokens (teacher forcing).

An item without an image (a text question) is asked as a text-only prompt.
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
from graphsurgeon.verify.ncnn_fp32 import Precision

from .config import IMAGE_TOKEN, processor_from_dict
from .ncnn_chain import PenguinNcnn
from .processor import preprocess, user_prompt


class PenguinAnswerer:
    """The conversion in ``folder``: its nets, its image processor settings and its tokenizer."""

    def __init__(self, folder: Path, doc: dict[str, Any], precision: Precision, threads: int) -> None:
        from tokenizers import Tokenizer

        path = folder / str(doc.get("tokenizer", {}).get("json", "tokenizer.json"))
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
            self.processor = processor_from_dict(doc.get("image_processor") or {}, f"{folder}/model.json")
        except GsurgError as err:
            raise EvalError(str(err)) from None
        except Exception as err:  # tokenizers raises a bare Exception for an unreadable file
            raise EvalError(f"{path}: cannot load the tokenizer: {err}") from None
        self.chain = PenguinNcnn(folder, doc, num_threads=threads, precision=precision)

    def embeddings(self, item: Question) -> tuple[np.ndarray | None, str]:
        """The fused prompt embeddings of ``item`` and "", or None and why ncnn could not compute the
        image's features."""
        image = getattr(item, "image", None)
        grids: list[tuple[int, int]] = []
        features: list[np.ndarray] = []
        if image is not None:
            processed = preprocess(image, self.processor)
            vision = self.chain.encode_image(processed.pixel_values, processed.grid)
            if vision.projector is None:
                return None, vision.error
            grids, features = [processed.grid], [vision.projector]
        ids = self.tokenizer.encode(user_prompt(item.question, grids, IMAGE_TOKEN)).ids
        return self.chain.fuse(ids, features), ""

    def answer(self, item: Question, max_tokens: int, forced: Sequence[int] | None = None) -> Answer:
        embeds, error = self.embeddings(item)
        if embeds is None:
            return Answer("", error=error)
        run = self.chain.generate(embeds, max_tokens, forced)
        logits = [] if run.prefill_logits is None else [run.prefill_logits, *run.decode_logits]
        stop = next((k for k, t in enumerate(run.tokens) if t in self.chain.eos_ids), len(run.tokens))
        text = self.tokenizer.decode(run.tokens[:stop], skip_special_tokens=True)
        return Answer(text, list(run.tokens), logits, run.error)

    def close(self) -> None:
        self.chain.close()


def open_conversion(
    folder: Path, doc: dict[str, Any], *, precision: Precision, threads: int
) -> PenguinAnswerer:
    return PenguinAnswerer(folder, doc, precision, threads)


def batch_request(item: Question, workdir: Path) -> dict[str, Any]:
    """``gsurg eval --runner``'s request for an item: the question as the prompt, which the runtime's
    penguin_vl family wraps in the same chat template with one ``<image>`` per patch, and the item's image
    written losslessly (PNG) into ``workdir``, named by its pixels' digest (equal images, such as the blank
    ones of one size, share a file). A text question has no image."""
    return image_request(item, workdir)


def reference_answers(
    folder: Path, items: Sequence[Question], max_tokens: int
) -> list[tuple[str, list[int]]]:
    """The oracle the conversions' answers are checked against: each item's greedy answer (text, tokens with
    the EOS kept) from the checkpoint in ``folder`` through the family's PyTorch reference, one item at a
    time: the official processor (``preprocess``, ``prompt_ids``) and ``PenguinVL.generate`` (KV cache).
    The text is the tokens before the first EOS, decoded without special tokens and stripped."""
    import torch

    from .config import load_files
    from .model import load_model
    from .processor import PenguinTokenizer, prompt_ids

    files = load_files(folder)
    model = load_model(folder, files)
    tokenizer = PenguinTokenizer(files)
    eos = set(files.config.eos_token_ids)
    out = []
    with torch.no_grad():
        for item in items:
            image = getattr(item, "image", None)
            processed = [] if image is None else [preprocess(image, files.processor)]
            ids = prompt_ids(tokenizer, item.question, processed)
            pixels = [(torch.from_numpy(p.pixel_values), p.grid) for p in processed]
            tokens = list(model.generate(ids, pixels, max_tokens).tokens)
            stop = next((k for k, t in enumerate(tokens) if t in eos), len(tokens))
            text = tokenizer.backend.decode(tokens[:stop], skip_special_tokens=True)
            out.append((str(text).strip(), tokens))
    return out
