"""The tiny Penguin-VL's tokenizer, trained here: a byte-level BPE with Qwen2's split regex on deterministic
English-like text (``corpus_lines``; both shared with the other Qwen-based examples in
``graphsurgeon/models/common/bpe_tokenizer.py``), the chat tokens and ``<image>`` added after the BPE
vocabulary as in the real vocabulary, and the files transformers writes beside ``tokenizer.json``
(``tokenizer_config.json``, ``special_tokens_map.json``, and the slow tokenizer's ``vocab.json`` +
``merges.txt``). ``make_tiny`` writes them into the checkpoint folder; the C++ tokenizer's parity corpus
trains through ``train_qwen2_bpe`` too (re-exported here with ``QWEN2_SPLIT`` and ``corpus_lines``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphsurgeon.models.common.bpe_tokenizer import (
    QWEN2_SPLIT as QWEN2_SPLIT,  # re-exported: importers name it here
)
from graphsurgeon.models.common.bpe_tokenizer import corpus_lines, train_qwen2_bpe
from graphsurgeon.models.common.tiny_checkpoint import token_entry

from .config import IMAGE_TOKEN

VOCAB_FILE, MERGES_FILE = "vocab.json", "merges.txt"
"""The BPE model as transformers' slow ``Qwen2Tokenizer`` reads it (the official loader asks for it)."""

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
THINK, END_THINK = "<think>", "</think>"
BPE_VOCAB = 640  # the 256 byte symbols and 384 merges; the added tokens come after


def build_tokenizer(bpe_vocab: int = BPE_VOCAB, lines: Sequence[str] | None = None) -> Any:
    """Train the byte-level BPE on ``lines`` (``corpus_lines()`` when None), then add the chat tokens and
    ``<image>``; a ``tokenizers.Tokenizer``."""
    from tokenizers import AddedToken

    tok = train_qwen2_bpe(corpus_lines() if lines is None else lines, bpe_vocab)

    def added(content: str) -> AddedToken:
        return AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False)

    tok.add_special_tokens([added(ENDOFTEXT), added(IM_START), added(IM_END)])
    tok.add_tokens([added(THINK), added(END_THINK)])  # non-special, as in Qwen3's vocabulary
    tok.add_special_tokens([added(IMAGE_TOKEN)])  # as the official processor adds it
    return tok


def tokenizer_config(ids: dict[str, int]) -> dict[str, Any]:
    """``tokenizer_config.json`` in transformers' Qwen2 layout."""
    specials = {ENDOFTEXT, IM_START, IM_END, IMAGE_TOKEN}
    decoder = {str(i): token_entry(t, t in specials) for t, i in sorted(ids.items(), key=lambda kv: kv[1])}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [IM_START, IM_END, IMAGE_TOKEN],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": IM_END,
        "errors": "replace",
        "extra_special_tokens": {},
        "model_max_length": 40960,
        "pad_token": ENDOFTEXT,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_slow_tokenizer_files(folder: Path, tokenizer_json: Path) -> None:
    """``vocab.json`` (the BPE vocabulary, in id order, without the added tokens, which
    ``tokenizer_config.json`` lists) and ``merges.txt`` (``#version: 0.2``, then one merge a line, in rank
    order) of the BPE model in ``tokenizer_json``, as a Qwen release ships them: the same model, so the
    slow tokenizer gives the ids ``tokenizer.json`` gives."""
    model = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]
    vocab = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1]))
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    if any(len(m) != 2 or any(" " in part for part in m) for m in merges):
        raise ValueError(f"{tokenizer_json}: a merge that merges.txt cannot hold")
    text = json.dumps(vocab, ensure_ascii=False, separators=(",", ":")) + "\n"
    (folder / VOCAB_FILE).write_text(text, encoding="utf-8")
    lines = "".join(f"{a} {b}\n" for a, b in merges)
    (folder / MERGES_FILE).write_text("#version: 0.2\n" + lines, encoding="utf-8")


def special_tokens_map() -> dict[str, Any]:
    entry = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    return {
        "additional_special_tokens": [IM_START, IM_END, IMAGE_TOKEN],
        "eos_token": {"content": IM_END, **entry},
        "pad_token": {"content": ENDOFTEXT, **entry},
    }
