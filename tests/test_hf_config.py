"""Checkpoint configs in both transformers styles (issue 14, item 1):
``graphsurgeon/models/common/hf_config.py`` read by the Qwen3 reference and by ``rules/llm-kv-cache.yaml``'s
``config.*`` facts (``source.config``).

Oracles: folders the installed transformers 5 saves itself (``tests/hf5_checkpoint``; its tokenizer from
``PreTrainedTokenizerFast.save_pretrained``, its EOS id as transformers reports it), the Qwen3-0.6B
``config.json`` and ``generation_config.json`` as the official repository ships them (4.x style), and
values the test writes into the files itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from graphsurgeon.cli import main  # noqa: E402
from graphsurgeon.formats.safetensors import CheckpointError  # noqa: E402
from graphsurgeon.models.common.qwen3_llm_config import facts, load_config  # noqa: E402
from graphsurgeon.models.common.qwen3_llm_model import load_model  # noqa: E402
from graphsurgeon.models.qwen3_llm.make_tiny import QWEN3_0_6B  # noqa: E402
from graphsurgeon.rewrite.loader import open_rule_file  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.hf5_checkpoint import ROPE_THETA, save_qwen3  # noqa: E402

RULES = REPO / "rules" / "llm-kv-cache.yaml"
#: generation_config.json of Qwen/Qwen3-0.6B as released (transformers 4.51).
QWEN3_0_6B_GENERATION = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
    "transformers_version": "4.51.0",
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Qwen3 checkpoint as transformers 5 saves it, with no EOS in config.json or generation_config."""
    return save_qwen3(tmp_path_factory.mktemp("hf5") / "ckpt", eos_token_id=None)


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    raw = json.loads(path.read_text()) if path.exists() else {}
    change(raw)
    path.write_text(json.dumps(raw, indent=2))


def _save_tokenizer(folder: Path, eos: str) -> int:
    """A word-level tokenizer saved by transformers with ``eos`` as its EOS; returns transformers' id."""
    vocab = {f"w{i}": i for i in range(20)} | {"<unk>": 20}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token=eos)
    tok.save_pretrained(str(folder))
    return int(tok.eos_token_id)


def test_the_rule_file_reads_a_transformers_5_config(saved: Path) -> None:
    """Before source.config, ``${config.rope_theta}`` failed: transformers 5 writes rope_parameters."""
    scope = open_rule_file(str(RULES), {"checkpoint": str(saved)}).scope
    assert scope.var("rope_theta") == ROPE_THETA
    assert (scope.var("layers"), scope.var("hidden_size"), scope.var("head_dim")) == (2, 64, 32)
    assert (scope.var("max_positions"), scope.var("vocab_size"), scope.var("tied")) == (512, 300, False)
    raw = json.loads((saved / "config.json").read_text())
    assert "rope_theta" not in raw and raw["eos_token_id"] is None and "dtype" in raw  # what 5.x writes


def test_no_eos_anywhere_is_an_empty_list_for_model_json(saved: Path) -> None:
    rules = open_rule_file(str(RULES), {"checkpoint": str(saved)}).finish()
    (entry,) = [s for s in rules.side_files if s.output == "model.json"]
    assert entry.data == {"eos_token_id": [], "tokenizer_files": False}  # and no tokenizer files: ids only
    assert load_config(saved).eos_token_ids == ()


def test_the_official_4x_config_gives_the_same_facts_as_transformers_reads_it(tmp_path: Path) -> None:
    folder = tmp_path / "qwen3-0.6b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_0_6B))
    (folder / "generation_config.json").write_text(json.dumps(QWEN3_0_6B_GENERATION))
    got = facts(str(folder))
    hf = transformers.AutoConfig.from_pretrained(str(folder))
    gen = transformers.GenerationConfig.from_pretrained(str(folder))
    assert got["rope_theta"] == hf.rope_parameters["rope_theta"] == 1e6
    assert got["eos_token_id"] == gen.eos_token_id == [151645, 151643]  # generate() stops at both
    assert (got["num_hidden_layers"], got["head_dim"], got["max_position_embeddings"]) == (28, 128, 40960)


@pytest.mark.parametrize(
    ("where", "change", "expected"),
    [
        ("config.json", lambda raw: raw.update(eos_token_id=7), (7,)),
        ("config.json", lambda raw: raw.update(eos_token_id=[7, 9, 7]), (7, 9)),
        ("generation_config.json", lambda raw: raw.update(eos_token_id=[3, 4]), (3, 4)),
        ("generation_config.json", lambda raw: raw.update(eos_token_id=[]), ()),
    ],
    ids=["config-id", "config-list", "generation-list", "generation-empty"],
)
def test_eos_comes_from_whichever_file_sets_it(
    saved: Path,
    tmp_path: Path,
    where: str,
    change: Callable[[dict[str, Any]], None],
    expected: tuple[int, ...],
) -> None:
    folder = _copy(saved, tmp_path / "ckpt")
    _edit(folder / where, change)
    assert load_config(folder).eos_token_ids == expected
    assert facts(str(folder))["eos_token_id"] == list(expected)


def test_generation_config_wins_over_config_json_as_in_generate(saved: Path, tmp_path: Path) -> None:
    folder = _copy(saved, tmp_path / "ckpt")
    _edit(folder / "config.json", lambda raw: raw.update(eos_token_id=7))
    _edit(folder / "generation_config.json", lambda raw: raw.update(eos_token_id=[3, 4]))
    assert transformers.GenerationConfig.from_pretrained(str(folder)).eos_token_id == [3, 4]
    assert load_config(folder).eos_token_ids == (3, 4)


def test_eos_from_the_tokenizer_files_when_no_config_names_one(saved: Path, tmp_path: Path) -> None:
    folder = _copy(saved, tmp_path / "ckpt")
    eos_id = _save_tokenizer(folder, "<|im_end|>")
    assert load_config(folder).eos_token_ids == (eos_id,) == (21,)


def test_a_tokenizer_eos_without_tokenizer_json_is_named(saved: Path, tmp_path: Path) -> None:
    """An EOS named only by its string cannot be used without the file that gives its id."""
    folder = _copy(saved, tmp_path / "ckpt")
    _save_tokenizer(folder, "<|im_end|>")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: no such file"):
        load_config(folder)


@pytest.mark.parametrize(
    ("where", "value", "needles"),
    [
        ("generation_config.json", "stop", ["generation_config.json: eos_token_id", "'stop'"]),
        ("config.json", [2, 300], ["config.json: eos_token_id", "below vocab_size 300", "[2, 300]"]),
        ("config.json", True, ["config.json: eos_token_id", "True"]),
    ],
    ids=["string", "outside-vocab", "bool"],
)
def test_a_bad_eos_names_the_file_and_key(
    saved: Path, tmp_path: Path, where: str, value: Any, needles: list[str]
) -> None:
    folder = _copy(saved, tmp_path / "ckpt")
    _edit(folder / where, lambda raw: raw.update(eos_token_id=value))
    with pytest.raises(CheckpointError) as err:
        load_config(folder)
    assert str(err.value).startswith(str(folder)) and "\n" not in str(err.value)
    for needle in needles:
        assert needle in str(err.value)


@pytest.mark.parametrize(
    ("rope", "needle"),
    [
        (
            {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}},
            "rope_parameters.rope_type 'yarn' is not supported",
        ),
        (
            {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e6, "factor": 2.0}},
            "rope_parameters.rope_type 'linear' is not supported",
        ),
    ],
    ids=["yarn", "linear"],
)
def test_a_scaled_rope_saved_by_transformers_5_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rope: dict[str, Any], needle: str
) -> None:
    """The runtime computes plain RoPE tables from the base: a scaled RoPE would convert to wrong output."""
    folder = save_qwen3(tmp_path / "ckpt", **rope)
    assert json.loads((folder / "config.json").read_text())["rope_parameters"]["rope_type"] != "default"
    capsys.readouterr()  # save_pretrained's progress bar
    assert main(["apply", str(RULES), "--set", f"checkpoint={folder}", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gsurg: error: {folder / 'config.json'}: {needle}"), err
    assert not (tmp_path / "o").exists()


def test_a_4x_rope_scaling_is_refused_naming_the_key(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({**QWEN3_0_6B, "rope_scaling": {"type": "dynamic", "factor": 2.0}})
    )
    with pytest.raises(CheckpointError, match=r"config\.json: rope_scaling\.rope_type 'dynamic' is not"):
        facts(str(folder))


def test_the_reference_equals_transformers_on_the_folder_it_saved(saved: Path) -> None:
    """The reference reads the 5.x folder as transformers does (the RoPE base above all)."""
    ours = load_model(saved)
    hf = transformers.Qwen3ForCausalLM.from_pretrained(
        str(saved), dtype=torch.float32, attn_implementation="eager", local_files_only=True
    ).eval()
    ids = torch.tensor([[5, 17, 200, 3, 99, 42, 7, 250]])
    with torch.no_grad():
        want = hf(ids).logits
        got, _ = ours(ids)
    assert got.shape == want.shape and float(want.abs().max()) > 1.0
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
