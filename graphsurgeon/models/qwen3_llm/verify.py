"""The verifier ``gsurg verify`` calls for a folder ``rules/llm-kv-cache.yaml`` wrote: the converted embed /
decoder / lm_head in the ncnn wheel against ``model.Qwen3ForCausalLM``, stage by stage (embedding, decoder
hidden states at the prefill and at every decode step, logits), then greedy tokens for each prompt.

Prompts are token ids (this example has no tokenizer): ``--prompt "5 17 42"``; without ``--prompt`` three
fixed prompts are used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphsurgeon.models.common.qwen3_llm_model import KVCache, causal_mask, load_model, rope_tables
from graphsurgeon.models.common.verify_stages import TEACHER_FORCED
from graphsurgeon.verify.criteria import kl_divergence
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.llm_chain import LlmChain
from graphsurgeon.verify.report import TokenResult, VerifyReport, compare
from graphsurgeon.verify.run import VerifyOptions

#: The model.json families this verifier reads (the one its rule file writes).
FAMILIES = ("qwen3_llm",)

DEFAULT_PROMPTS = ([5, 17, 42, 99, 3, 250], [1, 2, 3], [123, 45, 67, 89, 10, 11, 12, 13, 14])


def _prompts(options: VerifyOptions, vocab: int) -> list[list[int]]:
    if not options.prompts:
        return [[t % vocab for t in p] for p in DEFAULT_PROMPTS]
    out = []
    for text in options.prompts:
        try:
            ids = [int(t) for t in text.split()]
        except ValueError:
            raise VerifyError(
                f"prompt {text!r}: this model has no tokenizer; give token ids, e.g. '5 17 42'"
            ) from None
        if not ids or any(not 0 <= t < vocab for t in ids):
            raise VerifyError(f"prompt {text!r}: ids must be in 0..{vocab - 1}")
        out.append(ids)
    return out


def verify(folder: Path, model_json: dict[str, Any], options: VerifyOptions) -> VerifyReport:
    if options.checkpoint is None:
        raise VerifyError("the llm-kv-cache verifier needs the checkpoint (--checkpoint DIR)")
    torch.set_num_threads(options.threads)
    model = load_model(options.checkpoint)
    cfg = model.config
    report = VerifyReport(str(folder))
    prompts = _prompts(options, cfg.vocab_size)
    chain = LlmChain(folder, families=FAMILIES, num_threads=options.threads, precision=options.precision)
    with chain, torch.no_grad():
        first = prompts[0]
        ids = torch.tensor([first + [7 % cfg.vocab_size] * 3])
        report.stages.append(compare("embed", chain.embed(ids[0].tolist()), model.model.embed_tokens(ids)[0]))
        cache, start = KVCache(), 0
        with chain.session() as session:
            for i, n in enumerate((len(first), 1, 1, 1)):
                x = model.model.embed_tokens(ids[:, start : start + n])
                cos, sin = rope_tables(cfg, start, n)
                want, cache = model.decode(x, causal_mask(start, n), cos, sin, cache)
                step = session.prefill(x[0].numpy()) if i == 0 else session.append(x[0].numpy())
                name = "decoder prefill" if i == 0 else f"decoder step {i}"
                report.stages.append(compare(name, step.hidden, want[0]))
                if i == 0:
                    logits = torch.nn.functional.linear(want, model.lm_head_weight)[0]
                    report.stages.append(compare("prefill logits", chain.logits(step.hidden), logits))
                start += n
        for k, prompt in enumerate(prompts):
            if options.progress is not None:
                options.progress(f"greedy decoding, prompt {k + 1} of {len(prompts)}")
            want_tokens = model.generate(prompt, options.tokens)
            want_logits = model(torch.tensor([prompt + want_tokens[:-1]]))[0][0, len(prompt) - 1 :]
            ours_logits = chain.forced_logits(prompt, want_tokens)
            ours = [int(np.argmax(x)) for x in ours_logits]
            kl = [kl_divergence(w, o) for w, o in zip(want_logits.numpy(), ours_logits, strict=True)]
            case = f"prompt {k + 1} ({len(prompt)} ids)"
            report.tokens.append(TokenResult(case, ours, want_tokens, kl=kl))
    report.notes.append(f"reference: {options.checkpoint} (fp32); ncnn at {options.precision}")
    report.notes.append(TEACHER_FORCED)
    return report
