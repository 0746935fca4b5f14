"""The tiny Penguin-VL's tokenizer, trained here: a byte-level BPE with Qwen2's split regex on deterministic
English-like text (``corpus_lines``), the chat tokens and ``<image>`` added after the BPE vocabulary as in
the real vocabulary, and the files transformers writes beside ``tokenizer.json`` (``tokenizer_config.json``,
``special_tokens_map.json``, and the slow tokenizer's ``vocab.json`` + ``merges.txt``). ``make_tiny``
writes them into the checkpoint folder; the C++ tokenizer's parity corpus trains through
``train_qwen2_bpe`` too."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .config import IMAGE_TOKEN

VOCAB_FILE, MERGES_FILE = "vocab.json", "merges.txt"
"""The BPE model as transformers' slow ``Qwen2Tokenizer`` reads it (the official loader asks for it)."""

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
THINK, END_THINK = "<think>", "</think>"
BPE_VOCAB = 640  # the 256 byte symbols and 384 merges; the added tokens come after

_WORD_TEXT = (
    "the a an of to in on at for with from by and or but not is are was were be been this that these those "
    "image picture photo page newspaper desert sand dune sky sun cloud road car tree water river city street "
    "man woman child dog cat bird penguin horse people crowd building house window door table chair book "
    "red green blue yellow black white gray bright dark large small tall short old new left right top bottom "
    "what where when who why how which describe tell show count read find name list explain answer question "
    "month day year date time number title text word letter line printed written shown visible there here "
    "one two three four five six seven eight nine ten many few some all none each every first last next "
    "January February March April May June July August September October November December"
)
_WORDS = _WORD_TEXT.split()
_TEMPLATES = (
    "{A} {b} {c} {d}.",
    "What {b} is {c} in the {d}?",
    "Describe the {b} and the {c}.",
    "There are {n} {b} {c} near the {d}.",
    "The {b} was printed on {m} {n}, {y}.",
    "{A} {b}, {c} {d}; {e} {f}!",
    "How many {b} are {c} the {d}? Answer with a number.",
    "Read the {b} at the {c} of the {d}.",
)


def corpus_lines(count: int = 6000, seed: int = 0) -> list[str]:
    """Deterministic English-like training text (``random.Random`` with a fixed seed; no downloads)."""
    rng = random.Random(seed)
    months = _WORDS[-12:]
    lines = []
    for _ in range(count):
        words = {k: rng.choice(_WORDS) for k in "Abcdef"}
        words["A"] = words["A"].capitalize()
        template = rng.choice(_TEMPLATES)
        lines.append(
            template.format(**words, n=rng.randint(0, 2100), m=rng.choice(months), y=rng.randint(1700, 2030))
        )
    lines += ["\n".join(lines[i : i + 3]) for i in range(0, 300, 3)]  # newlines inside a text
    return lines


def train_qwen2_bpe(lines: Iterable[str], vocab_size: int) -> Any:
    """A byte-level BPE in Qwen2's layout (NFC, Qwen2's split regex then byte-level, byte-level decoder and
    post-processor) trained with HF ``tokenizers`` on ``lines``; no added tokens yet. Deterministic."""
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(lines, trainer=trainer)
    return tok


def build_tokenizer(bpe_vocab: int = BPE_VOCAB) -> Any:
    """Train the byte-level BPE, then add the chat tokens and ``<image>``; a ``tokenizers.Tokenizer``."""
    from tokenizers import AddedToken

    tok = train_qwen2_bpe(corpus_lines(), bpe_vocab)

    def added(content: str) -> AddedToken:
        return AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False)

    tok.add_special_tokens([added(ENDOFTEXT), added(IM_START), added(IM_END)])
    tok.add_tokens([added(THINK), added(END_THINK)])  # non-special, as in Qwen3's vocabulary
    tok.add_special_tokens([added(IMAGE_TOKEN)])  # as the official processor adds it
    return tok


def _token_entry(content: str, special: bool) -> dict[str, Any]:
    return {
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": special,
    }


def tokenizer_config(ids: dict[str, int]) -> dict[str, Any]:
    """``tokenizer_config.json`` in transformers' Qwen2 layout."""
    specials = {ENDOFTEXT, IM_START, IM_END, IMAGE_TOKEN}
    decoder = {str(i): _token_entry(t, t in specials) for t, i in sorted(ids.items(), key=lambda kv: kv[1])}
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
