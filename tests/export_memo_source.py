"""The export source ``tests/export_memo.py`` runs a job through in the worker (a child process): it calls the
job's real source (named by the variables ``MEMO_SOURCE`` and ``MEMO_BASE``, which the real source does not
see) with the rule file's other variables, and notes in the file ``MEMO_LOG`` names which of them the source
read. A later job whose variables agree on those (and on everything else the export reads) gets the same
pnnx output, so the memo can hand it the files of this one."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from graphsurgeon.export.spec import ExportSpec, load_source

MEMO_SOURCE = "_gsurg_test_memo_source"
MEMO_BASE = "_gsurg_test_memo_base"
MEMO_LOG = "_gsurg_test_memo_log"
MEMO_KEYS = (MEMO_SOURCE, MEMO_BASE, MEMO_LOG)


class ReadingVariables(Mapping[str, Any]):
    """The variables as the real source sees them, noting every name it asks for (present or not); iterating
    or counting them notes all of them."""

    def __init__(self, values: Mapping[str, Any], log: Path) -> None:
        self._values = dict(values)
        self._log = log
        self._read: set[str] = set()
        self._all = False
        self._write()

    def _note(self, key: str) -> None:
        if key not in self._read:
            self._read.add(key)
            self._write()

    def _note_all(self) -> None:
        if not self._all:
            self._all = True
            self._write()

    def _write(self) -> None:  # at every new name: reads after build() returns count too
        doc = {"all": self._all, "read": sorted(self._read)}
        self._log.write_text(json.dumps(doc), encoding="utf-8")

    def __getitem__(self, key: str) -> Any:
        self._note(key)
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._note(key)
        else:
            self._note_all()
        return key in self._values

    def get(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return self._values.get(key, default)

    def __iter__(self) -> Iterator[str]:
        self._note_all()
        return iter(self._values)

    def __len__(self) -> int:
        self._note_all()
        return len(self._values)


def build(variables: Mapping[str, Any], checkpoint: Path | None) -> Sequence[ExportSpec]:
    real = load_source(str(variables[MEMO_SOURCE]), Path(str(variables[MEMO_BASE])))
    seen = {k: v for k, v in variables.items() if k not in MEMO_KEYS}
    result: Sequence[ExportSpec] = real(ReadingVariables(seen, Path(str(variables[MEMO_LOG]))), checkpoint)
    return result
