"""Shared fixtures: the read-only corpus at ../shared/corpus and small model builders, synthesized weights
of the corpus decoders, and the export memo (tests/export_memo.py), which a test module opts into with
``pytestmark = pytest.mark.usefixtures("shared_exports")``."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from graphsurgeon.cli import main
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
def fp16_weights(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Path, int], Path]]:
    """``gsurg synth-bin PARAM --seed SEED --storage fp16`` (the corpus LLM decoders' gigabytes of weights),
    made once per param and seed for the session: test_kv_harness.py and test_rules_shipped.py load the same
    ones. The files are shared: a test must not change them. They are removed when the session ends."""
    root = tmp_path_factory.mktemp("fp16-weights")
    made: dict[tuple[Path, int], Path] = {}

    def weights(param: Path, seed: int) -> Path:
        if (param, seed) not in made:
            out = root / f"{param.stem}.seed{seed}.bin"
            argv = ["synth-bin", str(param), "-o", str(out), "--seed", str(seed), "--storage", "fp16", "-q"]
            assert main(argv) == 0
            made[param, seed] = out
        return made[param, seed]

    yield weights
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def export_memo(tmp_path_factory: pytest.TempPathFactory) -> ExportMemo:
    return ExportMemo(tmp_path_factory.mktemp("export-memo"))


@pytest.fixture(scope="module")
def shared_exports(export_memo: ExportMemo) -> Iterator[ExportMemo]:
    """While the module's tests (and its module fixtures) run, an export already made in this session with
    the same inputs is reused instead of traced again (see tests/export_memo.py)."""
    with export_memo.active():
        yield export_memo
