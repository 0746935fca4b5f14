"""The tiny MiniCPM-V-2 ``tokenizer.json`` under HF ``tokenizers`` (the project's version) against the
OFFICIAL slow tokenizer's ids (tests/goldens/minicpm_v2/tokenizer_goldens.json and model.json, made in a
scratch venv with transformers 4.40.2 by make_tokenizer_goldens.py / make_model_goldens.py; never by the
code under test). A Python verifier may then tokenize with ``tokenizers`` on this file and feed the model
what the official ``chat`` feeds it.

The one recorded difference: a byte piece spelled out as text (``"<0x41>"``) right after a chat marker is
one token under the file's ``ignore_merges`` (the official tokenizer spells it in pieces); the test pins it
to exactly that string, so a new difference fails.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

tokenizers = pytest.importorskip("tokenizers")

GOLDENS = Path(__file__).resolve().parent / "goldens" / "minicpm_v2"
TINY = Path(__file__).resolve().parents[1] / "graphsurgeon" / "models" / "minicpm_v2" / "tiny"
KNOWN_DIFFERENCES = {"<AI><0x41>"}


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDENS / "tokenizer_goldens.json").read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def tok() -> Any:
    return tokenizers.Tokenizer.from_file(str(TINY / "tokenizer.json"))


def test_the_shipped_files_are_those_the_goldens_were_made_from(golden: dict[str, Any]) -> None:
    for name, digest in golden["tiny_sha256"].items():
        assert hashlib.sha256((TINY / name).read_bytes()).hexdigest() == digest, name
    assert golden["official_class"] == "LlamaTokenizerWrapper"
    assert golden["user_defined_added"] == ["<用户>", "<AI>"]


def test_tokenizers_gives_the_official_ids(golden: dict[str, Any], tok: Any) -> None:
    rows = golden["corpus"] + golden["chats"] + golden["sweep"]
    differing = set()
    for row in rows:
        ids = tok.encode(row["text"]).ids
        assert ids == row["fast_ids"], row["text"]
        if ids != row["official_ids"]:
            differing.add(row["text"])
    assert differing == KNOWN_DIFFERENCES
    assert len(rows) > 1200 and sum("<用户>" in r["text"] for r in rows) > 100


def test_the_official_chat_prompts_of_the_model_goldens(tok: Any) -> None:
    model = json.loads((GOLDENS / "model.json").read_text(encoding="utf-8"))
    chats = model["eager"]["chats"]
    assert len(chats) == 2
    for chat in chats:
        assert tok.encode(chat["prompt"]).ids == chat["input_ids"]


def test_decode_is_the_recorded_fast_decode(golden: dict[str, Any], tok: Any) -> None:
    """HF's decode of the official ids, and of random ids (broken byte runs among them), as 0.19.1 gave
    them; where the official slow decode differs (legacy spacing around special tokens, a broken byte run
    as one U+FFFD per byte) the goldens hold both."""
    for row in golden["corpus"] + golden["chats"]:
        assert tok.decode(row["official_ids"], skip_special_tokens=False) == row["fast_decode"], row["text"]
    for row in golden["decodes"]:
        assert tok.decode(row["ids"], skip_special_tokens=False) == row["fast_decode"], row["ids"]
