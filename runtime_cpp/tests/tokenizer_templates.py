"""The TemplateProcessing post-processor, as transformers 5 writes it, against HF ``tokenizers``.

``save_pretrained`` of transformers 5 replaces the tokenizer.json post-processor by a TemplateProcessing:
the identity ``$A`` when no BOS/EOS is added, else the special tokens around ``$A`` (and a pair template).
``template_files`` saves the shipped tiny tokenizer both ways; ``check_templates`` compares the C++ ids of
every string, with and without add_special_tokens, with ``tokenizers``' own encode of the same file, and
checks that malformed templates are refused with a message naming the part.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (path, items) -> the tool's results for items (one per item)
Encode = Callable[[Path, list[Any]], list[dict[str, Any]]]
Fail = Callable[[str, str], None]

SPECIAL_BOS, SPECIAL_EOS = "<|endoftext|>", "<|im_end|>"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def template_files(tiny: Path, work: Path) -> list[tuple[str, Path]]:
    """The tiny tokenizer saved through transformers 5's ``save_pretrained``: without added special tokens
    (the identity template) and with a BOS and an EOS (special tokens around $A)."""
    from transformers import PreTrainedTokenizerFast

    variants: list[tuple[str, dict[str, Any]]] = [
        ("identity", {"add_bos_token": False, "add_eos_token": False}),
        (
            "bos-eos",
            {
                "bos_token": SPECIAL_BOS,
                "eos_token": SPECIAL_EOS,
                "add_bos_token": True,
                "add_eos_token": True,
            },
        ),
    ]
    out = []
    for name, kwargs in variants:
        folder = work / f"transformers5-{name}"
        shutil.rmtree(folder, ignore_errors=True)
        PreTrainedTokenizerFast(tokenizer_file=str(tiny), **kwargs).save_pretrained(str(folder))
        path = folder / "tokenizer.json"
        processor = json.loads(path.read_text(encoding="utf-8"))["post_processor"]
        if not isinstance(processor, dict) or processor.get("type") != "TemplateProcessing":
            raise SystemExit(f"transformers did not write a TemplateProcessing for {name}: {processor!r}")
        out.append((name, path))
    return out


def check_templates(tiny: Path, work: Path, strings: list[bytes], encode: Encode, fail: Fail) -> None:
    from tokenizers import Tokenizer

    for name, path in template_files(tiny, work):
        hf = Tokenizer.from_file(str(path))
        items: list[Any] = [_b64(s) for s in strings] + [{"plain": _b64(s)} for s in strings]
        results = encode(path, items)
        for k, data in enumerate(strings):
            text = data.decode("utf-8", "replace")
            for add, res in ((True, results[k]), (False, results[len(strings) + k])):
                want = hf.encode(text, add_special_tokens=add).ids
                if res["ids"] != want:
                    fail(
                        "template",
                        f"{name}, add_special_tokens={add}: {text[:60]!r}\n"
                        f"    HF : {want[:16]}\n    C++: {res['ids'][:16]}",
                    )
        with_bos = hf.encode("hi").ids
        print(
            f'transformers5-{name}: {len(strings)} strings x add_special_tokens both ways; "hi" -> {with_bos}'
        )


def bad_template_cases(good: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """Malformed TemplateProcessing post-processors: (name, tokenizer.json, expected message part)."""
    seq_a = {"Sequence": {"id": "A", "type_id": 0}}
    bos = {"SpecialToken": {"id": SPECIAL_BOS, "type_id": 0}}
    specials = {SPECIAL_BOS: {"id": SPECIAL_BOS, "ids": [640], "tokens": [SPECIAL_BOS]}}

    def template(single: list[Any], special_tokens: Any) -> dict[str, Any]:
        processor = {
            "type": "TemplateProcessing",
            "single": single,
            "pair": [],
            "special_tokens": special_tokens,
        }
        return {**good, "post_processor": processor}

    return [
        ("template-without-A", template([bos], specials), "must hold $A exactly once"),
        ("template-twice-A", template([seq_a, seq_a], {}), "must hold $A exactly once"),
        ("template-unknown-special", template([bos, seq_a], {}), 'special token "<|endoftext|>" is not in'),
        (
            "roberta-processing",
            {**good, "post_processor": {"type": "RobertaProcessing"}},
            'post_processor "RobertaProcessing" is not supported',
        ),
    ]
