"""Test strings and a trained tokenizer for ``check_tokenizer.py`` (the C++ tokenizer's parity test).

Everything is deterministic (``random.Random`` with fixed seeds, no downloads):

* ``test_strings()``: >= 200 byte strings - hand-picked edge cases (CJK, emoji and ZWJ sequences, mixed
  scripts, digits, runs of spaces / newlines / tabs / CRLF, contractions in any case, added tokens inside
  text, NFC-sensitive sequences) plus random mixtures of them, and invalid UTF-8 (lone continuation bytes,
  truncated sequences, overlongs, surrogates, bytes F5..FF) mixed into text and around special tokens.
* ``long_prompt()``: a chat prompt of >= 10 000 characters (the performance check).
* ``train_tokenizer()``: a byte-level BPE with Qwen2's pre-tokenizer and NFC, trained with HF ``tokenizers``
  on multilingual text (Latin with diacritics, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, CJK,
  kana, Hangul, emoji) so it holds thousands of merges, with added tokens using every flag
  (special / non-special, normalized, lstrip, rstrip, single_word, content already in the vocabulary).
* ``random_merges()``: grows a tokenizer document with merges of random token pairs.
* ``sentencepiece_strings()``: random strings for SentencePiece-style files (MiniCPM-V-2): words, runs of
  spaces, newlines, tabs, characters byte fallback spells, ``▁``, image / slice / chat markers, invalid UTF-8.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# The tiny Penguin-VL's tokenizer pipeline, trained here on other text.
from graphsurgeon.models.penguin_vl.tiny_tokenizer import QWEN2_SPLIT as QWEN2_SPLIT  # noqa: E402  (check_tokenizer uses it)
from graphsurgeon.models.penguin_vl.tiny_tokenizer import train_qwen2_bpe  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<image>"]

WORDS = {
    "en": "the image shows a penguin on the sand near the old newspaper printed in July what where month"
    " Describe answer question HELLO World it's don't I'M we'LL they'Re you've she'd",
    "fr": "été français garçon où déjà naïve cœur Noël hôtel élève l'œuvre aujourd'hui",
    "de": "Straße Größe übermäßig Äpfel schön Fußball Mädchen ÄÖÜ",
    "es": "niño año corazón ¿Qué ¡Hola! mañana pingüino",
    "vi": "Tiếng Việt người Hà Nội phở được",
    "ru": "привет мир Москва спасибо хорошо ёлка Россия ПИНГВИН",
    "el": "καλημέρα Ελλάδα ευχαριστώ ΑΘΗΝΑ ψυχή",
    "ar": "مرحبا العربية شكرا كتاب ١٢٣ البطريق",
    "he": "שלום עברית תודה פינגווין",
    "hi": "नमस्ते हिन्दी भारत धन्यवाद १२३ पेंगुइन",
    "th": "สวัสดี ภาษาไทย ขอบคุณ เพนกวิน",
    "zh": "你好 世界 中文 测试 我们 今天 天气 很好 图片 描述 这是 一个 企鹅 沙漠 报纸 月份 七月",
    "ja": "こんにちは 日本語 カタカナ ひらがな 東京 ありがとう ペンギン ｶﾀｶﾅ",
    "ko": "안녕하세요 한국어 감사합니다 서울 펭귄",
}
EMOJI = [
    "😀", "🐧", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "1️⃣", "❤️", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "✨", "🔥", "🫠",
]  # fmt: skip
SYMBOLS = ["∑", "√", "≠", "∞", "°C", "€5", "£", "¥", "©", "™", "→", "…", "—", "–", "«»", "“q”", "‘s’"]
SYMBOLS += ["&&", "::", "#", "@user", "(x)", "[1]", "{}", "/*", "*/", "\\", '"', "`code`"]
NUMBERS = ["0", "42", "2026", "3.14159", "1,000,000", "٣٤", "²", "½", "Ⅻ", "１２３", "007", "10:30"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\r\n", "\n\n\n", " \n ", "\r", "\u3000", "\u00a0", "\u2028"]
SPACES += ["\u0085", "\x0b", "\x0c", "\u200b", " \t\n", "\n \n", "    \n"]

HANDPICKED = [
    "",
    " ",
    "Hello world",
    "What's in the image? Answer with the month only.",
    "I'LL SEE YOU'RE THERE, HE'S SURE THEY'VE DONE IT, I'M AND I'D",
    "it's it'S IT's 'll 'Ll 're 'rE 've 'VE 'm 'M 'd 'D 't 'T 'x 'ſ 'ſa '",
    "don't   can't\twon't\nshouldn't",
    "中文测试：今天天气很好。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트 안녕하세요",
    "Mixed 中文 and English 和 日本語 with 한국어!",
    "👨‍👩‍👧‍👦 family 🏳️‍🌈 flag 🇯🇵🇺🇸 1️⃣ ❤️ 🧑🏿‍💻 👩‍❤️‍💋‍👨",
    "😀😀😀😀😀😀",
    "1234567890 12.5% 1,000 $9.99 3e10 0x1F",
    "Numbers١٢٣four五六",
    "    leading spaces",
    "trailing spaces    ",
    "a  b   c    d     e",
    "\n\n\nnewlines\n\n",
    "line1\r\nline2\r\n\r\nline3\r",
    "tabs\tand\t\tmore\t\t\ttabs",
    " \t \n \r\n  \n\t x",
    "   \n   ",
    "!!! ??? ... ,,, ;;; ::: --- ___",
    " !!!\n\n",
    "hello!!\n\n\nworld",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\n<image><image><image>\nWhat month?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "text<image>text",
    " <image> ",
    "<image",
    "<<image>>",
    "<|im_start|<|im_end|>>",
    "<think></think><think>",
    "<|endoftext|><|endoftext|>",
    "abc<|im_end|>def",
    "\u00e9 e\u0301 A\u030a \u212b \u2126 \uf900",
    "e\u0301\u0301 a\u0316\u0301 a\u0301\u0316",
    "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "Ti\u00ea\u0301ng Vi\u00ea\u0323t",
    "caf\u00e9 vs cafe\u0301",
    "\u0915\u094d\u0937 \u0e01\u0e34\u0e19",
    "\u200b\u200c\u200d\ufeff",
    "\x00\x01\x1f\x7f",
    "\u2028\u2029\u0085\x0b\x0c",
    "\u3000full width\u3000space",
    "ａｂｃ１２３！",
    "𝓗𝓮𝓵𝓵𝓸 𝟏𝟐𝟑",
    "a" * 300,
    "中" * 300,
    " " * 100 + "x",
    "\n" * 50,
    "ab" * 200 + "!" * 50,
    "mixed'S AND'LL ſ'ſ",
    "don'tcha it'sy I'mma we'llx they'REx you'VEy she'Dz x'ſa x'Ss x'tt",
    "'sa'Sb'tc'Tre're'RE'Ve've'mm'Md'D'ſs'll'lL",
]

_INVALID_BYTES = [
    b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe\xfe", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc3", b"\xe2\x82",
    b"\xf0\x9f", b"\xf0\x80\x80\x80", b"\xc3\x28", b"\xe2\x28\xa1", b"\x80\x80\x80",
]  # fmt: skip


def _pick_fragment(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.40:
        return rng.choice(rng.choice(list(WORDS.values())).split())
    if kind < 0.52:
        return rng.choice(SPACES)
    if kind < 0.62:
        return rng.choice(NUMBERS)
    if kind < 0.72:
        return rng.choice(EMOJI)
    if kind < 0.80:
        return rng.choice(SYMBOLS)
    if kind < 0.86:
        return rng.choice(SPECIALS)
    if kind < 0.92:
        return rng.choice(["'s", "'S", "'ll", "'LL", "'re", "'Ve", "'d", "'M", "'t", " '", "''"])
    return "".join(chr(rng.randrange(0x4E00, 0x4E00 + 400)) for _ in range(rng.randint(1, 6)))


def _random_text(rng: random.Random, fragments: int) -> str:
    return "".join(_pick_fragment(rng) + (" " if rng.random() < 0.5 else "") for _ in range(fragments))


def _corrupt(rng: random.Random, text: str) -> bytes:
    data = bytearray(text.encode())
    for _ in range(rng.randint(1, 3)):
        where = rng.randint(0, len(data))
        if rng.random() < 0.7:
            data[where:where] = rng.choice(_INVALID_BYTES)
        elif data:  # cut a byte out of the text (often inside a multi-byte character)
            del data[min(where, len(data) - 1)]
    return bytes(data)


def test_strings(seed: int = 0) -> list[bytes]:
    """The inputs, as raw bytes (some are not valid UTF-8)."""
    rng = random.Random(seed)
    out = [s.encode() for s in HANDPICKED]
    out += [_random_text(rng, rng.randint(1, 12)).encode() for _ in range(170)]
    out += [_corrupt(rng, _random_text(rng, rng.randint(1, 8))) for _ in range(40)]
    out += [bad for bad in _INVALID_BYTES]
    out += [b"<image>" + bad + b"<|im_end|>" for bad in _INVALID_BYTES[:6]]
    out += [b"abc" + bad for bad in _INVALID_BYTES[11:16]]  # truncated characters at the very end
    return out


def long_prompt(seed: int = 1, chars: int = 10_000) -> str:
    """A chat prompt of at least ``chars`` characters with 196 image tokens (the performance check)."""
    rng = random.Random(seed)
    body = ""
    while len(body) < chars:
        body += _random_text(rng, 20)
    return "<|im_start|>user\n" + "<image>" * 196 + "\n" + body + "<|im_end|>\n<|im_start|>assistant\n"


def training_lines(count: int = 12_000, seed: int = 2) -> list[str]:
    """Multilingual training text for the larger tokenizer."""
    rng = random.Random(seed)
    lines = [_random_text(rng, rng.randint(3, 15)) for _ in range(count)]
    hangul = [chr(rng.randrange(0xAC00, 0xD7A4)) for _ in range(150)]
    cjk = [chr(rng.randrange(0x4E00, 0x9FA6)) for _ in range(400)]
    for _ in range(count // 2):
        pool = rng.choice([hangul, cjk])
        lines.append("".join(rng.choice(pool) for _ in range(rng.randint(2, 12))))
    return lines


def train_tokenizer(vocab_size: int = 6000) -> Any:
    """A ``tokenizers.Tokenizer`` in the Qwen2 layout, trained here, with added tokens of every kind."""
    from tokenizers import AddedToken

    tok = train_qwen2_bpe(training_lines(), vocab_size)

    def added(content: str, **flags: bool) -> AddedToken:
        base = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
        return AddedToken(content, **{**base, **flags})

    tok.add_special_tokens([added(s) for s in SPECIALS[:3]])
    tok.add_tokens([added("<think>"), added("</think>")])
    tok.add_special_tokens([added("<image>")])
    tok.add_tokens(
        [
            added("<mask>", lstrip=True),
            added("<eos_r>", rstrip=True),
            added("[WORD]", single_word=True),
            added("e\u0301t\u00e9", normalized=True),  # matched on the NFC text as "été"
            added("\u212b", normalized=True),  # ANGSTROM SIGN, NFC U+00C5
            added("hello world", normalized=True),  # has a space: decoded as its raw text
            added("the"),  # already in the vocabulary: keeps that id
        ]
    )
    return tok


def added_token_strings() -> list[str]:
    """Strings for the added-token flags of ``train_tokenizer``."""
    return [
        "a <mask> b   <mask>\t\n<mask>",
        "<eos_r>   next <eos_r>\n\nx<eos_r>",
        "[WORD] x[WORD] [WORD]y [WORD]. _[WORD] é[WORD] 1[WORD]",
        "\u00e9t\u00e9 e\u0301te\u0301 l'été est \u212b \u00c5 A\u030a",
        "hello world, hello  world, Hello world",
        "the other then <mask><eos_r>[WORD]",
    ]


def random_merges(data: dict[str, Any], count: int, seed: int = 5) -> None:
    """Appends ``count`` merges of random token pairs (and their results) to a tokenizer document: unlike
    trained merges, many tokens can then be built in several ways, which exercises the merge order."""
    vocab, merges = data["model"]["vocab"], data["model"]["merges"]
    rng = random.Random(seed)
    tokens = list(vocab)
    seen = {tuple(m) for m in merges}
    while count > 0:
        a, b = rng.choice(tokens), rng.choice(tokens)
        if (a, b) in seen or len(a) + len(b) > 16:
            continue
        seen.add((a, b))
        merges.append([a, b])
        count -= 1
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            tokens.append(a + b)
    taken = set(vocab.values())
    next_id = max(taken) + 1
    for t in data["added_tokens"]:  # ids after the grown vocabulary, as HF assigns them
        t["id"] = vocab.get(t["content"], next_id)
        next_id += t["content"] not in vocab


SPM_MARKERS = [
    "<image>",
    "</image>",
    "<slice>",
    "</slice>",
    "<unk>",
    "<s>",
    "</s>",
    "<box>",
    "<用户>",
    "<AI>",
]
SPM_MARKERS += ["<mask>", "<image", "<AI", "用户>", "<0x41>", "<0xE4>"]


def sentencepiece_strings(count: int = 500, seed: int = 9) -> list[bytes]:
    """Random strings for SentencePiece-style tokenizers: English words (pieces of the tiny vocabularies),
    leading / trailing / repeated spaces, newlines, tabs, ``▁``, characters only byte fallback can spell
    (CJK, emoji, accented Latin, random code points of every plane), the image, slice and chat markers and
    near misses of them; a tenth with invalid UTF-8 mixed in. Also the hand-picked edge cases."""
    rng = random.Random(seed)
    words = ["the", "cat", "sat", "on", "mat", "a", "image", "is", "What", "in", "picture", "?", ".", ","]
    spaces = [" ", "  ", "   ", "\n", "\n\n", "\t", " \n ", "\r\n", "\u3000", "\u00a0", "▁", "▁▁"]
    fallback = ["猫", "你好", "企鹅", "🐧", "👨‍👩‍👧", "é", "ñ", "Ω", "ж", "ß", "\u0301", "\x00", "\x7f"]
    out = [
        s.encode() for s in ["", " ", "  ", "▁", "▁▁x", " x ", "x  ", "\n", "a\tb", "<用户><AI>", "<AI><AI>"]
    ]
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.35:
                parts.append(rng.choice(words))
            elif r < 0.6:
                parts.append(rng.choice(spaces))
            elif r < 0.75:
                parts.append(rng.choice(fallback))
            elif r < 0.8:
                plane = rng.choice([0, 0, 1, 2, 14])
                cp = rng.randrange(0x80, 0x10000) + plane * 0x10000
                parts.append(chr(cp) if not 0xD800 <= cp < 0xE000 else "x")
            else:
                parts.append(rng.choice(SPM_MARKERS))
        text = "".join(parts)
        out.append(_corrupt(rng, text) if rng.random() < 0.1 else text.encode())
    return out
