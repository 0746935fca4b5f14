"""Penguin-VL checkpoint folders (graphsurgeon/models/penguin_vl: config.py, checkpoint.py, make_tiny.py): the
shipped tiny checkpoint is what the script makes, byte for byte; its variants load the same weights; broken
folders are one clear error each.

Oracles: sha256 of every file against a fresh run of the script in another process; bf16 rounding done
here with numpy bit arithmetic (round to nearest, ties to even); the safetensors library for headers;
errors checked for their class (a GsurgError, exit 2), the file or tensor they name, and one line.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from safetensors.numpy import load_file, save_file  # noqa: E402

from graphsurgeon.errors import GsurgError  # noqa: E402
from graphsurgeon.formats.safetensors import CheckpointError  # noqa: E402
from graphsurgeon.models.common.checkpoint_tensors import INDEX_FILE, SINGLE_FILE  # noqa: E402
from graphsurgeon.models.penguin_vl.checkpoint import load_tensors, tensor_shapes  # noqa: E402
from graphsurgeon.models.penguin_vl.config import load_files  # noqa: E402
from graphsurgeon.models.penguin_vl.make_tiny import SHIPPED, make_tiny  # noqa: E402
from graphsurgeon.models.penguin_vl.make_tiny import VISION_FOLDER as VISION  # noqa: E402
from graphsurgeon.models.penguin_vl.model import load_model  # noqa: E402
from tests.conftest import REPO  # noqa: E402


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_the_shipped_tiny_checkpoint_is_what_the_script_makes(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    subprocess.run(
        [sys.executable, "-m", "graphsurgeon.models.penguin_vl.make_tiny", str(out)],
        cwd=REPO,
        check=True,
        timeout=300,
    )
    shipped = _digests(SHIPPED)
    assert set(shipped) == {
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
        "merges.txt",
        "penguinvl_vision_encoder/config.json",
        "penguinvl_vision_encoder/preprocessor_config.json",
    }
    assert _digests(out) == shipped
    assert sum((SHIPPED / name).stat().st_size for name in shipped) < 2_000_000


def test_the_tiny_config_keeps_the_real_asymmetries() -> None:
    cfg = load_files(SHIPPED).config
    vision, text = cfg.vision, cfg.text
    assert vision.q_width != vision.hidden_size and text.q_width != text.hidden_size
    assert vision.num_key_value_heads < vision.num_attention_heads  # GQA
    assert text.num_key_value_heads < text.num_attention_heads
    assert text.tie_word_embeddings and "lm_head.weight" not in tensor_shapes(cfg)
    raw = json.loads((SHIPPED / "config.json").read_text())
    assert raw["model_type"] == "penguinvl_qwen3" and raw["architectures"] == ["PenguinVLQwen3ForCausalLM"]
    assert raw["vision_encoder_config"]["model_type"] == "penguinvl_vision_encoder"


def _bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even) -> float32, by bits."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def test_variants_hold_the_same_weights(tmp_path: Path) -> None:
    reference = {k: v.numpy() for k, v in load_tensors(SHIPPED, load_files(SHIPPED).config).items()}
    bf16 = make_tiny(tmp_path / "bf16", dtype="bf16", shards=3)
    shard_files = set(json.loads((bf16 / INDEX_FILE).read_text())["weight_map"].values())
    assert len(shard_files) == 3 and not (bf16 / SINGLE_FILE).exists()
    loaded = load_tensors(bf16, load_files(bf16).config)
    assert set(loaded) == set(reference)
    for name, value in loaded.items():
        assert value.dtype == torch.float32
        np.testing.assert_array_equal(value.numpy(), _bf16(reference[name]), err_msg=name)

    untied = make_tiny(tmp_path / "untied", tied=False)
    cfg = load_files(untied).config
    assert not cfg.text.tie_word_embeddings
    tensors = load_tensors(untied, cfg)
    assert set(tensors) == set(reference) | {"lm_head.weight"}
    for name in reference:
        np.testing.assert_array_equal(tensors[name].numpy(), reference[name], err_msg=name)
    model = load_model(untied)
    assert model.lm_head is not None and not torch.equal(
        model.lm_head_weight, model.model.embed_tokens.weight
    )
    tied = load_model(SHIPPED)
    assert tied.lm_head is None and tied.lm_head_weight is tied.model.embed_tokens.weight


# --- bad folders ------------------------------------------------------------------------------------


def _copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SHIPPED, tmp_path / "ckpt"))


def _edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw))


def _rewrite_weights(folder: Path, change: Callable[[dict[str, np.ndarray]], object]) -> None:
    tensors = load_file(str(folder / SINGLE_FILE))
    change(tensors)
    save_file(tensors, str(folder / SINGLE_FILE))


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda raw: raw.__setitem__(key, value)


def _set_vision(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda raw: raw["vision_encoder_config"].__setitem__(key, value)


PATCH = "model.vision_encoder.vision_encoder.embeddings.patch_embedding.weight"
Q0 = "model.layers.0.self_attn.q_proj.weight"

# each breaks the folder it is given (what it returns is ignored)
BROKEN: dict[str, tuple[Callable[[Path], object], list[str]]] = {
    "no config.json": (lambda f: (f / "config.json").unlink(), ["config.json", "no such file"]),
    "config.json not JSON": (
        lambda f: (f / "config.json").write_text("{"),
        ["config.json", "not valid JSON"],
    ),
    "no tokenizer.json": (lambda f: (f / "tokenizer.json").unlink(), ["tokenizer.json", "no such file"]),
    "no preprocessor_config.json": (
        lambda f: (f / "preprocessor_config.json").unlink(),
        ["preprocessor_config.json", "no such file"],
    ),
    "no weights": (
        lambda f: (f / SINGLE_FILE).unlink(),
        [SINGLE_FILE, INDEX_FILE, "ckpt"],
    ),
    "missing tensor": (
        lambda f: _rewrite_weights(f, lambda t: t.pop(Q0)),
        [SINGLE_FILE, "missing tensor", Q0],
    ),
    "misshapen tensor": (
        lambda f: _rewrite_weights(f, lambda t: t.__setitem__(PATCH, np.zeros((64, 3, 16, 16), np.float32))),
        [SINGLE_FILE, PATCH, "[64, 3, 16, 16]", "[64, 3, 14, 14]", "config.json"],
    ),
    "unexpected tensor": (
        lambda f: _rewrite_weights(f, lambda t: t.__setitem__("model.extra.weight", np.zeros(2, np.float32))),
        [SINGLE_FILE, "unexpected tensor", "model.extra.weight"],
    ),
    "integer tensor": (
        lambda f: _rewrite_weights(f, lambda t: t.__setitem__("model.norm.weight", np.zeros(64, np.int32))),
        [SINGLE_FILE, "model.norm.weight", "I32"],
    ),
    "wrong model_type": (
        lambda f: _edit_json(f / "config.json", _set("model_type", "qwen3")),
        ["config.json", "model_type", "'qwen3'"],
    ),
    "image_token_index not the tokenizer's": (
        lambda f: _edit_json(f / "config.json", _set("image_token_index", 644)),
        ["config.json", "image_token_index 644", "'<image>'", "645", "tokenizer.json"],
    ),
    "eos_token_id not the tokenizer's": (
        lambda f: _edit_json(f / "config.json", _set("eos_token_id", [640])),
        ["config.json", "eos_token_id [640]", "'<|im_end|>'", "642"],
    ),
    "vision_hidden_size disagrees": (
        lambda f: _edit_json(f / "config.json", _set("vision_hidden_size", 96)),
        ["config.json", "vision_hidden_size 96", "hidden_size 64"],
    ),
    "vision encoder folder disagrees": (
        lambda f: _edit_json(f / VISION / "config.json", _set("num_hidden_layers", 3)),
        [f"{VISION}/config.json", "num_hidden_layers 3", "num_hidden_layers 2"],
    ),
    "no vision rope_theta": (
        lambda f: _edit_json(f / "config.json", lambda raw: raw["vision_encoder_config"].pop("rope_theta")),
        ["config.json", "vision_encoder_config", "no rope_theta"],
    ),
    "kv heads do not divide": (
        lambda f: _edit_json(f / "config.json", _set_vision("num_key_value_heads", 3)),
        ["config.json", "vision_encoder_config", "num_attention_heads 4", "num_key_value_heads 3"],
    ),
    "another projector": (
        lambda f: _edit_json(f / "config.json", _set("vision_projector_type", "linear")),
        ["config.json", "vision_projector_type 'linear'"],
    ),
    "patch size disagrees": (
        lambda f: _edit_json(f / "preprocessor_config.json", _set("patch_size", 16)),
        ["preprocessor_config.json", "patch_size 16", "14"],
    ),
    "not bicubic": (
        lambda f: _edit_json(f / "preprocessor_config.json", _set("resample", 2)),
        ["preprocessor_config.json", "resample 2"],
    ),
    "eos_token not in the vocabulary": (
        lambda f: _edit_json(f / "tokenizer_config.json", _set("eos_token", "<|nope|>")),
        ["tokenizer.json", "eos_token '<|nope|>'"],
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_folder_is_one_clear_error(tmp_path: Path, case: str) -> None:
    folder = _copy(tmp_path)
    breaks, needles = BROKEN[case]
    breaks(folder)
    with pytest.raises(CheckpointError) as err:
        load_model(folder)
    message = str(err.value)
    assert isinstance(err.value, GsurgError) and err.value.exit_code == 2
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)


def test_a_missing_shard_is_named(tmp_path: Path) -> None:
    folder = make_tiny(tmp_path / "sharded", shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002\.safetensors: cannot read"):
        load_model(folder)


def test_a_tied_checkpoint_may_carry_lm_head(tmp_path: Path) -> None:
    """transformers saves tied models without lm_head.weight, but a copy of it is harmless: ignored."""
    folder = _copy(tmp_path)
    _rewrite_weights(folder, lambda t: t.__setitem__("lm_head.weight", np.zeros((646, 64), np.float32)))
    model = load_model(folder)
    assert model.lm_head is None and float(model.lm_head_weight.abs().sum()) > 0
