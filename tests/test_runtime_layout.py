"""The C++ runtime's layout (runtime_cpp/README.md, "Adding a runtime family"): a family lives in its own
folder, runtime_cpp/families/<name>/, registered by one gsurg_add_family call (a family whose runner is not
written yet is listed in UNREGISTERED instead), and the shared parts name no family, so adding one edits no
shared file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[1] / "runtime_cpp"
SHARED = ("common", "tokenizer", "preprocess", "kernels", "runner")
SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".c", ".cmake", ".in"}
FAMILY_WORD = re.compile(r"penguin|qwen|minicpm", re.IGNORECASE)
# The one exception: the tokenizer reads tokenizer.json files whose pre-tokenizer is the one HF calls
# Qwen2's (its Split regex); "Qwen2" there names that file format, not a runtime family.
FORMAT_NAMES = {"tokenizer": re.compile(r"qwen2", re.IGNORECASE)}


# Families in progress, whose runner (and so the ENTRY gsurg_add_family needs) has not landed: their
# CMakeLists.txt builds only their own libraries and tests, no gsurg_add_family call and nothing in
# gsurg_runner, until the family's one registration replaces that and its name leaves this set.
UNREGISTERED: set[str] = set()


def shared_sources() -> list[Path]:
    files = []
    for part in SHARED:
        for path in sorted((RUNTIME / part).rglob("*")):
            if path.is_file() and (path.suffix in SOURCE_SUFFIXES or path.name == "CMakeLists.txt"):
                files.append(path)
    return files


def family_dirs() -> list[Path]:
    return sorted(p for p in (RUNTIME / "families").iterdir() if p.is_dir())


def test_shared_parts_exist() -> None:
    for part in SHARED:
        assert (RUNTIME / part / "CMakeLists.txt").is_file(), part
    assert len(shared_sources()) > 50


@pytest.mark.parametrize("path", shared_sources(), ids=lambda p: str(p.relative_to(RUNTIME)))
def test_shared_source_names_no_family(path: Path) -> None:
    part = path.relative_to(RUNTIME).parts[0]
    allowed = FORMAT_NAMES.get(part)
    hits = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = allowed.sub("", line) if allowed else line
        if FAMILY_WORD.search(text):
            hits.append(f"{number}: {line.strip()}")
    assert not hits, f"{path.relative_to(RUNTIME)} names a family:\n" + "\n".join(hits)


def test_every_family_registers_itself() -> None:
    dirs = family_dirs()
    assert {d.name for d in dirs} >= {"penguin_vl", "qwen3_vl"}
    assert {d.name for d in dirs} >= UNREGISTERED, "a family in progress is listed but has no folder"
    for d in dirs:
        cmake = d / "CMakeLists.txt"
        assert cmake.is_file(), f"{d.name} has no CMakeLists.txt"
        text = cmake.read_text()
        calls = re.findall(r"^\s*gsurg_add_family\(\s*NAME\s+(\w+)", text, re.MULTILINE)
        if d.name in UNREGISTERED:
            assert calls == [], f"{cmake} registers the family: take {d.name} off UNREGISTERED"
            assert "gsurg_runner" not in text, f"{cmake}: a family in progress adds nothing to gsurg_runner"
        else:
            assert calls == [d.name], (
                f"{cmake}: expected one gsurg_add_family(NAME {d.name} ...), found {calls}"
            )


def test_no_hand_written_family_table() -> None:
    """The table of families is generated from the families' registrations (cmake/families.cpp.in)."""
    assert not (RUNTIME / "runner" / "src" / "families.cpp").exists()
    assert "@GSURG_FAMILY_TABLE@" in (RUNTIME / "cmake" / "families.cpp.in").read_text()


def test_no_pvl_namespace() -> None:
    offenders = []
    for path in sorted(RUNTIME.rglob("*")):
        if path.is_file() and path.suffix in {".cpp", ".hpp", ".h", ".in"}:
            text = path.read_text(encoding="utf-8")
            if re.search(r"\bnamespace\s+pvl\b|\bpvl::|[\"<]pvl/", text):
                offenders.append(str(path.relative_to(RUNTIME)))
    assert not offenders, offenders
    assert not list(RUNTIME.glob("*/include/pvl"))
