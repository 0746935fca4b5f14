"""The VQA fixture's tokenizer (``train.py``): ``tiny_tokenizer``'s SentencePiece layout — ``<unk>``,
``<s>``, ``</s>``, the real ``added_tokens_decoder`` markers and the chat markers at the tiny ids, the 256
byte pieces, then BPE pieces — with the BPE trained on ``vqa_supervision.tokenizer_lines`` instead of the
tiny corpus, a question mark split off each word first, so that every vocabulary word after a space is
one piece (``▁red``) whatever follows it in a question.

Written as both files a MiniCPM-V-2 checkpoint carries: ``tokenizer.model`` (the SentencePiece proto, as
``tiny_tokenizer.model_proto`` writes it) and ``tokenizer.json``, the shipped tiny one (HF transformers'
conversion plus the chat markers' ``Split``) with its BPE vocabulary and merges replaced by these.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from . import tiny_tokenizer as tt

SHIPPED_JSON = Path(__file__).resolve().parent / "tiny" / "tokenizer.json"


def train_merges(lines: list[str]) -> list[tuple[str, str]]:
    """``tiny_tokenizer.train_bpe``'s BPE (ties to the smallest pair, pairs seen twice at least) run to
    the end, returning the merged pairs in merge order."""
    words = Counter(tt.SPACE + w for line in lines for w in line.replace("?", " ?").split(" ") if w)
    seqs = {w: list(w) for w in words}
    merges: list[tuple[str, str]] = []
    while True:
        pairs: Counter[tuple[str, str]] = Counter()
        for w, n in words.items():
            for pair in itertools.pairwise(seqs[w]):
                pairs[pair] += n
        best = min(pairs, key=lambda p: (-pairs[p], p), default=None)
        if best is None or pairs[best] < 2:
            return merges
        merges.append(best)
        for w, s in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out


def pieces(lines: list[str]) -> tuple[list[tuple[str, float, int]], list[tuple[str, str]]]:
    """``(piece, score, type)`` in id order, as ``tiny_tokenizer.pieces`` lays them out, and the merges."""
    merges = train_merges(lines)
    out: list[tuple[str, float, int]] = [(tt.UNK, 0.0, tt.UNKNOWN), (tt.BOS, 0.0, tt.CONTROL)]
    out += [(tt.EOS, 0.0, tt.CONTROL), *[(p, 0.0, tt.USER) for p in tt.USER_DEFINED]]
    out += [(f"<0x{b:02X}>", 0.0, tt.BYTE) for b in range(256)]
    out += [(a + b, -float(rank), tt.NORMAL) for rank, (a, b) in enumerate(merges)]
    seen = {p for p, _, _ in out}
    chars = sorted({c for line in lines for c in line.replace(" ", "")} | {tt.SPACE})
    rest = [c for c in chars if c not in seen]
    out += [(c, -float(len(merges) + rank), tt.NORMAL) for rank, c in enumerate(rest)]
    return out, merges


def model_proto(table: list[tuple[str, float, int]]) -> bytes:
    """``tiny_tokenizer.model_proto``'s serialisation of ``table``."""
    out = bytearray()
    for piece, score, kind in table:
        body = tt._bytes(1, piece.encode()) + tt._key(2, 5) + struct.pack("<f", score) + tt._int(3, kind)
        out += tt._bytes(1, body)
    trainer = tt._int(3, 2) + tt._int(4, len(table)) + tt._int(35, 1)
    out += tt._bytes(2, trainer + tt._int(40, 0) + tt._int(41, 1) + tt._int(42, 2))
    normalizer = tt._bytes(1, b"identity") + tt._int(3, 1) + tt._int(4, 0) + tt._int(5, 1)
    return bytes(out + tt._bytes(3, normalizer))


def tokenizer_json(table: list[tuple[str, float, int]], merges: list[tuple[str, str]]) -> dict[str, Any]:
    """The shipped ``tokenizer.json`` with this vocabulary and these merges."""
    doc: dict[str, Any] = json.loads(SHIPPED_JSON.read_text(encoding="utf-8"))
    doc["model"]["vocab"] = {piece: i for i, (piece, _, _) in enumerate(table)}
    doc["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    return doc


def build_tokenizer(lines: list[str]) -> tuple[Any, dict[str, bytes]]:
    """The ``tokenizers.Tokenizer`` of ``tokenizer.json`` and both files' bytes by name."""
    from tokenizers import Tokenizer

    table, merges = pieces(lines)
    tok = Tokenizer.from_str(json.dumps(tokenizer_json(table, merges), ensure_ascii=False))
    text = tok.to_str(pretty=True).encode("utf-8")
    return tok, {"tokenizer.model": model_proto(table), "tokenizer.json": text}
