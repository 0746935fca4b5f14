"""The Qwen3-VL config reader (issue 16, item 2: graphsurgeon/models/qwen3_vl/config.py) in both config styles
transformers saves, and its refusals.

Oracles: transformers 5.24's own reading of the same folders (``AutoConfig`` / ``GenerationConfig``
attributes, the model's logits, and which frequency slot its ``Qwen3VLTextRotaryEmbedding`` takes from
which of the T/H/W positions); the 4.57 style as ``make_tiny.transformers_4_style`` writes it (the keys of
the released 2B's config, docs/qwen3-vl.md §9); values the tests write into the files themselves.
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

from graphsurgeon.errors import GsurgError  # noqa: E402
from graphsurgeon.formats.safetensors import CheckpointError  # noqa: E402
from graphsurgeon.models.qwen3_vl.config import load_config  # noqa: E402
from graphsurgeon.models.qwen3_vl.make_tiny import SHIPPED, write_transformers_4_style  # noqa: E402
from graphsurgeon.models.qwen3_vl.processor_config import load_image_processor  # noqa: E402
from graphsurgeon.models.qwen3_vl.rule_facts import facts  # noqa: E402

Edit = Callable[[dict[str, Any]], None]


def _copy(tmp_path: Path, name: str = "ckpt", *, style4: bool = False) -> Path:
    folder = Path(shutil.copytree(SHIPPED, tmp_path / name))
    return write_transformers_4_style(folder) if style4 else folder


def _edit(path: Path, change: Edit) -> None:
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw, indent=2))


@pytest.fixture(scope="module")
def style4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(tmp_path_factory.mktemp("q3vl"), style4=True)


def test_the_reading_is_what_transformers_reads() -> None:
    cfg = load_config(SHIPPED)
    hf = transformers.AutoConfig.from_pretrained(str(SHIPPED))
    text, vision = hf.text_config, hf.vision_config
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "vocab_size",
        "max_position_embeddings",
    ):
        assert getattr(cfg.text, key) == getattr(text, key), key
    assert cfg.text.rope_theta == text.rope_parameters["rope_theta"]
    assert cfg.text.tie_word_embeddings is hf.tie_word_embeddings is True
    assert list(cfg.mrope_section) == text.rope_parameters["mrope_section"]
    for key in (
        "depth",
        "hidden_size",
        "num_heads",
        "intermediate_size",
        "in_channels",
        "patch_size",
        "temporal_patch_size",
        "spatial_merge_size",
        "out_hidden_size",
        "num_position_embeddings",
        "hidden_act",
    ):
        assert getattr(cfg.vision, key) == getattr(vision, key), key
    assert list(cfg.vision.deepstack_visual_indexes) == list(vision.deepstack_visual_indexes)
    assert cfg.vision.rope_theta == vision.rope_parameters["rope_theta"]
    assert cfg.vision.grid_side**2 == vision.num_position_embeddings
    assert cfg.vision.patch_dim == 1536 and cfg.vision.merged_width == 4 * vision.hidden_size
    for key in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert getattr(cfg, key) == getattr(hf, key), key
    assert list(cfg.eos_ids) == transformers.GenerationConfig.from_pretrained(str(SHIPPED)).eos_token_id


def _axis_of_each_slot(config: Any) -> list[str]:
    """Which position (T, H or W) HF's text rotary embedding uses for each of the head_dim/2 slots: with
    only one axis's position non-zero, exactly the slots of that axis get a non-zero sine."""
    rotary = transformers.models.qwen3_vl.modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding(config)
    x = torch.zeros(1, 1, config.head_dim)
    half = config.head_dim // 2
    moved = []
    for axis in range(3):
        positions = torch.zeros(3, 1, 1, dtype=torch.long)
        positions[axis] = 1
        _, sin = rotary(x, positions)
        moved.append(sin[0, 0, :half] != 0)
    axes = []
    for i in range(half):
        (axis,) = [a for a in range(3) if moved[a][i]]  # one axis per slot
        axes.append("THW"[axis])
    return axes


def test_the_mrope_section_is_how_many_slots_hf_gives_each_axis() -> None:
    cfg = load_config(SHIPPED)
    axes = _axis_of_each_slot(transformers.AutoConfig.from_pretrained(str(SHIPPED)).text_config)
    assert (axes.count("T"), axes.count("H"), axes.count("W")) == cfg.mrope_section
    assert axes[:6] == list("THWTHW")  # interleaved, not blocks


def test_an_mrope_section_whose_slots_do_not_fit_is_refused_because_hf_drops_them(tmp_path: Path) -> None:
    """[2, 7, 7] sums to 16 = head_dim/2, but HF's interleave can give H and W only 5 slots each."""
    text = transformers.AutoConfig.from_pretrained(str(SHIPPED)).text_config
    text.rope_parameters = {**text.rope_parameters, "mrope_section": [2, 7, 7]}
    axes = _axis_of_each_slot(text)
    assert (axes.count("H"), axes.count("W")) == (5, 5)  # not 7 and 7
    folder = _copy(tmp_path)
    _edit(
        folder / "config.json",
        lambda raw: raw["text_config"]["rope_parameters"].update(mrope_section=[2, 7, 7]),
    )
    with pytest.raises(
        CheckpointError, match=r"the 7 interleaved height slots \(1, 4, \.\.\. 19\) do not fit"
    ):
        load_config(folder)


def test_the_transformers_4_style_reads_the_same_and_hf_gives_the_same_logits(style4: Path) -> None:
    raw = json.loads((style4 / "config.json").read_text())
    text = raw["text_config"]
    assert "rope_parameters" not in text and set(text["rope_scaling"]) == {
        "rope_type",
        "mrope_section",
        "mrope_interleaved",
    }
    assert "rope_theta" in text and "torch_dtype" in raw and "dtype" not in raw
    assert "rope_parameters" not in raw["vision_config"]
    assert load_config(style4) == load_config(SHIPPED)
    assert facts(str(style4)) == facts(str(SHIPPED))

    ids = torch.tensor([[3, 40, 41, 42, 43, 44, 45, 7]])
    logits = []
    for folder in (SHIPPED, style4):
        model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(str(folder)).eval()
        assert model.config.vision_config.rope_parameters["rope_theta"] == 10000.0
        with torch.no_grad():
            logits.append(model(input_ids=ids).logits)
    assert torch.equal(logits[0], logits[1])


def test_eos_from_text_config_when_generation_config_has_none(style4: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(style4, tmp_path / "ckpt"))
    (folder / "generation_config.json").unlink()
    im_end = load_config(SHIPPED).eos_ids[0]
    assert load_config(folder).eos_ids == (im_end,)  # text_config.eos_token_id, as the 2B's config has it
    _edit(folder / "config.json", lambda raw: raw["text_config"].pop("eos_token_id"))
    assert load_config(folder).eos_ids == (im_end,)  # the tokenizer's eos_token


def test_facts_are_what_a_rule_file_reads() -> None:
    got = facts(str(SHIPPED))
    hf = transformers.AutoConfig.from_pretrained(str(SHIPPED))
    assert got["num_hidden_layers"] == hf.text_config.num_hidden_layers
    assert got["tie_word_embeddings"] is True and got["eos_token_id"] == list(load_config(SHIPPED).eos_ids)
    assert got["mrope_section"] == hf.text_config.rope_parameters["mrope_section"]
    assert got["image_token_id"] == hf.image_token_id
    assert got["vision_config"]["deepstack_visual_indexes"] == list(hf.vision_config.deepstack_visual_indexes)
    assert got["vision_config"]["grid_side"] == 4 and got["vision_config"]["head_dim"] == 16
    json.dumps(got)  # plain JSON values: model.json records them


def _text(**values: Any) -> Edit:
    return lambda raw: raw["text_config"].update(values)


def _rope(**values: Any) -> Edit:
    return lambda raw: raw["text_config"]["rope_parameters"].update(values)


def _vision(**values: Any) -> Edit:
    return lambda raw: raw["vision_config"].update(values)


def _pop_section(raw: dict[str, Any]) -> None:
    raw["text_config"]["rope_parameters"].pop("mrope_section")


REFUSALS: list[tuple[str, Edit, str]] = [
    (
        "mrope-sum",
        _rope(mrope_section=[6, 5, 4]),
        "text_config: rope_parameters.mrope_section [6, 5, 4] sums to 15, not head_dim/2 = 16",
    ),
    (
        "mrope-missing",
        _pop_section,
        "text_config: no rope_parameters.mrope_section or rope_scaling.mrope_section",
    ),
    ("mrope-shape", _rope(mrope_section=[8, 8]), "text_config: rope_parameters.mrope_section must be three"),
    (
        "mrope-blocks",
        _rope(mrope_interleaved=False),
        "text_config: rope_parameters.mrope_interleaved false is not supported",
    ),
    ("rope-type", _rope(rope_type="yarn"), "text_config: rope_parameters.rope_type 'yarn' is not supported"),
    ("text-act", _text(hidden_act="gelu"), "text_config: hidden_act 'gelu' is not supported (only silu)"),
    ("text-bias", _text(attention_bias=True), "text_config: attention_bias true is not supported"),
    (
        "out-hidden",
        _vision(out_hidden_size=32),
        "vision_config: out_hidden_size 32 differs from text_config.hidden_size 64",
    ),
    (
        "table-square",
        _vision(num_position_embeddings=15),
        "vision_config: num_position_embeddings 15 is not a square",
    ),
    (
        "deepstack-range",
        _vision(deepstack_visual_indexes=[1, 3, 6]),
        "vision_config: deepstack_visual_indexes [1, 3, 6]: 6 is not a block index (depth 6)",
    ),
    (
        "deepstack-negative",
        _vision(deepstack_visual_indexes=[-1, 3, 4]),
        "vision_config: deepstack_visual_indexes [-1, 3, 4]: -1 is not a block index",
    ),
    (
        "deepstack-order",
        _vision(deepstack_visual_indexes=[1, 4, 4]),
        "vision_config: deepstack_visual_indexes [1, 4, 4] must be increasing",
    ),
    (
        "deepstack-too-many",
        _vision(deepstack_visual_indexes=[0, 1, 2, 3, 4]),
        "vision_config: deepstack_visual_indexes has 5 taps, more than text_config.num_hidden_layers 4",
    ),
    (
        "vision-act",
        _vision(hidden_act="gelu"),
        "vision_config: hidden_act 'gelu' is not supported (only gelu_pytorch_tanh",
    ),
    (
        "vision-rope",
        _vision(rope_parameters={"rope_type": "default", "rope_theta": 1e4}),
        "vision_config: rope_parameters.rope_type 'default' is not supported (only axial",
    ),
    (
        "vision-heads",
        _vision(num_heads=3),
        "vision_config: hidden_size 32 / num_heads 3 must be a whole head",
    ),
    (
        "vision-head-dim",
        _vision(num_heads=16),
        "vision_config: hidden_size 32 / num_heads 16 must be a whole head size divisible by 4",
    ),
    (
        "vision-depth",
        lambda raw: raw["vision_config"].pop("depth"),
        "vision_config: depth must be a positive",
    ),
    (
        "tied",
        _text(tie_word_embeddings=False),
        "tie_word_embeddings true (what transformers ties by) disagrees with text_config.tie_word_embeddings",
    ),
    ("model-type", lambda raw: raw.update(model_type="qwen3_vl_moe"), "model_type is 'qwen3_vl_moe'"),
    ("token-range", lambda raw: raw.update(image_token_id=600), "image_token_id 600 is outside"),
    (
        "token-tokenizer",
        lambda raw: raw.update(image_token_id=10),
        "image_token_id 10 is not the tokenizer's '<|image_pad|>'",
    ),
]


@pytest.mark.parametrize(("edit", "message"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_each_refusal_is_one_line_naming_the_file_and_key(tmp_path: Path, edit: Edit, message: str) -> None:
    folder = _copy(tmp_path)
    _edit(folder / "config.json", edit)
    with pytest.raises(CheckpointError) as err:
        facts(str(folder))
    text = str(err.value)
    assert isinstance(err.value, GsurgError) and "\n" not in text
    assert text.startswith(f"{folder / 'config.json'}: ") and message in text


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda raw: raw["text_config"]["rope_scaling"].update(mrope_section=[6, 6, 5]),
            "text_config: rope_scaling.mrope_section [6, 6, 5] sums to 17, not head_dim/2 = 16",
        ),
        (
            lambda raw: raw["text_config"]["rope_scaling"].update(rope_type="linear"),
            "text_config: rope_scaling.rope_type 'linear' is not supported",
        ),
        (
            lambda raw: raw["text_config"].pop("rope_theta"),
            "text_config: no rope_theta or rope_parameters.rope_theta",
        ),
    ],
    ids=["mrope-sum", "rope-type", "no-theta"],
)
def test_the_transformers_4_style_is_refused_naming_its_own_keys(
    tmp_path: Path, edit: Edit, message: str
) -> None:
    folder = _copy(tmp_path, style4=True)
    _edit(folder / "config.json", edit)
    with pytest.raises(CheckpointError) as err:
        load_config(folder)
    assert str(err.value).startswith(f"{folder / 'config.json'}: ") and message in str(err.value)


def _hf_image_processor(folder: Path) -> Any:
    return transformers.Qwen2VLImageProcessorPil.from_pretrained(str(folder))


@pytest.mark.parametrize(
    "style",
    [
        {},  # size.shortest_edge / longest_edge, as make_tiny's processor saves it
        {"min_pixels": 4096, "max_pixels": 131072},  # the older keys, which win over size
        {"size": None, "min_pixels": 8192, "max_pixels": 65536},
    ],
    ids=["size", "min-max-over-size", "min-max-only"],
)
def test_the_image_processor_reads_as_transformers_reads_it(tmp_path: Path, style: dict[str, Any]) -> None:
    folder = _copy(tmp_path)
    path = folder / "preprocessor_config.json"
    _edit(path, lambda raw: raw.update({k: v for k, v in style.items() if v is not None}))
    if "size" in style:
        _edit(path, lambda raw: raw.pop("size"))
    ours = load_image_processor(folder, load_config(folder).vision)
    hf = _hf_image_processor(folder)
    assert (ours.min_pixels, ours.max_pixels) == (hf.size.shortest_edge, hf.size.longest_edge)
    assert (ours.patch_size, ours.temporal_patch_size, ours.merge_size) == (
        hf.patch_size,
        hf.temporal_patch_size,
        hf.merge_size,
    )
    assert list(ours.image_mean) == list(hf.image_mean) and list(ours.image_std) == list(hf.image_std)
    assert ours.rescale_factor == hf.rescale_factor and ours.resample == int(hf.resample) == 3
    assert facts(str(folder))["image_processor"]["max_pixels"] == hf.size.longest_edge


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda raw: raw.update(patch_size=14),
            "patch_size 14 differs from config.json vision_config.patch_size 16",
        ),
        (
            lambda raw: raw.update(merge_size=1),
            "merge_size 1 differs from config.json vision_config.spatial_merge_size",
        ),
        (lambda raw: raw.pop("image_mean"), "image_mean must be three numbers, not None"),
        (lambda raw: raw.pop("size"), "no min_pixels or size.shortest_edge"),
        (lambda raw: raw.update(min_pixels=10**6), "min_pixels 1000000 exceeds max_pixels 262144"),
        (lambda raw: raw.update(resample=2), "resample 2 is not supported (only 3, PIL BICUBIC)"),
    ],
    ids=["patch", "merge", "mean", "budget", "min-over-max", "resample"],
)
def test_an_image_processor_refusal_names_its_file_and_key(tmp_path: Path, edit: Edit, message: str) -> None:
    folder = _copy(tmp_path)
    _edit(folder / "preprocessor_config.json", edit)
    with pytest.raises(CheckpointError) as err:
        facts(str(folder))
    assert str(err.value).startswith(f"{folder / 'preprocessor_config.json'}: ") and message in str(err.value)


@pytest.mark.parametrize(
    ("top", "text"),
    [(True, None), (None, None), (False, False), (None, True), (False, True), (True, False)],
    ids=["top-only", "neither", "both-false", "text-only", "disagree", "disagree-2"],
)
def test_the_top_level_ties_as_in_transformers(tmp_path: Path, top: bool | None, text: bool | None) -> None:
    """transformers 5.24 ties by the top-level key alone (default false; with only ``text_config``'s true
    it leaves ``lm_head`` randomly initialised): the reader follows it and refuses a disagreement."""
    folder = _copy(tmp_path)

    def tie(raw: dict[str, Any]) -> None:
        for section, value in ((raw, top), (raw["text_config"], text)):
            section.pop("tie_word_embeddings")
            if value is not None:
                section["tie_word_embeddings"] = value

    _edit(folder / "config.json", tie)
    hf = transformers.AutoConfig.from_pretrained(str(folder)).tie_word_embeddings
    assert hf is bool(top)
    if text is not None and text != bool(top):
        with pytest.raises(CheckpointError, match=r"disagrees with text_config\.tie_word_embeddings"):
            load_config(folder)
    else:
        assert load_config(folder).text.tie_word_embeddings is hf
