"""A byte-level BPE in Qwen2's layout, trained here on deterministic English-like text: what the embedded
tiny checkpoints of the Qwen-based examples (``graphsurgeon/models/penguin_vl``,
``graphsurgeon/models/qwen3_vl``) build their ``tokenizer.json`` from, and what the C++ tokenizer's parity
corpus trains. Each example adds its own special tokens and writes its own tokenizer files; the training text
and the trainer are shared, so the same ``vocab_size`` gives the same BPE model everywhere.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)

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
