"""The verifier ``gsurg verify`` calls for a folder ``rules/minicpm_v2.yaml`` wrote: the converted nets in the
ncnn wheel (fp32 options, ``ncnn_chain.MiniCPMV2Ncnn``) against the family's reference (``model.py``, checked
against the official code: README), stage by stage, then greedy tokens.

Stages, per image (the overview and every slice, each on its own): block 0's input (the patch embedding
plus the resampled position table), every ViT block's output (the ncnn side reads them from the vision
net's residual stream), the final norm's output and the resampler's. Per case: the fused prompt
embeddings, the prefill logits (last prompt position) and every decode step's logits, the ncnn side fed
the reference's tokens (teacher forcing). Each ncnn net is fed what the ncnn nets before it computed.

Both sides get the same inputs: the family's image processor (``processor.preprocess``, bit-exact with the
official one) gives the pixels and the slice grid, and the prompt text of the official ``chat``
(``prompt.chat_prompt``) is encoded with the checkpoint's ``tokenizer.json`` (HF tokenizers; the official
slow tokenizer gives the same ids on the family's tests). Two images in one prompt: their placeholders one
after the other, before the question.

Cases: every prompt with every image, the first prompt with the first two images together, and the first
prompt with no image. Without ``--image``: crops of the corpus images (``../shared/corpus/images``) at sizes
the official slicing gives no slices, a 2x2 grid and a 3x3 grid (nine slices), or generated images of those
sizes. The reference runs first and is released before the ncnn nets load.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphsurgeon.formats.model_json import check_model_json
from graphsurgeon.models.common.verify_stages import (
    TEACHER_FORCED,
    chained_stages,
    compare_sized,
    corpus_images,
    generated_image,
    generation_stages,
    say,
)
from graphsurgeon.models.common.verify_stages import Expected as SharedExpected
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.report import TokenResult, VerifyReport, failed
from graphsurgeon.verify.run import VerifyOptions

from .ncnn_chain import FAMILIES, ImageResult, MiniCPMV2Ncnn, vision_stage_names
from .processor import ProcessedImage, preprocess
from .prompt import chat_prompt

if TYPE_CHECKING:
    from PIL import Image as PILImage

    from .model import MiniCPMV2

DEFAULT_PROMPTS = ("Describe the image.", "What is written on it?", "这是什么颜色？")
#: (width, height) of the default images: the official slicing gives none, 2x2 and 3x3 slices.
IMAGE_SIZES = ((300, 200), (800, 600), (1400, 1300))
TOKENIZER = "tokenizer.json"


@dataclass(frozen=True)
class Case:
    label: str
    prompt: int
    images: tuple[int, ...]


@dataclass
class Image:
    name: str
    processed: ProcessedImage

    @property
    def label(self) -> str:
        grid = self.processed.plan.grid
        return f"{self.name} ({'no slices' if grid is None else f'{grid[0]}x{grid[1]} slices'})"


@dataclass
class Expected(SharedExpected):
    """Per image, per sub-image (overview then slices), the vision stages; per case, the prompt ids."""

    images: list[list[list[np.ndarray]]] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)


def default_images() -> list[tuple[str, PILImage.Image]]:
    """Corpus images resized (bicubic) to ``IMAGE_SIZES``, else generated ones of those sizes."""
    from PIL import Image as PIL

    files = corpus_images()
    out = []
    for k, (w, h) in enumerate(IMAGE_SIZES):
        if k < len(files):
            with PIL.open(files[k]) as img:
                out.append(
                    (f"{files[k].name} at {w}x{h}", img.convert("RGB").resize((w, h), PIL.Resampling.BICUBIC))
                )
        else:
            out.append((f"generated {w}x{h}", generated_image(w, h, k)))
    return out


def _cases(prompts: Sequence[str], images: Sequence[Image]) -> list[Case]:
    cases = [
        Case(f"prompt {p + 1} + {img.label}", p, (i,))
        for p in range(len(prompts))
        for i, img in enumerate(images)
    ]
    if len(images) >= 2:
        cases.append(Case("prompt 1 + images 1 and 2", 0, (0, 1)))
    return [*cases, Case("prompt 1, text only", 0, ())]


def _encoder(checkpoint: Path) -> Any:
    from tokenizers import Tokenizer

    path = checkpoint / TOKENIZER
    if not path.is_file():
        raise VerifyError(f"{path}: no such file (the verifier encodes the prompts with it)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:
        raise VerifyError(f"{path}: HF tokenizers cannot read it: {err}") from None


def prompt_ids(tokenizer: Any, question: str, images: Sequence[Image]) -> list[int]:
    """The official chat text of one user turn with ``images`` (their placeholders in order), encoded."""
    placeholder = "".join(img.processed.placeholder for img in images) if images else None
    return [int(t) for t in tokenizer.encode(chat_prompt([("user", question)], placeholder)).ids]


def _prepare(options: VerifyOptions, query_num: int) -> tuple[Any, list[str], list[Image]]:
    from PIL import Image as PIL

    from .config import load_config

    assert options.checkpoint is not None
    cfg = load_config(options.checkpoint)
    prompts = list(options.prompts) or list(DEFAULT_PROMPTS)
    if any(not p.strip() for p in prompts):
        raise VerifyError("a prompt is empty")
    sources = []
    for path in options.images:
        if not path.is_file():
            raise VerifyError(f"{path}: no such image")
        with PIL.open(path) as img:
            sources.append((path.name, img.convert("RGB")))
    sources = sources or default_images()
    images = [Image(name, preprocess(picture, cfg.slicing, query_num, name)) for name, picture in sources]
    return _encoder(options.checkpoint), prompts, images


def _vision_stages(model: MiniCPMV2, pixels: np.ndarray) -> list[np.ndarray]:
    """One image through the reference's vision half: block 0's input, every block's output (read with
    forward hooks), the final norm's output and the resampler's, each ``[rows, width]``."""
    seen: dict[str, Any] = {}

    def block_input(_m: Any, args: Any) -> None:
        seen.setdefault("in", args[0])

    def block_output(i: int) -> Any:
        return lambda _m, _a, out: seen.__setitem__(f"b{i}", out)

    blocks = model.vpm.blocks
    handles = [blocks[0].register_forward_pre_hook(block_input)]
    handles += [block.register_forward_hook(block_output(i)) for i, block in enumerate(blocks)]
    try:
        stages = model.encode_image(pixels)
    finally:
        for h in handles:
            h.remove()
    values = [seen["in"], *(seen[f"b{i}"] for i in range(len(blocks))), stages.vision, stages.resampler]
    return [v.reshape(-1, v.shape[-1]).numpy().astype(np.float32) for v in values]


def _reference(
    tokenizer: Any,
    prompts: Sequence[str],
    images: Sequence[Image],
    cases: Sequence[Case],
    options: VerifyOptions,
) -> Expected:
    import torch

    from .model import load_model

    assert options.checkpoint is not None
    model = load_model(options.checkpoint)
    want = Expected()
    with torch.no_grad():
        for k, img in enumerate(images):
            say(options, f"reference: image {k + 1} of {len(images)} ({img.label})")
            want.images.append([_vision_stages(model, pixels) for pixels in img.processed.pixel_values])
        for k, case in enumerate(cases):
            say(options, f"reference: generate, case {k + 1} of {len(cases)} ({case.label})")
            chosen = [images[i] for i in case.images]
            ids = prompt_ids(tokenizer, prompts[case.prompt], chosen)
            pixels = [p for img in chosen for p in img.processed.pixel_values]
            trace = model.generate(ids, pixels, options.tokens)
            want.ids.append(ids)
            want.embeddings.append(trace.embeddings.numpy().astype(np.float32))
            want.prefill.append(trace.prefill_logits[-1].numpy().astype(np.float32))
            want.decode.append([x.numpy().astype(np.float32) for x in trace.decode_logits])
            want.tokens.append(list(trace.tokens))
            want.text.append(tokenizer.decode(trace.tokens))
    del model
    gc.collect()
    return want


def _vision(
    nets: MiniCPMV2Ncnn, images: Sequence[Image], want: Expected, report: VerifyReport, options: VerifyOptions
) -> list[list[ImageResult]]:
    names = vision_stage_names(nets.layers)
    results = []
    for k, (img, ref) in enumerate(zip(images, want.images, strict=True)):
        say(options, f"ncnn: image {k + 1} of {len(images)} ({img.label})")
        ours = []
        for j, (pixels, expected) in enumerate(zip(img.processed.pixel_values, ref, strict=True)):
            got = nets.encode_image(pixels)
            part = "overview" if j == 0 else f"slice {j}"
            chained_stages(report, f"{img.label}, {part}", names, got.values, got.error, expected)
            ours.append(got)
        results.append(ours)
    return results


def _case(
    nets: MiniCPMV2Ncnn,
    case: Case,
    images: Sequence[Image],
    vision: Sequence[Sequence[ImageResult]],
    want: Expected,
    k: int,
    report: VerifyReport,
    options: VerifyOptions,
) -> None:
    stage = f"{case.label}: fused embeddings"
    features = []
    for i in case.images:
        per_image = [r.features for r in vision[i]]
        if any(f is None for f in per_image):
            report.stages.append(failed(stage, f"image {i + 1}'s vision stages failed"))
            report.tokens.append(TokenResult(case.label, [], want.tokens[k], want.text[k]))
            return
        features += nets.ordered([f for f in per_image if f is not None], images[i].processed.plan.grid)
    try:
        embeds = nets.fuse(want.ids[k], features)
    except VerifyError as err:
        report.stages.append(failed(stage, str(err)))
        report.tokens.append(TokenResult(case.label, [], want.tokens[k], want.text[k]))
        return
    report.stages.append(compare_sized(stage, embeds, want.embeddings[k]))
    gen = nets.generate(embeds, options.tokens, forced=want.tokens[k])
    generation_stages(report, case.label, gen, want.prefill[k], want.decode[k], want.tokens[k], want.text[k])


def verify(folder: Path, model_json: dict[str, Any], options: VerifyOptions) -> VerifyReport:
    if options.checkpoint is None:
        raise VerifyError("the minicpm_v2 verifier needs the reference checkpoint (--checkpoint DIR)")
    if options.tokens < 1:
        raise VerifyError(f"--tokens must be at least 1, not {options.tokens}")
    # the family's schema first: a model.json outside the contract is refused before the reference runs
    check_model_json(model_json, str(folder / "model.json"), FAMILIES, error=VerifyError)
    import torch

    torch.set_num_threads(options.threads)
    tokenizer, prompts, images = _prepare(options, int(model_json["resampler"]["query_num"]))
    cases = _cases(prompts, images)
    want = _reference(tokenizer, prompts, images, cases, options)
    report = VerifyReport(str(folder))
    with MiniCPMV2Ncnn(folder, model_json, num_threads=options.threads, precision=options.precision) as nets:
        vision = _vision(nets, images, want, report, options)
        for k, case in enumerate(cases):
            say(options, f"ncnn: greedy decoding, case {k + 1} of {len(cases)} ({case.label})")
            _case(nets, case, images, vision, want, k, report, options)
    for p, text in enumerate(prompts):
        report.notes.append(f"prompt {p + 1}: {text!r}")
    reference = f"{options.checkpoint} (graphsurgeon.models.minicpm_v2, fp32, CPU)"
    report.notes.append(f"reference: {reference}; ncnn at {options.precision}")
    report.notes.append(TEACHER_FORCED)
    return report
