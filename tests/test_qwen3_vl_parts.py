"""The Qwen3-VL export parts (``graphsurgeon/models/qwen3_vl/parts.py``) and grid tables
(``vision_tables.py``) against HF transformers 5.24's own Qwen3-VL, built at test time from a small random
``Qwen3VLConfig`` (fp32, CPU): each part equals the HF module it replaces, each table HF's own helper, and the
parts chained equal HF's whole model (``Qwen3VLForConditionalGeneration.forward``: vision, fused embeddings,
DeepStack, prefill logits, decode steps with a cache), HF's intermediate values read with forward hooks on its
modules.

The slow tests export every part with pnnx (``graphsurgeon.export``), check what ncnn ops it made and run
the graphs in the ncnn wheel (exact fp32) at sizes other than the traced ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
import transformers

from graphsurgeon.models.common.qwen3_layers import KVCache, causal_mask
from graphsurgeon.models.qwen3_vl.parts import (
    DecoderPart,
    DeepStackMergerPart,
    EmbedPart,
    LMHeadPart,
    MergerPart,
    PatchEmbedPart,
    VisionPart,
    mrope_axes,
    mrope_tables,
    part_specs,
    text_config,
    text_model,
)
from graphsurgeon.models.qwen3_vl.vision_tables import (
    interpolated_pos_embed,
    merge_block_positions,
    vision_rope_tables,
)

IMAGE, VIDEO, VISION_START, VISION_END = 290, 291, 292, 293
TEXT_THETA = 5_000_000.0  # the 2B's; not a default of the tiny config
SECTION = [3, 3, 2]  # sums to head_dim 16 / 2
TAPS = [1, 2, 3]  # the last one is the ViT's last block: a tap equal to the final output
GRIDS = [(2, 2), (4, 6), (8, 4), (6, 10), (2, 12)]  # smaller and larger than the 4 x 4 table, portrait


def _config() -> Any:
    return transformers.Qwen3VLConfig(
        vision_config={
            "depth": 4,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 4,
            "patch_size": 16,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "out_hidden_size": 48,
            "num_position_embeddings": 16,
            "deepstack_visual_indexes": TAPS,
            "hidden_act": "gelu_pytorch_tanh",
        },
        text_config={
            "hidden_size": 48,
            "intermediate_size": 96,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "vocab_size": 300,
            "max_position_embeddings": 512,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": TEXT_THETA,
                "mrope_section": SECTION,
                "mrope_interleaved": True,
            },
        },
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
        tie_word_embeddings=True,
    )


@pytest.fixture(scope="module")
def hf() -> Any:
    """A random HF Qwen3-VL in eval mode. HF's init (N(0, 0.02), unit norms) leaves every block close to
    the identity; these weights make each layer change its input and each norm weight differ from 1."""
    torch.manual_seed(0)
    model = transformers.Qwen3VLForConditionalGeneration(_config()).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2:
                param.normal_(0.0, param[0].numel() ** -0.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
            else:
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
    return model


def assert_close(got: torch.Tensor, want: torch.Tensor, rel: float = 1e-5) -> None:
    """Same shape and ``max|got - want| <= rel * max|want|`` (on a non-zero reference)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = float(want.abs().max())
    err = float((got - want).abs().max())
    assert scale > 0 and err <= rel * scale, f"max abs error {err:.3g} at scale {scale:.3g}"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _grid(gh: int, gw: int) -> torch.Tensor:
    return torch.tensor([[1, gh, gw]])


class Recorder:
    """Forward hooks on HF modules: what each computed, by key, the latest call."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self._handles: list[Any] = []

    def output(self, key: str, module: torch.nn.Module) -> None:
        def hook(_m: torch.nn.Module, _args: Any, out: Any) -> None:
            self.values[key] = out

        self._handles.append(module.register_forward_hook(hook))

    def inputs(self, key: str, module: torch.nn.Module) -> None:
        def hook(_m: torch.nn.Module, args: Any, kwargs: Any) -> None:
            self.values[key] = (args, kwargs)

        self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    yield rec
    rec.close()


# ---- vision parts and tables, one module at a time ------------------------------------------------------


@pytest.mark.parametrize("n", [4, 60])
def test_patch_embed_is_hfs_conv3d(hf: Any, n: int) -> None:
    pixels = torch.randn(n, 1536, generator=_gen(n))
    with torch.no_grad():
        want = hf.model.visual.patch_embed(pixels)
        got = PatchEmbedPart(hf)(pixels[None])[0]
    assert_close(got, want)


def test_patch_embed_shares_hfs_weights(hf: Any) -> None:
    part, conv = PatchEmbedPart(hf), hf.model.visual.patch_embed.proj
    assert part.proj.weight.data_ptr() == conv.weight.data_ptr()  # a view: what diff-bin compares
    assert part.proj.bias is conv.bias


@pytest.mark.parametrize(("gh", "gw"), GRIDS)
def test_merge_block_positions_are_hfs_patch_order(gh: int, gw: int) -> None:
    from transformers.vision_utils import get_vision_position_ids

    rows, cols = merge_block_positions(gh, gw)
    want = get_vision_position_ids(_grid(gh, gw), 2)
    assert torch.equal(torch.stack((rows, cols), dim=-1), want)


@pytest.mark.parametrize(("gh", "gw"), GRIDS)
def test_vision_rope_tables_are_hfs(hf: Any, gh: int, gw: int) -> None:
    from transformers.vision_utils import get_vision_position_ids

    visual = hf.model.visual
    n, head_dim = gh * gw, 64 // 4
    want_cos, want_sin = visual.rotary_pos_emb(torch.zeros(n, 64), get_vision_position_ids(_grid(gh, gw), 2))
    theta = hf.config.vision_config.rope_parameters["rope_theta"]
    cos, sin = vision_rope_tables(gh, gw, head_dim, theta)
    assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)  # the same float32 products


@pytest.mark.parametrize(("gh", "gw"), GRIDS)
def test_interpolated_pos_embed_is_hfs(hf: Any, gh: int, gw: int) -> None:
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    visual = hf.model.visual
    table = visual.pos_embed.weight
    indices, weights = get_vision_interpolation_indices_and_weights(
        _grid(gh, gw), visual.num_grid_per_side, mode="bilinear", align_corners=True, spatial_merge_size=2
    )
    with torch.no_grad():
        want = (visual.pos_embed(indices) * weights[:, :, None]).sum(1)
        got = interpolated_pos_embed(table, gh, gw)
    assert_close(got, want, 1e-6)


@pytest.mark.parametrize(("gh", "gw"), GRIDS)
def test_interpolated_pos_embed_is_torch_bilinear_with_aligned_corners(hf: Any, gh: int, gw: int) -> None:
    """An independent check: torch's own interpolation of the ``[C, S, S]`` table, read in patch order."""
    table = hf.model.visual.pos_embed.weight.detach()
    side = 4
    image = table.T.reshape(1, -1, side, side)
    with torch.no_grad():
        resized = torch.nn.functional.interpolate(image, (gh, gw), mode="bilinear", align_corners=True)[0]
    rows, cols = merge_block_positions(gh, gw)
    assert_close(interpolated_pos_embed(table, gh, gw), resized[:, rows, cols].T, 1e-6)


@pytest.mark.parametrize("qkv", ["fused", "split"])
def test_vision_part_is_hfs_vit(hf: Any, recorder: Recorder, qkv: str) -> None:
    """The ViT on a portrait grid: the last block's output and every DeepStack tap equal HF's blocks'."""
    visual, gh, gw = hf.model.visual, 8, 4
    for i, block in enumerate(visual.blocks):
        recorder.output(f"block{i}", block)
    pixels = torch.randn(gh * gw, 1536, generator=_gen(8))
    cos, sin = vision_rope_tables(gh, gw, 16, 10000.0)
    with torch.no_grad():
        want = visual(pixels, grid_thw=_grid(gh, gw)).last_hidden_state
        patch = PatchEmbedPart(hf)(pixels[None])
        pos = interpolated_pos_embed(visual.pos_embed.weight, gh, gw)[None]
        final, *taps = VisionPart(hf, qkv)(patch, pos, cos[None], sin[None])  # type: ignore[arg-type]
    assert_close(final[0], want)
    assert len(taps) == len(TAPS)
    for tap, index in zip(taps, TAPS, strict=True):
        assert_close(tap[0], recorder.values[f"block{index}"])


def test_vision_part_shares_hfs_weights(hf: Any) -> None:
    block = hf.model.visual.blocks[1]
    fused: Any = VisionPart(hf).blocks[1]
    assert fused.qkv is block.attn.qkv and fused.mlp is block.mlp and fused.norm1 is block.norm1
    split: Any = VisionPart(hf, "split").blocks[1]
    qkv = block.attn.qkv.weight
    rows = qkv.shape[0] // 3
    for i, linear in enumerate((split.q, split.k, split.v)):  # views of the fused tensor's row blocks
        assert linear.weight.data_ptr() == qkv[i * rows].data_ptr()


def test_mergers_are_hfs(hf: Any) -> None:
    visual = hf.model.visual
    x = torch.randn(24, 64, generator=_gen(1))
    with torch.no_grad():
        assert_close(MergerPart(hf)(x.view(1, -1, 256))[0], visual.merger(x))
        for k, merger in enumerate(visual.deepstack_merger_list):
            assert_close(DeepStackMergerPart(hf, k)(x.view(1, -1, 256))[0], merger(x))


def test_merger_activations_are_hfs_exact_gelu_and_the_vit_tanh(hf: Any) -> None:
    """The parts run HF's own activation modules: exact GELU in the mergers (HF hard-codes nn.GELU()), the
    config's gelu_pytorch_tanh in the ViT blocks."""
    assert isinstance(MergerPart(hf).act, torch.nn.GELU) and MergerPart(hf).act.approximate == "none"
    assert isinstance(DeepStackMergerPart(hf, 0).act, torch.nn.GELU)
    x = torch.linspace(-3, 3, 50)
    act = hf.model.visual.blocks[0].mlp.act_fn
    assert VisionPart(hf).blocks[0].mlp is hf.model.visual.blocks[0].mlp
    assert torch.equal(act(x), torch.nn.functional.gelu(x, approximate="tanh"))


def test_parts_refuse_bad_indexes(hf: Any) -> None:
    with pytest.raises(ValueError, match="no DeepStack merger 3"):
        DeepStackMergerPart(hf, 3)
    with pytest.raises(ValueError, match="cannot follow"):
        DecoderPart(text_model(hf), 5)
    with pytest.raises(ValueError, match="merge blocks"):
        merge_block_positions(3, 4)


# ---- MRoPE tables ---------------------------------------------------------------------------------------


def test_mrope_tables_are_hfs_interleaved_rotary(hf: Any) -> None:
    t = 40
    positions = torch.randint(0, 300, (3, 1, t), generator=_gen(2))  # t, h and w differ everywhere
    want_cos, want_sin = hf.model.language_model.rotary_emb(torch.zeros(1, t, 48), positions)
    cos, sin = mrope_tables(positions[:, 0].T, TEXT_THETA, 16, SECTION)
    assert torch.equal(cos, want_cos[0]) and torch.equal(sin, want_sin[0])


def test_mrope_tables_are_hfs_at_the_2b_dims() -> None:
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    section = [24, 20, 20]
    cfg = transformers.Qwen3VLTextConfig(
        head_dim=128,
        rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": section},
    )
    t = 30
    positions = torch.randint(0, 5000, (3, 1, t), generator=_gen(3))
    want_cos, want_sin = Qwen3VLTextRotaryEmbedding(cfg)(torch.zeros(1, t, 8), positions)
    cos, sin = mrope_tables(positions[:, 0].T, 5e6, 128, section)
    assert torch.equal(cos, want_cos[0]) and torch.equal(sin, want_sin[0])
    axes = mrope_axes(128, section)
    assert [axes.count(a) for a in (0, 1, 2)] == section and axes[:6] == [0, 1, 2, 0, 1, 2]


def test_mrope_refuses_a_section_not_summing_to_half_the_head() -> None:
    with pytest.raises(ValueError, match="summing to 8"):
        mrope_axes(16, [4, 4, 4])


# ---- the parts chained against HF's whole model ---------------------------------------------------------


def _prompt(grid: tuple[int, int] | None) -> list[int]:
    pads = [] if grid is None else [VISION_START] + [IMAGE] * (grid[0] * grid[1] // 4) + [VISION_END]
    return [5, 17, 101, *pads, 33, 40, 41]


def _record_hf(hf: Any, rec: Recorder) -> None:
    visual, lm = hf.model.visual, hf.model.language_model
    rec.output("patch", visual.patch_embed)
    rec.inputs("block0_in", visual.blocks[0])
    for i, block in enumerate(visual.blocks):
        rec.output(f"block{i}", block)
    rec.output("merger", visual.merger)
    for k, merger in enumerate(visual.deepstack_merger_list):
        rec.output(f"ds{k}", merger)
    rec.inputs("lm", lm)
    rec.output("rotary", lm.rotary_emb)
    for i, layer in enumerate(lm.layers):
        rec.output(f"layer{i}", layer)
    rec.output("lm_out", lm)


def _vision(hf: Any, rec: Recorder, pixels: torch.Tensor, grid: tuple[int, int]) -> list[torch.Tensor]:
    """The vision parts on ``pixels``, each stage checked against what HF's forward recorded; returns the
    merger output and the DeepStack merger outputs ``[N/4, out_hidden]``."""
    visual, vcfg = hf.model.visual, hf.config.vision_config
    gh, gw = grid
    width = vcfg.hidden_size
    patch = PatchEmbedPart(hf)(pixels[None])
    assert_close(patch[0], rec.values["patch"])
    pos = interpolated_pos_embed(visual.pos_embed.weight, gh, gw)[None]
    args, kwargs = rec.values["block0_in"]
    assert_close((patch + pos)[0], args[0])  # HF's block input: patch embedding + position embedding
    cos, sin = vision_rope_tables(gh, gw, width // vcfg.num_heads, vcfg.rope_parameters["rope_theta"])
    want_cos, want_sin = kwargs["position_embeddings"]
    assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)
    final, *taps = VisionPart(hf)(patch, pos, cos[None], sin[None])
    assert_close(final[0], rec.values[f"block{vcfg.depth - 1}"])
    assert len(taps) == len(TAPS)
    for tap, index in zip(taps, TAPS, strict=True):
        assert_close(tap[0], rec.values[f"block{index}"])
    merged = MergerPart(hf)(final.view(1, -1, 4 * width))[0]
    assert_close(merged, rec.values["merger"])
    features = [merged]
    for k, tap in enumerate(taps):
        feature = DeepStackMergerPart(hf, k)(tap.view(1, -1, 4 * width))[0]
        assert_close(feature, rec.values[f"ds{k}"])
        features.append(feature)
    return features


def _tables(rec: Recorder, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """MRoPE tables from the positions HF's text model was called with (the prompt's position counter is
    the runtime's), checked equal to HF's rotary embedding of them. Without images HF passes none and its
    text model counts ``start ..`` on every axis."""
    positions = rec.values["lm"][1]["position_ids"]
    if positions is None:
        positions = torch.arange(start, start + length).expand(3, 1, length)
    elif positions.shape[0] == 4:  # the 1-D text row, then t, h, w
        positions = positions[1:]
    cos, sin = mrope_tables(positions[:, 0].T, TEXT_THETA, 16, SECTION)
    want_cos, want_sin = rec.values["rotary"]
    assert torch.equal(cos, want_cos[0]) and torch.equal(sin, want_sin[0])
    return cos[None], sin[None]


def _layer_outputs(decoder: DecoderPart) -> tuple[list[torch.Tensor], Callable[[], None]]:
    """The outputs of the part's decoder layers (before any DeepStack add, like HF's layer outputs)."""
    got: list[torch.Tensor] = []
    handles = [
        layer.register_forward_hook(lambda _m, _a, out: got.append(out[0][0])) for layer in decoder.layers
    ]

    def unhook() -> None:
        for handle in handles:
            handle.remove()

    return got, unhook


@pytest.mark.parametrize("grid", [(6, 10), (10, 4), None], ids=["landscape", "portrait", "text-only"])
def test_the_parts_chained_equal_hfs_model(hf: Any, recorder: Recorder, grid: tuple[int, int] | None) -> None:
    """Prefill (vision, fused embeddings, DeepStack after LLM layers 0..2, logits) and three greedy decode
    steps through the KV cache, each stage against HF's forward."""
    _record_hf(hf, recorder)
    llm = text_model(hf)
    decoder = DecoderPart(llm, len(TAPS))
    ids = torch.tensor([_prompt(grid)])
    length, hidden_size = ids.shape[1], 48
    image_rows = ids[0] == IMAGE
    hf.model.rope_deltas = None  # HF keeps the last prompt's; a text-only prompt must not reuse it
    with torch.no_grad():
        if grid is None:
            out = hf(input_ids=ids, use_cache=True)
            features: list[torch.Tensor] = []
        else:
            pixels = torch.randn(grid[0] * grid[1], 1536, generator=_gen(4))
            out = hf(
                input_ids=ids,
                pixel_values=pixels,
                image_grid_thw=_grid(*grid),
                mm_token_type_ids=image_rows.to(torch.int32)[None],
                use_cache=True,
            )
            features = _vision(hf, recorder, pixels, grid)

        embeds = EmbedPart(llm)(ids)
        deepstack = [torch.zeros(1, length, hidden_size) for _ in TAPS]
        if features:
            embeds[0, image_rows] = features[0]
            for ds, feature in zip(deepstack, features[1:], strict=True):
                ds[0, image_rows] = feature
        want_embeds = recorder.values["lm"][1]["inputs_embeds"]
        assert torch.equal(embeds[0, ~image_rows], want_embeds[0, ~image_rows])  # text rows: a lookup
        assert_close(embeds, want_embeds)  # the image rows: the merger's output
        cos, sin = _tables(recorder, 0, length)
        layers, unhook = _layer_outputs(decoder)
        hidden, cache = decoder.step(embeds, causal_mask(0, length), cos, sin, deepstack, KVCache())
        unhook()
        for i, got in enumerate(layers):
            assert_close(got, recorder.values[f"layer{i}"][0])
        assert_close(hidden, recorder.values["lm_out"].last_hidden_state)
        assert torch.equal(hidden, decoder(embeds, causal_mask(0, length), cos, sin, *deepstack))
        logits = LMHeadPart(llm)(hidden)
        assert_close(logits, out.logits)

        hf_cache = out.cache
        for step in range(3):
            token = torch.tensor([[int(out.logits[0, -1].argmax())]])
            out = hf(input_ids=token, cache=hf_cache, use_cache=True)
            hf_cache = out.cache
            cos, sin = _tables(recorder, length + step, 1)
            zeros = [torch.zeros(1, 1, hidden_size) for _ in TAPS]  # decode steps carry no DeepStack rows
            mask = causal_mask(length + step, 1)
            hidden, cache = decoder.step(EmbedPart(llm)(token), mask, cos, sin, zeros, cache)
            assert cache.length == length + step + 1
            assert_close(LMHeadPart(llm)(hidden), out.logits)


def test_a_config_in_the_457_style_gives_the_same_parts(hf: Any) -> None:
    """The 2B was saved by transformers 4.57 (``rope_scaling`` with the section, ``rope_theta`` beside it);
    HF 5.24 reads that into ``rope_parameters``, which the parts read: the same LLM numbers and tables."""
    raw = _config().to_dict()
    text = raw["text_config"]
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope.pop("rope_theta")
    text["rope_scaling"] = rope
    old = transformers.Qwen3VLForConditionalGeneration(transformers.Qwen3VLConfig.from_dict(raw)).eval()
    assert text_config(old) == text_config(hf)
    (new_decoder,) = (s for s in part_specs(hf) if s.name == "decoder")
    (old_decoder,) = (s for s in part_specs(old) if s.name == "decoder")
    for a, b in zip(new_decoder.inputs[1:4], old_decoder.inputs[1:4], strict=True):  # mask, cos, sin
        assert torch.equal(a, b)


def test_text_model_shares_hfs_parameters(hf: Any) -> None:
    llm = text_model(hf)
    lm = hf.model.language_model
    assert llm.model.embed_tokens.weight is lm.embed_tokens.weight
    assert llm.get_parameter("model.layers.2.self_attn.k_norm.weight") is lm.layers[2].self_attn.k_norm.weight
    assert llm.lm_head is None and LMHeadPart(llm).lm_head.weight is hf.lm_head.weight  # tied


# ---- pnnx export (slow) -----------------------------------------------------------------------------------

EXPORT_GRID = (4, 6)  # 24 patches (pnnx's second shape: 27); the checks run at 8 x 4
EXPORT_LENGTH = 8


def _specs(hf: Any) -> list[Any]:
    """The parts as ``part_specs`` gives them, and the ViT's split-qkv form beside its fused one."""
    specs = part_specs(hf, EXPORT_GRID, EXPORT_LENGTH)
    (split,) = (
        dataclasses.replace(s, name="vision_split") for s in part_specs(hf, qkv="split") if s.name == "vision"
    )
    assert [s.name for s in specs] == [
        "patch_embed",
        "vision",
        "merger",
        *(f"deepstack_merger{k}" for k in range(len(TAPS))),
        "embed",
        "decoder",
        "lm_head",
    ]
    return [*specs, split]


@pytest.fixture(scope="module")
def exported(hf: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("pnnx")
    from graphsurgeon.export.pnnx_run import export_all

    return export_all(_specs(hf), Path(tmp_path_factory.mktemp("qwen3_vl_parts")))


def _graph(exported: dict[str, Any], name: str) -> Any:
    from graphsurgeon.formats.param_text import read_param_text

    return read_param_text(exported[name].param)


def _types(graph: Any) -> dict[str, list[Any]]:
    by_type: dict[str, list[Any]] = {}
    for layer in graph.layers:
        by_type.setdefault(layer.type, []).append(layer)
    return by_type


def _run(exported: dict[str, Any], name: str, feeds: dict[str, torch.Tensor], outs: list[str]) -> Any:
    from graphsurgeon.verify.ncnn_fp32 import fp32_net, run

    net = fp32_net(exported[name].param, exported[name].bin)
    return run(net, {k: v.numpy() for k, v in feeds.items()}, outs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vision", "vision_split"])
def test_the_vit_exports_to_layernorm_gemms_rotary_sdpa_and_tanh_gelu(
    exported: dict[str, Any], name: str
) -> None:
    by_type = _types(_graph(exported, name))
    depth = 4
    assert [layer.name for layer in by_type["Input"]] == ["in0", "in1", "in2", "in3"]
    assert not {"MultiHeadAttention", "Crop", "ExpandDims", "Tile"} & set(by_type)
    gelus = by_type["GELU"]
    assert len(gelus) == depth and all(g.get("fast_gelu") == 1 for g in gelus)
    norms = by_type["LayerNorm"]
    assert len(norms) == 2 * depth
    assert all(n.get("affine_size") == 64 and n.get("eps") == pytest.approx(1e-6) for n in norms)
    sdpa = by_type["SDPA"]
    assert len(sdpa) == depth and all(s.get("attn_mask") == 0 and len(s.inputs) == 3 for s in sdpa)
    rope = by_type["RotaryEmbed"]
    assert len(rope) == 2 * depth and all(r.get("interleaved") == 0 for r in rope)
    gemms = sorted((g.get("constantN"), g.get("constantK")) for g in by_type["Gemm"])
    mlp = [(128, 64), (64, 128)]
    if name == "vision":  # one qkv Gemm, its output columns sliced into q, k, v
        assert gemms == sorted([(192, 64), (64, 64), *mlp] * depth)
        slices = by_type["Slice"]
        assert len(slices) == depth and all(len(x.outputs) == 3 for x in slices)
        assert all(x.get("axis") == 1 and list(x.get("slices")) == [64, 64, -233] for x in slices)
    else:  # q, k, v, proj
        assert gemms == sorted([(64, 64)] * 4 * depth + mlp * depth) and "Slice" not in by_type


@pytest.mark.slow
def test_the_mergers_export_to_layernorm_gemms_and_exact_gelu(exported: dict[str, Any]) -> None:
    for name, width in [("merger", 64), *((f"deepstack_merger{k}", 256) for k in range(len(TAPS)))]:
        by_type = _types(_graph(exported, name))
        assert [g.get("fast_gelu") for g in by_type["GELU"]] == [0], name
        assert [n.get("affine_size") for n in by_type["LayerNorm"]] == [width], name
        assert len(by_type["Gemm"]) == 2, name


@pytest.mark.slow
def test_the_decoder_exports_with_one_deepstack_add_per_feature(exported: dict[str, Any]) -> None:
    graph = _graph(exported, "decoder")
    by_type = _types(graph)
    n = len(TAPS)
    assert [layer.name for layer in by_type["Input"]] == [f"in{i}" for i in range(4 + n)]
    assert len(by_type["SDPA"]) == 4 and all(s.get("attn_mask") == 1 for s in by_type["SDPA"])
    assert len(by_type["RotaryEmbed"]) == 8
    assert not {"Tile", "ExpandDims", "MultiHeadAttention"} & set(by_type)
    for k in range(n):
        (reader,) = graph.blob(f"in{4 + k}").consumers
        assert reader.type == "BinaryOp" and reader.get("op_type") == 0  # hidden + ds_k


@pytest.mark.slow
def test_the_exported_vision_parts_equal_torch_in_ncnn(hf: Any, exported: dict[str, Any]) -> None:
    gh, gw = 8, 4
    n = gh * gw
    gen = _gen(6)
    pixels = torch.randn(1, n, 1536, generator=gen)
    with torch.no_grad():
        patch = PatchEmbedPart(hf)(pixels)
        got = _run(exported, "patch_embed", {"in0": pixels[0]}, ["out0"])["out0"]
        assert_close(torch.from_numpy(got).reshape(1, n, 64), patch)
        pos = interpolated_pos_embed(hf.model.visual.pos_embed.weight, gh, gw)[None]
        cos, sin = vision_rope_tables(gh, gw, 16, 10000.0)
        want = VisionPart(hf)(patch, pos, cos[None], sin[None])
        feeds = {"in0": patch[0], "in1": pos[0], "in2": cos, "in3": sin}
        outs = [f"out{i}" for i in range(len(want))]
        for graph in ("vision", "vision_split"):
            got_vit = _run(exported, graph, feeds, outs)
            for i, name in enumerate(outs):
                assert_close(torch.from_numpy(got_vit[name]), want[i][0])
        grouped = want[0].view(1, -1, 256)
        assert_close(
            torch.from_numpy(_run(exported, "merger", {"in0": grouped[0]}, ["out0"])["out0"]),
            MergerPart(hf)(grouped)[0],
        )
        for k in range(len(TAPS)):
            grouped = want[1 + k].view(1, -1, 256)
            got_ds = _run(exported, f"deepstack_merger{k}", {"in0": grouped[0]}, ["out0"])["out0"]
            assert_close(torch.from_numpy(got_ds), DeepStackMergerPart(hf, k)(grouped)[0])


@pytest.mark.slow
@pytest.mark.parametrize("t", [1, 5], ids=["decode-step", "prefill"])
def test_the_exported_decoder_equals_torch_in_ncnn(hf: Any, exported: dict[str, Any], t: int) -> None:
    gen = _gen(7 + t)
    llm = text_model(hf)
    hidden = torch.randn(1, t, 48, generator=gen)
    positions = torch.randint(0, 40, (t, 3), generator=gen)
    cos, sin = mrope_tables(positions, TEXT_THETA, 16, SECTION)
    deepstack = [torch.randn(1, t, 48, generator=gen) for _ in TAPS]
    mask = causal_mask(0, t)
    with torch.no_grad():
        want = DecoderPart(llm, len(TAPS))(hidden, mask, cos[None], sin[None], *deepstack)[0]
    feeds = {"in0": hidden[0], "in1": mask[0], "in2": cos, "in3": sin}
    feeds.update({f"in{4 + k}": ds[0] for k, ds in enumerate(deepstack)})
    assert_close(torch.from_numpy(_run(exported, "decoder", feeds, ["out0"])["out0"]), want)


@pytest.mark.slow
def test_every_exported_weight_is_a_checkpoint_tensor(
    hf: Any, exported: dict[str, Any], tmp_path: Path
) -> None:
    """gsurg's weight pairing (what a conversion's weight maps are made of) finds every weight of every
    part in the checkpoint HF saves, reshaped at most, or as one of the row ranges of a fused tensor: the
    split qkv's q, k and v are the thirds of the checkpoint's qkv weight and bias."""
    from graphsurgeon.formats.model_bin import read_bin
    from graphsurgeon.formats.param_text import read_param_text
    from graphsurgeon.formats.safetensors import Checkpoint
    from graphsurgeon.pipeline.weight_pairing import WeightMatcher

    hf.save_pretrained(str(tmp_path))
    ckpt = Checkpoint(str(tmp_path / "model.safetensors"))
    try:
        matcher = WeightMatcher(ckpt)
        paired: dict[str, set[str]] = {}
        for name, model in exported.items():
            graph = read_param_text(model.param)
            records = read_bin(graph, model.bin)
            pairs = matcher.pair_graph(graph, records, model.bin.name)
            if name == "vision_split":
                qkv = "model.visual.blocks.0.attn.qkv.weight"
                parts = sorted(p.rows for p in pairs if p.tensor == qkv and p.rows is not None)
                width = parts[0][1] if parts else 0
                assert parts == [(0, width), (width, 2 * width), (2 * width, 3 * width)]
            assert len(pairs) == len(records) > 0, name
            paired[name] = {p.tensor for p in pairs}
    finally:
        ckpt.close()
    assert "model.visual.patch_embed.proj.weight" in paired["patch_embed"]
    assert "model.visual.blocks.3.attn.qkv.weight" in paired["vision"]
    assert paired["lm_head"] == {"model.language_model.embed_tokens.weight"}  # tied
