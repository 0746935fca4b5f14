"""The strings of ``check_tokenizer.py``'s pre-tokenizer sweep (NFC and the Qwen2 split, code point by
code point): every code point of planes 0-3 and 14 (and samples of 15-16) split into assigned and
unassigned, in several contexts; random sequences where NFC has work to do; and every case variant of
Qwen2's contractions. Deterministic: fixed seeds, Python's own Unicode database.
"""

from __future__ import annotations

import random
import unicodedata


def sweep_code_points() -> tuple[list[int], list[int]]:
    """Code points of planes 0-3 and 14 plus samples of 15-16, split into assigned (per Python's Unicode
    database) and the rest."""
    cps = [*range(0, 0x40000), *range(0xE0000, 0xE1000)]
    cps += [*range(0xF0000, 0xF0100), *range(0xFFF00, 0x110000), *range(0x100000, 0x100100)]
    cps = [c for c in cps if not 0xD800 <= c < 0xE000]
    assigned = [c for c in cps if unicodedata.category(chr(c)) != "Cn"]
    unassigned = [c for c in cps if unicodedata.category(chr(c)) == "Cn"]
    return assigned, unassigned


def sweep_strings(cps: list[int], chunk: int = 256) -> list[str]:
    out = []
    for k in range(0, len(cps), chunk):
        chars = [chr(c) for c in cps[k : k + chunk]]
        out.append("".join(chars))
        out.append("".join("x" + c for c in chars))
        out.append("".join("!" + c for c in chars))
        out.append("".join(c + c + " " for c in chars))
        out.append("".join("'" + c + "x" for c in chars))  # case folding in (?i:'s|'t|...)
    return out


def nfc_strings(count: int = 600, seed: int = 3) -> list[str]:
    """Random sequences where NFC has work to do: base letters, combining marks of every class (reordered
    and composed), Hangul jamo, precomposed letters, singletons and composition exclusions."""
    marks = [chr(c) for c in range(0x300, 0x20000) if unicodedata.combining(chr(c))]
    bases = [*"aeiouAEIOUnNcCsSzZyYwW", "Α", "ι", "А", "ا", "क", "ก"]
    bases += ["é", "Å", "ṩ", "Å", "Ω", "豈", "क़", "⫝̸", "̈́"]
    jamo = [chr(c) for c in (*range(0x1100, 0x1113), *range(0x1161, 0x1176), *range(0x11A8, 0x11C3))]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            kind = rng.random()
            pool = bases if kind < 0.35 else marks if kind < 0.8 else jamo
            parts.append(rng.choice(pool))
        out.append("".join(parts))
    return out


def contraction_strings() -> list[str]:
    """Every case variant of Qwen2's contractions, followed by a letter, a digit, a space or nothing (the
    apostrophe follows a letter: after a space, `` ?[^\\s\\p{L}\\p{N}]+`` would take it first)."""
    variants = []
    for word in ("s", "t", "re", "ve", "m", "ll", "d"):
        forms = [""]
        for ch in word:
            forms = [f + c for f in forms for c in (ch, ch.upper())]
        variants += forms
    return ["y".join("'" + v + tail for v in variants) for tail in ("x", "1", " ", "", "'s")]
