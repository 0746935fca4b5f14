"""What the VLM verifiers (``penguin_vl.verify``, ``qwen3_vl.verify``) share: what the reference computed
(``Expected``), progress lines, a stage compared only when both sides have the same size, and the LLM
stages of one case — the prefill logits, then each decode step's logits for as long as the tokens agree —
with its greedy tokens side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from graphsurgeon.verify.criteria import kl_divergence
from graphsurgeon.verify.report import StageResult, TokenResult, VerifyReport, compare, failed
from graphsurgeon.verify.run import VerifyOptions

if TYPE_CHECKING:
    from PIL import Image as PILImage

#: The images of the shared corpus, when the package runs from a checkout that has ``../shared`` beside it.
CORPUS_IMAGES = Path(__file__).resolve().parents[3].parent / "shared" / "corpus" / "images"
#: The note a verifier adds: what its "ncnn" tokens are.
TEACHER_FORCED = "tokens: the ncnn argmax at each step, fed the reference's tokens (teacher forcing)"


@dataclass
class Expected:
    """What the reference computed, kept as numpy so the model can be released before ncnn runs."""

    vision: list[list[np.ndarray]] = field(default_factory=list)  # per image, as vision_stage_names
    embeddings: list[np.ndarray] = field(default_factory=list)  # per case
    prefill: list[np.ndarray] = field(default_factory=list)
    decode: list[list[np.ndarray]] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)


def corpus_images() -> list[Path]:
    """The corpus's images by name, which the verifiers take as default images from a checkout; empty where
    there is no corpus (an installed wheel), and the verifiers generate theirs."""
    return sorted(p for p in CORPUS_IMAGES.iterdir() if p.is_file()) if CORPUS_IMAGES.is_dir() else []


def generated_image(width: int, height: int, seed: int) -> PILImage.Image:
    """A deterministic RGB picture (gradients, stripes and seeded noise) for a verifier without corpus
    images: every pixel differs from its neighbours, so resizes and patch orders show."""
    from PIL import Image as PIL

    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    noise = np.random.default_rng(seed).integers(0, 64, size=(height, width, 3))
    base = np.stack([255 * x / width, 255 * y / height, 127.5 * (1 + np.sin((x + 2 * y) / 17.0))], axis=-1)
    return PIL.fromarray(np.clip(base * 0.75 + noise, 0, 255).astype(np.uint8), "RGB")


def say(options: VerifyOptions, message: str) -> None:
    """A progress line, when the command shows them."""
    if options.progress is not None:
        options.progress(message)


class Generation(Protocol):
    """What an ncnn chain's greedy run gives (its ``Generation`` dataclass)."""

    prefill_logits: np.ndarray | None  # [V] at the last prompt position
    decode_logits: list[np.ndarray]  # step i fed tokens[i]
    tokens: list[int]
    error: str


def compare_sized(stage: str, ours: np.ndarray, reference: np.ndarray) -> StageResult:
    """``compare``, or a failure naming both shapes when the sizes differ."""
    if ours.size != reference.size:
        return failed(stage, f"ncnn gave shape {list(ours.shape)}, the reference {list(reference.shape)}")
    return compare(stage, ours, reference)


def chained_stages(
    report: VerifyReport,
    label: str,
    names: Sequence[str],
    ours: Sequence[np.ndarray],
    error: str,
    reference: Sequence[np.ndarray],
) -> None:
    """A chain of stages where ncnn computed the first ``len(ours)`` (and stopped at ``error``): each
    computed one compared, the one that failed named with its error, the rest not computed."""
    for i, stage in enumerate(names):
        if i < len(ours):
            report.stages.append(compare_sized(f"{label}: {stage}", ours[i], reference[i]))
        elif i == len(ours):
            report.stages.append(failed(f"{label}: {stage}", error))
        else:
            report.stages.append(failed(f"{label}: {stage}", f"not computed ({names[len(ours)]} failed)"))


def generation_stages(
    report: VerifyReport,
    label: str,
    gen: Generation,
    prefill: np.ndarray,
    decode: Sequence[np.ndarray],
    ref_tokens: list[int],
    ref_text: str,
) -> None:
    """The prefill and decode-step stages of one case, and its tokens with each step's KL divergence, into
    ``report``. ``gen`` ran teacher-forced on ``ref_tokens``, so every step's logits are comparable."""
    stage = f"{label}: prefill logits"
    kl: list[float] = []
    if gen.prefill_logits is None:
        report.stages.append(failed(stage, gen.error))
    else:
        report.stages.append(compare_sized(stage, gen.prefill_logits, prefill))
        if gen.prefill_logits.size == prefill.size:
            kl.append(kl_divergence(prefill, gen.prefill_logits))
    for i, ref in enumerate(decode):
        stage = f"{label}: decode step {i + 1} logits"
        if i >= len(gen.decode_logits):
            if gen.error:
                report.stages.append(failed(stage, gen.error))
            break
        report.stages.append(compare_sized(stage, gen.decode_logits[i], ref))
        if gen.decode_logits[i].size == ref.size:
            kl.append(kl_divergence(ref, gen.decode_logits[i]))
    report.tokens.append(TokenResult(label, gen.tokens, ref_tokens, ref_text, kl=kl))
