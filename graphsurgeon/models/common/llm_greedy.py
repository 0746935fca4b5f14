"""Greedy decoding of fused prompt embeddings through a converted LLM half (``verify.llm_chain.LlmChain``:
embed, the KV-cache decoder, lm_head in the ncnn wheel), as the VLM verifiers' ncnn chains run it."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.llm_chain import LlmChain


@dataclass
class Generation:
    """The logits the decoder gave at every step, up to the first step ncnn could not compute (``error``)."""

    prefill_logits: np.ndarray | None = None  # [V] at the last prompt position
    decode_logits: list[np.ndarray] = field(default_factory=list)  # step i fed tokens[i]
    tokens: list[int] = field(default_factory=list)
    error: str = ""


def greedy(
    llm: LlmChain,
    embeds: np.ndarray,
    max_new_tokens: int,
    eos_ids: Collection[int],
    forced: Sequence[int] | None = None,
) -> Generation:
    """Prefill ``embeds`` ``[L, hidden]``, then one token per step through the KV cache; stops after an EOS id
    (kept) or ``max_new_tokens`` tokens, or at the first step ncnn fails. With ``forced`` (teacher forcing)
    each step is fed ``forced[i]`` instead of the argmax, for ``len(forced)`` steps; ``tokens`` still holds
    the argmax at every step."""
    result = Generation()
    try:
        with llm.session() as session:
            step = session.prefill(embeds)
            logits = llm.logits(step.hidden[-1:])[-1]
            result.prefill_logits = logits
            limit = max_new_tokens if forced is None else len(forced)
            while len(result.tokens) < limit:
                token = int(np.argmax(logits))
                result.tokens.append(token)
                fed = token if forced is None else int(forced[len(result.tokens) - 1])
                if len(result.tokens) == limit or (forced is None and token in eos_ids):
                    break
                step = session.decode_step(llm.embed([fed]))
                logits = llm.logits(step.hidden[-1:])[-1]
                result.decode_logits.append(logits)
    except VerifyError as err:
        result.error = str(err)
    return result
