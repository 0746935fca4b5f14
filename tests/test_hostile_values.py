"""Values that reached Python's own exceptions (a traceback, exit 1) or unbounded work, found by probing the
merged fixes of issue 14 (items 8 and 9): PyYAML scalar tags that its constructors fail on, --set values
nested past the recursion limit, paths with a NUL, a lone surrogate or an unknown ``~user``, a checkpoint's
JSON that is a FIFO, huge or nested too deeply, a non-finite RoPE base, and a config that claims 10^9
layers of a 2-layer checkpoint. Each must be one ``gsurg: error`` line (exit 2) or one CheckpointError.

Oracles: the expected message fragments are written by hand; the checkpoint is saved by transformers."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.formats.safetensors import CheckpointError
from tests.alarm import alarm
from tests.rule_language_harness import CHAIN, err_line, write

RULE = "version: 1\nname: t\nvars:\n  k: {value}\ngraphs:\n  main: {{}}\n"


def _apply(tmp_path: Path, rules: str, *extra: str) -> int:
    model = write(tmp_path, "m.param", CHAIN)
    return main(["apply", str(write(tmp_path, "r.yaml", rules)), str(model), "--dry-run", *extra])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("!!timestamp x", "r.yaml:4: timestamp 'x' cannot be read"),
        ("!!bool maybe", "r.yaml:4: bool 'maybe' cannot be read"),
        ('"a\\ud800b"', "r.yaml:4: the text holds a lone surrogate"),
    ],
)
def test_a_scalar_pyyaml_cannot_construct_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    assert _apply(tmp_path, RULE.format(value=value)) == 2
    line = err_line(capsys)
    assert expected in line, line


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("!!timestamp x", "--set k=!!timestamp x: not a value YAML can read"),
        ("!!bool maybe", "--set k=!!bool maybe: not a value YAML can read"),
        ("[" * 1000, "nested too deeply for a value"),
        ("a\udcffb", "--set k: the value 'a\\udcffb' is not valid text"),  # an undecodable argv byte
    ],
)
def test_a_set_value_yaml_cannot_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    assert _apply(tmp_path, RULE.format(value="1"), "--set", f"k={value}") == 2
    line = err_line(capsys)
    assert expected in line and len(line) < 400, line


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"a\\0b"', "holds a NUL character"),
        ("~no_such_user_gsurg/b", "no such user to expand ~ for"),
    ],
)
def test_a_path_variable_that_names_no_path_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    rules = f"version: 1\nname: t\nvars:\n  p: {{path: {value}}}\n  q: ${{p}}\ngraphs:\n  main: {{}}\n"
    rules += "side_files:\n  - {template: t.j2, output: x.txt}\n"
    write(tmp_path, "t.j2", "{{ vars.q }}\n")
    assert _apply(tmp_path, rules) == 2
    line = err_line(capsys)
    assert "r.yaml:4: " in line and expected in line, line


def test_a_checkpoint_json_that_is_a_fifo_huge_or_deep_is_one_error(tmp_path: Path) -> None:
    from graphsurgeon.formats.safetensors import JSON_FILE_LIMIT
    from graphsurgeon.models.common.hf_config import read_json

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with alarm(), pytest.raises(CheckpointError, match=r"fifo\.json: is a FIFO"):
        read_json(fifo)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:  # sparse: no blocks on disk
        fh.truncate(JSON_FILE_LIMIT + 1)
    with pytest.raises(CheckpointError, match=r"huge\.json"):
        read_json(huge)
    deep = write(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="nested too deeply"):
        read_json(deep)


def test_a_rule_file_json_fact_from_a_fifo_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    os.mkfifo(ckpt / "config.json")
    rules = (
        "version: 1\nname: t\nvars:\n  h: ${config.hidden_size}\n"
        f"source: {{export: none.py:build, checkpoint: {ckpt}}}\ngraphs:\n  main: {{}}\n"
    )
    with alarm():
        assert _apply(tmp_path, rules) == 2
    line = err_line(capsys)
    assert "config.json: is a FIFO" in line, line


def test_a_rope_base_that_is_not_finite_is_refused(tmp_path: Path) -> None:
    from graphsurgeon.models.common.qwen3_llm_config import load_config

    pytest.importorskip("transformers")
    from tests.hf5_checkpoint import save_qwen3

    folder = save_qwen3(tmp_path / "q")
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"]["rope_theta"] = float("inf")
    (folder / "config.json").write_text(json.dumps(config))  # json writes Infinity, as the probe's file had
    with pytest.raises(CheckpointError, match="must be a positive finite number, not inf"):
        load_config(folder)


def test_a_config_claiming_more_layers_than_the_checkpoint_holds_fails_before_building(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    from graphsurgeon.models.common.qwen3_llm_model import load_model
    from tests.hf5_checkpoint import save_qwen3

    folder = save_qwen3(tmp_path / "q")
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 10**9
    (folder / "config.json").write_text(json.dumps(config))
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=r"num_hidden_layers is 1000000000, but .* holds 2 layer\(s\)"):
        load_model(folder)
    assert time.monotonic() - start < 20  # it used to build modules until memory ran out


def test_a_config_size_beyond_32_bits_is_refused(tmp_path: Path) -> None:
    """``max_position_embeddings: 2**70`` reached model.json, which the C++ runtime reads as 32-bit ints."""
    pytest.importorskip("transformers")
    from graphsurgeon.models.common.qwen3_llm_config import load_config
    from tests.hf5_checkpoint import save_qwen3

    folder = save_qwen3(tmp_path / "q")
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 2**70
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"max_position_embeddings must be a positive integer below 2\^31"
    ):
        load_config(folder)
