"""The embedded tiny Qwen3-VL checkpoint (issue 16, item 2: graphsurgeon/models/qwen3_vl make_tiny.py,
tiny_tokenizer.py, processor.py): the shipped folder is what the script writes, byte for byte; transformers
5.24 loads it with the real structure at small widths; the image processor assembled without torchvision gives
the inputs HF's ``generate`` runs on, with one ``<|image_pad|>`` per merged 2x2 block.

Oracles: transformers' own ``Qwen3VLForConditionalGeneration`` / ``Qwen2VLImageProcessorPil`` /
``Qwen2Tokenizer`` (structure, pixel values, token expansion, generation); the prompt string and the token
counts of ``docs/qwen3-vl.md`` §4.3 and §5 (checked there against transformers); the safetensors header
read with the ``safetensors`` package. Nothing is compared with numbers this project computed.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
PIL_Image = pytest.importorskip("PIL.Image")

from graphsurgeon.models.qwen3_vl.make_tiny import MAX_PIXELS, MIN_PIXELS, SHIPPED  # noqa: E402
from graphsurgeon.models.qwen3_vl.processor import (  # noqa: E402
    VideoInputError,
    chat_inputs,
    load_processor,
    user_turn,
)
from graphsurgeon.models.qwen3_vl.tiny_tokenizer import SPECIAL_TOKENS  # noqa: E402
from tests.conftest import CORPUS  # noqa: E402

IMAGES = sorted(p for p in (CORPUS / "images").iterdir() if p.suffix in (".png", ".jpg"))
FILES = {
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def model() -> Any:
    return transformers.Qwen3VLForConditionalGeneration.from_pretrained(str(SHIPPED)).eval()


@pytest.fixture(scope="module")
def processor() -> Any:
    return load_processor(SHIPPED)


def test_the_shipped_tiny_checkpoint_is_what_the_script_makes(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    repo = Path(__file__).resolve().parents[1]
    subprocess.run(
        [sys.executable, "-m", "graphsurgeon.models.qwen3_vl.make_tiny", str(out)],
        cwd=repo,
        check=True,
        timeout=300,
    )
    shipped = _digests(SHIPPED)
    assert set(shipped) == FILES
    assert _digests(out) == shipped
    assert sum((SHIPPED / name).stat().st_size for name in shipped) < 3_000_000


def test_the_config_is_in_the_transformers_5_style() -> None:
    raw = json.loads((SHIPPED / "config.json").read_text())
    text, vision = raw["text_config"], raw["vision_config"]
    assert raw["model_type"] == "qwen3_vl" and raw["architectures"] == ["Qwen3VLForConditionalGeneration"]
    assert "dtype" in raw and "torch_dtype" not in raw and "rope_scaling" not in text
    assert "rope_theta" not in text and text["rope_parameters"]["rope_type"] == "default"
    assert sum(text["rope_parameters"]["mrope_section"]) == text["head_dim"] // 2
    assert vision["rope_parameters"]["rope_type"] == "axial"


def test_transformers_loads_the_real_structure_at_small_widths(model: Any) -> None:
    from safetensors import safe_open

    cfg = model.config
    text, vision = cfg.text_config, cfg.vision_config
    visual = model.model.visual
    taps = list(vision.deepstack_visual_indexes)
    assert len(visual.deepstack_merger_list) == len(taps) == 3
    assert len(set(taps)) == 3 and all(0 < t < vision.depth - 1 for t in taps)  # neither first nor last block
    assert text.num_hidden_layers > len(taps)  # the last tap's feature reaches the logits
    assert len(visual.blocks) == vision.depth >= 4
    # GQA, q/k norms, a query width that is not the hidden width
    attn = model.model.language_model.layers[0].self_attn
    assert text.num_attention_heads == 2 * text.num_key_value_heads
    assert attn.k_proj.out_features == text.num_key_value_heads * text.head_dim
    assert attn.q_proj.out_features != text.hidden_size and attn.q_norm.weight.numel() == text.head_dim
    # tied: one tensor, and the file has no lm_head.weight
    assert cfg.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
    with safe_open(str(SHIPPED / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert all(f.get_slice(n).get_dtype() == "F32" for n in names)
    assert "lm_head.weight" not in names and "model.visual.pos_embed.weight" in names
    assert (vision.patch_size, vision.temporal_patch_size, vision.spatial_merge_size) == (16, 2, 2)
    assert vision.out_hidden_size == text.hidden_size
    side = math.isqrt(vision.num_position_embeddings)
    assert side * side == vision.num_position_embeddings == visual.pos_embed.weight.shape[0]
    assert (text.hidden_size // text.num_attention_heads) % 2 == 0 and (
        vision.hidden_size // vision.num_heads
    ) % 4 == 0
    # the vision token ids are the tokenizer's, and the vocabulary covers every id
    tok = transformers.AutoTokenizer.from_pretrained(str(SHIPPED))
    assert len(tok) == text.vocab_size
    assert tok.convert_tokens_to_ids(
        ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
    ) == [
        cfg.image_token_id,
        cfg.video_token_id,
        cfg.vision_start_token_id,
        cfg.vision_end_token_id,
    ]


def test_no_weight_is_left_at_a_constant(model: Any) -> None:
    """A bias left at 0 or a norm at 1 could be dropped by a conversion unnoticed."""
    for name, param in model.named_parameters():
        assert torch.unique(param.detach()).numel() > param.numel() // 2, name


def test_the_tokenizer_reads_back_with_its_special_tokens() -> None:
    tok = transformers.AutoTokenizer.from_pretrained(str(SHIPPED))
    assert type(tok).__name__ == "Qwen2Tokenizer"
    ids = tok.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    assert ids == list(range(ids[0], ids[0] + len(SPECIAL_TOKENS)))  # after the BPE, in Qwen's order
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.bos_token is None
    text = "<|im_start|>user\nThe sky is blue.<|im_end|>\n"
    encoded = tok(text)["input_ids"]
    assert encoded[0] == ids[1] and encoded[-2:] == [ids[2], *tok("\n")["input_ids"]]
    assert tok.decode(encoded) == text
    generation = transformers.GenerationConfig.from_pretrained(str(SHIPPED))
    assert generation.eos_token_id == [
        tok.convert_tokens_to_ids("<|im_end|>"),
        tok.convert_tokens_to_ids("<|endoftext|>"),
    ]


def test_the_chat_template_renders_qwen3_vl_s_format(processor: Any) -> None:
    """docs/qwen3-vl.md §5 (the Qwen3-VL Instruct template as transformers renders it)."""
    one = processor.apply_chat_template(user_turn(1, "Describe this image."), add_generation_prompt=True)
    assert one == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    chat = [
        {"role": "system", "content": "Be brief."},
        *user_turn(2, "Compare."),
        {"role": "assistant", "content": [{"type": "text", "text": "Two."}]},
        {"role": "user", "content": "Why?"},
    ]
    rendered = processor.apply_chat_template(chat, add_vision_id=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
        "Picture 1: <|vision_start|><|image_pad|><|vision_end|>"
        "Picture 2: <|vision_start|><|image_pad|><|vision_end|>Compare.<|im_end|>\n"
        "<|im_start|>assistant\nTwo.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
    )
    with pytest.raises(Exception, match="does not support tools"):
        processor.apply_chat_template(user_turn(0, "hi"), tools=[{"name": "f"}])


def test_every_corpus_image_gives_a_grid_larger_than_the_position_table(processor: Any, model: Any) -> None:
    side = math.isqrt(model.config.vision_config.num_position_embeddings)
    assert IMAGES
    for path in IMAGES:
        out = processor.image_processor(PIL_Image.open(path), return_tensors="pt")
        ((t, h, w),) = out["image_grid_thw"].tolist()
        assert t == 1 and h > side and w > side, path.name
        assert MIN_PIXELS <= h * w * 16 * 16 <= MAX_PIXELS
        assert out["pixel_values"].shape == (h * w, 3 * 2 * 16 * 16)


def test_the_processor_expands_the_image_pads_and_hf_generates(processor: Any, model: Any) -> None:
    image_id = model.config.image_token_id
    outputs = []
    for path in IMAGES[:2]:
        inputs = chat_inputs(processor, [path], "Describe this image.")
        grid = inputs["image_grid_thw"]
        assert grid.shape == (1, 3)
        assert (inputs["input_ids"] == image_id).sum().item() == grid.prod().item() // 4
        assert inputs["pixel_values"].shape == (grid.prod().item(), 1536)
        assert (inputs["mm_token_type_ids"] == 1).sum().item() == grid.prod().item() // 4
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=32, do_sample=False, eos_token_id=None)
        new = out[0, inputs["input_ids"].shape[1] :].tolist()
        assert len(new) == 32 and len(set(new)) >= 10  # greedy decoding is not stuck on a few tokens
        outputs.append(new)
    assert outputs[0] != outputs[1]  # the image changes the answer


def test_two_images_and_no_image(processor: Any, model: Any) -> None:
    image_id = model.config.image_token_id
    both = chat_inputs(processor, IMAGES[:2], "Compare the pictures.")
    grids = both["image_grid_thw"]
    assert grids.shape == (2, 3)
    assert (both["input_ids"] == image_id).sum().item() == grids.prod(dim=1).sum().item() // 4
    text_only = chat_inputs(processor, [], "Hello.")
    assert "pixel_values" not in text_only and image_id not in text_only["input_ids"][0].tolist()
    with torch.no_grad():
        for inputs in (both, text_only):
            out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
            assert out.shape[1] == inputs["input_ids"].shape[1] + 8


def test_a_video_is_refused_not_dropped(processor: Any) -> None:
    with pytest.raises(VideoInputError, match="video input is not supported"):
        processor(text=["<|vision_start|><|video_pad|><|vision_end|>"], videos=[torch.zeros(2, 3, 32, 32)])


def test_a_processor_level_chat_template_json_is_read(tmp_path: Path, processor: Any) -> None:
    """transformers 4.x releases ship the template as chat_template.json beside the processor files."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name in FILES - {"chat_template.jinja", "model.safetensors"}:
        (folder / name).write_bytes((SHIPPED / name).read_bytes())
    template = (SHIPPED / "chat_template.jinja").read_text()
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": template}))
    again = load_processor(folder)
    turn = user_turn(1, "Describe this image.")
    assert again.apply_chat_template(turn, add_generation_prompt=True) == processor.apply_chat_template(
        turn, add_generation_prompt=True
    )
