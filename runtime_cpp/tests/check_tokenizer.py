"""Parity test of the C++ tokenizer (``gsurg_tokenize``) against HF ``tokenizers``, goldens computed here.

``python check_tokenizer.py --tool BUILD/tokenizer/gsurg_tokenize [--wrapper "wine"] [--tiny tokenizer.json]``

For five tokenizer files - the shipped tiny ones (``graphsurgeon/models/penguin_vl/tiny/tokenizer.json`` and
the one transformers 5's ``save_pretrained`` wrote for ``graphsurgeon/models/qwen3_vl/tiny``, with the vision
tokens), a larger one trained here on multilingual text (``tokenizer_corpus.train_tokenizer``), the same with
its merges rewritten in the legacy ``"a b"`` form, and the same with 20 000 random merges added - it checks,
on >= 200 strings (``tokenizer_corpus.test_strings``):

* ids: equal to ``Tokenizer.encode(text).ids``. Invalid UTF-8 input: HF gets
  ``bytes.decode("utf-8", "replace")`` of the bytes the C++ got (the documented C++ behaviour);
* decode: equal to ``Tokenizer.decode(ids, skip_special_tokens=False)``, also for random id sequences
  (tokens that split characters, ids past the vocabulary);
* stream decode: each ``StreamDecoder.push`` returns exactly what Python's incremental UTF-8 decoder
  (errors="replace") returns for that token's bytes, and ``finish`` the decoder's final flush; the bytes
  per token come from HF's token strings through the GPT-2 byte map written here, checked against HF's
  decode first;
* ``token_id`` of every vocabulary entry and added token, and ``vocab_size``;
* encoding a >= 10 000-character chat prompt takes < 100 ms;
* the tiny tokenizer saved by transformers 5 (a TemplateProcessing post-processor: the identity one, and
  one adding a BOS and an EOS) encodes as ``tokenizers`` encodes that file, add_special_tokens both ways
  (``tokenizer_templates.py``);
* broken or unsupported tokenizer files fail with exit status 1 and a message naming the file and fault;
* the SentencePiece-style files (``tokenizer_sentencepiece.py``): the tiny MiniCPM-V-2 tokenizer.json against
  the official slow tokenizer's recorded ids, and it, variants of it in the Metaspace form and a hand-written
  Metaspace tokenizer against ``tokenizers`` on random strings.

Then NFC and the pre-tokenizer alone over every code point of planes 0-3 and 14 (and samples of 15-16),
in several contexts: for every character assigned in Python's Unicode database the NFC must equal
``unicodedata``'s and the Qwen2 pieces HF's ``pre_tokenizers.Split`` of that text; for the others the
differences are only counted, since HF's tables and the local utf8proc may know different Unicode
versions. (HF's own NFC tables are older than both; where they differ from the standard is counted.)

Prints the first mismatches of each kind and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import base64
import codecs
import json
import random
import shlex
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

import tokenizer_corpus as corpus
from tokenizer_sentencepiece import bad_sentencepiece_cases, check_sentencepiece
from tokenizer_sweep import contraction_strings, nfc_strings, sweep_code_points, sweep_strings
from tokenizer_templates import bad_template_cases, check_templates

HERE = Path(__file__).resolve().parent
TINY = HERE.parent.parent / "graphsurgeon" / "models" / "penguin_vl" / "tiny" / "tokenizer.json"
QWEN3_VL_TINY = HERE.parent.parent / "graphsurgeon" / "models" / "qwen3_vl" / "tiny" / "tokenizer.json"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def byte_map() -> dict[str, int]:
    """GPT-2's ByteLevel map, character -> byte."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(0x100 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


class Report:
    """Counts mismatches per kind and prints the first few of each."""

    def __init__(self, show: int) -> None:
        self.show = show
        self.counts: dict[str, int] = {}

    def fail(self, kind: str, message: str) -> None:
        n = self.counts.get(kind, 0) + 1
        self.counts[kind] = n
        if n <= self.show:
            print(f"MISMATCH [{kind}] {message}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def run_tool(args: argparse.Namespace, tokenizer: Path, items: list[Any], mode: str) -> dict[str, Any]:
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    inp, out = work / f"in-{mode}.json", work / f"out-{mode}.json"
    inp.write_text(json.dumps(items))
    out.unlink(missing_ok=True)
    cmd = [*shlex.split(args.wrapper), args.tool, "--tokenizer", str(tokenizer), "--input", str(inp)]
    cmd += ["--output", str(out), "--mode", mode]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"gsurg_tokenize failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    result: dict[str, Any] = json.loads(out.read_text())
    if len(result["results"]) != len(items):
        raise SystemExit(f"gsurg_tokenize returned {len(result['results'])} results for {len(items)} inputs")
    return result


def show_text(data: bytes, limit: int = 160) -> str:
    try:
        text = repr(data.decode())
    except UnicodeDecodeError:
        text = repr(data)  # invalid UTF-8: show the bytes
    return text if len(text) <= limit else text[:limit] + f"... ({len(data)} bytes)"


def id_diff(hf: Any, want: list[int], got: list[int]) -> str:
    k = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), min(len(want), len(got)))
    lo = max(0, k - 3)
    names = lambda ids: [f"{i}:{hf.id_to_token(i)!r}" for i in ids]  # noqa: E731
    return (
        f"first difference at index {k} (lengths {len(want)} vs {len(got)})\n"
        f"    HF : ...{names(want[lo : k + 4])}\n    C++: ...{names(got[lo : k + 4])}"
    )


def token_bytes(hf: Any, ids: list[int], chars: dict[str, int]) -> list[bytes]:
    out = []
    for i in ids:
        tok = hf.id_to_token(i)
        if tok is None:
            out.append(b"")
        elif all(c in chars for c in tok):
            out.append(bytes(chars[c] for c in tok))
        else:
            out.append(tok.encode())
    return out


def check_decode(hf: Any, ids: list[int], res: dict[str, Any], what: str, report: Report) -> None:
    want = hf.decode(ids, skip_special_tokens=False)
    got = unb64(res["decode"])
    if got != want.encode():
        report.fail("decode", f"{what}: ids {ids[:12]}...\n    HF : {want!r}\n    C++: {got!r}")
    pieces = token_bytes(hf, ids, byte_map())
    if b"".join(pieces).decode("utf-8", "replace") != want:
        report.fail("checker", f"{what}: the checker's byte model disagrees with HF's decode")
        return
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    expected = [dec.decode(p) for p in pieces] + [dec.decode(b"", final=True)]
    try:
        stream = [unb64(c).decode() for c in res["stream"]]
    except UnicodeDecodeError as err:
        report.fail("stream", f"{what}: a chunk is not valid UTF-8 ({err})")
        return
    if stream != expected:
        k = next(i for i, (a, b) in enumerate(zip(expected, stream, strict=False)) if a != b)
        report.fail(
            "stream",
            f"{what}: step {k} (id {ids[k] if k < len(ids) else 'finish'}): "
            f"expected {expected[k]!r}, got {stream[k]!r}",
        )


def check_tokenizer(args: argparse.Namespace, name: str, path: Path, report: Report) -> None:
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(path))
    strings = corpus.test_strings()
    if name != "tiny":
        strings += [s.encode() for s in corpus.added_token_strings()]
    prompt = corpus.long_prompt().encode()
    strings.append(prompt)
    rng = random.Random(7)
    vocab = hf.get_vocab(with_added_tokens=True)
    top = max(vocab.values()) + 1
    id_lists = [[rng.randrange(0, top + 3) for _ in range(rng.randint(1, 30))] for _ in range(80)]
    queries = [*vocab, "", "not a token", "<|im_start", "Ġ", "ĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠ"]
    items: list[Any] = [b64(s) for s in strings]
    items += [{"ids": ids} for ids in id_lists] + [{"token": b64(q.encode())} for q in queries]
    out = run_tool(args, path, items, "encode")
    results = out["results"]

    if out["vocab_size"] != top:
        report.fail(
            "vocab_size", f"{name}: HF largest id + 1 = {top}, C++ vocab_size() = {out['vocab_size']}"
        )
    for data, res in zip(strings, results, strict=False):
        text = data.decode("utf-8", "replace")
        want = hf.encode(text).ids
        if res["ids"] != want:
            report.fail("ids", f"{name}: {show_text(data)}\n  {id_diff(hf, want, res['ids'])}")
            continue
        check_decode(hf, want, res, f"{name}: {show_text(data, 60)}", report)
    base = len(strings)
    for k, ids in enumerate(id_lists):
        check_decode(hf, ids, results[base + k], f"{name}: random ids", report)
    base += len(id_lists)
    for k, q in enumerate(queries):
        want_id = vocab.get(q, -1)
        if results[base + k]["id"] != want_id:
            report.fail("token_id", f"{name}: token_id({q!r}) = {results[base + k]['id']}, HF {want_id}")

    perf, limit = results[len(strings) - 1]["encode_us"], args.perf_limit_ms * 1000
    status = "ok" if perf < limit else "TOO SLOW"
    print(f"{name}: {len(prompt.decode())}-character prompt encoded in {perf / 1000:.2f} ms ({status})")
    if perf >= limit:
        report.fail("performance", f"{name}: {perf} us >= {limit} us")
    print(
        f"{name}: {len(strings)} strings, {len(id_lists)} id sequences, {len(queries)} token lookups checked"
    )


def check_pretokenizer(args: argparse.Namespace, path: Path, report: Report) -> None:
    """NFC and the Qwen2 split, code point by code point. The NFC golden is Python's ``unicodedata``:
    HF's NFC tables are older and lack the combining classes of marks added in recent Unicode versions
    (so they leave e.g. U+0898 U+0899 unordered); those strings are counted, and the pieces are always
    compared on the standard NFC text."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    hf_nfc = normalizers.NFC()
    split = pre_tokenizers.Split(Regex(corpus.QWEN2_SPLIT), behavior="isolated", invert=False)
    assigned, unassigned = sweep_code_points()
    groups = [("assigned", sweep_strings(assigned), True), ("unassigned", sweep_strings(unassigned), False)]
    groups[:0] = [("contraction", contraction_strings(), True), ("combining", nfc_strings(), True)]
    for group, strings, strict in groups:
        out = run_tool(args, path, [b64(s.encode()) for s in strings], "pretokenize")
        differing = hf_stale = 0
        for s, res in zip(strings, out["results"], strict=False):
            norm = unicodedata.normalize("NFC", s)
            hf_stale += hf_nfc.normalize_str(s) != norm
            got_norm = unb64(res["normalized"]).decode()
            want = [p for p, _ in split.pre_tokenize_str(norm)]
            got = [unb64(p).decode() for p in res["pieces"]]
            if got_norm == norm and got == want:
                continue
            differing += 1
            if not strict:
                continue
            if got_norm != norm:
                k = next((i for i, (a, b) in enumerate(zip(norm, got_norm, strict=False)) if a != b), 0)
                report.fail(
                    "nfc", f"at U+{ord(norm[k]):04X}: NFC {norm[k : k + 4]!r} C++ {got_norm[k : k + 4]!r}"
                )
            else:
                k = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), len(got))
                cps_of = lambda p: " ".join(f"U+{ord(c):04X}" for c in p[:8])  # noqa: E731
                report.fail(
                    "pretokenize",
                    f"piece {k}: HF [{cps_of(want[k])}] C++ [{cps_of(got[k]) if k < len(got) else '-'}]",
                )
        print(
            f"pre-tokenizer sweep, {group} strings (Unicode: Python "
            f"{unicodedata.unidata_version}, utf8proc {out['unicode_version']}): {len(strings)} strings, "
            f"{differing} differ{'' if strict else ' (informational)'}; HF's NFC differs from the standard "
            f"on {hf_stale}"
        )


def check_bad_files(args: argparse.Namespace, report: Report) -> None:
    """Broken or unsupported tokenizer files: exit status 1 and one message naming the file and the fault."""
    good = json.loads(Path(args.tiny).read_text())
    cases: list[tuple[str, Any, str]] = [
        ("truncated", json.dumps(good)[:3000], "invalid JSON"),
        ("nfkc", {**good, "normalizer": {"type": "NFKC"}}, 'normalizer "NFKC" is not supported'),
        ("no-pre-tokenizer", {**good, "pre_tokenizer": None}, "pre_tokenizer is not supported"),
        ("wordpiece-decoder", {**good, "decoder": {"type": "WordPiece"}}, 'decoder "WordPiece"'),
    ]
    model = dict(good["model"])
    model["merges"] = [["zz", "qq"], *good["model"]["merges"]]
    cases.append(("unknown-merge", {**good, "model": model}, 'BPE merge 1 ("zz", "qq") uses a token missing'))
    model = dict(good["model"])
    model["merges"] = ["a b c"]
    cases.append(("three-part-merge", {**good, "model": model}, 'merge 1 "a b c" is not "a b"'))
    cases += bad_template_cases(good)
    model = {**good["model"], "byte_fallback": True}
    cases.append(
        ("byte-fallback-byte-level", {**good, "model": model}, "byte_fallback is set, but the decoder is")
    )
    cases += bad_sentencepiece_cases()
    work = Path(args.workdir)
    empty = work / "empty.json"
    empty.write_text("[]")
    for name, content, expected in [*cases, ("missing", None, "")]:
        path = work / f"bad-{name}.json"
        if content is not None:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        cmd = [*shlex.split(args.wrapper), args.tool, "--tokenizer", str(path), "--input", str(empty)]
        proc = subprocess.run([*cmd, "--output", str(work / "bad-out.json")], capture_output=True, text=True)
        message = proc.stderr.strip()
        if proc.returncode != 1 or path.name not in message or expected not in message:
            report.fail("bad file", f"{name}: exit {proc.returncode}, stderr {message!r}")
    print(f"bad tokenizer files: {len(cases) + 1} checked")


def trained_files(work: Path) -> tuple[Path, Path, Path]:
    """The trained tokenizer, saved as HF writes it, with legacy "a b" merges (and a #version line, and
    the empty subword prefix / suffix of Qwen2's file), and with 20 000 random merges added."""
    tok = corpus.train_tokenizer()
    data = json.loads(tok.to_str())
    merges = data["model"]["merges"]
    if len(merges) < 4000:
        raise SystemExit(f"the trained tokenizer has only {len(merges)} merges")
    modern, legacy = work / "trained.json", work / "trained-legacy.json"
    modern.write_text(json.dumps(data, ensure_ascii=False))
    data["model"]["continuing_subword_prefix"] = data["model"]["end_of_word_suffix"] = ""  # as Qwen2's file
    data["model"]["merges"] = ["#version: 0.2"] + [
        m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in merges
    ]
    legacy.write_text(json.dumps(data, ensure_ascii=False))
    data["model"]["merges"] = [list(m) for m in merges]
    corpus.random_merges(data, 20_000)
    synthetic = work / "trained-random-merges.json"
    synthetic.write_text(json.dumps(data, ensure_ascii=False))
    chars = byte_map()
    texts = [bytes(chars[c] for c in t).decode("utf-8", "ignore") for t in data["model"]["vocab"]]
    cjk = sum(1 for t in texts if len(t) > 1 and any(0x4E00 <= ord(c) <= 0x9FFF for c in t))
    print(f"trained tokenizer: {len(texts)} tokens, {len(merges)} merges, {cjk} of several CJK characters")
    return modern, legacy, synthetic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", required=True, help="the gsurg_tokenize executable")
    parser.add_argument("--wrapper", default="", help='command that runs the tool, e.g. "wine"')
    parser.add_argument("--tiny", type=Path, default=TINY, help="the shipped tiny tokenizer.json")
    parser.add_argument("--workdir", default="", help="folder for the exchanged files (default: a temp dir)")
    parser.add_argument("--show", type=int, default=5, help="mismatches printed per kind")
    parser.add_argument("--perf-limit-ms", type=float, default=100, help="limit for the long prompt")
    parser.add_argument("--no-sweep", action="store_true", help="skip the per-code-point pre-tokenizer sweep")
    args = parser.parse_args(argv)
    try:
        import tokenizers
    except ImportError:
        print(f"{sys.executable} has no HF `tokenizers` (pip install tokenizers; or pass -DGSURG_PYTHON=...)")
        return 1
    print(f"HF tokenizers {tokenizers.__version__} ({sys.executable}); tool: {args.wrapper} {args.tool}")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.workdir:
            args.workdir = tmp
        work = Path(args.workdir)
        work.mkdir(parents=True, exist_ok=True)
        report = Report(args.show)
        start = time.perf_counter()
        modern, legacy, synthetic = trained_files(work)
        files = [("tiny", args.tiny), ("qwen3-vl-tiny", QWEN3_VL_TINY), ("trained", modern)]
        files.append(("trained-legacy-merges", legacy))
        for name, path in [*files, ("trained-random-merges", synthetic)]:
            check_tokenizer(args, name, path, report)
        check_templates(
            Path(args.tiny),
            work,
            corpus.test_strings()[:120],
            lambda path, items: run_tool(args, path, items, "encode")["results"],
            report.fail,
        )
        check_sentencepiece(lambda path, items: run_tool(args, path, items, "encode"), work, report.fail)
        check_bad_files(args, report)
        if not args.no_sweep:
            check_pretokenizer(args, args.tiny, report)
        print(f"checked in {time.perf_counter() - start:.1f} s")
    if report.total:
        print("FAILED: " + ", ".join(f"{n} {kind}" for kind, n in sorted(report.counts.items())))
        return 1
    print("OK: the C++ tokenizer matches HF tokenizers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
