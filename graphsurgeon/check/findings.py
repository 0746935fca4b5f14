"""Findings and reports: what a check found, where, and how bad, with text and JSON renderings.

A finding is an error when ncnn would fail to load the model or would compute wrong numbers, and a warning
for hazards and style. The JSON shape is ``{"schema_version": 1, "summary": {...}, "findings": [...]}``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from graphsurgeon.errors import clipped

SCHEMA_VERSION = 1


class Level(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Finding:
    """One independent problem: a stable check id, a message, and the place (layer, line, blob, weight)."""

    level: Level
    check: str
    message: str
    layer: str | None = None
    line: int | None = None
    blob: str | None = None
    weight: str | None = None
    offset: int | None = None

    def where(self) -> str:
        parts = []
        if self.line:
            parts.append(f"line {self.line}")
        if self.layer:
            parts.append(f"layer {self.layer}")
        if self.blob:
            parts.append(f"blob {self.blob}")
        if self.weight:
            parts.append(f"weight {self.weight}")
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        return ", ".join(parts)


def error(check: str, message: str, **where: Any) -> Finding:
    return Finding(Level.ERROR, check, message, **where)


def warning(check: str, message: str, **where: Any) -> Finding:
    return Finding(Level.WARNING, check, message, **where)


@dataclass
class LintReport:
    """All findings for one model, in check order, and what was looked at."""

    path: str
    bin_path: str | None = None
    findings: list[Finding] = field(default_factory=list)
    layers: int = 0
    blobs: int = 0
    weights: int | None = None
    checks_run: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(f.level is Level.ERROR for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.level is Level.WARNING for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0

    def summary(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "bin": self.bin_path,
            "layers": self.layers,
            "blobs": self.blobs,
            "weights": self.weights,
            "errors": self.errors,
            "warnings": self.warnings,
            "by_check": dict(sorted(Counter(f.check for f in self.findings).items())),
            "checks_run": self.checks_run,
            "passed": self.errors == 0,
        }

    def to_json(self) -> str:
        findings = [{k: v for k, v in asdict(f).items() if v is not None} for f in self.findings]
        return json.dumps(
            {"schema_version": SCHEMA_VERSION, "summary": self.summary(), "findings": findings}, indent=2
        )

    def to_text(self) -> str:
        lines = [
            clipped(f"{self.path}: {f.level.value}: [{f.check}] {f.where()}: {f.message}")
            for f in self.findings
        ]
        verdict = "PASSED" if self.errors == 0 else "FAILED"
        weights = f", {self.weights} weights" if self.weights is not None else ""
        lines.append(
            f"{self.layers} layers, {self.blobs} blobs{weights}: {self.errors} error(s), "
            f"{self.warnings} warning(s)"
        )
        lines.append(verdict)
        return "\n".join(lines)
