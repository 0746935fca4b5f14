"""The Penguin-VL reference (graphsurgeon/models/penguin_vl) against independent oracles.

* The LLM half equals ``transformers.Qwen3ForCausalLM`` loaded from the same LLM tensors (prefill hidden
  states and logits from the fused embeddings, every cached decode step's logits, and the greedy tokens
  of its ``generate``), tied and untied, fp32 and bf16.
* The vision half equals a float64 numpy computation written here from the formulas (patch embed as a sum
  over channel, row, column; RMSNorm; per-element 2-D RoPE ``y[i] = x[i]cos(r f_i) - x[i+h]sin(r f_i)``,
  ``y[i+h] = x[i+h]cos(c f_i) + x[i]sin(c f_i)``; softmax attention with query head ``h`` reading kv head
  ``h // group``; SwiGLU; projector with an erf GELU), not through the model's code.
* The export sub-modules compute the same numbers, the fused and the explicit RoPE alike.
* Greedy generation on the embedded tiny checkpoint runs >= 32 tokens, the same on every run, different
  for different prompts and images, and stops at EOS.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("PIL")
pytest.importorskip("tokenizers")

from safetensors.torch import save_file  # noqa: E402

from graphsurgeon.models.penguin_vl.config import load_files  # noqa: E402
from graphsurgeon.models.penguin_vl.make_tiny import SHIPPED, make_tiny  # noqa: E402
from graphsurgeon.models.penguin_vl.model import PenguinInputError, PenguinVL, load_model  # noqa: E402
from graphsurgeon.models.penguin_vl.parts import (  # noqa: E402
    VisionEmbedPatch,
    VisionEncoder,
    VisionProjector,
    vision_rope_inputs,
)
from graphsurgeon.models.penguin_vl.processor import (  # noqa: E402
    PenguinTokenizer,
    ProcessedImage,
    load_and_preprocess,
    prompt_ids,
)
from tests.conftest import CORPUS  # noqa: E402

IMAGES = ("desert.jpg", "newspaper.png")
PROMPTS = ("Describe the image.", "What month is printed at the top?", "How many people are in the picture?")


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    """The tiny model is too small to gain from threads; on a shared 2-core machine they cost 5x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny() -> tuple[PenguinVL, PenguinTokenizer, dict[str, ProcessedImage]]:
    files = load_files(SHIPPED)
    images = {name: load_and_preprocess(CORPUS / "images" / name, files.processor) for name in IMAGES}
    return load_model(SHIPPED, files), PenguinTokenizer(files), images


def _image_input(img: ProcessedImage) -> tuple[Any, tuple[int, int]]:
    return torch.from_numpy(img.pixel_values), img.grid


# --- the LLM half against transformers ---------------------------------------------------------------


def _hf_llm(folder: Path, model: PenguinVL, where: Path) -> Any:
    """A transformers Qwen3ForCausalLM folder holding the checkpoint's LLM tensors (names unchanged)."""
    transformers = pytest.importorskip("transformers")
    raw = json.loads((folder / "config.json").read_text())
    keep = (
        *("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"),
        *("num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "vocab_size"),
        *("tie_word_embeddings", "max_position_embeddings"),
    )
    cfg = {k: raw[k] for k in keep} | {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}
    where.mkdir()
    (where / "config.json").write_text(json.dumps(cfg))
    state = {k: v.contiguous() for k, v in model.state_dict().items() if not k.startswith("model.vision")}
    save_file(state, str(where / "model.safetensors"), metadata={"format": "pt"})
    hf = transformers.Qwen3ForCausalLM.from_pretrained(
        str(where), dtype=torch.float32, attn_implementation="eager", local_files_only=True
    )
    return hf.eval()


@pytest.mark.parametrize(
    "variant", [{}, {"tied": False, "dtype": "bf16", "shards": 3}], ids=["tied-fp32", "untied-bf16-sharded"]
)
def test_llm_half_equals_transformers_qwen3(tmp_path: Path, variant: dict[str, Any], tiny: Any) -> None:
    _, tokenizer, images = tiny
    folder = make_tiny(tmp_path / "ckpt", **variant) if variant else SHIPPED
    model = load_model(folder)
    hf = _hf_llm(folder, model, tmp_path / "hf")
    eos = model.config.eos_token_ids[0]
    for img in (images["desert.jpg"], None):
        ids = prompt_ids(tokenizer, PROMPTS[0], [img] if img else [])
        trace = model.generate(ids, [_image_input(img)] if img else [], max_new_tokens=12)
        with torch.no_grad():
            out = hf(inputs_embeds=trace.embeddings[None], output_hidden_states=True)
            torch.testing.assert_close(out.hidden_states[-1][0], trace.prefill_hidden, rtol=1e-4, atol=1e-4)
            # logits are ~10 in size; eager attention and SDPA sum in different orders
            torch.testing.assert_close(out.logits[0, -1], trace.prefill_logits, rtol=1e-4, atol=5e-4)
            gen = hf.generate(
                inputs_embeds=trace.embeddings[None],
                max_new_tokens=12,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=eos,
                output_logits=True,
                return_dict_in_generate=True,
            )
        assert gen.sequences[0].tolist() == trace.tokens
        assert len(gen.logits) == len(trace.decode_logits) + 1
        for step, ours in enumerate(trace.decode_logits, start=1):
            torch.testing.assert_close(gen.logits[step][0], ours, rtol=1e-4, atol=5e-4)


# --- the vision half against numpy -------------------------------------------------------------------


def _np(t: Any) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def _rope_2d(x: np.ndarray, grid_w: int, theta: float) -> np.ndarray:
    """x ``[N, heads, D]``; patch p at row p // grid_w, column p % grid_w; per element, as the fact sheet."""
    n, _, d = x.shape
    half = d // 2
    y = np.empty_like(x)
    for p in range(n):
        r, c = p // grid_w, p % grid_w
        for i in range(half):
            f = theta ** (-2.0 * i / d)
            a, b = r * f, c * f
            y[p, :, i] = x[p, :, i] * math.cos(a) - x[p, :, i + half] * math.sin(a)
            y[p, :, i + half] = x[p, :, i + half] * math.cos(b) + x[p, :, i] * math.sin(b)
    return y


def _vision_layer(x: np.ndarray, sd: dict[str, np.ndarray], prefix: str, cfg: Any, grid_w: int) -> np.ndarray:
    n, heads, kv, d = x.shape[0], cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    eps = cfg.rms_norm_eps
    a = _rms(x, sd[prefix + "input_layernorm.weight"], eps)
    q = _rms(
        (a @ sd[prefix + "self_attn.q_proj.weight"].T).reshape(n, heads, d),
        sd[prefix + "self_attn.q_norm.weight"],
        eps,
    )
    k = _rms(
        (a @ sd[prefix + "self_attn.k_proj.weight"].T).reshape(n, kv, d),
        sd[prefix + "self_attn.k_norm.weight"],
        eps,
    )
    v = (a @ sd[prefix + "self_attn.v_proj.weight"].T).reshape(n, kv, d)
    q, k = _rope_2d(q, grid_w, cfg.rope_theta), _rope_2d(k, grid_w, cfg.rope_theta)
    o = np.empty((n, heads, d))
    for h in range(heads):
        g = h // (heads // kv)
        scores = q[:, h, :] @ k[:, g, :].T / math.sqrt(d)  # every patch sees every patch
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        o[:, h, :] = (p / p.sum(axis=1, keepdims=True)) @ v[:, g, :]
    x = x + o.reshape(n, heads * d) @ sd[prefix + "self_attn.o_proj.weight"].T
    h2 = _rms(x, sd[prefix + "post_attention_layernorm.weight"], eps)
    gate, up = h2 @ sd[prefix + "mlp.gate_proj.weight"].T, h2 @ sd[prefix + "mlp.up_proj.weight"].T
    return x + (gate / (1.0 + np.exp(-gate)) * up) @ sd[prefix + "mlp.down_proj.weight"].T


def _synthetic(grid: tuple[int, int], cfg: Any, seed: int) -> ProcessedImage:
    n = grid[0] * grid[1]
    pixels = np.random.default_rng(seed).uniform(-1, 1, (n, cfg.patch_dim)).astype(np.float32)
    return ProcessedImage(pixels, grid, (grid[0] * cfg.patch_size, grid[1] * cfg.patch_size))


@pytest.mark.parametrize("grid", [(3, 5), (4, 2)])
def test_vision_half_equals_the_formulas_in_numpy(tiny: Any, grid: tuple[int, int]) -> None:
    model = tiny[0]
    cfg = model.config.vision
    img = _synthetic(grid, cfg, seed=grid[0])
    stages = model.encode_image(*_image_input(img))
    sd = {k: _np(v) for k, v in model.state_dict().items()}
    vp = "model.vision_encoder.vision_encoder."
    kernel = sd[vp + "embeddings.patch_embedding.weight"]  # [Cv, C, p, p]
    pixels = img.pixel_values.astype(np.float64).reshape(-1, cfg.num_channels, cfg.patch_size, cfg.patch_size)
    patch = np.einsum("nckl,ockl->no", pixels, kernel) + sd[vp + "embeddings.patch_embedding.bias"]
    np.testing.assert_allclose(_np(stages.patch_embed), patch, rtol=1e-5, atol=1e-5)
    x = patch
    for i in range(cfg.num_hidden_layers):
        x = _vision_layer(x, sd, f"{vp}encoder.layers.{i}.", cfg, grid[1])
        scale = np.abs(x).max()
        np.testing.assert_allclose(_np(stages.layers[i]), x, rtol=0, atol=1e-4 * scale, err_msg=f"layer {i}")
    x = _rms(x, sd[vp + "encoder.norm.weight"], cfg.rms_norm_eps)
    np.testing.assert_allclose(_np(stages.encoder), x, rtol=0, atol=1e-4 * np.abs(x).max())
    pp = "model.vision_projector.readout."
    hidden = x @ sd[pp + "0.weight"].T + sd[pp + "0.bias"]
    gelu = np.vectorize(lambda z: 0.5 * z * (1.0 + math.erf(z / math.sqrt(2.0))))(hidden)
    projected = gelu @ sd[pp + "2.weight"].T + sd[pp + "2.bias"]
    np.testing.assert_allclose(_np(stages.projector), projected, rtol=0, atol=1e-4 * np.abs(projected).max())


@pytest.mark.parametrize("rope", ["fused", "explicit"])
def test_export_parts_compute_the_reference_stages(tiny: Any, rope: str) -> None:
    model, _, images = tiny
    img = images["newspaper.png"]
    stages = model.encode_image(*_image_input(img))
    with torch.no_grad():
        patch = VisionEmbedPatch(model)(torch.from_numpy(img.pixel_values)[None])
        cos, sin = vision_rope_inputs(model, img.grid)
        assert cos.shape == (1, img.tokens, model.config.vision.head_dim)
        encoded = VisionEncoder(model, rope)(patch, cos, sin)  # type: ignore[arg-type]
        projected = VisionProjector(model)(encoded)
    # fp32 sums in another order (a Linear for the Conv2d, another SDPA call), sharpened by attention
    torch.testing.assert_close(patch[0], stages.patch_embed, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(encoded[0], stages.encoder, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(projected[0], stages.projector, rtol=1e-4, atol=1e-4)


def test_the_column_angle_matters(tiny: Any) -> None:
    """The second half of each table is the column angle: a table whose halves are both the row angle
    (what a first-half-only RotaryEmbed computes) gives different encoder outputs on a non-square grid."""
    model, _, images = tiny
    img = images["desert.jpg"]
    cos, sin = vision_rope_inputs(model, img.grid)
    half = cos.shape[-1] // 2
    row_cos = torch.cat((cos[..., :half], cos[..., :half]), dim=-1)
    row_sin = torch.cat((sin[..., :half], sin[..., :half]), dim=-1)
    with torch.no_grad():
        patch = VisionEmbedPatch(model)(torch.from_numpy(img.pixel_values)[None])
        right = VisionEncoder(model)(patch, cos, sin)
        wrong = VisionEncoder(model)(patch, row_cos, row_sin)
    assert float((right - wrong).abs().max()) > 1e-2


# --- generation --------------------------------------------------------------------------------------


def test_greedy_generation_is_long_deterministic_and_input_dependent(tiny: Any) -> None:
    model, tokenizer, images = tiny
    outputs: dict[tuple[str, str], list[int]] = {}
    for name in (*IMAGES, None):
        img = images[name] if name else None
        for prompt in PROMPTS:
            ids = prompt_ids(tokenizer, prompt, [img] if img else [])
            inputs = [_image_input(img)] if img else []
            first = model.generate(ids, inputs, max_new_tokens=32)
            again = model.generate(ids, inputs, max_new_tokens=32)
            assert first.tokens == again.tokens
            assert len(first.tokens) == 32 and not set(first.tokens) & set(model.config.eos_token_ids)
            assert len(set(first.tokens)) >= 8, first.tokens  # not one repeated token
            outputs[(name or "text", prompt)] = first.tokens
    assert len({tuple(t) for t in outputs.values()}) == len(outputs)  # every prompt x image differs


def test_generation_stops_at_eos_and_keeps_it(tiny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer, _ = tiny
    eos = model.config.eos_token_ids[0]
    real = model.logits
    calls = []

    def forced(hidden: Any) -> Any:
        logits = real(hidden)
        calls.append(1)
        if len(calls) == 3:
            logits = torch.zeros_like(logits)
            logits[eos] = 1.0
        return logits

    monkeypatch.setattr(model, "logits", forced)
    trace = model.generate(prompt_ids(tokenizer, PROMPTS[1]), max_new_tokens=32)
    assert len(trace.tokens) == 3 and trace.tokens[-1] == eos and eos not in trace.tokens[:-1]
    assert len(trace.decode_logits) == 2


def test_image_features_must_fill_the_image_tokens(tiny: Any) -> None:
    model, tokenizer, images = tiny
    img = images["desert.jpg"]
    ids = prompt_ids(tokenizer, PROMPTS[0], [img])
    with pytest.raises(
        PenguinInputError, match=r"has \d+ image tokens .* but the images give \d+ feature rows"
    ):
        model.generate([*ids, model.config.image_token_index], [_image_input(img)])
    with pytest.raises(PenguinInputError, match="do not fit a 2x2 grid"):
        model.encode_image(torch.from_numpy(img.pixel_values), (2, 2))


def test_the_command_line_runner(tiny: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from graphsurgeon.models.penguin_vl.generate import main

    model, tokenizer, images = tiny
    image = CORPUS / "images" / "desert.jpg"
    assert main(["--image", str(image), "--format", "json", PROMPTS[2]]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = model.generate(
        prompt_ids(tokenizer, PROMPTS[2], [images["desert.jpg"]]), [_image_input(images["desert.jpg"])]
    )
    assert printed["tokens"] == expected.tokens and printed["grids"] == [list(images["desert.jpg"].grid)]
    assert printed["text"] == tokenizer.decode(expected.tokens)

    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n")
    assert main(["--image", str(broken), PROMPTS[0]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gsurg: error: {broken}: ") and err.count("\n") == 1
