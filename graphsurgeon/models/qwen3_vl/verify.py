"""The verifier ``gsurg verify`` calls for a folder ``rules/qwen3_vl.yaml`` wrote: the converted nets in the
ncnn wheel (fp32 options, ``ncnn_chain.Qwen3VLNcnn``) against HF transformers' own
``Qwen3VLForConditionalGeneration`` loaded from the checkpoint (fp32, CPU), stage by stage, then greedy
tokens against HF's ``generate``.

Stages, per image (HF's vision model run on that image alone, values read with forward hooks): the patch
embedding, the patch embedding plus the interpolated position embedding (block 0's input), every ViT
block's output (the ncnn side reads them from the vision net's residual stream; its last-block output and
DeepStack taps are checked to be those blobs), the main merger and every DeepStack merger. Per case (HF's
``generate``): the fused prompt embeddings (the language model's ``inputs_embeds`` of the prefill call),
the prefill logits (last prompt position) and the logits of every decode step whose input tokens agree on
both sides. Each ncnn net is fed what the ncnn nets before it computed, so an error shows in the first
stage it enters and carries on from there.

Both sides get the same inputs: the checkpoint's own processor (``processor.load_processor``: HF's image
processor, tokenizer and chat template) gives ``pixel_values``, ``image_grid_thw`` and ``input_ids``.
Everything the ncnn side computes between nets (position taps, ViT RoPE tables, fused rows, DeepStack
rows, MRoPE positions and cos/sin, mask, cache, EOS test) comes from ``model.json`` (``ncnn_chain``).

Cases: every prompt with every image, the first prompt with the first two images together, and the first
prompt with no image. Without ``--prompt``: three fixed prompts; without ``--image``: two crops of the
corpus images in ``../shared/corpus/images`` beside the repository (a portrait and a landscape one, cut
deterministically), or two generated images of those sizes when the folder is absent. The reference runs
first and is released before the ncnn nets load.
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

from .ncnn_chain import FAMILIES, Qwen3VLNcnn, VisionResult, vision_stage_names

if TYPE_CHECKING:
    from PIL import Image as PILImage

DEFAULT_PROMPTS = (
    "Describe the image.",
    "What is written on it?",
    "What colour is the sky?",
)
#: (width, height) of the default images: a portrait and a landscape crop, different non-square grids.
CROP_SIZES = ((240, 400), (416, 288))


@dataclass(frozen=True)
class Case:
    label: str
    prompt: int
    images: tuple[int, ...]


@dataclass
class Image:
    name: str
    pixel_values: np.ndarray  # [N, patch_dim], merge-block order
    grid: tuple[int, int]  # patches (gh, gw)
    picture: Any  # the PIL image, for the processor


@dataclass
class Expected(SharedExpected):
    """The shared stages' reference values, and each case's prompt ids (the processor's, fed to both)."""

    ids: list[list[int]] = field(default_factory=list)


def _crop(img: PILImage.Image, width: int, height: int) -> PILImage.Image:
    """The centre ``width x height`` window of ``img`` scaled (bicubic) so the window fits inside it."""
    from PIL import Image as PIL

    scale = min(img.width / width, img.height / height)
    w, h = round(width * scale), round(height * scale)
    left, top = (img.width - w) // 2, (img.height - h) // 2
    return img.crop((left, top, left + w, top + h)).resize((width, height), PIL.Resampling.BICUBIC)


def default_images() -> list[tuple[str, PILImage.Image]]:
    """A portrait and a landscape crop of the first corpus images (by name), else generated ones."""
    from PIL import Image as PIL

    files = corpus_images()
    out = []
    for k, (w, h) in enumerate(CROP_SIZES):
        if k < len(files):
            with PIL.open(files[k]) as img:
                out.append((f"{files[k].name} crop {w}x{h}", _crop(img.convert("RGB"), w, h)))
        else:
            out.append((f"generated {w}x{h}", generated_image(w, h, k)))
    return out


def _cases(prompts: Sequence[str], images: Sequence[Image]) -> list[Case]:
    cases = [
        Case(f"prompt {p + 1} + {img.name} ({img.grid[0]}x{img.grid[1]})", p, (i,))
        for p in range(len(prompts))
        for i, img in enumerate(images)
    ]
    if len(images) >= 2:
        cases.append(Case("prompt 1 + images 1 and 2", 0, (0, 1)))
    return [*cases, Case("prompt 1, text only", 0, ())]


def _prepare(options: VerifyOptions) -> tuple[Any, list[str], list[Image]]:
    from PIL import Image as PIL

    from .processor import load_processor

    assert options.checkpoint is not None
    processor = load_processor(options.checkpoint)
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
    images = []
    for name, picture in sources:
        got = processor.image_processor(images=[picture], return_tensors="pt")
        _t, gh, gw = (int(v) for v in got["image_grid_thw"][0])
        images.append(Image(name, got["pixel_values"].numpy().astype(np.float32), (gh, gw), picture))
    return processor, prompts, images


class _Hooks:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.handles: list[Any] = []

    def output(self, key: str, module: Any) -> None:
        def hook(_m: Any, _a: Any, out: Any) -> None:
            self.values[key] = out

        self.handles.append(module.register_forward_hook(hook))

    def first_input(self, key: str, module: Any, kwarg: str | None = None) -> None:
        def hook(_m: Any, args: Any, kwargs: Any) -> None:
            if key not in self.values:
                self.values[key] = kwargs[kwarg] if kwarg else args[0]

        self.handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def _reference(
    processor: Any,
    prompts: Sequence[str],
    images: Sequence[Image],
    cases: Sequence[Case],
    options: VerifyOptions,
    depth: int,
) -> Expected:
    import torch
    import transformers

    from .processor import chat_inputs

    assert options.checkpoint is not None
    model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(
        str(options.checkpoint), dtype=torch.float32
    ).eval()
    visual = model.model.visual
    want = Expected()
    with torch.no_grad():
        for k, img in enumerate(images):
            say(options, f"reference: image {k + 1} of {len(images)} ({img.name}, grid {img.grid})")
            hooks = _Hooks()
            hooks.output("patch", visual.patch_embed)
            hooks.first_input("vit_in", visual.blocks[0])
            for i, block in enumerate(visual.blocks):
                hooks.output(f"block{i}", block)
            try:
                out = visual(torch.from_numpy(img.pixel_values), grid_thw=torch.tensor([[1, *img.grid]]))
            finally:
                hooks.close()
            rec = hooks.values
            values = [rec["patch"], rec["vit_in"], *(rec[f"block{i}"] for i in range(depth))]
            values += [out.pooler_output, *out.deepstack_features]
            want.vision.append([v.detach().numpy().astype(np.float32) for v in values])
        for k, case in enumerate(cases):
            say(options, f"reference: generate, case {k + 1} of {len(cases)} ({case.label})")
            inputs = chat_inputs(processor, [images[i].picture for i in case.images], prompts[case.prompt])
            hooks = _Hooks()
            hooks.first_input("embeds", model.model.language_model, "inputs_embeds")
            try:
                model.model.rope_deltas = None
                gen = model.generate(
                    **inputs,
                    max_new_tokens=options.tokens,
                    do_sample=False,
                    output_logits=True,
                    return_dict_in_generate=True,
                )
            finally:
                hooks.close()
            length = int(inputs["input_ids"].shape[1])
            tokens = [int(t) for t in gen.sequences[0, length:]]
            logits = [x[0].numpy().astype(np.float32) for x in gen.logits]
            want.ids.append([int(t) for t in inputs["input_ids"][0]])
            want.embeddings.append(hooks.values["embeds"][0].numpy().astype(np.float32))
            want.prefill.append(logits[0])
            want.decode.append(logits[1:])
            want.tokens.append(tokens)
            want.text.append(processor.tokenizer.decode(tokens))
    del model
    gc.collect()
    return want


def _vision(
    nets: Qwen3VLNcnn, images: Sequence[Image], want: Expected, report: VerifyReport, options: VerifyOptions
) -> list[VisionResult]:
    names = vision_stage_names(nets.depth, nets.taps)
    results = []
    for k, (img, ref) in enumerate(zip(images, want.vision, strict=True)):
        say(options, f"ncnn: image {k + 1} of {len(images)} ({img.name})")
        ours = nets.encode_image(img.pixel_values, img.grid)
        label = f"{img.name} ({img.grid[0]}x{img.grid[1]})"
        chained_stages(report, label, names, ours.values, ours.error, ref)
        results.append(ours)
    return results


def _case(
    nets: Qwen3VLNcnn,
    case: Case,
    images: Sequence[Image],
    vision: Sequence[VisionResult],
    want: Expected,
    k: int,
    report: VerifyReport,
    options: VerifyOptions,
) -> None:
    ref_tokens = want.tokens[k]
    stage = f"{case.label}: fused embeddings"
    ids = want.ids[k]
    try:
        segments = nets.segments(ids, [images[i].grid for i in case.images])
        embeds, deepstack = nets.fuse(ids, [vision[i] for i in case.images])
    except VerifyError as err:
        report.stages.append(failed(stage, str(err)))
        report.tokens.append(TokenResult(case.label, [], ref_tokens, want.text[k]))
        return
    report.stages.append(compare_sized(stage, embeds, want.embeddings[k]))
    gen = nets.generate(embeds, deepstack, segments, options.tokens, forced=want.tokens[k])
    generation_stages(report, case.label, gen, want.prefill[k], want.decode[k], ref_tokens, want.text[k])


def verify(folder: Path, model_json: dict[str, Any], options: VerifyOptions) -> VerifyReport:
    if options.checkpoint is None:
        raise VerifyError("the qwen3_vl verifier needs the reference checkpoint (--checkpoint DIR)")
    if options.tokens < 1:
        raise VerifyError(f"--tokens must be at least 1, not {options.tokens}")
    # the family's schema first: a model.json outside the contract is refused before the reference runs
    check_model_json(model_json, str(folder / "model.json"), FAMILIES, error=VerifyError)
    import torch

    torch.set_num_threads(options.threads)
    processor, prompts, images = _prepare(options)
    cases = _cases(prompts, images)
    depth = int(model_json["vision"]["depth"])
    want = _reference(processor, prompts, images, cases, options, depth)
    report = VerifyReport(str(folder))
    with Qwen3VLNcnn(folder, model_json, num_threads=options.threads, precision=options.precision) as nets:
        vision = _vision(nets, images, want, report, options)
        for k, case in enumerate(cases):
            say(options, f"ncnn: greedy decoding, case {k + 1} of {len(cases)} ({case.label})")
            _case(nets, case, images, vision, want, k, report, options)
    for p, text in enumerate(prompts):
        report.notes.append(f"prompt {p + 1}: {text!r}")
    report.notes.append(
        f"reference: {options.checkpoint} (HF Qwen3VLForConditionalGeneration, fp32, CPU); "
        f"ncnn at {options.precision}"
    )
    report.notes.append(TEACHER_FORCED)
    return report
