"""The Qwen3 reference model (graphsurgeon/models/qwen3_llm) against HF transformers, and its checkpoint
writer.

Oracles: ``transformers.Qwen3ForCausalLM`` loaded from the same checkpoint folder (offline, local path,
eager attention, fp32) for logits over a prefill and cached decode steps and for greedy tokens; the
``safetensors`` library and torch's own bf16 rounding for the written files; counts by hand for the
Qwen3-0.6B config.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from safetensors.numpy import save_file  # noqa: E402

import graphsurgeon.models.qwen3_llm.make_tiny as make_tiny_module  # noqa: E402
from graphsurgeon.formats.safetensors import Checkpoint, CheckpointError  # noqa: E402
from graphsurgeon.models.common.qwen3_llm_config import config_from_dict  # noqa: E402
from graphsurgeon.models.common.qwen3_llm_model import load_model  # noqa: E402
from graphsurgeon.models.qwen3_llm.make_tiny import (  # noqa: E402
    QWEN3_0_6B,
    DType,
    make_tiny,
    tensor_shapes,
    tiny_config,
    to_bf16_bits,
)

PROMPT = [5, 17, 200, 3, 99, 42]
DECODE = [7, 250, 9, 1]


def _hf(folder: Path) -> Any:
    model = transformers.Qwen3ForCausalLM.from_pretrained(
        str(folder), dtype=torch.float32, attn_implementation="eager", local_files_only=True
    )
    return model.eval()


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


class Variant(TypedDict):
    tied: bool
    dtype: DType
    shards: int


VARIANTS: dict[str, Variant] = {
    "tied-fp32": {"tied": True, "dtype": "fp32", "shards": 1},
    "untied-fp32-sharded": {"tied": False, "dtype": "fp32", "shards": 3},
    "tied-bf16-sharded": {"tied": True, "dtype": "bf16", "shards": 2},
    "untied-bf16": {"tied": False, "dtype": "bf16", "shards": 1},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_equal_transformers_over_a_prefill_and_cached_decode_steps(
    tmp_path: Path, variant: str
) -> None:
    folder = make_tiny(tmp_path / variant, **VARIANTS[variant])
    ours, hf = load_model(folder), _hf(folder)
    with torch.no_grad():
        logits, cache = ours(torch.tensor([PROMPT]))
        out = hf(torch.tensor([PROMPT]), use_cache=True)
        steps = [(logits, out.logits)]
        for tok in DECODE:
            logits, cache = ours(torch.tensor([[tok]]), cache)
            out = hf(torch.tensor([[tok]]), cache=out.cache, use_cache=True)
            steps.append((logits, out.logits))
    assert cache.length == len(PROMPT) + len(DECODE)
    for mine, theirs in steps:
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)
    assert float(steps[0][1].abs().max()) > 1.0  # logits of a real spread, not all near zero


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_greedy_tokens_equal_transformers_generate(tmp_path: Path, tied: bool) -> None:
    folder = make_tiny(tmp_path / "m", tied=tied)
    ours, hf = load_model(folder), _hf(folder)
    with torch.no_grad():
        theirs = hf.generate(
            torch.tensor([PROMPT]), max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(PROMPT) :].tolist()
    assert len(theirs) == 24 and len(set(theirs)) > 4  # not one token repeated
    assert ours.generate(PROMPT, 24) == theirs


# ---- the checkpoint writer --------------------------------------------------------------------------------


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_the_writer_gives_the_same_bytes_every_run_and_for_any_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _digest(make_tiny(tmp_path / "a", tied=False, dtype="bf16", shards=2))
    b = _digest(make_tiny(tmp_path / "b", tied=False, dtype="bf16", shards=2))
    monkeypatch.setattr(make_tiny_module, "CHUNK", 1000)  # streaming in small pieces changes nothing
    c = _digest(make_tiny(tmp_path / "c", tied=False, dtype="bf16", shards=2))
    assert a == b == c
    assert set(a) == {
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    }
    assert _digest(make_tiny(tmp_path / "d", seed=1)) != _digest(make_tiny(tmp_path / "e", seed=0))


def test_bf16_rounding_is_torch_rounding() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.standard_normal(10000).astype(np.float32),
            # halfway cases: low 16 bits exactly 0x8000, with even and odd kept bits
            (np.arange(64, dtype=np.uint32) << 16 | 0x3F800000 | 0x8000).view(np.float32),
            np.array([0.0, -0.0, 1e-40, 3.0e38], dtype=np.float32),
        ]
    )
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(to_bf16_bits(x), want)


def test_sharded_and_bf16_folders_hold_the_same_model(tmp_path: Path) -> None:
    single = load_model(make_tiny(tmp_path / "single", tied=False))
    sharded = load_model(make_tiny(tmp_path / "sharded", tied=False, shards=3))
    bf16 = load_model(make_tiny(tmp_path / "bf16", tied=False, dtype="bf16", shards=2))
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3
    for (name, p), (_, q), (_, r) in zip(
        single.named_parameters(), sharded.named_parameters(), bf16.named_parameters(), strict=True
    ):
        assert torch.equal(p, q), name
        assert torch.equal(p.to(torch.bfloat16).float(), r), name


def test_the_written_files_are_what_the_safetensors_library_reads(tmp_path: Path) -> None:
    from safetensors import safe_open

    folder = make_tiny(tmp_path / "m", tied=False, dtype="bf16")
    cfg = json.loads((folder / "config.json").read_text())
    with safe_open(str(folder / "model.safetensors"), framework="pt") as fh:
        assert fh.metadata() == {"format": "pt"}
        shapes = {name: tuple(fh.get_slice(name).get_shape()) for name in fh.keys()}  # noqa: SIM118
        assert fh.get_tensor("model.norm.weight").dtype == torch.bfloat16
    assert shapes["lm_head.weight"] == (cfg["vocab_size"], cfg["hidden_size"]) == (300, 64)
    assert shapes["model.layers.1.self_attn.q_proj.weight"] == (4 * 32, 64)  # q width 128 != hidden 64
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (2 * 32, 64)
    assert len(shapes) == 1 + 2 * 11 + 1 + 1


def test_the_qwen3_0_6b_config_has_the_released_sizes() -> None:
    cfg = config_from_dict(QWEN3_0_6B)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (
        1024,
        28,
        16,
        8,
    )
    assert (cfg.head_dim, cfg.intermediate_size, cfg.vocab_size) == (128, 3072, 151936)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 1e6 and cfg.rms_norm_eps == 1e-6
    # by hand: embedding 151936*1024; per layer q 2048*1024, k and v 1024*1024, o 1024*2048,
    # mlp 3*3072*1024, norms 2*1024 + 2*128; final norm 1024 (0.6B total, 0.44B without the embedding)
    per_layer = 2048 * 1024 + 2 * 1024 * 1024 + 1024 * 2048 + 3 * 3072 * 1024 + 2 * 1024 + 2 * 128
    assert sum(math.prod(s) for _, s in tensor_shapes(QWEN3_0_6B)) == 151936 * 1024 + 28 * per_layer + 1024
    assert sum(math.prod(s) for _, s in tensor_shapes(QWEN3_0_6B)) == 596_049_920


# ---- loading errors ---------------------------------------------------------------------------------------


def _rewrite(folder: Path, edit: Any) -> None:
    """Rewrite the single-file checkpoint through the safetensors library after ``edit(tensors)``."""
    ckpt = Checkpoint(str(folder / "model.safetensors"))
    tensors = {name: ckpt.array(name) for name in ckpt.tensors}
    ckpt.close()
    edit(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda t: t.pop("model.layers.1.mlp.up_proj.weight"),
            "{st}: missing tensor(s) model.layers.1.mlp.up_proj.weight",
        ),
        (
            lambda t: t.update({"model.layers.0.mlp.gate_proj.weight": np.zeros((128, 65), np.float32)}),
            "{st}: tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 65] but {cfg} gives "
            "[128, 64]",
        ),
        (
            lambda t: t.update({"model.extra.weight": np.zeros(3, np.float32)}),
            "{st}: unexpected tensor(s) model.extra.weight (not a Qwen3 model?)",
        ),
    ],
    ids=["missing", "shape", "unexpected"],
)
def test_a_checkpoint_that_does_not_fit_the_config_names_file_and_tensor(
    tmp_path: Path, edit: Any, expected: str
) -> None:
    folder = make_tiny(tmp_path / "m")
    _rewrite(folder, edit)
    with pytest.raises(CheckpointError) as err:
        load_model(folder)
    assert str(err.value) == expected.format(st=folder / "model.safetensors", cfg=folder / "config.json")


def test_a_tied_checkpoint_may_carry_lm_head_as_transformers_allows(tmp_path: Path) -> None:
    folder = make_tiny(tmp_path / "m", tied=True)
    _rewrite(folder, lambda t: t.update({"lm_head.weight": np.zeros((300, 64), np.float32)}))
    model = load_model(folder)
    assert model.lm_head is None and float(model.lm_head_weight.abs().sum()) > 0  # the embedding is used


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"num_key_value_heads": 3}, "num_attention_heads 4 is not a multiple of num_key_value_heads 3"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling.rope_type 'yarn' is not"),
        ({"attention_bias": True}, "attention_bias true is not supported"),
        ({"hidden_size": None}, "hidden_size must be a positive integer below 2^31, not None"),
        ({"rms_norm_eps": "small"}, "rms_norm_eps must be a positive number, not 'small'"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported (only silu)"),
    ],
    ids=["gqa", "rope-scaling", "bias", "missing-int", "bad-float", "act"],
)
def test_config_problems_name_the_file_and_key(tmp_path: Path, change: dict[str, Any], expected: str) -> None:
    folder = make_tiny(tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(change)
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as err:
        load_model(folder)
    assert str(err.value).startswith(f"{folder / 'config.json'}: {expected}")


def test_a_transformers_5_config_with_rope_parameters_loads_the_same(tmp_path: Path) -> None:
    cfg = tiny_config()
    theta = cfg.pop("rope_theta")
    cfg.pop("rope_scaling")
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    assert config_from_dict(cfg) == config_from_dict(tiny_config())


def test_a_folder_without_weights_is_named(tmp_path: Path) -> None:
    folder = make_tiny(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no model\.safetensors or model\.safetensors\.index\.json"):
        load_model(folder)
    with pytest.raises(CheckpointError, match=r"config\.json: no such file"):
        load_model(tmp_path)
