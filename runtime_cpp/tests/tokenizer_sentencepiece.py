"""The SentencePiece-style tokenizer files of ``check_tokenizer.py``: the C++ tokenizer (``gsurg_tokenize``)
against the OFFICIAL MiniCPM-V-2 slow tokenizer's recorded ids and against HF ``tokenizers`` computed here.

* ``minicpm-v2-tiny`` (``graphsurgeon/models/minicpm_v2/tiny/tokenizer.json``, made by HF transformers'
  converter, tests/goldens/minicpm_v2/make_tokenizer_goldens.py): ids equal to the official slow
  ``LlamaTokenizerWrapper``'s (``tokenizer_goldens.json``: hand-written strings, official chat prompts, a
  random sweep; the one recorded string where the file's ids are not the official ones must give the
  file's); decode of those ids and of the recorded id sequences equal to the recorded HF decode, and the
  ``chat`` answer decoding (ids 0, BOS, EOS dropped, stripped) equal to the official one wherever the goldens
  say the fast decode agrees with it;
* the same file and variants of it in the newer Metaspace form (no normalizer; pre-tokenizer ``Metaspace``
  with each ``prepend_scheme`` and ``split``; the Metaspace decoder or the legacy chain), and one tokenizer
  written here by hand in that form (Mistral's layout: ``Metaspace`` first/no split, merges as ``"a b"``
  strings, byte fallback, a normalized and an lstrip added token): ids and decode against
  ``tokenizers``' own on random strings (``tokenizer_corpus.sentencepiece_strings``: words, runs of spaces,
  newlines, tabs, characters only byte fallback can spell, markers, chat markers, invalid UTF-8 - HF gets
  Python's "replace" decoding of those bytes), random id sequences, ``token_id`` of every token and
  ``vocab_size``;
* stream decode: all pushes + finish equal HF's decode; what is returned after k ids is a prefix of HF's
  decode of those k ids and of all ids, and equals HF's decode of the k ids whenever the last known one is not
  a byte token (a byte run is held until it ends, because HF decodes it as a whole).
"""

from __future__ import annotations

import base64
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tokenizer_corpus as corpus

REPO = Path(__file__).resolve().parents[2]
MINICPM_TINY = REPO / "graphsurgeon" / "models" / "minicpm_v2" / "tiny" / "tokenizer.json"
GOLDENS = REPO / "tests" / "goldens" / "minicpm_v2" / "tokenizer_goldens.json"
#: the strings where the tiny file's ids are recorded to differ from the official slow tokenizer's
KNOWN_DIFFERENCES = {"<AI><0x41>"}
BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")

Encode = Callable[[Path, list[Any]], dict[str, Any]]  # (tokenizer.json, items) -> gsurg_tokenize's output
Fail = Callable[[str, str], None]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _text(res: dict[str, Any], key: str = "decode") -> str:
    return base64.b64decode(res[key]).decode()


def check_stream(hf: Any, ids: list[int], res: dict[str, Any], what: str, fail: Fail) -> None:
    """The stream properties of the module docstring, against HF's decode of every prefix."""
    chunks = [base64.b64decode(c).decode() for c in res["stream"]]
    full = hf.decode(ids, skip_special_tokens=False)
    if "".join(chunks) != full:
        fail("stream", f"{what}: pushes + finish {''.join(chunks)!r} != HF {full!r}")
        return
    emitted, last_byte = "", False
    for k, (i, chunk) in enumerate(zip(ids, chunks, strict=False)):
        emitted += chunk
        token = hf.id_to_token(i)
        if token is not None:
            last_byte = BYTE_TOKEN.fullmatch(token) is not None
        prefix = hf.decode(ids[: k + 1], skip_special_tokens=False)
        if not (prefix.startswith(emitted) and full.startswith(emitted)) or (
            not last_byte and emitted != prefix
        ):
            fail("stream", f"{what}: after id {k} ({i}) the stream gave {emitted!r}, HF decodes {prefix!r}")
            return


def check_against_hf(
    encode: Encode, name: str, path: Path, strings: list[bytes], fail: Fail, id_lists: int = 60
) -> None:
    """ids, decode, stream, token_id and vocab_size of one file against ``tokenizers`` on it."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(path))
    vocab = hf.get_vocab(with_added_tokens=True)
    top = max(vocab.values()) + 1
    rng = random.Random(len(name))
    byte_ids = [vocab[t] for t in vocab if BYTE_TOKEN.fullmatch(t)]
    lists = []
    for _ in range(
        id_lists
    ):  # runs of byte tokens (often broken UTF-8) among any ids, past the vocabulary too
        ids: list[int] = []
        while len(ids) < rng.randint(1, 24):
            ids += [rng.choice(byte_ids) for _ in range(rng.randint(1, 4))] if rng.random() < 0.4 else []
            ids.append(rng.randrange(0, top + 3))
        lists.append(ids)
    queries = [*vocab, "", "▁", "<0x4", "not a token"]
    items: list[Any] = [_b64(s) for s in strings] + [{"ids": ids} for ids in lists]
    items += [{"token": _b64(q.encode())} for q in queries]
    output = encode(path, items)
    results = output["results"]
    if output["vocab_size"] != top:
        fail("vocab_size", f"{name}: HF largest id + 1 = {top}, C++ vocab_size() = {output['vocab_size']}")
    for data, res in zip(strings, results, strict=False):
        text = data.decode("utf-8", "replace")
        want = hf.encode(text).ids
        if res["ids"] != want:
            fail("ids", f"{name}: {text[:80]!r}\n    HF : {want[:24]}\n    C++: {res['ids'][:24]}")
            continue
        if _text(res) != hf.decode(want, skip_special_tokens=False):
            fail("decode", f"{name}: {text[:60]!r}: {_text(res)!r} vs HF {hf.decode(want)!r}")
        check_stream(hf, want, res, f"{name}: {text[:40]!r}", fail)
    base = len(strings)
    for k, ids in enumerate(lists):
        res = results[base + k]
        if _text(res) != hf.decode(ids, skip_special_tokens=False):
            fail(
                "decode",
                f"{name}: ids {ids}: {_text(res)!r} vs HF {hf.decode(ids, skip_special_tokens=False)!r}",
            )
        check_stream(hf, ids, res, f"{name}: ids {ids[:8]}", fail)
    base += len(lists)
    for k, q in enumerate(queries):
        if results[base + k]["id"] != vocab.get(q, -1):
            fail("token_id", f"{name}: token_id({q!r}) = {results[base + k]['id']}, HF {vocab.get(q, -1)}")
    print(f"{name}: {len(strings)} strings, {len(lists)} id sequences, {len(queries)} token lookups checked")


def check_official(encode: Encode, fail: Fail) -> None:
    """The tiny MiniCPM-V-2 file against the official slow tokenizer's recorded ids and decodes."""
    golden = json.loads(GOLDENS.read_text(encoding="utf-8"))
    rows = golden["corpus"] + golden["chats"] + golden["sweep"]
    long = golden["chats"][-1]["text"]
    while len(long) < 10_000:  # a long chat prompt, for the time it takes
        long += golden["chats"][-1]["text"]
    items: list[Any] = [_b64(r["text"].encode()) for r in rows] + [_b64(long.encode())]
    items += [{"ids": r["ids"]} for r in golden["decodes"]]
    chat = [
        r for r in golden["corpus"] + golden["chats"] if r["official_chat_decode"] == r["fast_chat_decode"]
    ]
    items += [{"ids": _chat_answer_ids(r["official_ids"])} for r in chat]
    results = encode(MINICPM_TINY, items)["results"]
    official = 0
    for row, res in zip(rows, results, strict=False):
        want = row["fast_ids"] if row["text"] in KNOWN_DIFFERENCES else row["official_ids"]
        official += res["ids"] == row["official_ids"]
        if res["ids"] != want:
            fail(
                "official ids",
                f"{row['text'][:80]!r}\n    official: {want[:24]}\n    C++     : {res['ids'][:24]}",
            )
        elif "fast_decode" in row and res["ids"] == row["official_ids"] and _text(res) != row["fast_decode"]:
            fail(
                "official decode",
                f"{row['text'][:60]!r}: {_text(res)!r} vs recorded HF {row['fast_decode']!r}",
            )
    perf = results[len(rows)]["encode_us"]
    if perf >= 100_000:
        fail("performance", f"minicpm-v2-tiny: a {len(long)}-character prompt took {perf} us")
    base = len(rows) + 1
    for row, res in zip(golden["decodes"], results[base:], strict=False):
        if _text(res) != row["fast_decode"]:
            fail("official decode", f"ids {row['ids']}: {_text(res)!r} vs recorded HF {row['fast_decode']!r}")
    base += len(golden["decodes"])
    for row, res in zip(chat, results[base:], strict=False):
        if _text(res).strip() != row["official_chat_decode"]:
            fail("official chat decode", f"{row['text'][:60]!r}: {_text(res).strip()!r}")
    print(
        f"minicpm-v2-tiny: {official} of {len(rows)} strings give the official ids (the rest: "
        f"{sorted(KNOWN_DIFFERENCES)}); {len(golden['decodes'])} id sequences and {len(chat)} chat answers "
        f"decoded; a {len(long)}-character prompt encoded in {perf / 1000:.2f} ms"
    )


def _chat_answer_ids(ids: list[int]) -> list[int]:
    """What the official ``_decode_text`` decodes: ids 0 dropped, a leading BOS (1) and a trailing EOS (2)."""
    kept = [i for i in ids if i != 0]
    kept = kept[1:] if kept and kept[0] == 1 else kept
    return kept[:-1] if kept and kept[-1] == 2 else kept


def metaspace_variants(work: Path) -> list[tuple[str, Path]]:
    """The tiny MiniCPM-V-2 file rewritten in the newer form: no normalizer, a Metaspace pre-tokenizer of
    each scheme (the file's Split of the chat markers after it), with and without split, the Metaspace
    decoder or the file's legacy chain; merges as ["a", "b"] pairs."""
    doc = json.loads(MINICPM_TINY.read_text(encoding="utf-8"))
    legacy_decoder, split_markers = doc["decoder"], doc["pre_tokenizer"]
    doc["model"]["merges"] = [m.split(" ") for m in doc["model"]["merges"]]  # the pair form
    out = []
    for scheme, split, decoder in [
        ("first", False, "legacy"),
        ("always", True, "metaspace"),
        ("never", True, "legacy"),
        ("first", True, "metaspace"),
        ("never", False, "metaspace"),
    ]:
        meta = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
        doc["normalizer"] = None
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [meta, split_markers]}
        doc["decoder"] = legacy_decoder if decoder == "legacy" else meta
        path = work / f"minicpm-metaspace-{scheme}-{'split' if split else 'whole'}-{decoder}.json"
        path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
        out.append((path.stem, path))
    return out


def hand_written(work: Path) -> list[Path]:
    """A small SentencePiece-style tokenizer in Mistral's layout, written here: Metaspace (first, no split),
    no normalizer, BPE with byte fallback and "a b" merges, the legacy decoder chain, a TemplateProcessing
    adding <s>, and added tokens (special; normalized; lstrip). Then two variants of it without byte
    fallback in the legacy form."""
    words = ["▁the", "▁cat", "▁sat", "▁on", "▁mat", "▁a", "ing", "▁▁", "er", "▁is", "▁image"]
    vocab: dict[str, int] = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    merges: list[str] = []
    for ch in sorted({c for w in words for c in w} | set("bdfhklnprwxyz.,?")):
        vocab.setdefault(ch, len(vocab))
    for word in words:  # left to right: ▁ t -> ▁t, ▁t h -> ▁th, ...
        for k in range(2, len(word) + 1):
            if word[:k] not in vocab:
                merges.append(f"{word[: k - 1]} {word[k - 1]}")
                vocab[word[:k]] = len(vocab)
    special = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    added = [{"id": i, "content": t, **special} for t, i in [("<unk>", 0), ("<s>", 1), ("</s>", 2)]]
    added.append({"id": len(vocab), "content": "<image>", **special})
    added.append({**special, "id": len(vocab) + 1, "content": "<AI>", "normalized": True, "special": False})
    added.append({**special, "id": len(vocab) + 2, "content": "<mask>", "lstrip": True})
    doc: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    path = work / "hand-written-metaspace.json"
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
    # the same without byte fallback (unknown characters are <unk>, fused or not), in the legacy form with a
    # normalized added token (matched as its normalized content, "▁<AI>")
    doc["normalizer"] = {
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        ],
    }
    doc["pre_tokenizer"] = None
    doc["model"]["byte_fallback"] = False
    doc["decoder"]["decoders"] = [d for d in doc["decoder"]["decoders"] if d["type"] != "ByteFallback"]
    variants = [path]
    for fuse in (True, False):
        doc["model"]["fuse_unk"] = fuse
        variants.append(work / f"hand-written-legacy-unk{'-fused' if fuse else ''}.json")
        variants[-1].write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
    return variants


def check_sentencepiece(encode: Encode, work: Path, fail: Fail) -> None:
    check_official(encode, fail)
    strings = corpus.sentencepiece_strings()
    files = [("minicpm-v2-tiny", MINICPM_TINY), *metaspace_variants(work)]
    files += [(path.stem, path) for path in hand_written(work)]
    for name, path in files:
        check_against_hf(encode, name, path, strings, fail)


def bad_sentencepiece_cases() -> list[tuple[str, Any, str]]:
    """Broken or unsupported SentencePiece-style files: (name, tokenizer.json, expected message part)."""
    good = json.loads(MINICPM_TINY.read_text(encoding="utf-8"))
    no_byte = {
        **good,
        "model": {
            **good["model"],
            "vocab": {k: v for k, v in good["model"]["vocab"].items() if k != "<0x41>"},
        },
    }
    regex_replace = {"type": "Replace", "pattern": {"Regex": " +"}, "content": "▁"}
    strip_first = {"type": "Sequence", "decoders": [{"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    not_literal = {
        "type": "Split",
        "pattern": {"Regex": "<用户>|\\d+"},
        "behavior": "Isolated",
        "invert": False,
    }
    return [
        (
            "spm-nfkc",
            {**good, "normalizer": {"type": "NFKC"}},
            'normalizer: normalizer "NFKC" is not supported',
        ),
        (
            "spm-regex-replace",
            {**good, "normalizer": {"type": "Sequence", "normalizers": [regex_replace]}},
            'normalizer.normalizers[0]: Replace with the pattern {"Regex":" +"} is not supported',
        ),
        ("spm-missing-byte", no_byte, 'model.byte_fallback is true, but model.vocab has no "<0x41>"'),
        (
            "spm-whitespace-pre-tokenizer",
            {**good, "pre_tokenizer": {"type": "Whitespace"}},
            'pre_tokenizer: pre_tokenizer "Whitespace" is not supported',
        ),
        ("spm-split-regex", {**good, "pre_tokenizer": not_literal}, "is not an alternation of literals"),
        ("spm-strip-before-fuse", {**good, "decoder": strip_first}, 'decoder.decoders[0]: decoder "Strip"'),
        ("spm-wordpiece-decoder", {**good, "decoder": {"type": "WordPiece"}}, 'decoder: decoder "WordPiece"'),
        ("spm-no-decoder", {**good, "decoder": None}, "decoder: none is not supported"),
    ]
