"""The C++ runtime as this checkout's tests find it: a program ``runtime_cpp/scripts/build_and_test.sh`` (or
the guide's by-hand build) built from these sources. The tests that run it skip when it is not built, or
when it is older than a source it is built from (a stale program would test old code)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.conftest import REPO


def built_runner(program: str) -> Path | None:
    """This checkout's built runtime ``program``: where the guide's build step puts it (``build/``), under
    ``$GSURG_BUILD_DIR``, or in build_and_test.sh's default tree (the cache, keyed by the checkout's path)."""
    cache = Path(os.environ.get("GSURG_CACHE", Path.home() / ".cache" / "gsurg"))
    key = hashlib.sha256(str(REPO / "runtime_cpp").encode()).hexdigest()[:12]
    roots = [REPO / "build", cache / "runtime-build" / key]
    if os.environ.get("GSURG_BUILD_DIR"):
        roots.insert(1, Path(os.environ["GSURG_BUILD_DIR"]))
    found = [r / "linux" / "runner" / program for r in roots]
    return next((p for p in found if p.is_file() and os.access(p, os.X_OK)), None)


def newer_sources(runner: Path) -> list[Path]:
    """The runtime's sources changed since ``runner`` was built: a stale program would test old code
    against today's model.json."""
    built = runner.stat().st_mtime
    sources = (REPO / "runtime_cpp").rglob("*")
    return [p for p in sources if p.suffix in (".cpp", ".hpp", ".h", ".txt") and p.stat().st_mtime > built]


def fresh_runner(program: str) -> Path:
    """The built ``program``, or a skip saying why it cannot be used (not built, or stale)."""
    runner = built_runner(program)
    if runner is None:
        pytest.skip(
            f"{program} is not built for this checkout (runtime_cpp/scripts/build_and_test.sh builds it; "
            "GSURG_BUILD_DIR names another build tree)"
        )
    stale = newer_sources(runner)
    if stale:
        pytest.skip(f"{runner} is older than {len(stale)} of its sources (e.g. {stale[0]}): rebuild it")
    return runner
