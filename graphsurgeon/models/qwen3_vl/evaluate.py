"""``gsurg eval``'s way into a Qwen3-VL conversion (``rules/qwen3_vl.yaml``'s nets in the ncnn wheel): a
visual question is asked as a runtime asks it, from the conversion folder's own files. The image goes
through transformers' ``Qwen2VLImageProcessorPil`` with ``model.json``'s ``image_processor`` settings (the
ones the C++ runtime reads: smart_resize budget and factor, Pillow bicubic, rescale and normalise, patches
in merge-block order); the prompt is one user turn, the image then the question, with the generation
prompt, rendered by the folder's chat template (``tokenizer.chat_template``) and tokenized with its
tokenizer, every ``<|image_pad|>`` expanded to the image's merged rows (``processor.ImageTextProcessor``);
the patches run through the vision nets, the merger rows overwrite the pads' embeddings and the DeepStack
features go on the same rows, and the answer is decoded greedily through the KV-cache decoder up to an EOS
of ``model.json`` (``ncnn_chain.Qwen3VLNcnn``), or fed the reference's tokens (teacher forcing).

An item without an image (a text question) is asked as a text-only prompt (the same turn, no image part).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphsurgeon.errors import GsurgError
from graphsurgeon.evaluation.answers import Answer, Question
from graphsurgeon.evaluation.errors import EvalError
from graphsurgeon.evaluation.runner_batch import image_request
from graphsurgeon.formats.model_json import check_model_json
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.ncnn_fp32 import Precision

from .ncnn_chain import FAMILIES, Qwen3VLNcnn, VisionResult

#: model.json ``tokenizer`` keys and the names transformers' ``from_pretrained`` looks for.
TOKENIZER_FILES = {"json": "tokenizer.json", "config": "tokenizer_config.json"}


def image_processor(settings: dict[str, Any], where: str) -> Any:
    """``Qwen2VLImageProcessorPil`` with model.json's ``image_processor`` settings (the schema's keys)."""
    from PIL import Image
    from transformers import Qwen2VLImageProcessorPil

    if settings.get("resample") != "bicubic":
        raise EvalError(f"{where}: image_processor.resample {settings.get('resample')!r} is not 'bicubic'")
    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": int(settings["min_pixels"]), "longest_edge": int(settings["max_pixels"])},
        patch_size=int(settings["patch_size"]),
        temporal_patch_size=int(settings["temporal_patch_size"]),
        merge_size=int(settings["merge_size"]),
        image_mean=[float(v) for v in settings["image_mean"]],
        image_std=[float(v) for v in settings["image_std"]],
        rescale_factor=float(settings["rescale_factor"]),
        do_convert_rgb=bool(settings["do_convert_rgb"]),
        resample=Image.Resampling.BICUBIC,
    )


def _tokenizer(folder: Path, names: dict[str, Any]) -> Any:
    """The folder's tokenizer, from the files model.json ``tokenizer`` names (copied under the names
    ``from_pretrained`` reads when they are others)."""
    from transformers import AutoTokenizer

    files = {key: folder / str(names.get(key, default)) for key, default in TOKENIZER_FILES.items()}
    for path in files.values():
        if not path.is_file():
            raise EvalError(f"{path}: no such file (model.json tokenizer names it)")
    if all(
        files[key].name == default and files[key].parent == folder for key, default in TOKENIZER_FILES.items()
    ):
        return AutoTokenizer.from_pretrained(str(folder))
    with tempfile.TemporaryDirectory(prefix="gsurg-tokenizer-") as tmp:
        for key, default in TOKENIZER_FILES.items():
            shutil.copyfile(files[key], Path(tmp) / default)
        return AutoTokenizer.from_pretrained(tmp)


def _chat_template(folder: Path, names: dict[str, Any]) -> str:
    path = folder / str(names.get("chat_template", "chat_template.jinja"))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise EvalError(
            f"{path}: cannot read the chat template (model.json tokenizer.chat_template): {err}"
        ) from None
    if not text.strip():
        raise EvalError(f"{path}: the chat template is empty")
    return text


def conversion_processor(folder: Path, doc: dict[str, Any]) -> Any:
    """The processor a runtime's prompt is built with: model.json's image processor settings, the folder's
    tokenizer and chat template (``processor.ImageTextProcessor``)."""
    from .processor import ImageTextProcessor

    where = f"{folder}/model.json"
    names = doc.get("tokenizer") or {}
    try:
        tokenizer = _tokenizer(folder, names)
    except GsurgError:
        raise
    except Exception as err:  # transformers raises whatever its parsers raise for an unreadable file
        raise EvalError(f"{folder}: cannot load the tokenizer: {err}") from None
    return ImageTextProcessor(
        image_processor(doc["image_processor"], where), tokenizer, chat_template=_chat_template(folder, names)
    )


def prompt_inputs(processor: Any, item: Question) -> dict[str, Any]:
    """``input_ids`` and, with an image, ``pixel_values`` and ``image_grid_thw`` (numpy) of one user turn:
    the item's image, if any, then its question, then the generation prompt."""
    from .processor import user_turn

    image = getattr(item, "image", None)
    images = [] if image is None else [image]
    text = processor.apply_chat_template(user_turn(len(images), item.question), add_generation_prompt=True)
    got = processor(text=[text], images=images or None, return_tensors="np")
    return dict(got)


class Qwen3VLAnswerer:
    """The conversion in ``folder``: its nets, its image processor settings, tokenizer and chat template."""

    def __init__(self, folder: Path, doc: dict[str, Any], precision: Precision, threads: int) -> None:
        where = str(folder / "model.json")
        doc = check_model_json(doc, where, FAMILIES, error=EvalError)
        self.max_aspect_ratio = float(doc["image_processor"]["max_aspect_ratio"])
        self.processor = conversion_processor(folder, doc)
        try:
            self.chain = Qwen3VLNcnn(folder, doc, num_threads=threads, precision=precision)
        except VerifyError as err:
            raise EvalError(str(err)) from None

    def answer(self, item: Question, max_tokens: int, forced: Sequence[int] | None = None) -> Answer:
        image = getattr(item, "image", None)
        if image is not None:
            ratio = max(image.size) / max(1, min(image.size))
            if ratio > self.max_aspect_ratio:
                return Answer(
                    "",
                    error=f"an image of {image.size[0]}x{image.size[1]} has aspect ratio "
                    f"{ratio:g}, above image_processor.max_aspect_ratio {self.max_aspect_ratio:g}",
                )
        try:
            inputs = prompt_inputs(self.processor, item)
        except ValueError as err:  # the image processor's refusals
            return Answer("", error=f"the processor: {err}")
        ids = [int(t) for t in inputs["input_ids"][0]]
        grids: list[tuple[int, int]] = []
        images: list[VisionResult] = []
        if image is not None:
            _t, gh, gw = (int(v) for v in inputs["image_grid_thw"][0])
            vision = self.chain.encode_image(inputs["pixel_values"].astype("float32"), (gh, gw))
            if vision.merger is None:
                return Answer("", error=vision.error)
            grids, images = [(gh, gw)], [vision]
        try:
            segments = self.chain.segments(ids, grids)
            embeds, deepstack = self.chain.fuse(ids, images)
        except VerifyError as err:
            return Answer("", error=str(err))
        run = self.chain.generate(embeds, deepstack, segments, max_tokens, forced)
        logits = [] if run.prefill_logits is None else [run.prefill_logits, *run.decode_logits]
        stop = next((k for k, t in enumerate(run.tokens) if t in self.chain.eos_ids), len(run.tokens))
        text = self.processor.tokenizer.decode(run.tokens[:stop], skip_special_tokens=True)
        return Answer(str(text), list(run.tokens), logits, run.error)

    def close(self) -> None:
        self.chain.close()


def open_conversion(
    folder: Path, doc: dict[str, Any], *, precision: Precision, threads: int
) -> Qwen3VLAnswerer:
    return Qwen3VLAnswerer(folder, doc, precision, threads)


def batch_request(item: Question, workdir: Path) -> dict[str, Any]:
    """``gsurg eval --runner``'s request for an item: the question as the prompt, which the runtime's
    qwen3_vl family wraps in Qwen3-VL's chat turn (``<|vision_start|>``, the image's pads,
    ``<|vision_end|>``, then the text), and the item's image written losslessly (PNG) into ``workdir``,
    named by its pixels' digest (equal images, such as the blank ones of one size, share a file). A text
    question has no image."""
    return image_request(item, workdir)


def reference_answers(
    folder: Path, items: Sequence[Question], max_tokens: int
) -> list[tuple[str, list[int]]]:
    """The oracle the conversions' answers are checked against: each item's greedy answer (text, tokens with
    the EOS kept) from the checkpoint in ``folder`` through transformers' own
    ``Qwen3VLForConditionalGeneration.generate`` (fp32, CPU, KV cache), one item at a time, its inputs from
    the checkpoint's processor (``processor.load_processor``) for the same user turn. Greedy with no other
    logits processor, stopping at the checkpoint's EOS ids (``config.load_config``), whatever its
    ``generation_config.json`` says about sampling. The text is the tokens before the first EOS, decoded
    without special tokens and stripped."""
    import torch
    import transformers

    from .config import load_config
    from .processor import chat_inputs, load_processor

    try:
        eos = list(load_config(folder).eos_ids)
        processor = load_processor(folder)
    except GsurgError as err:
        raise EvalError(str(err)) from None
    model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32)
    model.eval()
    pad = eos[0] if eos else processor.tokenizer.pad_token_id
    config = transformers.GenerationConfig(
        max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos or None, pad_token_id=pad
    )
    out = []
    with torch.no_grad():
        for item in items:
            image = getattr(item, "image", None)
            inputs = chat_inputs(processor, [] if image is None else [image], item.question)
            model.model.rope_deltas = None  # the MRoPE offset of the previous prompt
            sequences = model.generate(**inputs, generation_config=config)
            length = int(inputs["input_ids"].shape[1])
            tokens = [int(t) for t in sequences[0, length:]]
            stop = next((k for k, t in enumerate(tokens) if t in eos), len(tokens))
            answer = processor.tokenizer.decode(tokens[:stop], skip_special_tokens=True)
            out.append((str(answer).strip(), tokens))
    return out
