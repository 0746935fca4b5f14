"""What the VLM verifiers (``penguin_vl.verify``, ``qwen3_vl.verify``) share once a case's embeddings are
fused: a stage compared only when both sides have the same size, and the LLM stages of one case — the
prefill logits, then each decode step's logits for as long as the tokens agree — with its greedy tokens
side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from graphsurgeon.verify.report import StageResult, TokenResult, VerifyReport, compare, failed


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


def generation_stages(
    report: VerifyReport,
    label: str,
    gen: Generation,
    prefill: np.ndarray,
    decode: Sequence[np.ndarray],
    ref_tokens: list[int],
    ref_text: str,
) -> None:
    """The prefill and decode-step stages of one case, and its tokens, into ``report``."""
    stage = f"{label}: prefill logits"
    if gen.prefill_logits is None:
        report.stages.append(failed(stage, gen.error))
    else:
        report.stages.append(compare_sized(stage, gen.prefill_logits, prefill))
    for i, ref in enumerate(decode):
        stage = f"{label}: decode step {i + 1} logits"
        if gen.tokens[: i + 1] != ref_tokens[: i + 1]:
            report.notes.append(f"{label}: decode steps from {i + 1} not compared (the tokens differ)")
            break
        if i >= len(gen.decode_logits):
            if gen.error:
                report.stages.append(failed(stage, gen.error))
            break
        report.stages.append(compare_sized(stage, gen.decode_logits[i], ref))
    report.tokens.append(TokenResult(label, gen.tokens, ref_tokens, ref_text))
