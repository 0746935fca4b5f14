"""Calibration samples for the Qwen3 export (``ExportSpec.calibration``): what each sub-model sees when the
reference runs a prompt, computed on first access, so a conversion that does not calibrate (the rule
file's default ``storage: fp32``) never pays for them.

* ``embed``: the prompt's ids ``[1, T]``;
* ``decoder``: its input rows ``[1, T, H]`` (the embedding of the ids, or rows a caller gives: Penguin-VL's
  fused text and image rows), the causal mask and the RoPE tables of positions ``0..T-1`` (a prefill: the
  converted decoder's caches start empty);
* ``lm_head``: the decoder's output for those rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import torch

from .qwen3_llm_model import DecoderPart, Qwen3ForCausalLM, causal_mask, rope_tables

Sample = tuple[torch.Tensor, ...]
DEFAULT_LENGTHS = (24, 7)  # two prompts of different lengths


@dataclass(frozen=True)
class Prompt:
    """One calibration prompt: ``ids [1, T]`` (int64) and, optionally, the decoder's input rows
    ``[1, T, H]`` when they are not just the embedding of the ids."""

    ids: torch.Tensor
    rows: torch.Tensor | None = None


class LazySamples(Sequence[Sample]):
    """A sequence of samples made by ``make`` on first access, then kept."""

    def __init__(self, make: Callable[[], list[Sample]]) -> None:
        self._make: Callable[[], list[Sample]] | None = make
        self._items: list[Sample] | None = None

    def _all(self) -> list[Sample]:
        if self._items is None:
            assert self._make is not None
            self._items, self._make = self._make(), None
        return self._items

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, index: int) -> Sample: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Sample]: ...
    def __getitem__(self, index: int | slice) -> Sample | Sequence[Sample]:
        return self._all()[index]


def random_prompts(vocab_size: int, lengths: Sequence[int] = DEFAULT_LENGTHS, seed: int = 1) -> list[Prompt]:
    """Seeded token ids (the tiny checkpoints have no tokenizer; the embedding rows are the model's own)."""
    gen = torch.Generator().manual_seed(seed)
    return [Prompt(torch.randint(0, vocab_size, (1, n), generator=gen, dtype=torch.int64)) for n in lengths]


#: The most prompts a calibration text may hold (each is one run of the decoder per calibration pass).
MAX_TEXT_PROMPTS = 4096
TEXT_LIMIT = 16 << 20


def text_prompts(path: Path, tokenizer: Path) -> list[Prompt]:
    """One prompt per non-empty line of the UTF-8 file ``path``, tokenized by ``tokenizer`` (a
    ``tokenizer.json``) as the checkpoint's own tokenizer encodes text, without special tokens added."""
    from tokenizers import Tokenizer

    from graphsurgeon.export.errors import ExportError
    from graphsurgeon.input_files import read_input

    raw = read_input(path, limit=TEXT_LIMIT, what="a calibration text", error=ExportError)
    try:
        lines = [line for line in raw.decode("utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError:
        raise ExportError(f"calibration_text {path}: not UTF-8 text") from None
    if not lines:
        raise ExportError(f"calibration_text {path}: no line holds a prompt")
    if len(lines) > MAX_TEXT_PROMPTS:
        raise ExportError(f"calibration_text {path}: {len(lines)} prompts; at most {MAX_TEXT_PROMPTS}")
    if not tokenizer.is_file():
        raise ExportError(
            f"calibration_text {path}: the checkpoint has no {tokenizer.name} to tokenize it ({tokenizer})"
        )
    tok = Tokenizer.from_file(str(tokenizer))
    prompts = []
    for number, line in enumerate(lines, 1):
        ids = tok.encode(line, add_special_tokens=False).ids
        if not ids:
            raise ExportError(f"calibration_text {path}: prompt {number} tokenizes to nothing")
        prompts.append(Prompt(torch.tensor([ids], dtype=torch.int64)))
    return prompts


def llm_samples(model: Qwen3ForCausalLM, prompts: Callable[[], Sequence[Prompt]]) -> dict[str, LazySamples]:
    """The embed / decoder / lm_head samples of ``prompts`` (called once, on first access of any)."""
    cache: dict[str, list[Sample]] = {}

    def compute() -> dict[str, list[Sample]]:
        if not cache:
            decoder = DecoderPart(model).eval()
            with torch.no_grad():
                for p in prompts():
                    length = int(p.ids.shape[1])
                    rows = model.model.embed_tokens(p.ids) if p.rows is None else p.rows
                    cos, sin = rope_tables(model.config, 0, length)
                    step = (rows, causal_mask(0, length), cos, sin)
                    cache.setdefault("embed", []).append((p.ids,))
                    cache.setdefault("decoder", []).append(step)
                    cache.setdefault("lm_head", []).append((decoder(*step),))
        return cache

    def lazy(name: str) -> LazySamples:
        return LazySamples(lambda: compute()[name])

    return {name: lazy(name) for name in ("embed", "decoder", "lm_head")}
