"""The MiniCPM-V-2 fp32 reference (graphsurgeon/models/minicpm_v2/model.py) against the OFFICIAL code's
outputs on the embedded tiny checkpoint (tests/goldens/minicpm_v2/model.json, made by
make_model_goldens.py in a scratch venv with transformers 4.40.2, timm 0.9.10 and the official modeling
files at 1878519; never by the code under test).

Checked per stage: the LLM's logits for fixed ids; for one sliced image (an overview and 2x2 slices) and one
unsliced: the prompt text, the pixels (sha256 against the official ``transform``), the ViT output (norm and
a head), the resampler output (every value), the fused embeddings (row norms and a head), the last prompt
logits, and the greedy ids of ``chat``. Tolerance 1e-4 absolute (fp32 against fp32, eager; the figures
found are about 3e-6, see the family README). Also: each muP constant changes the logits far beyond that
tolerance, so the goldens would catch a port that dropped one; mismatched image spans are one error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import Tensor  # noqa: E402

from graphsurgeon.models.minicpm_v2.llm import KVCache  # noqa: E402
from graphsurgeon.models.minicpm_v2.make_tiny import SHIPPED  # noqa: E402
from graphsurgeon.models.minicpm_v2.model import MiniCPMInputError, MiniCPMV2, load_model  # noqa: E402
from graphsurgeon.models.minicpm_v2.processor import preprocess  # noqa: E402
from graphsurgeon.models.minicpm_v2.prompt import chat_prompt  # noqa: E402
from tests.goldens.minicpm_v2.images import make_image, specs  # noqa: E402

GOLDENS = Path(__file__).resolve().parent / "goldens" / "minicpm_v2" / "model.json"
TOL = 1e-4


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GOLDENS.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def model() -> MiniCPMV2:
    return load_model(SHIPPED)


def _max_abs(a: Tensor, b: list[Any]) -> float:
    return float(np.abs(a.double().numpy() - np.asarray(b, dtype=np.float64).reshape(a.shape)).max())


def test_the_goldens_are_of_the_shipped_checkpoint(golden: dict[str, Any]) -> None:
    for name, digest in golden["tiny_sha256"].items():
        assert hashlib.sha256((SHIPPED / name).read_bytes()).hexdigest() == digest, name
    assert golden["versions"]["transformers"].startswith("4.40") and golden["versions"]["timm"] == "0.9.10"
    eager = golden["eager"]
    assert eager["attn_implementation"] == "eager" and eager["tokenizer_class"] == "LlamaTokenizerWrapper"


def _llm_logits(model: MiniCPMV2, ids: list[int]) -> Tensor:
    with torch.no_grad():
        hidden, _ = model.llm.model(model.llm.embed_text(torch.tensor(ids)), KVCache())
        return model.llm.logits(hidden)


def test_llm_logits_match_the_official_code(model: MiniCPMV2, golden: dict[str, Any]) -> None:
    llm = golden["eager"]["llm"]
    assert _max_abs(_llm_logits(model, llm["input_ids"]), llm["logits"]) < TOL


@pytest.mark.parametrize("index", [0, 1])
def test_chat_matches_the_official_code_stage_by_stage(
    model: MiniCPMV2, golden: dict[str, Any], index: int
) -> None:
    chat = golden["eager"]["chats"][index]
    spec = {s["name"]: s for s in specs()}[chat["image"]]
    cfg = model.config
    processed = preprocess(make_image(spec), cfg.slicing, cfg.resampler.query_num)
    assert chat_prompt([("user", "What is in the image?")], processed.placeholder) == chat["prompt"]
    assert len(processed.pixel_values) == len(chat["images"])
    for pixels, want in zip(processed.pixel_values, chat["images"], strict=True):
        assert hashlib.sha256(pixels.astype("<f4").tobytes()).hexdigest() == want["pixels_sha256"]

    trace = model.generate(chat["input_ids"], processed.pixel_values, max_new_tokens=len(chat["tokens"]))
    for stage, want in zip(trace.images, chat["images"], strict=True):
        assert list(stage.grid) == want["grid"]
        vision = stage.vision.double()
        assert abs(float(vision.norm()) - want["vision"]["norm"]) < TOL * want["vision"]["norm"]
        assert _max_abs(stage.vision[:2], want["vision"]["head"]) < TOL
        assert _max_abs(stage.resampler, want["resampler"]) < TOL
    embeds = chat["embeddings"]
    assert _max_abs(trace.embeddings.norm(dim=-1), embeds["row_norms"]) < TOL
    assert _max_abs(trace.embeddings[:, :4], embeds["head"]) < TOL
    assert _max_abs(trace.prefill_logits[-1], chat["last_logits"]) < TOL
    assert trace.tokens == chat["tokens"]
    assert len(set(trace.tokens)) > 3  # the greedy output depends on the input, not one repeated token


def _variant(model: MiniCPMV2, **text: float) -> MiniCPMV2:
    changed: Any = text  # float settings of TextConfig
    cfg = dataclasses.replace(model.config, text=dataclasses.replace(model.config.text, **changed))
    other = MiniCPMV2(cfg, model.image_ids, device="meta")
    other.load_state_dict(model.state_dict(), strict=True, assign=True)
    return other.eval()


@pytest.mark.parametrize("change", [{"scale_emb": 1.0}, {"scale_depth": 2**0.5}, {"dim_model_base": 128.0}])
def test_each_mup_constant_matters(
    model: MiniCPMV2, golden: dict[str, Any], change: dict[str, float]
) -> None:
    """Dropping one constant (x12 -> x1, the residual factor -> 1, the logit divisor -> 1) moves the
    logits far beyond the goldens' tolerance."""
    llm = golden["eager"]["llm"]
    assert _max_abs(_llm_logits(_variant(model, **change), llm["input_ids"]), llm["logits"]) > 100 * TOL


def test_image_spans_must_match_the_images(model: MiniCPMV2, golden: dict[str, Any]) -> None:
    chat = golden["eager"]["chats"][1]
    spec = {s["name"]: s for s in specs()}[chat["image"]]
    pixels = preprocess(make_image(spec), model.config.slicing, 4).pixel_values
    with pytest.raises(MiniCPMInputError, match="1 image spans but 2 images"):
        model.generate(chat["input_ids"], pixels * 2, 1)
    start, end = model.image_ids
    with pytest.raises(MiniCPMInputError, match="holds 3 rows"):
        model.generate([1, start, 0, 0, 0, end], pixels, 1)
    with pytest.raises(MiniCPMInputError, match="do not pair up"):
        model.generate([1, start, 0, 0, 0, 0], pixels, 1)
