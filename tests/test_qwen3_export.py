"""The Qwen3 example's three sub-models exported through graphsurgeon.export and run in the ncnn wheel (exact
fp32 options) against the torch sub-modules, and the structure pnnx 20261020 gives the decoder (the facts
graphsurgeon/models/common/qwen3_llm_model.py's docstring states, which the rule file llm-kv-cache.yaml builds
on).

The source is loaded as a rule file would load it: ``../graphsurgeon/models/common/llm_export.py:build``
relative to ``rules/``. One export per checkpoint (tied and untied), ~3 s each.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pnnx")

from graphsurgeon.export.pnnx_run import ExportedModel, export_all  # noqa: E402
from graphsurgeon.export.spec import call_source, load_source  # noqa: E402
from graphsurgeon.formats.param_text import read_param_text  # noqa: E402
from graphsurgeon.ir.graph import Blob, Layer  # noqa: E402
from graphsurgeon.models.common.qwen3_llm_model import (  # noqa: E402
    DecoderPart,
    EmbedPart,
    LMHeadPart,
    causal_mask,
    load_model,
    rope_tables,
)
from graphsurgeon.models.qwen3_llm.make_tiny import make_tiny  # noqa: E402
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run  # noqa: E402
from tests.conftest import REPO  # noqa: E402

SOURCE = "../graphsurgeon/models/common/llm_export.py:build"
LENGTHS = (3, 13)  # neither the example length 8 nor pnnx's second length 11


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def exported(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, dict[str, ExportedModel]]]:
    root = tmp_path_factory.mktemp("qwen3")
    folder = make_tiny(root / "ckpt", tied=request.param, layers=2)
    specs = call_source(load_source(SOURCE, REPO / "rules"), SOURCE, {}, folder)
    assert [s.name for s in specs] == ["embed", "decoder", "lm_head"]
    yield load_model(folder), export_all(specs, root / "work")


def _net(model: ExportedModel) -> Any:
    return fp32_net(model.param, model.bin)


@pytest.mark.parametrize("t", LENGTHS)
def test_the_decoder_without_cache_equals_torch(
    exported: tuple[Any, dict[str, ExportedModel]], t: int
) -> None:
    model, models = exported
    cfg = model.config
    hidden = 0.5 * torch.randn(1, t, cfg.hidden_size, generator=torch.Generator().manual_seed(t))
    mask, (cos, sin) = causal_mask(0, t), rope_tables(cfg, 0, t)
    with torch.no_grad():
        want = DecoderPart(model)(hidden, mask, cos, sin)[0].numpy()
    feeds = {"in0": hidden[0].numpy(), "in1": mask[0].numpy(), "in2": cos[0].numpy(), "in3": sin[0].numpy()}
    got = run(_net(models["decoder"]), feeds, ["out0"])["out0"]
    assert got.shape == want.shape == (t, cfg.hidden_size)
    scale = float(np.abs(want).max())
    assert scale > 1.0 and float(np.abs(got - want).max()) <= 1e-5 * scale


@pytest.mark.parametrize("t", LENGTHS)
def test_embed_equals_torch(exported: tuple[Any, dict[str, ExportedModel]], t: int) -> None:
    model, models = exported
    ids = torch.randint(0, model.config.vocab_size, (1, t), generator=torch.Generator().manual_seed(t))
    with torch.no_grad():
        want = EmbedPart(model)(ids)[0].numpy()
    # Embed reads int32 ids: the Mat holds their bits (pnnx made the int64 input an int32 one)
    got = run(_net(models["embed"]), {"in0": ids[0].numpy().astype(np.int32).view(np.float32)}, ["out0"])[
        "out0"
    ]
    assert got.shape == want.shape and np.array_equal(got, want)  # a row copy: bit-exact


@pytest.mark.parametrize("t", LENGTHS)
def test_lm_head_equals_torch(exported: tuple[Any, dict[str, ExportedModel]], t: int) -> None:
    model, models = exported
    cfg = model.config
    hidden = torch.randn(1, t, cfg.hidden_size, generator=torch.Generator().manual_seed(t))
    with torch.no_grad():
        want = LMHeadPart(model)(hidden).numpy()
    got = run(_net(models["lm_head"]), {"in0": hidden[0].numpy()}, ["out0"])["out0"]
    assert got.shape == want.shape == (1, t, cfg.vocab_size)  # pnnx's Reshapes around the Gemm keep a c=1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


# ---- what pnnx made of the decoder ------------------------------------------------------------------------


def _origin(blob: Blob) -> Layer:
    """The layer whose output a blob carries, through Splits (they share data)."""
    layer = blob.producer
    assert layer is not None
    while layer.type == "Split":
        layer = layer.inputs[0].producer
        assert layer is not None
    return layer


def test_the_decoder_exports_to_native_gqa_sdpa_rotary_and_rmsnorm(
    exported: tuple[Any, dict[str, ExportedModel]],
) -> None:
    model, models = exported
    cfg = model.config
    graph = read_param_text(models["decoder"].param)
    by_type: dict[str, list[Layer]] = {}
    for layer in graph.layers:
        by_type.setdefault(layer.type, []).append(layer)
    inputs = [layer.name for layer in by_type["Input"]]
    assert inputs == ["in0", "in1", "in2", "in3"]  # hidden, mask, cos, sin
    n = cfg.num_hidden_layers
    assert not {"Tile", "ExpandDims", "MultiHeadAttention"} & set(by_type)  # no head repeat: native GQA
    assert not [t for t in by_type if "." in t]
    sdpa = by_type["SDPA"]
    assert len(sdpa) == n
    for layer in sdpa:
        assert layer.get("attn_mask") == 1 and layer.get("kv_cache") == 0 and len(layer.inputs) == 4
        assert _origin(layer.inputs[3]).name == "in1"  # the mask input, unchanged
    rope = by_type["RotaryEmbed"]
    assert len(rope) == 2 * n  # q and k of every layer
    for layer in rope:
        assert layer.get("interleaved") == 0
        assert (_origin(layer.inputs[1]).name, _origin(layer.inputs[2]).name) == ("in2", "in3")
    norms = by_type["RMSNorm"]
    assert len(norms) == 4 * n + 1  # input, post-attention, q_norm, k_norm per layer; the final norm
    assert all(layer.get("eps") == pytest.approx(cfg.rms_norm_eps, rel=1e-6) for layer in norms)
    assert sorted({layer.get("affine_size") for layer in norms}) == [cfg.head_dim, cfg.hidden_size]
    gemms = by_type["Gemm"]
    assert all(g.get("constantM") == 0 and g.get("constantB") == 1 for g in gemms)  # M follows the length
    h, q, kv, inter = cfg.hidden_size, cfg.q_width, cfg.kv_width, cfg.intermediate_size
    per_layer = [(q, h), (kv, h), (kv, h), (h, q), (inter, h), (inter, h), (h, inter)]  # q k v o gate up down
    assert sorted((g.get("constantN"), g.get("constantK")) for g in gemms) == sorted(per_layer * n)
    assert all(r.get("shape_expr") for r in by_type["Reshape"])  # expressions on the input's dims
    assert graph.layers[-1].type == "RMSNorm" and graph.layers[-1].outputs[0].name == "out0"
