"""Every block-quantized weight of a real conversion is proved by its weight map (issue 17, item 1):
``gsurg apply rules/llm-kv-cache.yaml --set storage=int8`` (and int4, and int4 with ``quant_method=minmax``)
writes ``{graph}.weights.yaml`` per graph, and ``gsurg diff-bin X.ncnn.bin CHECKPOINT --map X.weights.yaml
--fail-on-diff`` passes for all three graphs, every quantized weight within half a step of its tensor or
saturated; the fp32 conversion against the int8 one passes too, in steps. A code moved by one level or a
scale set to 0 in a copy fails, naming the weight, row and column (or the scale's record and offset).

Oracle: the shipped tiny checkpoint read with the safetensors package and the codes and scales read from the
written .bin at the offsets the walk gives, with plain numpy; the pass/fail verdicts of ``diff-bin`` itself
are checked against hand-packed records in test_diff_bin_quantized.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from safetensors.numpy import load_file

pytest.importorskip("torch")
pytest.importorskip("pnnx")

from graphsurgeon.cli import main
from graphsurgeon.formats.model_bin import walk_bin
from graphsurgeon.formats.param_text import read_param_text
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_exports")]

RULES = REPO / "rules" / "llm-kv-cache.yaml"
CHECKPOINT = REPO / "graphsurgeon" / "models" / "qwen3_llm" / "tiny" / "model.safetensors"
GRAPHS = ("embed", "decoder", "lm_head")
VARIANTS = {
    "fp32": [],
    "int8": ["--set", "storage=int8"],
    "int4": ["--set", "storage=int4"],  # the rule file's default method: clip
    "int4-minmax": ["--set", "storage=int4", "--set", "quant_method=minmax"],
}
#: The rule file's default block per variant (``quant_block``): 128 at 8 bits, 64 at 4.
BLOCK = {"int8": 128, "int4": 64, "int4-minmax": 64}


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quant-maps")
    for name, argv in VARIANTS.items():
        assert main(["apply", str(RULES), "--out", str(root / name), *argv]) == 0, name
    return {name: root / name for name in VARIANTS}


def _diff(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    rc = main(["diff-bin", *argv, "--fail-on-diff", "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


def _with_map(capsys: pytest.CaptureFixture[str], folder: Path, graph: str) -> tuple[int, dict[str, Any]]:
    bin_path, map_path = folder / f"{graph}.ncnn.bin", folder / f"{graph}.weights.yaml"
    return _diff(capsys, str(bin_path), str(CHECKPOINT), "--map", str(map_path), "--atol", "0", "--rtol", "0")


def _quantized_in_map(folder: Path, graph: str) -> int:
    """The count the map's header gives ("# N weight(s) are block-quantized codes")."""
    for line in (folder / f"{graph}.weights.yaml").read_text().splitlines():
        if "are block-quantized codes" in line:
            return int(line.split()[1])
    return 0


@pytest.mark.parametrize("variant", ["int8", "int4", "int4-minmax"])
def test_every_quantized_weight_passes_its_map(
    converted: dict[str, Path], capsys: pytest.CaptureFixture[str], variant: str
) -> None:
    folder = converted[variant]
    saturated = 0
    for graph in GRAPHS:
        rc, doc = _with_map(capsys, folder, graph)
        assert rc == 0 and doc["summary"]["result"] == "PASSED", (graph, doc["summary"])
        assert doc["unpaired"] == {"a": [], "b": []}, graph  # no scales record is left over
        quant = [p["quantized"] for p in doc["pairs"] if p["quantized"] is not None]
        assert len(quant) == doc["summary"]["quantized"]["pairs"] == _quantized_in_map(folder, graph)
        bits = 8 if variant == "int8" else 4
        assert all(q["format"] == f"int{bits} block {BLOCK[variant]}" and q["wrong"] == 0 for q in quant)
        if variant == "int4-minmax":  # min-max clips nothing: every value within half a step
            assert all(q["max_steps"] <= 0.5 and q["saturated"] == 0 for q in quant)
        saturated += sum(q["saturated"] for q in quant)
        if graph != "embed":
            assert quant, graph
    if variant == "int4":
        assert saturated > 0  # clip saturates outliers on purpose, and still passes


def test_the_map_header_says_how_quantized_weights_are_checked(converted: dict[str, Path]) -> None:
    text = (converted["int8"] / "decoder.weights.yaml").read_text()
    header = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    assert "14 weight(s) are block-quantized codes" in header
    assert "--atol and --rtol do not apply to them" in header and "scales records have no entry" in header
    entries = yaml.safe_load(text)
    assert "gemm_0.B" in entries and not any(k.endswith("_quantize_scales") for k in entries)


def test_an_fp32_conversion_against_a_quantized_one(
    converted: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for variant in ("int8", "int4"):
        for graph in ("decoder", "lm_head"):
            a, b = converted["fp32"] / f"{graph}.ncnn.bin", converted[variant] / f"{graph}.ncnn.bin"
            rc, doc = _diff(capsys, str(a), str(b))
            assert rc == 0 and doc["unpaired"] == {"a": [], "b": []}, (variant, graph, doc["summary"])
            assert doc["summary"]["quantized"]["pairs"] == {"decoder": 14, "lm_head": 1}[graph]
            assert all(p["how"] == "name" for p in doc["pairs"])


def _int8_records(folder: Path, layer: str) -> tuple[int, int, np.ndarray, np.ndarray]:
    """Codes offset, scales offset, the codes ``[N, K]`` and scales ``[N, blocks]`` of ``layer`` in the
    int8 decoder, read from the file at the walk's offsets."""
    records = walk_bin(read_param_text(folder / "decoder.ncnn.param"), folder / "decoder.ncnn.bin")
    codes_rec = next(r for r in records if r.layer == layer and r.slot == "B")
    scales_rec = next(r for r in records if r.layer == layer and r.slot == "B_quantize_scales")
    data = (folder / "decoder.ncnn.bin").read_bytes()
    n, blocks = scales_rec.shape
    codes = np.frombuffer(
        data, np.int8, count=codes_rec.shape[0] * codes_rec.shape[1], offset=codes_rec.offset
    )
    scales = np.frombuffer(data, "<f4", count=n * blocks, offset=scales_rec.offset)
    return codes_rec.offset, scales_rec.offset, codes.reshape(n, -1), scales.reshape(n, blocks)


def test_faults_in_a_real_conversion_name_the_weight(
    converted: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(converted["int8"], broken)
    codes_at, scales_at, codes, scales = _int8_records(broken, "gemm_3")
    entry = yaml.safe_load((broken / "decoder.weights.yaml").read_text())["gemm_3.B"]
    w = load_file(str(CHECKPOINT))[entry].astype(np.float64)  # [N, K], no transform in the map
    y = w * np.repeat(scales.astype(np.float64), BLOCK["int8"], axis=1)[:, : w.shape[1]]
    near = np.argwhere((np.abs(y - codes) < 0.4) & (codes < 127))
    r, c = (int(i) for i in near[len(near) // 3])
    data = bytearray((broken / "decoder.ncnn.bin").read_bytes())
    pristine = bytes(data)
    data[codes_at + r * codes.shape[1] + c] = (int(codes[r, c]) + 1) & 0xFF
    (broken / "decoder.ncnn.bin").write_bytes(bytes(data))
    rc, doc = _with_map(capsys, broken, "decoder")
    failing = [p for p in doc["pairs"] if p["status"] != "pass"]
    assert rc == 1 and [p["a"]["name"] for p in failing] == ["gemm_3.B"]
    wrong = failing[0]["quantized"]["first_wrong"]
    assert failing[0]["quantized"]["wrong"] == 1
    assert (wrong["row"], wrong["col"], wrong["code"]) == (r, c, int(codes[r, c]) + 1)
    assert wrong["offset"] == codes_at + r * codes.shape[1] + c
    # a scale set to 0, in a fresh copy
    data = bytearray(pristine)
    last = scales.shape[1] - 1
    at = scales_at + 4 * (5 * scales.shape[1] + last)  # row 5, the last block
    data[at : at + 4] = b"\x00\x00\x00\x00"
    (broken / "decoder.ncnn.bin").write_bytes(bytes(data))
    rc, doc = _with_map(capsys, broken, "decoder")
    failing = [p for p in doc["pairs"] if p["status"] != "pass"]
    assert rc == 1 and [p["a"]["name"] for p in failing] == ["gemm_3.B"]
    bad = failing[0]["quantized"]["first_bad_scale"]
    assert bad == {"row": 5, "block": last, "offset": at, "value": 0.0}
    assert failing[0]["quantized"]["wrong"] == 0
