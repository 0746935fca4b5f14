"""rules/llm-kv-cache.yaml end to end (rule-language issue, item 10): a Qwen3-style checkpoint folder ->
pnnx exports -> embed / decoder with a KV cache / lm_head + model.json, from the rule file alone, checked
in the ncnn wheel against the PyTorch reference (graphsurgeon/models/qwen3_llm, itself checked against
transformers in test_qwen3_reference.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from graphsurgeon.cli import main
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.models.common.qwen3_llm_model import KVCache, causal_mask, load_model, rope_tables
from graphsurgeon.models.qwen3_llm.make_tiny import make_tiny
from graphsurgeon.verify.llm_chain import LlmChain
from tests.conftest import REPO
from tests.hf5_checkpoint import ROPE_THETA, save_qwen3

RULES = REPO / "rules" / "llm-kv-cache.yaml"
SHIPPED = REPO / "graphsurgeon" / "models" / "qwen3_llm" / "tiny"
PROMPTS = ([5, 17, 42, 99, 3, 250], [1, 2, 3], [123, 45, 67, 89, 10, 11, 12, 13, 14])

pytestmark = pytest.mark.usefixtures("shared_exports")


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped tiny checkpoint (the rule file's default), an untied bf16 sharded 3-layer one, and one
    transformers 5 saved itself with no EOS in any file (issue 14, item 1)."""
    root = tmp_path_factory.mktemp("llm")
    untied = make_tiny(root / "ckpt-untied", tied=False, dtype="bf16", shards=2, layers=3, seed=1)
    hf5 = save_qwen3(root / "ckpt-hf5", eos_token_id=None)
    out = {}
    for name, ckpt in (("default", None), ("untied", untied), ("hf5", hf5)):
        argv = [] if ckpt is None else ["--set", f"checkpoint={ckpt}"]
        assert main(["apply", str(RULES), "--out", str(root / name), *argv]) == 0
        out[name] = root / name
    out["untied_ckpt"], out["hf5_ckpt"] = untied, hf5
    return out


def _checkpoint(converted: dict[str, Path], name: str) -> Path:
    return SHIPPED if name == "default" else converted[f"{name}_ckpt"]


def test_the_shipped_tiny_checkpoint_is_what_make_tiny_writes(tmp_path: Path) -> None:
    again = make_tiny(tmp_path / "tiny")
    for name in ("config.json", "model.safetensors"):
        assert (
            hashlib.sha256((again / name).read_bytes()).digest()
            == hashlib.sha256((SHIPPED / name).read_bytes()).digest()
        ), name


def test_the_decoder_has_the_kv_cache_interface(converted: dict[str, Path]) -> None:
    for name, layers in (("default", 2), ("untied", 3), ("hf5", 2)):
        folder = converted[name]
        assert sorted(p.name for p in folder.iterdir() if not p.name.endswith(".gsurg.json")) == [
            "decoder.ncnn.bin",
            "decoder.ncnn.param",
            "decoder.weights.yaml",
            "embed.ncnn.bin",
            "embed.ncnn.param",
            "embed.weights.yaml",
            "lm_head.ncnn.bin",
            "lm_head.ncnn.param",
            "lm_head.weights.yaml",
            "model.json",
        ]
        graph = read_param_text(folder / "decoder.ncnn.param")
        sdpa = [x for x in graph.layers if x.type == "SDPA"]
        assert len(sdpa) == layers and all(x.get("kv_cache") == 1 and x.get("attn_mask") == 1 for x in sdpa)
        for i, layer in enumerate(sdpa):
            assert [b.name for b in layer.inputs[-2:]] == [f"cache_k{i}", f"cache_v{i}"]
            assert [b.name for b in layer.outputs[1:]] == [f"out_cache_k{i}", f"out_cache_v{i}"]
        assert not any(x.type in ("Tile", "ExpandDims") for x in graph.layers)  # native GQA
        assert all(x.get("constantM") == 0 for x in graph.layers if x.type == "Gemm")
        (kv,) = [x for x in graph.layers if x.name == "kv_cache"]
        assert kv.type == "Input" and len(kv.outputs) == 2 * layers
        assert {b.name for b in graph.input_blobs()} >= {"in0", "in1", "in2", "in3"}
        lines = (folder / "decoder.ncnn.param").read_text().splitlines()
        assert lines[1] == f"{len(graph.layers)} {len(graph.blobs)}"  # recounted
        lm = read_param_text(folder / "lm_head.ncnn.param")
        assert [x.type for x in lm.layers] == ["Input", "Gemm"]
        doc = json.loads((folder / "model.json").read_text())
        assert doc["num_layers"] == layers and doc["decoder"]["cache_inputs"][-1] == f"cache_v{layers - 1}"
        assert doc["nets"]["decoder"]["param"] == "decoder.ncnn.param"
        config = json.loads((_checkpoint(converted, name) / "config.json").read_text())
        assert doc["max_positions"] == config["max_position_embeddings"]  # the context a runtime may fill
        theta = config["rope_parameters"]["rope_theta"] if name == "hf5" else config["rope_theta"]
        assert doc["decoder"]["rope"]["theta"] == theta
        assert doc["tokens"]["eos"] == ([] if name == "hf5" else [config["eos_token_id"]])
        assert "tokenizer" not in doc  # these checkpoints have no tokenizer files: ids only
    assert theta == ROPE_THETA  # the 5.x base, not a default


@pytest.mark.parametrize("name", ["default", "untied", "hf5"])
def test_decoder_hidden_states_equal_pytorch_over_a_prefill_and_decode_steps(
    converted: dict[str, Path], name: str
) -> None:
    ckpt = _checkpoint(converted, name)
    model = load_model(ckpt)
    cfg = model.config
    gen = torch.Generator().manual_seed(7)
    hidden = torch.randn(1, 9, cfg.hidden_size, generator=gen)
    schedule = (5, 1, 1, 1, 1)
    with (
        LlmChain(converted[name], families=("qwen3_llm",)) as chain,
        chain.session() as session,
        torch.no_grad(),
    ):
        cache, start = KVCache(), 0
        for i, n in enumerate(schedule):
            x = hidden[:, start : start + n]
            cos, sin = rope_tables(cfg, start, n)
            want, cache = model.decode(x, causal_mask(start, n), cos, sin, cache)
            step = session.prefill(x[0].numpy()) if i == 0 else session.append(x[0].numpy())
            scale = float(want.abs().max())
            assert float(np.abs(step.hidden - want[0].numpy()).max()) <= 1e-4 * scale, (name, i)
            start += n
        assert session.position == sum(schedule)


@pytest.mark.parametrize("name", ["default", "untied", "hf5"])
def test_greedy_tokens_equal_pytorch_for_32_tokens(converted: dict[str, Path], name: str) -> None:
    ckpt = _checkpoint(converted, name)
    model = load_model(ckpt)
    with LlmChain(converted[name], families=("qwen3_llm",)) as chain:
        for prompt in PROMPTS:
            want = model.generate(prompt, 32)
            assert chain.greedy(prompt, 32) == want, (name, prompt)
            assert len(set(want)) > 3  # the reference does not just repeat one token


def test_a_missing_checkpoint_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    out = tmp_path / "o"
    assert main(["apply", str(RULES), "--out", str(out), "--set", f"checkpoint={missing}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(missing) in err[0] and "does not exist" in err[0], err
    assert not out.exists()


def test_verify_passes_on_the_conversion_and_fails_against_another_checkpoint(
    converted: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(converted["default"]), "--format", "json", "--tokens", "16"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] and {s["stage"] for s in doc["stages"]} >= {
        "embed",
        "decoder prefill",
        "decoder step 3",
    }
    assert all(s["cosine"] >= 0.99999 for s in doc["stages"]) and len(doc["tokens"]) == 3
    other = make_tiny(tmp_path / "other", seed=5)  # same shapes, other weights: a wrong conversion
    assert main(["verify", str(converted["default"]), "--checkpoint", str(other), "--tokens", "8"]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and text.rstrip().endswith("FAILED")
