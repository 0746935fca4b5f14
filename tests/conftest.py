"""Shared fixtures: the read-only corpus at ../shared/corpus and small model builders."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
CORPUS_PARAMS = sorted(CORPUS.glob("*/*.param"))
MODELS_WITH_BIN = [p for p in CORPUS_PARAMS if p.with_suffix(".bin").exists()]


def corpus_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.fail(f"the shared corpus is missing at {CORPUS}")
    return CORPUS
