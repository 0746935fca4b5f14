"""``gsurg rope`` (issue 16, item 5): MRoPE positions, per-slot angles and layout comparisons of a prompt.

Oracles, run here: transformers 5.24's own Qwen3-VL code — ``Qwen3VLModel.get_rope_index`` on a tiny random
model for the positions, ``Qwen3VLTextRotaryEmbedding`` for the interleaved cos/sin — and its Qwen2.5-VL
``Qwen2_5_VLRotaryEmbedding`` for the block-sectioned cos/sin; the config files ``save_pretrained`` writes;
and the position lists of ``qwen3-vl.md`` §4.1, copied below. The command's angles, comparison and
per-image counts are checked against numbers derived from HF's cos/sin, never from the command's code.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLTextConfig  # noqa: E402
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLRotaryEmbedding  # noqa: E402
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import (  # noqa: E402
    Qwen3VLModel,
    Qwen3VLTextRotaryEmbedding,
)

from graphsurgeon.cli import build_parser, main  # noqa: E402

IMAGE_ID, VIDEO_ID, VS_ID, VE_ID = 290, 291, 292, 293
THETA = 5_000_000.0
HEAD_DIM = 128
SECTION = [24, 20, 20]  # Qwen3-VL-2B (qwen3-vl.md §1)
FLAGS = ["--theta", "5e6", "--head-dim", "128", "--mrope-section", "24,20,20"]


def _text_config(
    head_dim: int = HEAD_DIM, section: list[int] = SECTION, theta: float = THETA
) -> dict[str, Any]:
    return {
        "hidden_size": 2 * head_dim,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": head_dim,
        "vocab_size": 300,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": theta,
            "mrope_section": section,
            "mrope_interleaved": True,
        },
    }


def _config(**text: Any) -> Qwen3VLConfig:
    return Qwen3VLConfig(
        text_config=_text_config(**text),
        vision_config={
            "depth": 1,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 2,
            "out_hidden_size": 2 * text.get("head_dim", HEAD_DIM),
            "deepstack_visual_indexes": [0],
            "num_position_embeddings": 16,
            "patch_size": 4,
        },
        image_token_id=IMAGE_ID,
        video_token_id=VIDEO_ID,
        vision_start_token_id=VS_ID,
        vision_end_token_id=VE_ID,
    )


@pytest.fixture(scope="module")
def hf_model() -> Qwen3VLModel:
    torch.manual_seed(0)
    return Qwen3VLModel(_config()).eval()


def _hf_positions(model: Qwen3VLModel, layout: list[tuple[str, Any]]) -> tuple[np.ndarray, int]:
    """HF's ``get_rope_index`` for a prompt written as [("text", n) | ("image", (t, h, w))]: the text
    tokens are ordinary ids, an image is its h·w/4 ``<|image_pad|>`` ids; returns ``[3, L]`` and the delta."""
    ids: list[int] = []
    grids = []
    for kind, value in layout:
        if kind == "text":
            ids += [5] * value
        else:
            grids.append(list(value))
            ids += [IMAGE_ID] * (value[1] * value[2] // 4)
    input_ids = torch.tensor([ids])
    types = (input_ids == IMAGE_ID).int()
    grid = torch.tensor(grids) if grids else None
    with torch.no_grad():
        pos, delta = model.get_rope_index(input_ids, types, image_grid_thw=grid)
    return pos[:, 0, :].numpy(), int(delta.item())


def _spell(layout: list[tuple[str, Any]]) -> str:
    return ",".join(f"text:{v}" if k == "text" else "image:" + "x".join(map(str, v)) for k, v in layout)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["rope", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = _run(capsys, *args, "--format", "json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def _cmd_positions(data: dict[str, Any]) -> np.ndarray:
    return np.array([tok["position"] for tok in data["tokens"]]).T


LANDSCAPE = [("text", 3), ("image", (1, 4, 6)), ("text", 2)]  # [t, t, vs, pad×6, ve, t]
PORTRAIT = [("text", 2), ("image", (1, 8, 4)), ("text", 1)]  # [t, vs, pad×8, ve]
TWO_IMAGES = [("text", 4), ("image", (1, 6, 4)), ("text", 3), ("image", (1, 2, 8)), ("text", 2)]
LAYOUTS = {"landscape": LANDSCAPE, "portrait": PORTRAIT, "two_images": TWO_IMAGES}


def test_landscape_positions_are_those_of_the_doc_and_of_hf(
    hf_model: Qwen3VLModel, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _json(capsys, *FLAGS, "--layout", _spell(LANDSCAPE))
    mine = _cmd_positions(data)
    # qwen3-vl.md §4.1, landscape example
    assert mine[0].tolist() == [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7]
    assert mine[1].tolist() == [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7]
    assert mine[2].tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7]
    assert data["prompt"]["rope_delta"] == -3
    hf, delta = _hf_positions(hf_model, LANDSCAPE)
    assert np.array_equal(mine, hf)
    assert delta == -3


def test_portrait_image_advances_by_its_larger_side(
    hf_model: Qwen3VLModel, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _json(capsys, *FLAGS, "--layout", _spell(PORTRAIT))
    mine = _cmd_positions(data)
    image = [t["index"] for t in data["tokens"] if t["kind"] == "image 0"]
    assert sorted(set(mine[1, image].tolist())) == [2, 3, 4, 5]  # §4.1: H 2..5
    assert sorted(set(mine[2, image].tolist())) == [2, 3]  # W 2..3
    assert mine[:, -1].tolist() == [6, 6, 6]  # the next text position is 6, not 2 + w' = 4
    hf, delta = _hf_positions(hf_model, PORTRAIT)
    assert np.array_equal(mine, hf)
    assert data["prompt"]["rope_delta"] == delta
    assert data["prompt"]["next_position"] == int(hf.max()) + 1


def test_two_images_positions_and_delta_equal_hf(
    hf_model: Qwen3VLModel, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _json(capsys, *FLAGS, "--layout", _spell(TWO_IMAGES))
    hf, delta = _hf_positions(hf_model, TWO_IMAGES)
    assert np.array_equal(_cmd_positions(data), hf)
    assert data["prompt"]["rope_delta"] == delta
    kinds = [t["kind"] for t in data["tokens"]]
    assert kinds.count("image 0") == 6 and kinds.count("image 1") == 4


def _hf_cos_sin(layout: str, config: Any, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin ``[L, head_dim]`` from HF's rotary embedding of ``layout`` for positions ``[3, L]``."""
    rotary = (
        Qwen3VLTextRotaryEmbedding(config) if layout == "interleaved" else Qwen2_5_VLRotaryEmbedding(config)
    )
    position_ids = torch.from_numpy(pos).view(3, 1, -1)
    with torch.no_grad():
        cos, sin = rotary(torch.zeros(1, dtype=torch.float32), position_ids)
    return cos[0].numpy(), sin[0].numpy()


def _hf_text_config(layout: str, section: list[int]) -> Any:
    if layout == "interleaved":
        return _config(section=section).text_config
    return Qwen2_5_VLTextConfig(
        **{
            **_text_config(section=section),
            "rope_parameters": {"rope_type": "default", "rope_theta": THETA, "mrope_section": section},
        }
    )


def _angles(data: dict[str, Any], layout: str) -> np.ndarray:
    return np.array([tok["angles"][layout] for tok in data["tokens"]], dtype=np.float32)


@pytest.mark.parametrize("section", [SECTION, [16, 24, 24]], ids=["qwen3vl", "qwen25vl"])
@pytest.mark.parametrize("name", ["landscape", "two_images"])
def test_angles_give_hf_cos_sin_for_interleaved_block_and_1d(
    hf_model: Qwen3VLModel, capsys: pytest.CaptureFixture[str], name: str, section: list[int]
) -> None:
    """Interleaved against Qwen3-VL's rotary embedding, block against Qwen2.5-VL's (both transformers
    5.24), 1-D against Qwen3-VL's with the T row on all three axes; positions from HF's get_rope_index.
    The [16,24,24] sections make interleave's H and W reach past 64 slots, which HF cuts (21 slots each)."""
    layout = LAYOUTS[name]
    sec = ",".join(map(str, section))
    data = _json(
        capsys,
        "--theta",
        "5e6",
        "--head-dim",
        "128",
        "--mrope-section",
        sec,
        "--layout",
        _spell(layout),
        "--compare",
        "interleaved,block,1d",
    )
    pos, _ = _hf_positions(hf_model, layout)
    for which, hf_pos in (("interleaved", pos), ("block", pos), ("1d", np.stack([pos[0]] * 3))):
        config = _hf_text_config("block" if which == "block" else "interleaved", section)
        cos, sin = _hf_cos_sin("block" if which == "block" else "interleaved", config, hf_pos)
        ang = np.concatenate([_angles(data, which)] * 2, axis=1)
        np.testing.assert_allclose(np.cos(ang), cos, atol=2e-6, rtol=0, err_msg=which)
        np.testing.assert_allclose(np.sin(ang), sin, atol=2e-6, rtol=0, err_msg=which)
        # cos/sin hide an error below 1e-6 rad in a low-frequency slot; HF's angle, atan2(sin, cos), shows it
        mine = np.angle(np.exp(1j * ang.astype(np.float64)))
        theirs = np.arctan2(sin.astype(np.float64), cos.astype(np.float64))
        np.testing.assert_allclose(mine, theirs, atol=3e-7, rtol=1e-5, err_msg=which)
    if section == [16, 24, 24]:
        assert data["axis_counts"]["interleaved"] == {"T": 22, "H": 21, "W": 21}
        assert any("interleaved" in note for note in data["notes"])


@pytest.mark.parametrize("section", [SECTION, [16, 24, 24], [8, 28, 28], [40, 12, 12]])
@pytest.mark.parametrize("layout", ["interleaved", "block"])
def test_each_slot_reads_the_axis_hf_rotates_it_by(
    capsys: pytest.CaptureFixture[str], layout: str, section: list[int]
) -> None:
    """HF's rotary embedding of one unit position on one axis (0 on the others): the slots whose sin is not
    0 are exactly those that read that axis."""
    config = _hf_text_config(layout, section)
    probe = np.zeros((3, 3), dtype=np.int64)
    probe[[0, 1, 2], [0, 1, 2]] = 1  # token k is 1 on axis k
    _, sin = _hf_cos_sin(layout, config, probe)
    half = HEAD_DIM // 2
    hf_axes = ["THW"[int(np.flatnonzero(sin[:, i])[0])] for i in range(half)]
    assert all(np.count_nonzero(sin[:, i]) == 1 for i in range(half))
    data = _json(
        capsys,
        "--theta",
        "5e6",
        "--head-dim",
        "128",
        "--mrope-section",
        ",".join(map(str, section)),
        "--layout",
        "text:1",
        "--compare",
        layout,
    )
    assert [slot["axis"][layout] for slot in data["slots"]] == hf_axes


def _wrapped(cos_a: np.ndarray, sin_a: np.ndarray, cos_b: np.ndarray, sin_b: np.ndarray) -> np.ndarray:
    """b's angle minus a's, in (-pi, pi], from cos and sin alone."""
    return np.arctan2(sin_b * cos_a - cos_b * sin_a, cos_b * cos_a + sin_b * sin_a)


def test_comparison_and_image_counts_follow_from_hf_cos_sin(
    hf_model: Qwen3VLModel, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = [("text", 3), ("image", (1, 8, 6)), ("text", 2)]
    data = _json(
        capsys, *FLAGS, "--layout", _spell(layout), "--compare", "interleaved,block,1d", "--top", "3"
    )
    pos, _ = _hf_positions(hf_model, layout)
    half = HEAD_DIM // 2
    inter = [x[:, :half] for x in _hf_cos_sin("interleaved", _hf_text_config("interleaved", SECTION), pos)]
    block = [x[:, :half] for x in _hf_cos_sin("block", _hf_text_config("block", SECTION), pos)]
    flat = np.stack([pos[0]] * 3)
    one_d = [x[:, :half] for x in _hf_cos_sin("interleaved", _hf_text_config("interleaved", SECTION), flat)]
    comparisons = {c["b"]: c for c in data["comparisons"]}
    assert set(comparisons) == {"block", "1d"} and all(c["a"] == "interleaved" for c in data["comparisons"])
    for name, other in (("block", block), ("1d", one_d)):
        delta = np.abs(_wrapped(*inter, *other))
        largest = comparisons[name]["largest"]
        tok, slot = largest["token"], largest["slot"]
        # every |Δ| here is below pi, so the unwrapped largest is HF's largest wrapped difference
        assert largest["abs_delta"] == pytest.approx(float(delta.max()), abs=1e-5)
        assert delta[tok, slot] == pytest.approx(float(delta.max()), abs=1e-5)
        assert largest["position"] == pos[:, tok].tolist()
        assert comparisons[name]["tokens_changed"] == int((delta > 1e-6).any(axis=1).sum())
        assert [d["abs_delta"] for d in comparisons[name]["top"]] == sorted(
            (d["abs_delta"] for d in comparisons[name]["top"]), reverse=True
        )
    # an image slot "varies" if HF's cos or sin of it is not the same for all the image's tokens
    image = slice(3, 3 + 12)
    expected = {}
    for name, (cos, sin) in (("interleaved", inter), ("block", block), ("1d", one_d)):
        c, s = cos[image], sin[image]
        expected[name] = int(((c.max(0) != c.min(0)) | (s.max(0) != s.min(0))).sum())
    got = {name: v["varying_slots"] for name, v in data["images"][0]["variation"].items()}
    assert got == expected
    assert expected["1d"] == 0 and expected["interleaved"] == 40
    # block puts W on the lowest frequencies: its W angles barely move across the image
    spans = data["images"][0]["variation"]
    assert spans["block"]["max_span"]["W"] < 1e-3 < spans["interleaved"]["max_span"]["W"]


def _save_5x(folder: Path) -> Path:
    _config().save_pretrained(folder)
    return folder


def _write_457(folder: Path) -> Path:
    """config.json as transformers 4.57 saved the real 2B: ``rope_scaling`` with the sections and
    ``rope_theta`` beside it in ``text_config`` (qwen3-vl.md §9)."""
    folder.mkdir(exist_ok=True)
    text = {k: v for k, v in _text_config().items() if k != "rope_parameters"}
    text["rope_scaling"] = {"mrope_interleaved": True, "mrope_section": SECTION, "rope_type": "default"}
    text["rope_theta"] = THETA
    cfg = {"model_type": "qwen3_vl", "text_config": text, "vision_config": {"spatial_merge_size": 2}}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _write_model_json(path: Path, rope: dict[str, Any], merge: Any = 2) -> Path:
    model = {
        "format": "gsurg-model",
        "family": "qwen3_vl",
        "decoder": {"rope": rope},
        "vision": {"merge_size": merge},
    }
    path.write_text(json.dumps(model))
    return path


MODEL_ROPE = {"theta": THETA, "head_dim": HEAD_DIM, "mrope_section": SECTION, "layout": "interleaved"}


def test_settings_from_both_config_styles_and_model_json_agree_with_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spelled = _spell(LANDSCAPE)
    five = _save_5x(tmp_path / "hf5")
    saved = json.loads((five / "config.json").read_text())
    assert "rope_parameters" in saved["text_config"]  # the style this transformers writes
    sources = {
        "5.x folder": str(five),
        "5.x file": str(five / "config.json"),
        "4.57": str(_write_457(tmp_path / "hf457")),
        "model.json": str(_write_model_json(tmp_path / "model.json", MODEL_ROPE)),
    }
    reference = _json(capsys, *FLAGS, "--layout", spelled, "--compare", "interleaved,block")
    for name, source in sources.items():
        data = _json(capsys, source, "--layout", spelled)
        settings = data["settings"]
        assert (settings["theta"], settings["head_dim"], settings["mrope_section"], settings["merge"]) == (
            THETA,
            HEAD_DIM,
            SECTION,
            2,
        ), name
        assert settings["model_layout"] == "interleaved", name
        assert data["layouts"] == ["interleaved", "block"], name  # the model's layout first
        assert data["tokens"] == reference["tokens"], name


def test_head_dim_from_hidden_over_heads_and_qwen3_vl_interleaves_whatever_the_flag_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write_457(tmp_path / "hf457")
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["text_config"]["head_dim"]  # hidden_size 256 / 2 heads
    cfg["text_config"]["rope_scaling"]["mrope_interleaved"] = False
    (folder / "config.json").write_text(json.dumps(cfg))
    code, out, err = _run(capsys, str(folder), "--layout", "text:2", "--format", "json")
    assert code == 0
    settings = json.loads(out)["settings"]
    assert (settings["head_dim"], settings["model_layout"]) == (HEAD_DIM, "interleaved")
    assert "mrope_interleaved is false, but HF's qwen3_vl is always interleaved" in err
    cfg["model_type"] = "some_vl"  # a model HF does not pin: the flag decides
    (folder / "config.json").write_text(json.dumps(cfg))
    assert _json(capsys, str(folder), "--layout", "text:2")["settings"]["model_layout"] == "block"


def test_a_flag_overrides_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _save_5x(tmp_path / "hf5")
    data = _json(capsys, str(folder), "--theta", "10000", "--layout", "text:2")
    assert data["settings"]["theta"] == 10000.0
    assert data["settings"]["source"].endswith("with --theta")
    assert data["slots"][1]["inv_freq"] == pytest.approx(10000 ** (-2 / HEAD_DIM), rel=1e-6)


def test_text_output_is_a_summary_with_the_largest_difference(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, *FLAGS, "--layout", _spell(LANDSCAPE))
    assert code == 0 and err == ""
    data = _json(capsys, *FLAGS, "--layout", _spell(LANDSCAPE))
    largest = data["comparisons"][0]["largest"]
    assert (
        f"at token {largest['token']} (image 0, position ({','.join(map(str, largest['position']))}))" in out
    )
    assert f"slot {largest['slot']}:" in out
    assert "interleaved varies 40 slots (80 dims)" in out
    assert len(out.splitlines()) < 20  # the per-token tables are in json and md only


def test_md_output_has_the_per_token_tables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, *FLAGS, "--layout", _spell(LANDSCAPE), "--format", "md")
    assert code == 0
    data = _json(capsys, *FLAGS, "--layout", _spell(LANDSCAPE))
    for layout in ("interleaved", "block"):
        section = out.split(f"## Tokens, {layout}\n", 1)[1].split("\n## ", 1)[0]
        rows = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
        assert len(rows) == len(data["tokens"])
        cells = rows[4].strip("| ").split(" | ")  # token 4: image 0, position (3,3,4)
        assert cells[:5] == ["4", "image 0", *map(str, data["tokens"][4]["position"])]
        assert len(cells) == 5 + HEAD_DIM // 2
        axis = data["slots"][2]["axis"][layout]
        coord = data["tokens"][4]["coordinates"][layout][2]
        assert cells[5 + 2] == f"{axis}={coord} {data['tokens'][4]['angles'][layout][2]:.6g}"


def test_quiet_prints_nothing_and_the_report_group_is_the_shared_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _run(capsys, *FLAGS, "--layout", "text:2,image:1x2x2", "-q") == (0, "", "")
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    rope: argparse.ArgumentParser = sub.choices["rope"]
    group = next(g for g in rope._action_groups if g.title == "report")
    assert {s for a in group._group_actions for s in a.option_strings} == {"--format", "-q", "--quiet"}


BAD_LAYOUTS = [
    (
        "text:2,image:1x5x6",
        "--layout item 2 'image:1x5x6': h=5 is not a positive multiple of the spatial merge 2",
    ),
    ("text:2,audio:3", "--layout item 2 'audio:3': unknown token kind 'audio'"),
    ("image:2x4x4", "--layout item 1 'image:2x4x4': t=2; a still image has t=1"),
    ("video:2x4x4", "--layout item 1 'video:2x4x4': videos are not supported"),
    ("text:0", "--layout item 1 'text:0': text takes a token count >= 1"),
    ("text:2,,text:1", "--layout item 2 '': expected KIND:VALUE"),
    ("image:1x4", "--layout item 1 'image:1x4': image takes a patch grid TxHxW"),
    ("text:3,image:1x1024x1024", "--layout item 2 'image:1x1024x1024': the layout reaches 262147 tokens"),
]


def test_adjacent_images_are_placed_one_by_one_with_a_note(
    hf_model: Qwen3VLModel, capsys: pytest.CaptureFixture[str]
) -> None:
    """HF's get_rope_index fails on two images with no token between them (it reads one run of image
    tokens); the command places them as two images and says so."""
    adjacent = [("text", 1), ("image", (1, 2, 4)), ("image", (1, 2, 4))]
    with pytest.raises(RuntimeError):
        _hf_positions(hf_model, adjacent)
    code, out, err = _run(capsys, *FLAGS, "--layout", _spell(adjacent), "-q")
    assert (code, out) == (0, "")
    assert "images 0 and 1 are adjacent with no text between" in err
    separated = [("text", 1), ("image", (1, 2, 4)), ("text", 2), ("image", (1, 2, 4))]
    data = _json(capsys, *FLAGS, "--layout", _spell(separated))
    assert np.array_equal(_cmd_positions(data), _hf_positions(hf_model, separated)[0])


def _one_error(err: str, expected: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gsurg: error: ") and expected in lines[0], err


@pytest.mark.parametrize(("layout", "expected"), BAD_LAYOUTS, ids=[b[0] for b in BAD_LAYOUTS])
def test_a_bad_layout_is_one_line_naming_the_item(
    capsys: pytest.CaptureFixture[str], layout: str, expected: str
) -> None:
    code, out, err = _run(capsys, *FLAGS, "--layout", layout)
    assert (code, out) == (2, "")
    _one_error(err, expected)


def _bad_5x(folder: Path) -> Path:
    _save_5x(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["text_config"]["rope_parameters"]["mrope_section"] = [24, 20, 24]
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _bad_457(folder: Path) -> Path:
    _write_457(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["text_config"]["rope_scaling"]["mrope_section"] = [16, 16, 16]
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _yarn(folder: Path) -> Path:
    _save_5x(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["text_config"]["rope_parameters"]["rope_type"] = "yarn"
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


BAD_SETTINGS = {
    "5.x sections": (
        _bad_5x,
        [],
        "config.json: text_config.rope_parameters.mrope_section: [24,20,24] sums to 68, not head_dim/2 = 64",
    ),
    "4.57 sections": (
        _bad_457,
        [],
        "config.json: text_config.rope_scaling.mrope_section: [16,16,16] sums to 48",
    ),
    "model.json sections": (
        lambda p: _write_model_json(p / "model.json", {**MODEL_ROPE, "mrope_section": [20, 20, 20]}),
        [],
        "model.json: decoder.rope.mrope_section: [20,20,20] sums to 60",
    ),
    "model.json without sections": (
        lambda p: _write_model_json(p / "model.json", {"theta": THETA, "head_dim": HEAD_DIM}),
        [],
        "model.json: decoder.rope.mrope_section: missing",
    ),
    "model.json odd head_dim": (
        lambda p: _write_model_json(p / "model.json", {**MODEL_ROPE, "head_dim": 127}),
        [],
        "model.json: decoder.rope.head_dim: must be an even integer >= 2, got 127",
    ),
    "model.json merge": (
        lambda p: _write_model_json(p / "model.json", MODEL_ROPE, merge="2"),
        [],
        "model.json: vision.merge_size: must be an integer >= 1, got '2'",
    ),
    "model.json layout": (
        lambda p: _write_model_json(p / "model.json", {**MODEL_ROPE, "layout": "spiral"}),
        [],
        "model.json: decoder.rope.layout: must be interleaved or block, got 'spiral'",
    ),
    "flag sections": (
        None,
        [*FLAGS[:4], "--mrope-section", "24,20,21"],
        "--mrope-section: [24,20,21] sums to 65",
    ),
    "flag sections text": (
        None,
        [*FLAGS[:4], "--mrope-section", "a,b"],
        "--mrope-section: expected three integers",
    ),
    "override breaks the file": (
        _save_5x,
        ["--head-dim", "64"],
        "sums to 64, not head_dim/2 = 32 (head_dim 64 from --head-dim)",
    ),
    "no settings": (
        None,
        ["--theta", "5e6"],
        "give SETTINGS (a model.json, config.json or checkpoint folder) or",
    ),
    "bad theta": (None, ["--theta", "x", *FLAGS[2:]], "--theta: expected a number, got 'x'"),
    "negative theta": (None, ["--theta", "-1", *FLAGS[2:]], "--theta: must be a number > 0, got -1.0"),
    "rope type": (_yarn, [], "text_config.rope_parameters.rope_type: 'yarn' is not supported"),
    "unknown compare": (
        None,
        [*FLAGS, "--compare", "interleaved,spiral"],
        "--compare: unknown layout 'spiral'",
    ),
    "missing file": (lambda p: p / "nowhere.json", [], "nowhere.json"),
    "not json": (lambda p: (p / "config.json").write_text("{") and p / "config.json", [], "not valid JSON"),
    "empty folder": (lambda p: p, [], "a folder with neither config.json nor model.json"),
}


@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_bad_settings_are_one_line_naming_the_key_or_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    make, flags, expected = BAD_SETTINGS[case]
    work = tmp_path / "w"
    work.mkdir()
    source = [] if make is None else [str(make(work))]
    code, out, err = _run(capsys, *source, *flags, "--layout", "text:2,image:1x4x4")
    assert (code, out) == (2, "")
    _one_error(err, expected)
