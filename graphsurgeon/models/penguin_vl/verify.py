"""The verifier ``gsurg verify`` calls for a folder ``rules/penguin_vl.yaml`` wrote: the six converted nets in
the ncnn wheel (fp32 options, ``ncnn_chain.PenguinNcnn``) against the fp32 PyTorch reference
(``model.PenguinVL``), stage by stage, per (prompt, image) case, then greedy tokens side by side.

Stages, per image: patch embed, the output of each encoder layer, the encoder output (after the final
norm), the projector; per case: the fused prompt embeddings, the prefill logits (last prompt position) and
the logits of every decode step whose input tokens agree on both sides. Each ncnn net is fed what the ncnn
nets before it computed, so an error shows in the first stage it enters and carries on from there.

Both sides get the same inputs: the image processor's patches and the prompt's token ids from the
reference checkpoint's own files. What a runtime computes between the nets (the vision RoPE tables for the
grid, the fused embeddings, the decoder's cos/sin and mask, the EOS test) comes from ``model.json``
(``ncnn_chain``), never from the reference's code.

Cases: every prompt with every image, then the first prompt with no image. Without ``--prompt``: three
fixed prompts; without ``--image``: the first two non-square images of different sizes in
``../shared/corpus/images`` beside the repository, or, when that folder is absent, two non-square images
this module generates (deterministic). The reference runs first and is released before the ncnn nets
load, so the two never hold memory together.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphsurgeon.models.common.verify_stages import (
    TEACHER_FORCED,
    Expected,
    chained_stages,
    compare_sized,
    corpus_images,
    generation_stages,
    say,
)
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.report import TokenResult, VerifyReport, failed
from graphsurgeon.verify.run import VerifyOptions

from .config import load_files
from .ncnn_chain import PenguinNcnn, vision_stage_names
from .processor import PenguinTokenizer, ProcessedImage, open_image, preprocess, prompt_ids

if TYPE_CHECKING:
    from PIL import Image as PILImage

DEFAULT_PROMPTS = (
    "Describe the image.",
    "What month is printed at the top?",
    "How many people are in the picture?",
)
GENERATED_SIZES = ((300, 200), (190, 260))  # (width, height) of the fallback images: non-square, different


@dataclass(frozen=True)
class Case:
    label: str
    prompt: int  # index into the prompts
    image: int | None  # index into the images


def generated_images() -> list[tuple[str, PILImage.Image]]:
    """Two deterministic non-square RGB images of different sizes: smooth gradients with a seeded noise
    texture, so every patch differs."""
    from PIL import Image

    out = []
    for k, (w, h) in enumerate(GENERATED_SIZES):
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        noise = np.random.default_rng(k).integers(0, 64, size=(h, w, 3))
        base = np.stack([255 * x / w, 255 * y / h, 127.5 * (1 + np.sin((x + 2 * y) / 17.0))], axis=-1)
        pixels = np.clip(base * 0.75 + noise, 0, 255).astype(np.uint8)
        out.append((f"generated {w}x{h}", Image.fromarray(pixels, "RGB")))
    return out


def default_images() -> list[tuple[str, PILImage.Image]]:
    """The first two non-square corpus images (by name) of different sizes, else ``generated_images``."""
    chosen: list[tuple[str, PILImage.Image]] = []
    for path in corpus_images():
        img = open_image(path)
        if img.width != img.height and all(img.size != c.size for _, c in chosen):
            chosen.append((path.name, img))
        if len(chosen) == 2:
            return chosen
    return generated_images()


def _cases(prompts: Sequence[str], images: Sequence[tuple[str, ProcessedImage]]) -> list[Case]:
    cases = [
        Case(f"prompt {p + 1} + {name} ({img.grid[0]}x{img.grid[1]})", p, i)
        for p in range(len(prompts))
        for i, (name, img) in enumerate(images)
    ]
    return [*cases, Case("prompt 1, text only", 0, None)]


def _reference(
    checkpoint: Path,
    prompts: Sequence[str],
    images: Sequence[tuple[str, ProcessedImage]],
    cases: Sequence[Case],
    options: VerifyOptions,
) -> tuple[Expected, list[list[int]]]:
    """Run the fp32 reference for every image and case; returns its stages and each case's prompt ids."""
    import torch

    from .model import load_model

    files = load_files(checkpoint)
    tokenizer = PenguinTokenizer(files)
    model = load_model(checkpoint, files)
    want, ids = Expected(), []
    with torch.no_grad():
        for k, (name, img) in enumerate(images):
            say(options, f"reference: image {k + 1} of {len(images)} ({name}, grid {img.grid})")
            stages = model.encode_image(torch.from_numpy(img.pixel_values), img.grid)
            values = [stages.patch_embed, *stages.layers, stages.encoder, stages.projector]
            want.vision.append([x.numpy() for x in values])  # in the order of vision_stage_names
        for k, case in enumerate(cases):
            say(options, f"reference: greedy decoding, case {k + 1} of {len(cases)} ({case.label})")
            chosen = [] if case.image is None else [images[case.image][1]]
            case_ids = prompt_ids(tokenizer, prompts[case.prompt], chosen)
            inputs = [(torch.from_numpy(img.pixel_values), img.grid) for img in chosen]
            trace = model.generate(case_ids, inputs, max_new_tokens=options.tokens)
            ids.append(case_ids)
            want.embeddings.append(trace.embeddings.numpy())
            want.prefill.append(trace.prefill_logits.numpy())
            want.decode.append([x.numpy() for x in trace.decode_logits])
            want.tokens.append(list(trace.tokens))
            want.text.append(tokenizer.decode(trace.tokens))
    del model
    gc.collect()
    return want, ids


def _prepare(options: VerifyOptions) -> tuple[list[str], list[tuple[str, ProcessedImage]]]:
    """The prompts and the preprocessed images (every image read before anything runs)."""
    assert options.checkpoint is not None
    processor = load_files(options.checkpoint).processor
    prompts = list(options.prompts) or list(DEFAULT_PROMPTS)
    if any(not p.strip() for p in prompts):
        raise VerifyError("a prompt is empty")
    sources = [(p.name, open_image(p)) for p in options.images] if options.images else default_images()
    return prompts, [(name, preprocess(img, processor)) for name, img in sources]


def _vision(
    nets: PenguinNcnn,
    images: Sequence[tuple[str, ProcessedImage]],
    want: Expected,
    report: VerifyReport,
    options: VerifyOptions,
) -> list[np.ndarray | None]:
    """Every vision stage of every image; returns each image's projector output (None when ncnn could not
    compute it)."""
    features: list[np.ndarray | None] = []
    names = vision_stage_names(nets.layers)
    for k, ((name, img), ref) in enumerate(zip(images, want.vision, strict=True)):
        say(options, f"ncnn: image {k + 1} of {len(images)} ({name})")
        ours = nets.encode_image(img.pixel_values, img.grid)
        label = f"{name} ({img.grid[0]}x{img.grid[1]})"
        chained_stages(report, label, names, ours.values, ours.error, ref)
        features.append(ours.projector)
    return features


def _case(
    nets: PenguinNcnn,
    case: Case,
    ids: list[int],
    feature: np.ndarray | None,
    want: Expected,
    k: int,
    report: VerifyReport,
    options: VerifyOptions,
) -> None:
    """One case's LLM stages (fused embeddings, prefill logits, each decode step) and its tokens."""
    ref_tokens = want.tokens[k]
    stage = f"{case.label}: fused embeddings"
    if case.image is not None and feature is None:
        report.stages.append(failed(stage, "not computed (the image's vision stages failed)"))
        report.tokens.append(TokenResult(case.label, [], ref_tokens, want.text[k]))
        return
    try:
        embeds = nets.fuse(ids, [] if feature is None else [feature])
    except VerifyError as err:
        report.stages.append(failed(stage, str(err)))
        report.tokens.append(TokenResult(case.label, [], ref_tokens, want.text[k]))
        return
    report.stages.append(compare_sized(stage, embeds, want.embeddings[k]))
    gen = nets.generate(embeds, options.tokens, forced=ref_tokens)
    generation_stages(report, case.label, gen, want.prefill[k], want.decode[k], ref_tokens, want.text[k])


def verify(folder: Path, model_json: dict[str, Any], options: VerifyOptions) -> VerifyReport:
    if options.checkpoint is None:
        raise VerifyError("the penguin_vl verifier needs the reference checkpoint (--checkpoint DIR)")
    if options.tokens < 1:
        raise VerifyError(f"--tokens must be at least 1, not {options.tokens}")
    import torch

    torch.set_num_threads(options.threads)
    prompts, images = _prepare(options)
    cases = _cases(prompts, images)
    want, ids = _reference(options.checkpoint, prompts, images, cases, options)
    report = VerifyReport(str(folder))
    with PenguinNcnn(folder, model_json, num_threads=options.threads, precision=options.precision) as nets:
        features = _vision(nets, images, want, report, options)
        for k, case in enumerate(cases):
            say(options, f"ncnn: greedy decoding, case {k + 1} of {len(cases)} ({case.label})")
            feature = None if case.image is None else features[case.image]
            _case(nets, case, ids[k], feature, want, k, report, options)
    for p, text in enumerate(prompts):
        report.notes.append(f"prompt {p + 1}: {text!r}")
    report.notes.append(f"reference: {options.checkpoint} (fp32); ncnn at {options.precision}")
    report.notes.append(TEACHER_FORCED)
    return report
