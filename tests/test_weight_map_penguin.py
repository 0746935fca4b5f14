"""Every weight of the Penguin-VL conversion is the checkpoint's (issue 9, item 4): ``gsurg apply
rules/penguin_vl.yaml`` writes a diff-bin map per sub-model, and ``gsurg diff-bin OUT/x.ncnn.bin
CHECKPOINT --map OUT/x.weights.yaml --fail-on-diff`` passes for all six .bin files — exactly for the
default fp32 conversion, within fp16's rounding bound (atol 2^-25, rtol 2^-11: half a unit in the last
place, subnormals included) for ``--set storage=fp16`` — and fails, naming the weight, when one value of
a copy is changed. Also the untied bf16 sharded variant of the LLM half (rules/llm-kv-cache.yaml).

Oracle: ``gsurg diff-bin`` reading the written files and the safetensors checkpoint (it is tested against
hand-made files in test_diff_bin_*.py); which tensor each weight holds is written out by hand below for the
tied embedding."""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("pnnx")

from graphsurgeon.cli import main
from graphsurgeon.formats.model_bin import walk_bin
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.models.qwen3_llm.make_tiny import make_tiny
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_exports")]

PENGUIN = REPO / "rules" / "penguin_vl.yaml"
LLM = REPO / "rules" / "llm-kv-cache.yaml"
CHECKPOINT = REPO / "graphsurgeon" / "models" / "penguin_vl" / "tiny" / "model.safetensors"
GRAPHS = ("vision_embed_patch", "vision_encoder", "vision_projector", "embed", "decoder", "lm_head")
FP16_TOL = ("2.9802322387695312e-08", "0.00048828125")  # 2^-25, 2^-11


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("penguin-maps")
    out = {"fp32": root / "fp32", "fp16": root / "fp16"}
    assert main(["apply", str(PENGUIN), "--out", str(out["fp32"])]) == 0
    assert main(["apply", str(PENGUIN), "--out", str(out["fp16"]), "--set", "storage=fp16"]) == 0
    untied = make_tiny(root / "ckpt-untied", tied=False, dtype="bf16", shards=2, layers=3, seed=1)
    out["untied"] = root / "untied"
    out["untied_ckpt"] = untied
    assert main(["apply", str(LLM), "--out", str(out["untied"]), "--set", f"checkpoint={untied}"]) == 0
    return out


def _diff(folder: Path, graph: str, checkpoint: Path, tol: tuple[str, str] = ("0", "0")) -> int:
    return main(
        [
            "diff-bin",
            str(folder / f"{graph}.ncnn.bin"),
            str(checkpoint),
            "--map",
            str(folder / f"{graph}.weights.yaml"),
            "--atol",
            tol[0],
            "--rtol",
            tol[1],
            "--fail-on-diff",
        ]
    )


def _map(folder: Path, graph: str) -> dict[str, Any]:
    doc = yaml.safe_load((folder / f"{graph}.weights.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def test_every_fp32_weight_equals_the_checkpoint_exactly(
    converted: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = converted["fp32"]
    for graph in GRAPHS:
        capsys.readouterr()
        assert _diff(folder, graph, CHECKPOINT) == 0, graph
        report = capsys.readouterr().out
        assert "unpaired: 0 in a, 0 in b" in report and report.rstrip().endswith("PASSED"), report
        records = walk_bin(read_param_text(folder / f"{graph}.ncnn.param"), folder / f"{graph}.ncnn.bin")
        assert list(_map(folder, graph)) == [f"{r.layer}.{r.slot}" for r in records]


def test_the_tied_embedding_backs_both_embed_and_lm_head(converted: dict[str, Path]) -> None:
    for folder in (converted["fp32"], converted["fp16"]):
        assert _map(folder, "embed") == {"embed.weight": "model.embed_tokens.weight"}
        lm = _map(folder, "lm_head")
        assert lm == {
            "lm_head.B": {"tensor": "model.embed_tokens.weight", "transforms": [{"reshape": [646 * 64]}]}
        }
    untied = converted["untied"]
    assert _map(untied, "embed") == {"embed.weight": "model.embed_tokens.weight"}
    assert _map(untied, "lm_head")["lm_head.B"]["tensor"] == "lm_head.weight"


def test_a_changed_weight_fails_diff_bin_naming_it(
    converted: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(converted["fp32"], broken)
    bin_path = broken / "decoder.ncnn.bin"
    records = walk_bin(read_param_text(broken / "decoder.ncnn.param"), bin_path)
    target = [r for r in records if r.layer_type == "Gemm" and r.slot == "B"][3]
    data = bytearray(bin_path.read_bytes())
    at = target.offset + 4 + 4 * 100  # the tag, then element 100
    struct.pack_into("<f", data, at, -struct.unpack_from("<f", data, at)[0])
    bin_path.write_bytes(bytes(data))
    capsys.readouterr()
    assert _diff(broken, "decoder", CHECKPOINT) == 1
    report = capsys.readouterr().out.splitlines()
    failing = [line for line in report if "FAIL" in line and f"{target.layer}.B" in line]
    assert failing, report
    assert report[-1] == "FAILED"
    assert sum("FAIL" in line for line in report[:-1]) == 1  # that weight only


def test_fp16_weights_equal_the_checkpoint_within_fp16_rounding(
    converted: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = converted["fp16"]
    for graph in GRAPHS:
        header = (folder / f"{graph}.weights.yaml").read_text()
        m = re.search(r"--atol (\S+) --rtol (\S+) --fail-on-diff", header)
        assert m is not None and (m.group(1), m.group(2)) == FP16_TOL, graph
        assert _diff(folder, graph, CHECKPOINT, FP16_TOL) == 0, graph
    capsys.readouterr()
    assert _diff(folder, "decoder", CHECKPOINT) == 1  # rounded: not exactly equal
    assert "FAILED" in capsys.readouterr().out


def test_the_untied_bf16_sharded_llm_weights_equal_the_checkpoint_exactly(converted: dict[str, Path]) -> None:
    index = converted["untied_ckpt"] / "model.safetensors.index.json"
    assert index.is_file()
    for graph in ("embed", "decoder", "lm_head"):
        assert (
            f"gsurg diff-bin {graph}.ncnn.bin {index} "
            in (converted["untied"] / f"{graph}.weights.yaml").read_text()
        )
        assert _diff(converted["untied"], graph, index) == 0, graph
