"""What test_lint_report.py, test_lint_graph.py and test_lint_layers.py share: a text .param with an exact
header built from its layer lines, the weight tags written by hand from ncnn's format, and one-call
wrappers around ``run_lint``, ``gsurg lint`` and the ``ncnn`` wheel's ``load_param_mem``."""

from __future__ import annotations

import struct
from pathlib import Path

import ncnn
import pytest

from graphsurgeon.check.context import LintOptions
from graphsurgeon.check.findings import LintReport
from graphsurgeon.check.lint import run_lint
from graphsurgeon.cli import main

# Weight tags written by hand from ncnn's src/modelbin.cpp (uint32 little-endian on disk).
TAG_FP32 = bytes(4)
TAG_FP16 = bytes.fromhex("476b3001")

Row = tuple[str, str, str | None, int | None]  # (level, check, layer, line)


def f32(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def write(tmp_path: Path, text: str, name: str = "m.param") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def param(*layer_lines: str, blobs: int | None = None) -> str:
    """A text .param with an exact header (layer count, distinct blob names) unless ``blobs`` overrides it."""
    names: set[str] = set()
    for line in layer_lines:
        tok = line.split()
        nb, nt = int(tok[2]), int(tok[3])
        names.update(tok[4 : 4 + nb + nt])
    count = len(names) if blobs is None else blobs
    return "7767517\n" + f"{len(layer_lines)} {count}\n" + "".join(f"{line}\n" for line in layer_lines)


def lint(
    path: Path,
    *,
    bin_path: Path | None = None,
    inputs: list[str] | None = None,
    outputs: list[str] | None = None,
    custom: list[str] | None = None,
) -> LintReport:
    options = LintOptions(bin_path=str(bin_path) if bin_path else None, inputs=inputs, outputs=outputs)
    return run_lint(str(path), options, custom=custom)


def rows(report: LintReport) -> list[Row]:
    return [(f.level.value, f.check, f.layer, f.line) for f in report.findings]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["lint", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def ncnn_load_param(text: str) -> int:
    net = ncnn.Net()
    return int(net.load_param_mem(text))
