"""``gsurg verify`` holds a two-byte-float conversion to the exact criteria when its weights are the
checkpoint's own values (``verify.lossless_storage``), and to its storage's approximate ones otherwise.

The oracle for "lossless" is the checkpoint's safetensors header (the tiny Qwen3 written bf16 by
``make_tiny``) and, for the verdict, the PyTorch reference the verifier already runs: a bf16 checkpoint
stored ``storage=bf16`` must give the reference's tokens at every step and exact stage cosines.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from graphsurgeon.cli import main
from graphsurgeon.models.qwen3_llm.make_tiny import make_tiny
from graphsurgeon.verify.criteria import criteria_for
from graphsurgeon.verify.lossless_storage import Lossless, lossless_float_storage, map_path

REPO = Path(__file__).resolve().parents[1]
TINY_FP32 = REPO / "graphsurgeon" / "models" / "qwen3_llm" / "tiny"

pytestmark = pytest.mark.usefixtures("shared_exports")


def _apply(out: Path, storage: str, checkpoint: Path) -> dict[str, Any]:
    argv = ["apply", str(REPO / "rules" / "llm-kv-cache.yaml"), "--out", str(out), "-q"]
    argv += ["--set", f"storage={storage}", "--set", f"checkpoint={checkpoint}"]
    assert main(argv) == 0
    doc: dict[str, Any] = json.loads((out / "model.json").read_text())
    return doc


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("ckpt") / "tiny_bf16", dtype="bf16")


@pytest.fixture(scope="module")
def bf16_of_bf16(tmp_path_factory: pytest.TempPathFactory, bf16_checkpoint: Path) -> Path:
    out = tmp_path_factory.mktemp("conv") / "bf16_of_bf16"
    _apply(out, "bf16", bf16_checkpoint)
    return out


def test_a_bf16_checkpoint_stored_bf16_is_lossless(bf16_of_bf16: Path, bf16_checkpoint: Path) -> None:
    doc = json.loads((bf16_of_bf16 / "model.json").read_text())
    answer = lossless_float_storage(bf16_of_bf16, doc, bf16_checkpoint)
    # 2 layers x 7 Gemms + the embedding in embed and in lm_head (tied): every tagged slot of the three nets
    assert answer == Lossless(True, answer.reason) and "16 fp16/bf16 weights" in answer.reason
    exact = criteria_for("fp32", "bf16", answer)
    assert exact.exact and exact.storage == "bf16" and "lossless" in exact.describe()
    assert not criteria_for("fp16", "bf16", answer).exact  # fp16 arithmetic rounds whatever the weights


def test_an_fp32_checkpoint_stored_bf16_was_rounded(tmp_path: Path) -> None:
    doc = _apply(tmp_path / "c", "bf16", TINY_FP32)
    answer = lossless_float_storage(tmp_path / "c", doc, TINY_FP32)
    assert not answer.holds
    assert "embed.ncnn.bin: embed.weight (bf16)" in answer.reason and "stored F32" in answer.reason
    approx = criteria_for("fp32", "bf16", answer)
    assert not approx.exact and "rounded: embed.ncnn.bin" in approx.describe()


def test_what_is_missing_is_named_and_never_judged_lossless(
    tmp_path: Path, bf16_of_bf16: Path, bf16_checkpoint: Path
) -> None:
    folder = tmp_path / "c"
    shutil.copytree(bf16_of_bf16, folder)
    doc = json.loads((folder / "model.json").read_text())
    assert not lossless_float_storage(folder, doc, None).holds
    missing = lossless_float_storage(folder, doc, tmp_path / "nowhere")
    assert not missing.holds and "nowhere" in missing.reason

    decoder_map = map_path(folder, "decoder.ncnn.bin")
    assert decoder_map.name == "decoder.weights.yaml"
    text = decoder_map.read_text()
    # a Gemm weight left out of its map: its source is unknown
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("gemm_0.B:"))
    del lines[first : first + 4]  # the key, `tensor:`, `transforms:` and its one reshape
    decoder_map.write_text("\n".join(lines) + "\n")
    answer = lossless_float_storage(folder, doc, bf16_checkpoint)
    assert not answer.holds
    assert "decoder.ncnn.bin: gemm_0.B (bf16) is not in decoder.weights.yaml" in answer.reason

    # a map naming a tensor the checkpoint lacks
    decoder_map.write_text(text.replace("model.layers.0.self_attn.q_proj.weight", "no.such.tensor", 1))
    answer = lossless_float_storage(folder, doc, bf16_checkpoint)
    assert not answer.holds and "names 'no.such.tensor', not in the checkpoint" in answer.reason

    # a malformed map, then no map at all
    decoder_map.write_text("[not, a, mapping]\n")
    answer = lossless_float_storage(folder, doc, bf16_checkpoint)
    assert not answer.holds and "decoder.weights.yaml" in answer.reason
    decoder_map.unlink()
    answer = lossless_float_storage(folder, doc, bf16_checkpoint)
    assert answer == Lossless(False, "decoder.weights.yaml is missing: the weights' sources are unknown")


@pytest.mark.slow
def test_verify_holds_the_lossless_conversion_to_equal_tokens(
    bf16_of_bf16: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    code = main(["verify", str(bf16_of_bf16), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["criteria"].startswith("fp32 x bf16: exact (") and "lossless:" in doc["criteria"]
    assert code == 0 and doc["passed"] and doc["exact"], doc["summary"]
    for case in doc["tokens"]:
        assert case["ours"] == case["reference"] and len(case["reference"]) == 32
    assert all(st["cosine"] >= 0.99999 for st in doc["stages"])


@pytest.mark.slow
def test_a_wrong_lossless_claim_only_makes_verify_stricter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A map that wrongly said the weights were lossless would hold a rounded conversion to equal tokens
    and exact stage cosines, which it misses (here: the fp32 tiny stored bf16, a few 1e-6 off per stage)."""
    from graphsurgeon.verify import run

    _apply(tmp_path / "c", "bf16", TINY_FP32)
    assert run.run_verify(tmp_path / "c", run.VerifyOptions()).passed  # its own, approximate criteria
    monkeypatch.setattr(run, "lossless_float_storage", lambda *_: Lossless(True, "claimed"))
    report = run.run_verify(tmp_path / "c", run.VerifyOptions())
    assert report.criteria.startswith("fp32 x bf16: exact") and not report.passed
    assert min(s.cosine for s in report.stages) < 0.99999


def _bf16_vlm_checkpoint(model: str, folder: Path) -> Path:
    """The tiny VLM's checkpoint with every float tensor stored bf16: Penguin-VL's written so by its
    make_tiny, Qwen3-VL's (written fp32 by transformers' classes) cast by torch, as a bf16 save would."""
    if model == "penguin_vl":
        from graphsurgeon.models.penguin_vl.make_tiny import make_tiny as make_penguin

        return make_penguin(folder, dtype="bf16")
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(REPO / "graphsurgeon" / "models" / model / "tiny", folder)
    for file in folder.glob("*.safetensors"):
        tensors = load_file(file)
        cast = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in tensors.items()}
        save_file(cast, file, metadata={"format": "pt"})
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("model", ["penguin_vl", "qwen3_vl"])
def test_the_tiny_vlms_bf16_of_bf16_pass_exactly(
    tmp_path: Path, model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _bf16_vlm_checkpoint(model, tmp_path / "ckpt")
    argv = ["apply", str(REPO / "rules" / f"{model}.yaml"), "--out", str(tmp_path / "c"), "-q"]
    assert main([*argv, "--set", "storage=bf16", "--set", f"checkpoint={checkpoint}"]) == 0
    capsys.readouterr()
    code = main(["verify", str(tmp_path / "c"), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["criteria"].startswith("fp32 x bf16: exact (") and "lossless:" in doc["criteria"]
    assert code == 0 and doc["passed"] and doc["exact"], doc["summary"]
    assert all(case["ours"] == case["reference"] for case in doc["tokens"])
