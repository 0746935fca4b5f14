"""Shared fixtures: the read-only corpus at ../shared/corpus and small model builders, and the export memo
(tests/export_memo.py), which a test module opts into with
``pytestmark = pytest.mark.usefixtures("shared_exports")``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.export_memo import ExportMemo

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


@pytest.fixture(scope="session")
def export_memo(tmp_path_factory: pytest.TempPathFactory) -> ExportMemo:
    return ExportMemo(tmp_path_factory.mktemp("export-memo"))


@pytest.fixture(scope="module")
def shared_exports(export_memo: ExportMemo) -> Iterator[ExportMemo]:
    """While the module's tests (and its module fixtures) run, an export already made in this session with
    the same inputs is reused instead of traced again (see tests/export_memo.py)."""
    with export_memo.active():
        yield export_memo
