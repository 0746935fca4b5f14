"""``gsurg eval``'s way into a Qwen3 LLM conversion (``rules/llm-kv-cache.yaml``'s nets in the ncnn wheel):
a question becomes the ids its tokenizer gives, the answer is decoded greedily through the KV cache up to
EOS. The tokenizer is the converted checkpoint's ``tokenizer.json`` (model.json's ``verifier.checkpoint``),
read with HF ``tokenizers``; the prompt is the question's ids, as ``train.py`` trained it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphsurgeon.evaluation.answers import Answer, Question
from graphsurgeon.evaluation.errors import EvalError
from graphsurgeon.models.common.llm_greedy import greedy
from graphsurgeon.verify.llm_chain import LlmChain
from graphsurgeon.verify.ncnn_fp32 import Precision

from .verify import FAMILIES


class LlmAnswerer:
    """The conversion in ``folder`` and its checkpoint's tokenizer."""

    def __init__(self, folder: Path, doc: dict[str, Any], precision: Precision, threads: int) -> None:
        from tokenizers import Tokenizer

        checkpoint = Path(str(doc.get("verifier", {}).get("checkpoint", "")))
        path = checkpoint / "tokenizer.json"
        if not path.is_file():
            raise EvalError(
                f"{folder / 'model.json'}: the converted checkpoint {checkpoint} has no tokenizer.json "
                "(the text questions need one: convert the trained fixture, gsurg apply qwen3_llm --trained)"
            )
        self.tokenizer = Tokenizer.from_file(str(path))
        self.eos = {int(i) for i in doc.get("tokens", {}).get("eos", [])}
        self.chain = LlmChain(folder, families=FAMILIES, num_threads=threads, precision=precision)

    def answer(self, item: Question, max_tokens: int, forced: Sequence[int] | None = None) -> Answer:
        ids = self.tokenizer.encode(item.question).ids
        run = greedy(self.chain, self.chain.embed(ids), max_tokens, self.eos, forced)
        logits = [] if run.prefill_logits is None else [run.prefill_logits, *run.decode_logits]
        stop = next((k for k, t in enumerate(run.tokens) if t in self.eos), len(run.tokens))
        text = self.tokenizer.decode(run.tokens[:stop], skip_special_tokens=True)
        return Answer(text, list(run.tokens), logits, run.error)

    def close(self) -> None:
        self.chain.close()


def open_conversion(folder: Path, doc: dict[str, Any], *, precision: Precision, threads: int) -> LlmAnswerer:
    return LlmAnswerer(folder, doc, precision, threads)


def batch_request(item: Question, workdir: Path) -> dict[str, Any]:
    """``gsurg eval --runner``'s request for an item: the question as the prompt, which the runtime's
    qwen3_llm family turns into the tokenizer's ids (the conversion's copy of the checkpoint's
    tokenizer.json), as ``LlmAnswerer`` does: no chat template."""
    del workdir  # the question is all: no files
    return {"prompt": item.question}
