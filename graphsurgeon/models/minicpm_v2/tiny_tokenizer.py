"""The tiny checkpoint's ``tokenizer.model``: a SentencePiece BPE model with byte fallback, in the layout the
official slow ``LlamaTokenizer`` reads (MiniCPM-V-2's tokenizer is SentencePiece, docs/minicpm-v-2.md §7.3),
written here as protobuf bytes without the ``sentencepiece`` package (so writing it needs no dependency and
gives the same bytes on every run).

The pieces, in id order:

* ``<unk>`` (UNKNOWN), ``<s>``, ``</s>`` (CONTROL): ids 0, 1, 2 as in the real model;
* USER_DEFINED (always one piece, matched before BPE): the real ``added_tokens_decoder`` tokens ``<image>``
  ... ``</slice>`` and the chat markers ``<用户>`` and ``<AI>``; their ids are **not** the real ones (101-112
  there) on purpose, so a port that hard-codes an id fails on the tiny checkpoint;
* the 256 byte pieces ``<0x00>`` .. ``<0xFF>`` (BYTE): what an unknown character falls back to;
* the merged pieces of a small BPE trained here on ``CORPUS`` (scores ``-rank``: SentencePiece merges the
  best-scored pair first), then every single character of the corpus and ``▁``.

The normaliser is Llama's: ``identity`` (no NFKC), a dummy ``▁`` prefix, spaces kept as they are and
escaped to ``▁``. Checked by running the official tokenizer class on it (``make_model_goldens.py``).
"""

from __future__ import annotations

import itertools
import struct
from collections import Counter

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
USER_DEFINED = [
    "<image>",
    "</image>",
    "<ref>",
    "</ref>",
    "<box>",
    "</box>",
    "<quad>",
    "</quad>",
    "<point>",
    "</point>",
    "<slice>",
    "</slice>",
    "<用户>",
    "<AI>",
]
ADDED_TOKENS = [UNK, BOS, EOS, *USER_DEFINED[:12]]
"""The tokens of the real ``tokenizer_config.json``'s ``added_tokens_decoder`` (not the chat markers)."""
SPACE = "\u2581"  # ▁
MERGES = 160
CORPUS = [
    "What is in the image?",
    "Describe the picture in one sentence.",
    "The image shows a red square on a blue background.",
    "There is a small green circle in the top left corner.",
    "A cat is sitting on the table next to a cup of tea.",
    "How many people are in this photo?",
    "Two people are walking along the river at sunset.",
    "What colour is the car?",
    "The car is yellow and the sky is grey.",
    "Read the text in the picture.",
    "这是一张图片。",
    "图片里有什么？",
    "一只猫坐在桌子上。",
    "请描述这张图片。",
]

# SentencePiece.Type
NORMAL, UNKNOWN, CONTROL, USER, BYTE = 1, 2, 3, 4, 6


def train_bpe(lines: list[str], merges: int) -> tuple[list[str], list[str]]:
    """A plain BPE over the corpus words (each ``▁`` + word, as SentencePiece splits on spaces): returns the
    merged pieces in merge order and the single characters (sorted). Ties go to the smallest pair."""
    words = Counter(SPACE + w for line in lines for w in line.split(" ") if w)
    seqs = {w: list(w) for w in words}
    chars = sorted({c for w in words for c in w})
    merged: list[str] = []
    for _ in range(merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in itertools.pairwise(s):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < 2:
            break
        piece = best[0] + best[1]
        merged.append(piece)
        for w, s in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(piece)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merged, chars


def pieces() -> list[tuple[str, float, int]]:
    """``(piece, score, type)`` in id order."""
    out: list[tuple[str, float, int]] = [(UNK, 0.0, UNKNOWN), (BOS, 0.0, CONTROL), (EOS, 0.0, CONTROL)]
    out += [(p, 0.0, USER) for p in USER_DEFINED]
    out += [(f"<0x{b:02X}>", 0.0, BYTE) for b in range(256)]
    merged, chars = train_bpe(CORPUS, MERGES)
    out += [(p, -float(rank), NORMAL) for rank, p in enumerate(merged)]
    seen = {p for p, _, _ in out}
    rest = [c for c in chars if c not in seen]
    out += [(c, -float(len(merged) + rank), NORMAL) for rank, c in enumerate(rest)]
    return out


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value)


def model_proto() -> bytes:
    """The serialized ``sentencepiece.ModelProto``: pieces (1), trainer_spec (2: model_type BPE, vocab_size,
    byte_fallback, unk/bos/eos ids 0/1/2), normalizer_spec (3: Llama's)."""
    out = bytearray()
    table = pieces()
    for piece, score, kind in table:
        body = _bytes(1, piece.encode()) + _key(2, 5) + struct.pack("<f", score) + _int(3, kind)
        out += _bytes(1, body)
    trainer = _int(3, 2) + _int(4, len(table)) + _int(35, 1) + _int(40, 0) + _int(41, 1) + _int(42, 2)
    out += _bytes(2, trainer)
    normalizer = _bytes(1, b"identity") + _int(3, 1) + _int(4, 0) + _int(5, 1)
    out += _bytes(3, normalizer)
    return bytes(out)


def vocab_size() -> int:
    return len(pieces())


def ids() -> dict[str, int]:
    return {p: i for i, (p, _, _) in enumerate(pieces())}
