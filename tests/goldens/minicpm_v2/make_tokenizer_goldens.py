"""Writes the tiny checkpoint's ``tokenizer.json`` (graphsurgeon/models/minicpm_v2/tiny) with HF transformers'
own slow->fast conversion, and ``tokenizer_goldens.json``: the OFFICIAL slow tokenizer's ids and text for a
corpus, beside the fast tokenizer's. It never imports graphsurgeon: the tiny folder is read as files.

The official tokenizer is ``LlamaTokenizerWrapper`` of ``modeling_minicpmv.py`` (github:HwwwwwwwH/MiniCPM-V-2
at 187851962daa9b63072d40ec802f597b71bff532), loaded as the official code loads it:
``AutoTokenizer.from_pretrained(folder, trust_remote_code=True)`` on a scratch copy of the tiny tokenizer
files next to the official Python files. It is transformers' slow, sentencepiece-backed ``LlamaTokenizer``
(``legacy: true``, BOS added) on ``tokenizer.model``. The official ``chat`` encodes its prompt with
``tokenizer.encode(prompt)`` (``_convert_to_tensors``: ``add_bos_token`` is true) and decodes an answer with
``_decode_text``: ids 0 dropped, a leading BOS and a trailing EOS dropped, ``tokenizer.decode(...).strip()``.

``tokenizer.json`` is made in two steps, both by HF code:

1. ``LlamaTokenizerFast.from_pretrained(folder, from_slow=True)`` then ``save_pretrained``: transformers
   4.40.2's ``LlamaConverter`` (normalizer ``Sequence[Prepend("▁"), Replace(" ", "▁")]``, no
   pre-tokenizer, BPE with ``byte_fallback`` and ``fuse_unk``, merges ordered by piece score, the decoder
   ``Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)]``, a ``TemplateProcessing`` adding
   ``<s>``, the ``added_tokens_decoder`` tokens as special added tokens). Its ids are recorded as
   ``converted_ids``.
2. This converter drops the model's other sentencepiece USER_DEFINED pieces (the tiny model has two: the
   chat markers ``<用户>`` and ``<AI>``), which sentencepiece always emits whole, after the dummy prefix
   (``"<用户>"`` alone is ``▁`` + ``<用户>``). The fast file then spells them out in bytes. They are added
   here as transformers 5's ``build_tokenizer_from_spm_proto`` represents user-defined pieces: a
   pre-tokenizer ``Split`` isolating them (after the normalizer's dummy prefix), and ``ignore_merges`` so
   that a piece in the vocabulary is one token. The document is re-serialized by ``tokenizers`` itself
   (``Tokenizer.from_str(...).save(...)``). Its ids are ``fast_ids``.

Recorded for each corpus string (ASCII, spaces, newlines and tabs, byte-fallback text, the image, slice
and chat markers, the empty string, and chat prompts made by the official ``chat`` itself from the real
``config.json``, 64 ``<unk>`` per image): ``official_ids``, ``fast_ids``, ``converted_ids``, and the text of
``official_ids`` decoded by both tokenizers, whole (``decode``) and as ``chat`` decodes an answer
(``chat_decode``). Then random id sequences (byte tokens forming valid and broken UTF-8, markers, spaces)
decoded by both, and a sweep of random strings encoded by both (every string and its official ids kept).

Run it in the scratch venv of the official era, outside the project (commands and versions in
graphsurgeon/models/minicpm_v2/README.md, "Tokenizer")::

    cd /work/wt-mcpm-tok && /work/scratch-mcpm-model-venv/bin/python \\
        -m tests.goldens.minicpm_v2.make_tokenizer_goldens \\
        --official /work/.mirror/HwwwwwwwH+MiniCPM-V-2/repo --scratch /work/scratch-mcpm-tok
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

COMMIT = "187851962daa9b63072d40ec802f597b71bff532"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TINY = REPO / "graphsurgeon" / "models" / "minicpm_v2" / "tiny"
TOKENIZER_FILES = ["tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"]
OFFICIAL_FILES = ["configuration_minicpm.py", "modeling_minicpm.py", "modeling_minicpmv.py", "resampler.py"]
USER_DEFINED = 4  # sentencepiece ModelProto.SentencePiece.Type

MARKERS = ["<image>", "</image>", "<slice>", "</slice>", "<unk>", "<s>", "</s>", "<box>", "</ref>"]
CHAT_MARKERS = ["<用户>", "<AI>"]
CORPUS: list[str] = [
    "",
    "Hello world",
    "What is in the image?",
    "Describe the picture in one sentence.",
    "The car is yellow and the sky is grey.",
    "HELLO, World! 42 + 7 = 49; (x) [y] {z} ~ @ # $ % ^ & * _ | \\ / ' \"",
    " ",
    "   ",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "a  b   c    d",
    "\n",
    "\n\n",
    "line one\nline two\n",
    "\ttab\tand\t\ttabs",
    " \n \t \r\n ",
    "这是一张图片。",
    "你好，世界！",
    "企鹅在沙漠里。",
    "日本語のテキスト",
    "한국어",
    "🐧",
    "👨‍👩‍👧‍👦 and 🏳️‍🌈",
    "café naïve Ñandú Straße ÅÄÖ œuvre",
    "Tiếng Việt",
    "e\u0301 vs \u00e9",
    "\u00a0non-breaking\u3000ideographic",
    "▁",
    "▁x ▁ y",
    "<0x41> is not A",
    "<image>",
    "</image>",
    "<slice>",
    "<unk>",
    "<s>",
    "</s>",
    "<用户>",
    "<AI>",
    "<image><unk><unk><unk><unk></image>",
    "<slice><image><unk></image>\n<image><unk></image></slice>",
    "x<image>y",
    " <image> ",
    "<image>\n",
    "<<image>>",
    "<image",
    "<box>12,34</box> <ref>cat</ref>",
    "<用户>hi<AI>",
    "<用户> hi <AI> ok",
    "<用户><AI>",
    "a<用户>b<AI>c",
    "<AI>ok<用户>",
    "<用户>\n<AI>",
    "<用户 AI>",
    "<AI><0x41>",
    "<用户>你好🐧<AI>",
]
#: chats given to the official ``chat`` with each image (None: no image); their prompts join the corpus
CHATS: list[list[dict[str, str]]] = [
    [{"role": "user", "content": "What is in the image?"}],
    [
        {"role": "user", "content": "Describe it."},
        {"role": "assistant", "content": "A picture."},
        {"role": "user", "content": "  And the colours?\n"},
    ],
    [{"role": "user", "content": "这张图片里有什么？🐧"}],
]
CHAT_IMAGES: list[str | None] = [None, "small_100x100", "medium_800x600"]
SWEEP = 1200


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def scratch_folder(official: Path, scratch: Path) -> Path:
    """The tiny tokenizer files next to the official Python files (the tokenizer class lives in
    modeling_minicpmv.py, which imports the other three)."""
    folder = scratch / "tiny_tokenizer"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        shutil.copy2(TINY / name, folder / name)
    for name in OFFICIAL_FILES:
        text = subprocess.run(
            ["git", "-C", str(official), "show", f"{COMMIT}:{name}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def convert(folder: Path, scratch: Path) -> tuple[Path, Path, list[str]]:
    """Step 1 (transformers' conversion, saved) and step 2 (the user-defined pieces isolated): the two
    tokenizer.json paths and the pieces added in step 2."""
    from tokenizers import Tokenizer
    from transformers import LlamaTokenizerFast
    from transformers.convert_slow_tokenizer import import_protobuf

    converted_dir = scratch / "converted"
    shutil.rmtree(converted_dir, ignore_errors=True)
    LlamaTokenizerFast.from_pretrained(str(folder), from_slow=True).save_pretrained(str(converted_dir))
    converted = converted_dir / "tokenizer.json"
    doc = json.loads(converted.read_text(encoding="utf-8"))

    proto = import_protobuf().ModelProto()
    proto.ParseFromString((folder / "tokenizer.model").read_bytes())
    added = {t["content"] for t in doc["added_tokens"]}
    pieces = [p.piece for p in proto.pieces if p.type == USER_DEFINED and p.piece not in added]
    if doc.get("pre_tokenizer") is not None:
        raise SystemExit(f"the converter wrote a pre-tokenizer, {doc['pre_tokenizer']}; step 2 assumes none")
    if pieces:
        pattern = "|".join(re.escape(p) for p in sorted(pieces, key=len, reverse=True))
        doc["pre_tokenizer"] = {
            "type": "Split",
            "pattern": {"Regex": pattern},
            "behavior": "Isolated",
            "invert": False,
        }
        doc["model"]["ignore_merges"] = True
    amended = scratch / "tokenizer.json"
    Tokenizer.from_str(json.dumps(doc, ensure_ascii=False)).save(str(amended), pretty=True)
    return converted, amended, pieces


def chat_prompts(official: Path) -> list[dict[str, Any]]:
    """The prompt text the official ``chat`` builds (the real config: 64 ``<unk>`` per image), recorded
    by the processor goldens' harness (``make_goldens.load_official``: ``chat`` run from the official
    source with ``generate`` replaced by a recorder)."""
    from tests.goldens.minicpm_v2.images import make_image, specs
    from tests.goldens.minicpm_v2.make_goldens import load_official

    model_and_tok, _, recorder = load_official(official)
    by_name = {s["name"]: s for s in specs()}
    out = []
    for name in CHAT_IMAGES:
        image = None if name is None else make_image(by_name[name]).convert("RGB")
        for msgs in CHATS:
            model_and_tok.model.chat(image, msgs, None, model_and_tok.tokenizer)
            out.append({"image": name, "messages": msgs, "text": recorder.prompts[-1]})
    return out


def official_chat_decode(slow: Any, ids: list[int]) -> str:
    """``MiniCPMV._decode_text`` for one answer (mv@1878519 L206-215), on a list."""
    kept = [i for i in ids if i != 0]
    if kept and kept[0] == slow.bos_id:
        kept = kept[1:]
    if kept and kept[-1] == slow.eos_id:
        kept = kept[:-1]
    return str(slow.decode(kept).strip())


def fast_chat_decode(fast: Any, ids: list[int], bos: int, eos: int) -> str:
    """The same steps with the fast tokenizer's decode."""
    kept = [i for i in ids if i != 0]
    if kept and kept[0] == bos:
        kept = kept[1:]
    if kept and kept[-1] == eos:
        kept = kept[:-1]
    return str(fast.decode(kept, skip_special_tokens=False).strip())


def sweep_strings(count: int, seed: int = 11) -> list[str]:
    """Random strings of words, spaces, newlines, tabs, characters outside the vocabulary (byte
    fallback), markers and chat markers."""
    rng = random.Random(seed)
    words = ["the", "image", "cat", "sits", "on", "a", "red", "table", "What", "is", "in", "?", ".", ","]
    words += [
        "图片",
        "猫",
        "这是",
        "你好",
        "世界",
        "企鹅",
        "é",
        "ß",
        "Ω",
        "ж",
        "🐧",
        "😀",
        "👍🏽",
        "0x41",
        "▁",
    ]
    spaces = [" ", "  ", "   ", "\n", "\n\n", "\t", " \n", "\r\n", "\u3000"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 10)):
            r = rng.random()
            if r < 0.45:
                parts.append(rng.choice(words))
            elif r < 0.7:
                parts.append(rng.choice(spaces))
            elif r < 0.8:
                parts.append(rng.choice(MARKERS))
            elif r < 0.9:
                parts.append(rng.choice(CHAT_MARKERS))
            else:
                parts.append(chr(rng.choice([rng.randrange(0x4E00, 0x9FA6), rng.randrange(0xC0, 0x250)])))
        out.append("".join(parts))
    return out


def id_sequences(vocab: dict[str, int], count: int = 40, seed: int = 5) -> list[list[int]]:
    """Random ids for decoding: byte tokens forming valid UTF-8 (CJK, emoji) and broken runs (a lead byte
    alone, a stray continuation byte), markers, chat markers, ``▁`` and other pieces."""
    rng = random.Random(seed)
    byte = {b: vocab[f"<0x{b:02X}>"] for b in range(256)}
    specials = [vocab[m] for m in ["<s>", "</s>", "<unk>", "<image>", "</image>", "<box>", "<AI>", "<用户>"]]
    normal = sorted(i for t, i in vocab.items() if not t.startswith("<"))
    out = []
    for _ in range(count):
        ids: list[int] = []
        for _ in range(rng.randint(1, 10)):
            r = rng.random()
            if r < 0.3:
                ids += [byte[b] for b in rng.choice(["猫".encode(), "🐧".encode(), "é".encode(), b"\n"])]
            elif r < 0.4:
                ids += [byte[b] for b in rng.choice([b"\xe4", b"\x80", b"\xe4\xb8", b"\xf0\x9f\x90"])]
            elif r < 0.55:
                ids.append(rng.choice(specials))
            elif r < 0.65:
                ids.append(vocab["▁"])
            else:
                ids.append(rng.choice(normal))
        out.append(ids)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True, help="a git mirror of HwwwwwwwH/MiniCPM-V-2")
    parser.add_argument("--scratch", type=Path, required=True, help="a scratch folder outside the project")
    parser.add_argument("--out", type=Path, default=HERE / "tokenizer_goldens.json")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import sentencepiece  # type: ignore[import-not-found,unused-ignore]
    import tokenizers
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    args.scratch.mkdir(parents=True, exist_ok=True)
    folder = scratch_folder(args.official, args.scratch)
    slow = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)
    if type(slow).__name__ != "LlamaTokenizerWrapper" or not slow.legacy or not slow.add_bos_token:
        raise SystemExit(f"unexpected official tokenizer {type(slow).__name__} (legacy {slow.legacy})")
    converted_path, amended_path, pieces = convert(folder, args.scratch)
    converted, fast = Tokenizer.from_file(str(converted_path)), Tokenizer.from_file(str(amended_path))
    bos, eos = slow.bos_id, slow.eos_id

    def entry(text: str) -> dict[str, Any]:
        ids = list(slow.encode(text))
        return {
            "text": text,
            "official_ids": ids,
            "fast_ids": fast.encode(text).ids,
            "converted_ids": converted.encode(text).ids,
            "official_decode": slow.decode(ids),
            "fast_decode": fast.decode(ids, skip_special_tokens=False),
            "official_chat_decode": official_chat_decode(slow, ids),
            "fast_chat_decode": fast_chat_decode(fast, ids, bos, eos),
        }

    corpus = [entry(text) for text in CORPUS]
    chats = [{**chat, **entry(chat["text"])} for chat in chat_prompts(args.official)]
    vocab = fast.get_vocab(with_added_tokens=True)
    decodes = [
        {
            "ids": ids,
            "official_decode": slow.decode(ids),
            "fast_decode": fast.decode(ids, skip_special_tokens=False),
        }
        for ids in id_sequences(vocab)
    ]
    sweep = [
        {"text": t, "official_ids": list(slow.encode(t)), "fast_ids": fast.encode(t).ids}
        for t in sweep_strings(SWEEP)
    ]

    shutil.copy2(amended_path, TINY / "tokenizer.json")
    agree = lambda rows, a, b: sum(r[a] == r[b] for r in rows)  # noqa: E731
    golden = {
        "about": "the official slow MiniCPM-V-2 tokenizer and the fast tokenizer.json on minicpm_v2/tiny; "
        "see make_tokenizer_goldens.py",
        "commit": COMMIT,
        "versions": {
            "python": platform.python_version(),
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "sentencepiece": sentencepiece.__version__,
        },
        "official_class": type(slow).__name__,
        "tiny_sha256": {name: sha256(TINY / name) for name in [*TOKENIZER_FILES, "tokenizer.json"]},
        "user_defined_added": pieces,
        "summary": {
            "corpus": len(corpus) + len(chats),
            "corpus_fast_equals_official": agree(corpus + chats, "fast_ids", "official_ids"),
            "corpus_converted_equals_official": agree(corpus + chats, "converted_ids", "official_ids"),
            "corpus_decode_equal": agree(corpus + chats, "fast_decode", "official_decode"),
            "corpus_chat_decode_equal": agree(corpus + chats, "fast_chat_decode", "official_chat_decode"),
            "id_sequences": len(decodes),
            "id_sequences_decode_equal": agree(decodes, "fast_decode", "official_decode"),
            "sweep": len(sweep),
            "sweep_fast_equals_official": agree(sweep, "fast_ids", "official_ids"),
        },
        "corpus": corpus,
        "chats": chats,
        "decodes": decodes,
        "sweep": sweep,
    }
    rows = lambda key: ",\n  ".join(json.dumps(r, ensure_ascii=False) for r in golden[key])  # noqa: E731
    head = {k: v for k, v in golden.items() if k not in ("corpus", "chats", "decodes", "sweep")}
    text = json.dumps(head, indent=1, ensure_ascii=False)[:-2]
    for key in ("corpus", "chats", "decodes", "sweep"):
        text += f',\n "{key}": [\n  {rows(key)}\n ]'
    args.out.write_text(text + "\n}\n", encoding="utf-8")
    print(json.dumps(golden["summary"], indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
