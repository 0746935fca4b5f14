"""The tiny Penguin-VL checkpoint's slow-tokenizer files (issue 14, item 3): the official loader
(tencent-ailab/Penguin-VL ``penguinvl/model/__init__.py``) opens the tokenizer with
``AutoTokenizer.from_pretrained(path, use_fast=False)``; transformers 4.x's slow ``Qwen2Tokenizer`` reads
``vocab.json`` + ``merges.txt`` and never ``tokenizer.json``, so without them the official code stops
there. ``make_tiny`` writes both from the same BPE model; they must tokenize exactly as ``tokenizer.json``.

Oracles: HF ``tokenizers`` on ``tokenizer.json`` (what the converter and the reference use); transformers'
own ``Qwen2Tokenizer`` built from ``vocab.json`` + ``merges.txt`` alone (a folder without
``tokenizer.json``); and a byte-level BPE written here from the GPT-2/Qwen2 definition (NFC, Qwen2's split
regex, bytes to unicode, lowest-rank merge first), which shares no code with either.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
regex = pytest.importorskip("regex")

from graphsurgeon.models.penguin_vl.config import load_files  # noqa: E402
from graphsurgeon.models.penguin_vl.make_tiny import SHIPPED  # noqa: E402
from graphsurgeon.models.penguin_vl.processor import PenguinTokenizer, Turn, render_chat  # noqa: E402
from graphsurgeon.models.penguin_vl.tiny_tokenizer import MERGES_FILE, QWEN2_SPLIT, VOCAB_FILE, corpus_lines  # noqa: E402

TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json")


def _tokenizer_json() -> dict[str, Any]:
    return json.loads((SHIPPED / "tokenizer.json").read_text(encoding="utf-8"))


def _fast() -> Any:
    return tokenizers.Tokenizer.from_file(str(SHIPPED / "tokenizer.json"))


def _merges(folder: Path) -> list[tuple[str, str]]:
    lines = (folder / MERGES_FILE).read_text(encoding="utf-8").split("\n")
    assert lines[0] == "#version: 0.2" and lines[-1] == ""
    pairs = [tuple(line.split(" ")) for line in lines[1:-1]]
    assert all(len(p) == 2 and all(p) for p in pairs)
    return pairs  # type: ignore[return-value]


def sweep() -> list[str]:
    """Text the model meets: the training corpus, chat prompts with every special token, and what tends to
    break a byte-level BPE (contractions, digit runs, whitespace runs, CR/LF, non-NFC input, CJK, emoji,
    lone punctuation, strings of random code points)."""
    tokens = load_files(SHIPPED).tokens
    lines = corpus_lines()[::97]
    chats = [
        render_chat([Turn("user", [None, "What month is printed at the top?"])], tokens.image),
        render_chat([Turn("user", ["Describe the image.", None, None])], tokens.image, think=True),
        render_chat([Turn("system", ["You are helpful."]), Turn("user", ["hi"])], tokens.image),
        tokens.image * 7 + "\nCount: 12345<|im_end|><|im_start|>assistant\n<think>\n\n</think>\n\n",
    ]
    tricky = [
        "",
        " ",
        "   leading and trailing   ",
        "don't I'll WE'RE they've she'd it's O'NEIL",
        "12345 3.14159 2026-12-01 1,000,000",
        "tabs\tand\t\tnewlines\n\n\nCR\r\nLF\rend\n",
        "e\u0301 cafe\u0301 \u212b \ufb01",  # not NFC: combining accent, Angstrom sign, fi ligature
        "你好，世界！これは日本語です。한국어",
        "🐧 penguin 👍🏽 🇨🇳 family: 👨‍👩‍👧",
        "!!!???...;;;---___***",
        "<image> <image>< image> <|im_end|> <|im_start |> </think><think>",
        "x" * 300,
    ]
    rng = random.Random(14)
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x4E00, 0x4FFF), (0x1F300, 0x1F64F)]
    rand = []
    for _ in range(60):
        chars = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(ranges)
            chars.append(chr(rng.randint(lo, hi)) if rng.random() > 0.15 else rng.choice(" \n\t"))
        rand.append("".join(chars))
    return lines + chats + tricky + rand


# --- an independent byte-level BPE (GPT-2 / Qwen2 definition) -------------------------------------------


def _bytes_to_unicode() -> dict[int, str]:
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


class PlainBPE:
    def __init__(self, folder: Path) -> None:
        self.vocab: dict[str, int] = json.loads((folder / VOCAB_FILE).read_text(encoding="utf-8"))
        self.ranks = {pair: i for i, pair in enumerate(_merges(folder))}
        self.byte_map = _bytes_to_unicode()
        self.split = regex.compile(QWEN2_SPLIT)

    @cache  # noqa: B019 - a handful of instances in one test run
    def _word(self, word: str) -> tuple[int, ...]:
        parts = list(word)
        while len(parts) > 1:
            pairs = [
                (self.ranks.get((a, b), len(self.ranks)), i)
                for i, (a, b) in enumerate(itertools.pairwise(parts))
            ]
            rank, i = min(pairs)
            if rank == len(self.ranks):
                break
            a, b = parts[i], parts[i + 1]
            out, j = [], 0
            while j < len(parts):  # merge every occurrence of the pair, left to right
                if j < len(parts) - 1 and parts[j] == a and parts[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(parts[j])
                    j += 1
            parts = out
        return tuple(self.vocab[p] for p in parts)

    def encode(self, text: str, added: dict[str, int]) -> list[int]:
        ids: list[int] = []
        pattern = "(" + "|".join(regex.escape(t) for t in sorted(added, key=len, reverse=True)) + ")"
        for k, chunk in enumerate(regex.split(pattern, text)):
            if k % 2:
                ids.append(added[chunk])
                continue
            for piece in self.split.findall(unicodedata.normalize("NFC", chunk)):
                ids += self._word("".join(self.byte_map[b] for b in piece.encode("utf-8")))
        return ids


# --- the tests ------------------------------------------------------------------------------------------


def test_the_slow_tokenizer_files_hold_the_bpe_model_of_tokenizer_json() -> None:
    model = _tokenizer_json()["model"]
    vocab = json.loads((SHIPPED / VOCAB_FILE).read_text(encoding="utf-8"))
    assert vocab == model["vocab"] and sorted(vocab.values()) == list(range(len(vocab)))
    assert list(vocab.values()) == sorted(vocab.values())  # written in id order, as Qwen's is
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    assert _merges(SHIPPED) == merges and len(merges) == len(vocab) - 256
    added = {t["content"]: t["id"] for t in _tokenizer_json()["added_tokens"]}
    assert not set(added) & set(vocab)  # the added tokens come from tokenizer_config.json
    config = json.loads((SHIPPED / "tokenizer_config.json").read_text())
    assert {v["content"]: int(k) for k, v in config["added_tokens_decoder"].items()} == added


def test_transformers_qwen2_tokenizer_from_vocab_and_merges_alone_gives_tokenizer_json_ids(
    tmp_path: Path,
) -> None:
    for name in (VOCAB_FILE, MERGES_FILE, *TOKENIZER_FILES):
        shutil.copy(SHIPPED / name, tmp_path / name)  # no tokenizer.json: only the slow files can be read
    slow = transformers.Qwen2Tokenizer.from_pretrained(str(tmp_path))
    fast = _fast()
    strings = sweep()
    mismatches = [
        (s, slow.encode(s, add_special_tokens=False), fast.encode(s).ids)
        for s in strings
        if slow.encode(s, add_special_tokens=False) != fast.encode(s).ids
    ]
    assert not mismatches, mismatches[:3]
    assert len(slow) == fast.get_vocab_size(with_added_tokens=True)
    for s in strings:
        ids = fast.encode(s).ids
        assert slow.decode(ids, skip_special_tokens=False) == fast.decode(ids, skip_special_tokens=False)


def test_the_official_tokenizer_call_opens_the_folder_with_the_converter_s_ids() -> None:
    official = transformers.AutoTokenizer.from_pretrained(str(SHIPPED), use_fast=False)
    ours = PenguinTokenizer(load_files(SHIPPED))
    assert type(official).__name__ == "Qwen2Tokenizer"
    assert official.eos_token == ours.tokens.eos and official.pad_token == "<|endoftext|>"
    for s in sweep():
        assert official.encode(s, add_special_tokens=False) == ours.encode(s), s


def test_an_independent_bpe_on_vocab_and_merges_gives_tokenizer_json_ids() -> None:
    plain = PlainBPE(SHIPPED)
    added = {t["content"]: t["id"] for t in _tokenizer_json()["added_tokens"]}
    fast = _fast()
    for s in sweep():
        assert plain.encode(s, added) == fast.encode(s).ids, s


def test_the_converter_reads_the_folder_the_same_without_the_slow_files(tmp_path: Path) -> None:
    without = Path(shutil.copytree(SHIPPED, tmp_path / "without"))
    (without / VOCAB_FILE).unlink()
    (without / MERGES_FILE).unlink()
    ours, shipped = load_files(without), load_files(SHIPPED)
    assert (ours.config, ours.processor, ours.tokens) == (shipped.config, shipped.processor, shipped.tokens)
