"""rules/minicpm_v2.yaml end to end (issue 37, items 2 and 3): the embedded tiny MiniCPM-V-2 -> pnnx exports
-> the ncnn nets + model.json + weight maps, from the family's name alone, checked against the checkpoint's
bytes (``gsurg diff-bin`` with the written maps), the ncnn wheel, and the family's reference
(``gsurg verify``: the reference is checked against the official code in tests/test_minicpm_v2_reference.py).

Wrong rule files must fail ``verify``: the muP text scale dropped, the image rows scaled with the text ones,
the position table resampled without antialiasing, the slices fed in the wrong order.

One module-scoped apply of the tiny model serves the slow tests; each wrong rule file gets its own run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from graphsurgeon.cli import main
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.verify.run import VerifyOptions, run_verify
from tests.conftest import REPO

FAMILY = REPO / "graphsurgeon" / "models" / "minicpm_v2"
TINY = FAMILY / "tiny"
RULES = REPO / "rules" / "minicpm_v2.yaml"
NETS = ("vision", "pos_embed", "resampler", "embed", "decoder", "lm_head")
COSINE = 0.99999

pytestmark = pytest.mark.usefixtures("shared_exports")  # the wrong rule files reuse the conversion's export


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``gsurg apply minicpm_v2`` (the registry's name) with no other argument than ``--out``."""
    out = tmp_path_factory.mktemp("minicpm_v2") / "out"
    assert main(["apply", "minicpm_v2", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def model_json(converted: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((converted / "model.json").read_text(encoding="utf-8"))
    return doc


@pytest.mark.slow
def test_apply_writes_every_net_its_weight_map_model_json_and_the_tokenizer_files(converted: Path) -> None:
    names = {p.name for p in converted.iterdir() if not p.name.endswith(".gsurg.json")}
    nets = {f"{n}{ext}" for n in NETS for ext in (".ncnn.param", ".ncnn.bin", ".weights.yaml")}
    side = {"model.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json"}
    assert names == nets | side
    for name in side - {"model.json"}:
        assert (converted / name).read_bytes() == (TINY / name).read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("name", NETS)
def test_each_weight_map_proves_every_weight_equal_to_the_checkpoint(
    converted: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bin_, weights = converted / f"{name}.ncnn.bin", converted / f"{name}.weights.yaml"
    argv = ["diff-bin", str(bin_), str(TINY / "model.safetensors"), "--map", str(weights)]
    assert main([*argv, "--atol", "0", "--rtol", "0", "--fail-on-diff"]) == 0
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.slow
def test_the_resampler_in_projection_is_mapped_as_three_row_ranges_and_proj_as_stored(
    converted: Path,
) -> None:
    text = (converted / "resampler.weights.yaml").read_text(encoding="utf-8")
    width = 128  # the tiny hidden size
    for k, part in enumerate("qkv"):
        entry = "  tensor: resampler.attn.in_proj_weight\n  transforms:\n"
        entry += f"  - slice: {{axis: 0, start: {k * width}, stop: {(k + 1) * width}}}"
        assert f"attention_7.{part}_weight:\n{entry}" in text
    assert "proj.B:\n  tensor: resampler.proj\n" in text
    proj = read_param_text(converted / "resampler.ncnn.param").layer("proj")
    assert proj.type == "Gemm" and proj.get("transB") == 0


@pytest.mark.slow
def test_the_mup_constants_sit_where_model_json_says(converted: Path, model_json: dict[str, Any]) -> None:
    config = json.loads((TINY / "config.json").read_text(encoding="utf-8"))
    layers = config["num_hidden_layers"]
    residual = config["scale_depth"] / layers**0.5
    divisor = config["hidden_size"] / config["dim_model_base"]
    embed = [x for x in read_param_text(converted / "embed.ncnn.param") if x.type == "BinaryOp"]
    assert [(x.get("op_type"), x.get("with_scalar"), x.get("b")) for x in embed] == [
        (2, 1, config["scale_emb"])
    ]
    decoder = read_param_text(converted / "decoder.ncnn.param")
    alphas = [x.get("alpha") for x in decoder if x.type == "Gemm"]
    assert len(alphas) == 7 * layers and sum(a != 1 for a in alphas) == 2 * layers
    assert all(a == pytest.approx(residual, rel=1e-6) for a in alphas if a != 1)
    assert not [x for x in decoder if x.type == "BinaryOp" and x.get("with_scalar")]
    head = [x for x in read_param_text(converted / "lm_head.ncnn.param") if x.type == "BinaryOp"]
    assert [(x.get("op_type"), x.get("b")) for x in head] == [(3, divisor)]
    mup = model_json["muP"]
    assert (mup["scale_emb"], mup["logit_divisor"]) == (config["scale_emb"], divisor)
    assert mup["residual_scale"] == pytest.approx(residual)


@pytest.mark.slow
def test_model_json_says_what_the_checkpoint_and_its_tokenizer_say(model_json: dict[str, Any]) -> None:
    config = json.loads((TINY / "config.json").read_text(encoding="utf-8"))
    added = json.loads((TINY / "tokenizer_config.json").read_text(encoding="utf-8"))["added_tokens_decoder"]
    ids = {entry["content"]: int(key) for key, entry in added.items()}
    tokens = model_json["tokens"]
    assert (tokens["image_start"], tokens["image_end"]) == (ids["<image>"], ids["</image>"])
    assert (tokens["slice_start"], tokens["slice_end"], tokens["placeholder"]) == (
        ids["<slice>"],
        ids["</slice>"],
        ids["<unk>"],
    )
    assert model_json["resampler"]["query_num"] == config["query_num"]
    assert model_json["num_layers"] == config["num_hidden_layers"]
    table = model_json["vision"]["position_embedding"]
    assert table["antialias"] is True and table["interpolation"] == "bicubic"
    assert model_json["image_processor"]["slice_order"] == "row-major"


@pytest.mark.slow
def test_verify_passes_every_stage_with_equal_tokens(converted: Path) -> None:
    report = run_verify(converted, VerifyOptions(checkpoint=TINY, tokens=32))
    assert report.passed, [s.stage for s in report.stages if not s.passed]
    assert min(s.cosine for s in report.stages) >= COSINE
    labels = [t.case for t in report.tokens]
    for wanted in ("no slices", "2x2 slices", "3x3 slices", "images 1 and 2", "text only"):
        assert any(wanted in label for label in labels), wanted
    assert any("这是什么颜色" in note for note in report.notes)  # a non-ASCII prompt among the cases
    assert all(len(t.reference) == 32 and t.ours == t.reference for t in report.tokens)
    slices = [s for s in report.stages if ", slice 9: resampler" in s.stage]
    assert slices, "the 3x3 image's ninth slice went through the resampler"


# ---- wrong rule files fail verify ----------------------------------------------------------------------

WRONG_TEXT_SCALE = """\
version: 1
name: minicpm-v-2-text-scale-dropped
include: [{rules}]
graphs:
  embed:
    extend: true
    rules:
      - name: text-scale-dropped
        match: {{type: BinaryOp, params: {{op_type: 2, with_scalar: 1}}}}
        expect: {{count: 1}}
        do: [{{set: {{b: 1.0}}}}]
"""

WRONG_IMAGE_ROWS = """\
version: 1
name: minicpm-v-2-every-row-scaled
include: [{rules}]
graphs:
  embed:
    extend: true
    rules:
      - name: text-scale-moved
        match: {{type: BinaryOp, params: {{op_type: 2, with_scalar: 1}}}}
        expect: {{count: 1}}
        do: [{{set: {{b: 1.0}}}}]
  decoder:
    extend: true
    rules:
      - name: every-row-scaled
        match:
          pattern: |
            Input %i 0 1 in0
            Split %s 1 2 in0 %a %b
        expect: {{count: 1}}
        do:
          - replace: |
              Input %i 0 1 in0
              BinaryOp every_row_scaled 1 1 in0 every_row_scaled_out 0=2 1=1 2=12.0
              Split %s 1 2 every_row_scaled_out %a %b
"""


def _image(path: Path) -> Path:
    """An 800x600 picture (the official slicing: an overview and 2x2 slices)."""
    from PIL import Image

    y, x = np.mgrid[0:600, 0:800]
    rgb = np.stack([x * 255 // 800, y * 255 // 600, (x + y) % 256], axis=-1).astype(np.uint8)
    Image.fromarray(rgb, "RGB").save(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("wrong", "rules", "settings", "failing"),
    [
        ("muP text scale dropped", WRONG_TEXT_SCALE, [], "fused embeddings"),
        ("image rows scaled with the text", WRONG_IMAGE_ROWS, [], "prefill logits"),
        ("position table without antialias", None, ["position_antialias=false"], "patch embed + position"),
        ("slices in column-major order", None, ["slice_order=column-major"], "fused embeddings"),
    ],
)
def test_a_wrong_rule_file_fails_verify(
    tmp_path: Path, wrong: str, rules: str | None, settings: list[str], failing: str
) -> None:
    path = RULES
    if rules is not None:
        path = tmp_path / "wrong.yaml"
        path.write_text(rules.format(rules=RULES), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["apply", str(path), "--out", str(out)]
    for setting in settings:
        argv += ["--set", setting]
    assert main(argv) == 0, wrong
    options = VerifyOptions(checkpoint=TINY, images=[_image(tmp_path / "800x600.png")], tokens=4)
    options.prompts = ["Describe the image."]
    report = run_verify(out, options)
    assert not report.passed, wrong
    assert any(failing in s.stage for s in report.stages if not s.passed), wrong


# ---- bad checkpoints: one line naming the culprit, exit 2, nothing written ------------------------------


def _drop_tensor(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))  # bf16: numpy has no such dtype
    del tensors["resampler.kv_proj.weight"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _edit_json(folder: Path, name: str, edit: Any) -> None:
    path = folder / name
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc)
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")


def _drop_added(doc: dict[str, Any]) -> None:
    doc["added_tokens"] = [t for t in doc["added_tokens"] if t["content"] != "<image>"]


def _drop_decoder_entry(doc: dict[str, Any]) -> None:
    doc["added_tokens_decoder"] = {
        k: v for k, v in doc["added_tokens_decoder"].items() if v["content"] != "</image>"
    }


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        (_drop_tensor, "model.safetensors: missing tensor(s) resampler.kv_proj.weight"),
        (
            lambda f: _edit_json(f, "config.json", lambda d: d.update(vision_encoder="vit_base_patch16_224")),
            "vision_encoder",
        ),
        (lambda f: _edit_json(f, "tokenizer_config.json", _drop_decoder_entry), "has no '</image>'"),
        (lambda f: _edit_json(f, "tokenizer.json", _drop_added), "added_tokens has no '<image>'"),
    ],
    ids=[
        "missing-resampler-tensor",
        "other-vision-encoder",
        "tokenizer-config-without-marker",
        "tokenizer-json-without-marker",
    ],
)
def test_a_broken_checkpoint_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, broken: Any, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    folder = tmp_path / "ckpt"
    shutil.copytree(TINY, folder)
    broken(folder)
    out = tmp_path / "out"
    assert main(["apply", "minicpm_v2", "--checkpoint", str(folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gsurg: error: ") and named in err[0], err
    assert not out.exists()


# ---- the short export grown back (issue 37 item 4) ------------------------------------------------------


@pytest.mark.slow
def test_the_short_export_grown_back_writes_the_same_bytes_as_tracing_everything(
    converted: Path, tmp_path: Path
) -> None:
    """The default conversion traces one LLM layer, one ViT block and 16 vocabulary rows and grows them
    back (repeat, weight actions); tracing the whole model gives the same .bin files, byte for byte, and
    the same layers in the same order."""
    full = tmp_path / "full"
    sets = ["export_llm_layers=0", "export_vision_layers=0", "export_vocab_rows=0"]
    argv = ["apply", "minicpm_v2", "--out", str(full)]
    for setting in sets:
        argv += ["--set", setting]
    assert main(argv) == 0
    for name in NETS:
        assert (converted / f"{name}.ncnn.bin").read_bytes() == (full / f"{name}.ncnn.bin").read_bytes(), name
        ours = [x.type for x in read_param_text(converted / f"{name}.ncnn.param")]
        assert ours == [x.type for x in read_param_text(full / f"{name}.ncnn.param")], name
    decoder = read_param_text(converted / "decoder.ncnn.param")
    assert any(x.name.endswith("_r1") for x in decoder), "the decoder's second layer is a copy"
