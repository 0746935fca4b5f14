"""Penguin-VL checkpoint folders in every style the converter must take (issue 14, items 1 and 3): the
official release's layout (the encoder's own sub-folder, named so the official loader accepts it, with its
config and image processor), the earlier layout of the tiny checkpoint, a config.json as transformers 5
writes it, and EOS ids from any file or none.

Oracles: the official ``build_vision_encoder`` condition (tencent-ailab/Penguin-VL,
``penguinvl/model/encoder.py``: the name must contain ``penguin``; ``PenguinVLImageProcessor`` and the
encoder config are read from that folder); configs written by the installed transformers 5
(``save_pretrained`` of Qwen3Config subclasses with the official ``model_type``s); the shipped tiny
checkpoint's own reading as the expected one.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from graphsurgeon.formats.safetensors import CheckpointError  # noqa: E402
from graphsurgeon.models.penguin_vl.config import facts, load_files  # noqa: E402
from graphsurgeon.models.penguin_vl.make_tiny import SHIPPED, VISION_FOLDER  # noqa: E402
from graphsurgeon.models.penguin_vl.model import load_model  # noqa: E402
from graphsurgeon.rewrite.loader import open_rule_file  # noqa: E402
from tests.conftest import REPO  # noqa: E402

RULES = REPO / "rules" / "penguin_vl.yaml"
PREPROCESSOR = "preprocessor_config.json"


def _copy(tmp_path: Path, name: str = "ckpt") -> Path:
    return Path(shutil.copytree(SHIPPED, tmp_path / name))


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    raw = json.loads(path.read_text()) if path.exists() else {}
    change(raw)
    path.write_text(json.dumps(raw, indent=2))


def _update(values: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda raw: raw.update(values)


def _same_reading(folder: Path) -> None:
    """``folder`` reads exactly as the shipped checkpoint: files, rule-file facts and variables."""
    ours, shipped = load_files(folder), load_files(SHIPPED)
    assert (ours.config, ours.processor, ours.tokens) == (shipped.config, shipped.processor, shipped.tokens)
    assert facts(str(folder)) == facts(str(SHIPPED))
    mine = open_rule_file(str(RULES), {"checkpoint": str(folder)}).scope.values()
    theirs = open_rule_file(str(RULES), {"checkpoint": str(SHIPPED)}).scope.values()
    assert {k: v for k, v in mine.items() if k != "checkpoint"} == {
        k: v for k, v in theirs.items() if k != "checkpoint"
    }


def test_the_tiny_checkpoint_has_the_official_layout() -> None:
    raw = json.loads((SHIPPED / "config.json").read_text())
    for key in ("vision_encoder", "mm_vision_encoder"):
        assert raw[key] == VISION_FOLDER and "penguin" in raw[key].lower()  # build_vision_encoder
    encoder = SHIPPED / VISION_FOLDER
    own = json.loads((encoder / "config.json").read_text())
    assert own["model_type"] == "penguinvl_vision_encoder"
    assert json.loads((encoder / PREPROCESSOR).read_text()) == json.loads(
        (SHIPPED / PREPROCESSOR).read_text()
    )
    assert (
        json.loads((encoder / PREPROCESSOR).read_text())["image_processor_type"] == "PenguinVLImageProcessor"
    )


def test_the_earlier_layout_still_converts_the_same(tmp_path: Path) -> None:
    """The tiny checkpoint as it was: a folder named ``vision_encoder`` holding only the encoder config."""
    folder = _copy(tmp_path)
    (folder / VISION_FOLDER).rename(folder / "vision_encoder")
    (folder / "vision_encoder" / PREPROCESSOR).unlink()
    _edit(folder / "config.json", lambda raw: raw.update(vision_encoder="vision_encoder"))
    _edit(folder / "config.json", lambda raw: raw.update(mm_vision_encoder="vision_encoder"))
    _same_reading(folder)
    shutil.rmtree(folder / "vision_encoder")  # and with no sub-folder at all: the inline config suffices
    _same_reading(folder)


def test_the_encoder_folder_must_agree_with_the_top_level(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit(folder / VISION_FOLDER / PREPROCESSOR, lambda raw: raw.update(patch_size=16))
    with pytest.raises(CheckpointError) as err:
        load_files(folder)
    assert str(err.value).startswith(f"{folder / VISION_FOLDER / PREPROCESSOR}: ")
    assert f"patch_size 16 differ from {folder / PREPROCESSOR}: patch_size 14" in str(err.value)


def _save_as_transformers_5(folder: Path) -> dict[str, Any]:
    """Rewrite ``folder/config.json`` as transformers 5 saves the official config classes (Qwen3Config
    subclasses): rope_parameters at both levels, ``dtype`` for ``torch_dtype``."""

    penguin = type("PenguinConfig", (transformers.Qwen3Config,), {"model_type": "penguinvl_qwen3"})
    encoder = type("EncoderConfig", (transformers.Qwen3Config,), {"model_type": "penguinvl_vision_encoder"})

    raw = json.loads((folder / "config.json").read_text())
    vision = encoder(**raw["vision_encoder_config"]).to_dict()
    penguin(**{**raw, "vision_encoder_config": vision}).save_pretrained(str(folder))
    return dict(json.loads((folder / "config.json").read_text()))


def test_a_config_saved_by_transformers_5_reads_the_same(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    raw = _save_as_transformers_5(folder)
    assert "rope_theta" not in raw and "rope_theta" not in raw["vision_encoder_config"]
    assert raw["rope_parameters"]["rope_type"] == "default" and "dtype" in raw and "torch_dtype" not in raw
    _same_reading(folder)


def test_a_scaled_vision_rope_is_refused_naming_the_key(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _save_as_transformers_5(folder)
    scaled = {"rope_type": "linear", "rope_theta": 1e6, "factor": 2.0}
    _edit(folder / "config.json", lambda raw: raw["vision_encoder_config"].update(rope_parameters=scaled))
    with pytest.raises(CheckpointError, match=r"vision_encoder_config: rope_parameters\.rope_type 'linear'"):
        facts(str(folder))


@pytest.mark.parametrize("section", ["llm", "vision"])
def test_a_sliding_window_layer_is_refused_in_either_stack(tmp_path: Path, section: str) -> None:
    """transformers' Qwen3 gives a ``sliding_attention`` layer a windowed mask the reference does not build;
    both stacks are read by the one Qwen3 reader, which names the section."""
    folder = _copy(tmp_path)

    def slide(raw: dict[str, Any]) -> None:
        stack = raw if section == "llm" else raw["vision_encoder_config"]
        stack["layer_types"] = ["full_attention", "sliding_attention"]

    _edit(folder / "config.json", slide)
    where = f"{folder / 'config.json'}" + ("" if section == "llm" else ": vision_encoder_config")
    with pytest.raises(CheckpointError) as err:
        load_files(folder)
    assert str(err.value) == f"{where}: layer_types other than full_attention are not supported"


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        ({"config.json": {"eos_token_id": None}}, (642,)),  # the tokenizer's <|im_end|>
        ({"config.json": {"eos_token_id": None}, "tokenizer_config.json": {"eos_token": None}}, ()),
        ({"generation_config.json": {"eos_token_id": [642, 640]}}, (642, 640)),
        (
            {"config.json": {"eos_token_id": [640, 642]}, "tokenizer_config.json": {"eos_token": None}},
            (640, 642),
        ),
    ],
    ids=["from-tokenizer", "none-at-all", "from-generation-config", "list-without-tokenizer-eos"],
)
def test_eos_from_any_file_or_none(
    tmp_path: Path, edits: dict[str, dict[str, Any]], expected: tuple[int, ...]
) -> None:
    folder = _copy(tmp_path)
    for name, values in edits.items():
        _edit(folder / name, _update(values))
    files = load_files(folder)
    assert files.config.eos_token_ids == expected
    rules = open_rule_file(str(RULES), {"checkpoint": str(folder)}).finish()
    (entry,) = [s for s in rules.side_files if s.output == "model.json"]
    assert entry.data is not None and entry.data["eos_token_id"] == list(expected)
    if not expected:  # generation then runs to its budget
        trace = load_model(folder, files).generate([5, 6, 7], [], max_new_tokens=4)
        assert len(trace.tokens) == 4


def test_the_tokenizer_eos_must_be_one_of_the_eos_ids(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit(folder / "generation_config.json", lambda raw: raw.update(eos_token_id=[640]))
    with pytest.raises(CheckpointError, match=r"eos_token_id \[640\] does not include the tokenizer's"):
        load_files(folder)
