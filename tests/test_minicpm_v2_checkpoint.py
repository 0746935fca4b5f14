"""MiniCPM-V-2 checkpoint folders (graphsurgeon/models/minicpm_v2: config.py, checkpoint.py, make_tiny.py):
the shipped tiny checkpoint is what the script makes, byte for byte; the real config gives the real
tensor table; broken folders and configs are one clear error each, naming the file and the key or tensor.

Oracles: sha256 of every file against fresh runs of the script; the real model's published numbers
(docs/minicpm-v-2.md §2: 694 tensors, 3,434,965,792 parameters = total_size / 2); errors checked for their
class (a GsurgError, exit 2), what they name, and one line.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file, save_file  # noqa: E402

from graphsurgeon.errors import GsurgError  # noqa: E402
from graphsurgeon.formats.safetensors import CheckpointError  # noqa: E402
from graphsurgeon.models.common.checkpoint_tensors import INDEX_FILE, SINGLE_FILE  # noqa: E402
from graphsurgeon.models.minicpm_v2.checkpoint import (  # noqa: E402
    load_tensors,
    parameter_count,
    tensor_shapes,
)
from graphsurgeon.models.minicpm_v2.config import config_from_dict, facts, load_config  # noqa: E402
from graphsurgeon.models.minicpm_v2.make_tiny import SHIPPED, make_tiny, model_config  # noqa: E402
from graphsurgeon.models.minicpm_v2.model import load_model  # noqa: E402

REAL: dict[str, Any] = {
    "hidden_size": 2304,
    "intermediate_size": 5760,
    "num_attention_heads": 36,
    "num_hidden_layers": 40,
    "num_key_value_heads": 36,
    "query_num": 64,
    "vision_encoder": "vit_so400m_patch14_siglip_384.webli",
    "vocab_size": 122753,
}


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()
    }


def test_the_shipped_tiny_checkpoint_is_what_the_script_makes_every_time(tmp_path: Path) -> None:
    """Every shipped file but tokenizer.json, which HF transformers' converter made from tokenizer.model
    (tests/goldens/minicpm_v2/make_tokenizer_goldens.py; test_minicpm_v2_tokenizer.py checks it)."""
    first, second = make_tiny(tmp_path / "a"), make_tiny(tmp_path / "b")
    shipped = _digests(SHIPPED)
    assert set(shipped) == {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer.model",
        "tokenizer_config.json",
    }
    del shipped["tokenizer.json"]
    assert _digests(first) == _digests(second) == shipped
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 2_000_000


def test_the_real_config_gives_the_real_tensor_table() -> None:
    raw = {**model_config(REAL["vocab_size"], "bf16"), **REAL}
    cfg = config_from_dict(raw)
    shapes = tensor_shapes(cfg)
    assert len(shapes) == 694 and parameter_count(cfg) == 6_869_931_584 // 2
    assert shapes["vpm.pos_embed"] == (1, 729, 1152) and "vpm.blocks.25.norm1.weight" in shapes
    assert "vpm.blocks.26.norm1.weight" not in shapes
    assert shapes["resampler.attn.in_proj_weight"] == (6912, 2304) and cfg.resampler.heads == 18
    assert cfg.text.residual_scale == 1.4 / 40**0.5 and cfg.text.logit_divisor == 9.0


def test_tiny_config_and_facts() -> None:
    cfg = load_config(SHIPPED)
    assert cfg.text.scale_emb == 12 and cfg.text.scale_depth == 1.4 and cfg.text.dim_model_base == 256
    assert cfg.text.logit_divisor == 0.5 and cfg.resampler.heads == 1 and cfg.vision.layers == 2
    assert (
        cfg.eos_token_ids == (2,) and cfg.slicing.scale_resolution == 448 and cfg.slicing.max_slice_nums == 9
    )
    f = facts(str(SHIPPED))
    assert f["num_hidden_layers"] == 2 and f["query_num"] == 4 and f["eos_token_id"] == [2]
    assert f["vision_encoder"]["num_hidden_layers"] == 2 and f["vision_encoder"]["pos_grid"] == 4
    json.dumps(f)  # a rule file's source.config must be plain data


def test_sharded_fp32_variant_holds_the_same_weights(tmp_path: Path) -> None:
    shipped = load_tensors(SHIPPED, load_config(SHIPPED))
    sharded = make_tiny(tmp_path / "s", dtype="fp32", shards=3)
    files = set(json.loads((sharded / INDEX_FILE).read_text())["weight_map"].values())
    assert len(files) == 3 and not (sharded / SINGLE_FILE).exists()
    loaded = load_tensors(sharded, load_config(sharded))
    assert set(loaded) == set(shipped)
    for name, value in loaded.items():  # bf16 rounding of the same fp32 draws
        assert torch.equal(value.to(torch.bfloat16).to(torch.float32), shipped[name]), name


# --- bad folders ------------------------------------------------------------------------------------


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, folder)
    return folder


def _one_error(excinfo: pytest.ExceptionInfo[BaseException], *fragments: str) -> str:
    err = excinfo.value
    assert isinstance(err, GsurgError) and err.exit_code == 2
    text = str(err)
    assert "\n" not in text
    for fragment in fragments:
        assert fragment in text, (fragment, text)
    return text


def _edit_weights(folder: Path, edit: Any) -> None:
    tensors = load_file(str(folder / SINGLE_FILE))
    edit(tensors)
    save_file(tensors, str(folder / SINGLE_FILE))


def test_a_missing_resampler_tensor_is_named(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit_weights(folder, lambda t: t.pop("resampler.ln_post.bias"))
    with pytest.raises(CheckpointError) as excinfo:
        load_model(folder)
    _one_error(excinfo, "missing tensor", "resampler.ln_post.bias", SINGLE_FILE)


def test_an_unexpected_tensor_is_named(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit_weights(folder, lambda t: t.update({"vpm.cls_token": torch.zeros(1, 1, 32)}))
    with pytest.raises(CheckpointError) as excinfo:
        load_model(folder)
    _one_error(excinfo, "unexpected tensor", "vpm.cls_token")


def test_a_wrong_shape_is_named(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit_weights(folder, lambda t: t.update({"resampler.proj": torch.zeros(128, 64)}))
    with pytest.raises(CheckpointError) as excinfo:
        load_model(folder)
    _one_error(excinfo, "'resampler.proj'", "[128, 64]", "[128, 128]", "config.json")


def test_a_kept_dropped_block_is_a_layer_count_error(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    raw = json.loads((folder / "config.json").read_text())
    raw["drop_vision_last_layer"] = False  # the config now wants 3 blocks, the checkpoint holds 2
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError) as excinfo:
        load_model(folder)
    _one_error(excinfo, "drop_vision_last_layer", "vpm.blocks.")


def test_a_sharded_missing_tensor_is_named(tmp_path: Path) -> None:
    folder = make_tiny(tmp_path / "s", shards=2)
    index = json.loads((folder / INDEX_FILE).read_text())
    del index["weight_map"]["llm.lm_head.weight"]
    (folder / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(CheckpointError) as excinfo:
        load_model(folder)
    _one_error(excinfo, "missing tensor", "llm.lm_head.weight", INDEX_FILE)


@pytest.mark.parametrize(
    ("key", "value", "fragments"),
    [
        (
            "vision_encoder",
            "vit_so400m_patch14_siglip_224",
            ["vision_encoder", "vit_so400m_patch14_siglip_224"],
        ),
        ("vision_encoder", None, ["vision_encoder", "None"]),
        ("model_type", "minicpmv2_6", ["model_type", "minicpmv2_6"]),
        ("hidden_act", "gelu", ["hidden_act", "gelu"]),
        ("attention_bias", True, ["attention_bias"]),
        ("pretraining_tp", 2, ["pretraining_tp", "muP"]),
        ("tie_word_embeddings", True, ["tie_word_embeddings"]),
        ("rope_scaling", {"type": "linear", "factor": 2.0}, ["rope_scaling", "linear"]),
        ("query_num", 8, ["query_num 8", "square"]),
        ("slice_mode", False, ["slice_mode"]),
        ("patch_size", 16, ["patch_size 16", "14"]),
        ("hidden_size", 192, ["hidden_size 192"]),
        ("scale_emb", 0, ["scale_emb"]),
        ("dim_model_base", "256", ["dim_model_base"]),
        ("scale_depth", None, ["scale_depth"]),
        ("num_key_value_heads", 3, ["num_key_value_heads 3"]),
        ("bos_token_id", 100000, ["bos_token_id 100000"]),
    ],
)
def test_config_refusals_name_the_file_and_key(
    tmp_path: Path, key: str, value: Any, fragments: list[str]
) -> None:
    folder = _copy(tmp_path)
    raw = json.loads((folder / "config.json").read_text())
    raw[key] = value
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError) as excinfo:
        load_config(folder)
    _one_error(excinfo, str(folder / "config.json"), *fragments)


def test_a_missing_key_is_named(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    raw = json.loads((folder / "config.json").read_text())
    del raw["scale_resolution"]
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError) as excinfo:
        facts(str(folder))
    _one_error(excinfo, "config.json", "scale_resolution")


def test_a_tokenizer_config_without_image_tokens_is_named(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    raw = json.loads((folder / "tokenizer_config.json").read_text())
    raw["added_tokens_decoder"] = {
        k: v for k, v in raw["added_tokens_decoder"].items() if v["content"] != "</image>"
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError) as excinfo:
        load_model(folder)
    _one_error(excinfo, "tokenizer_config.json", "'</image>'")
