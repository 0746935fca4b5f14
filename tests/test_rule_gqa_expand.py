"""The shipped rule ``rules/gqa-expand.yaml``: GQA k/v projection weights expanded for MultiHeadAttention.

A small two-layer attention problem (embed 16, H=4 query heads, G=2 kv heads, D=4, T=5) with random,
asymmetric weights is built three ways and run in the ncnn wheel with exact fp32 options:

- native GQA: Gemm q/k/v projections -> Reshape/Permute -> SDPA with k/v at G heads -> Permute/Reshape ->
  out Gemm, written by hand, its weights through gsurg's Weight API and ``write_bin``;
- MultiHeadAttention layers whose k/v weights the shipped rule loads from a checkpoint (interleave order);
- the same rule with the expansion in tile order, which must give different outputs.

Both good graphs must match each other and a numpy reference (softmax(q kᵀ/√D) v, query head h reading kv
head h // (H/G)); the expected .bin bytes are computed with numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from graphsurgeon.cli import main
from graphsurgeon.formats.model_bin import write_bin
from graphsurgeon.formats.param_any import read_param
from graphsurgeon.ir.weights import Weight
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run
from tests.conftest import REPO
from tests.safetensors_files import write_safetensors

RULE = REPO / "rules" / "gqa-expand.yaml"
E, H, G, D, T, LAYERS = 16, 4, 2, 4, 5, 2
GROUP = H // G
SETS = [f"heads={H}", f"kv_heads={G}", f"group={GROUP}", f"head_dim={D}", r"layers=attn(?P<i>\d+)"]


def bf16_exact(shape: tuple[int, ...], rng: np.random.Generator, scale: float) -> np.ndarray:
    """Random float32 values that bf16 holds exactly, so the checkpoint may store them as bf16."""
    vals = (rng.standard_normal(shape) * scale).astype(np.float32)
    return ((vals.view("<u4") >> 16) << 16).astype("<u4").view(np.float32)


RNG = np.random.default_rng(2026)
WEIGHTS = [
    {
        "q": bf16_exact((H * D, E), RNG, 0.4),
        "k": bf16_exact((G * D, E), RNG, 0.4),  # [G·D, in]: two different kv heads (asymmetric)
        "v": bf16_exact((G * D, E), RNG, 0.4),
        "o": bf16_exact((E, H * D), RNG, 0.4),
    }
    for _ in range(LAYERS)
]


def interleave(w: np.ndarray) -> np.ndarray:
    """kv head g serves query heads g·GROUP … g·GROUP+GROUP-1: rows [h0, h0, h1, h1]."""
    return np.repeat(w.reshape(G, D, E), GROUP, axis=0).reshape(H * D, E)


def tile(w: np.ndarray) -> np.ndarray:
    """The wrong order: rows [h0, h1, h0, h1]."""
    return np.tile(w.reshape(G, D, E), (GROUP, 1, 1)).reshape(H * D, E)


def reference(x: np.ndarray) -> np.ndarray:
    """Grouped-query attention in float64, straight from the definition."""
    h = x.astype(np.float64)
    for w in WEIGHTS:
        q = (h @ w["q"].T).reshape(T, H, D).transpose(1, 0, 2)
        k = (h @ w["k"].T).reshape(T, G, D).transpose(1, 0, 2)
        v = (h @ w["v"].T).reshape(T, G, D).transpose(1, 0, 2)
        heads = np.empty((H, T, D))
        for head in range(H):
            g = head // GROUP
            s = q[head] @ k[g].T / np.sqrt(D)
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            heads[head] = (p / p.sum(axis=-1, keepdims=True)) @ v[g]
        h = heads.transpose(1, 0, 2).reshape(T, H * D) @ w["o"].T
    return h


def checkpoint(tmp: Path) -> Path:
    """HF names; k_proj in fp32, v_proj in bf16 (raw bits written by hand)."""
    tensors: dict[str, tuple[str, tuple[int, ...], bytes]] = {}
    for i, w in enumerate(WEIGHTS):
        prefix = f"model.layers.{i}.self_attn."
        tensors[prefix + "k_proj.weight"] = ("F32", (G * D, E), w["k"].astype("<f4").tobytes())
        bf16 = (w["v"].view("<u4") >> 16).astype("<u2")
        tensors[prefix + "v_proj.weight"] = ("BF16", (G * D, E), bf16.tobytes())
        tensors[prefix + "q_proj.weight"] = ("F32", (H * D, E), w["q"].astype("<f4").tobytes())
    return write_safetensors(tmp / "model.safetensors", tensors)


def gemm(name: str, src: str, dst: str, n: int, k: int) -> str:
    return f"Gemm {name} 1 1 {src} {dst} 2=0 3=1 4=0 5=1 6=1 7=0 8={n} 9={k} 10=-1"


def sdpa_param() -> str:
    """Native GQA: SDPA takes k/v at G heads and maps query head h to kv head h // (H/G) itself."""
    lines = ["Input in 0 1 h0"]
    for i in range(LAYERS):
        x, y = f"h{i}", f"h{i + 1}"
        lines.append(f"Split split{i} 1 3 {x} {x}_q {x}_k {x}_v")
        for p, heads in (("q", H), ("k", G), ("v", G)):
            lines.append(gemm(f"{p}_proj{i}", f"{x}_{p}", f"{p}{i}", heads * D, E))
            lines.append(f"Reshape {p}_split{i} 1 1 {p}{i} {p}{i}_thd 0={D} 1={heads} 2=-1")  # [T, heads, D]
            lines.append(f"Permute {p}_heads{i} 1 1 {p}{i}_thd {p}{i}_htd 0=2")  # [heads, T, D]
        lines.append(f"SDPA sdpa{i} 3 1 q{i}_htd k{i}_htd v{i}_htd a{i}")  # [H, T, D]
        lines.append(f"Permute a_heads{i} 1 1 a{i} a{i}_thd 0=2")  # [T, H, D]
        lines.append(f"Reshape a_merge{i} 1 1 a{i}_thd a{i}_td 0={H * D} 1=-1")  # [T, H·D]
        lines.append(gemm(f"o_proj{i}", f"a{i}_td", y, E, H * D))
    blobs = 1 + 16 * LAYERS
    return f"7767517\n{len(lines)} {blobs}\n" + "\n".join(lines) + "\n"


def mha_param() -> str:
    lines = [f"MultiHeadAttention attn{i} 1 1 h{i} h{i + 1} 0={E} 1={H} 2={E * E}" for i in range(LAYERS)]
    return f"7767517\n{LAYERS + 1} {LAYERS + 1}\nInput in 0 1 h0\n" + "\n".join(lines) + "\n"


def build(tmp: Path, stem: str, text: str, weights: dict[tuple[str, str], np.ndarray]) -> tuple[Path, Path]:
    """Write a .param by hand and its .bin through gsurg's Weight API and checked writer."""
    param = tmp / f"{stem}.param"
    param.write_text(text)
    graph = read_param(str(param))
    for (layer, slot), arr in weights.items():
        load_type = 1 if slot.endswith("bias") else 0
        graph.layer(layer).weights[slot] = Weight.from_array(arr, load_type=load_type)
    binf = tmp / f"{stem}.bin"
    write_bin(graph, binf)
    return param, binf


def sdpa_model(tmp: Path) -> tuple[Path, Path]:
    weights = {(f"{p}_proj{i}", "B"): w[p] for i, w in enumerate(WEIGHTS) for p in "qkvo"}
    return build(tmp, "sdpa", sdpa_param(), weights)


def mha_model(tmp: Path) -> tuple[Path, Path]:
    """q/out weights in place, k/v weights zero: the rule must fill them; all biases zero."""
    weights: dict[tuple[str, str], np.ndarray] = {}
    for i, w in enumerate(WEIGHTS):
        layer = f"attn{i}"
        weights[(layer, "q_weight")] = w["q"]
        weights[(layer, "out_weight")] = w["o"]
        for slot in ("k_weight", "v_weight"):
            weights[(layer, slot)] = np.zeros((H * D, E), np.float32)
        for slot in ("q_bias", "k_bias", "v_bias", "out_bias"):
            weights[(layer, slot)] = np.zeros(E, np.float32)
    return build(tmp, "mha", mha_param(), weights)


def apply(rule: Path, param: Path, binf: Path, out: Path, ckpt: Path) -> None:
    sets = [a for s in [*SETS, f"checkpoint={ckpt}"] for a in ("--set", s)]
    assert main(["apply", str(rule), str(param), "--bin", str(binf), "--out", str(out), *sets]) == 0


def tile_rule(tmp: Path) -> Path:
    """The shipped rule with only the head expansion changed to tile order: a leading axis of 1 repeated
    (reshape [1, G, D, in], repeat_interleave over axis 0) is np.tile over the kv heads."""
    doc = yaml.safe_load(RULE.read_text())
    for action in doc["graphs"]["main"]["rules"][0]["do"]:
        action["weight"]["transforms"] = [
            {"reshape": [1, "${kv_heads}", "${head_dim}", -1]},
            {"repeat_interleave": {"axis": 0, "n": "${group}"}},
        ]
    path = tmp / "gqa-tile.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# per MultiHeadAttention layer: q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b (tagged weights, raw biases)
WEIGHT_RECORD = 4 + 4 * E * E
BIAS_RECORD = 4 * E
LAYER_BYTES = 4 * (WEIGHT_RECORD + BIAS_RECORD)


def slot_bytes(data: bytes, layer: int, index: int) -> bytes:
    """Weight record ``index`` (0 q, 1 k, 2 v, 3 out) of layer ``layer``: tag and payload."""
    start = layer * LAYER_BYTES + index * (WEIGHT_RECORD + BIAS_RECORD)
    return data[start : start + WEIGHT_RECORD]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    tmp = tmp_path_factory.mktemp("gqa")
    ckpt = checkpoint(tmp)
    mha = mha_model(tmp)
    apply(RULE, *mha, tmp / "interleave", ckpt)
    apply(tile_rule(tmp), *mha, tmp / "tile", ckpt)
    return {
        "sdpa": sdpa_model(tmp),
        "mha": mha,
        "interleave": (tmp / "interleave" / "mha.param", tmp / "interleave" / "mha.bin"),
        "tile": (tmp / "tile" / "mha.param", tmp / "tile" / "mha.bin"),
    }


X = np.random.default_rng(5).standard_normal((T, E)).astype(np.float32)


def outputs(model: tuple[Path, Path]) -> np.ndarray:
    return run(fp32_net(*model), {"h0": X}, [f"h{LAYERS}"])[f"h{LAYERS}"]


def test_tile_and_interleave_differ_for_asymmetric_kv_heads() -> None:
    for w in WEIGHTS:
        kv = w["k"].reshape(G, D, E)
        assert not np.allclose(kv[0], kv[1]), "the two kv heads must differ"
        assert not np.array_equal(interleave(w["k"]), tile(w["k"]))
        assert np.array_equal(interleave(w["k"])[: 2 * D], np.concatenate([w["k"][:D], w["k"][:D]]))
        assert np.array_equal(tile(w["k"])[: 2 * D], w["k"])


def test_rule_writes_interleaved_kv_weights(models: dict[str, tuple[Path, Path]]) -> None:
    before = models["mha"][1].read_bytes()
    data = models["interleave"][1].read_bytes()
    assert len(data) == len(before) == LAYERS * LAYER_BYTES
    tiled = models["tile"][1].read_bytes()
    for i, w in enumerate(WEIGHTS):
        assert slot_bytes(data, i, 0) == slot_bytes(before, i, 0), "q_weight untouched"
        assert slot_bytes(data, i, 1) == b"\0" * 4 + interleave(w["k"]).astype("<f4").tobytes()
        assert slot_bytes(data, i, 2) == b"\0" * 4 + interleave(w["v"]).astype("<f4").tobytes()
        assert slot_bytes(data, i, 3) == slot_bytes(before, i, 3), "out_weight untouched"
        assert slot_bytes(tiled, i, 1) == b"\0" * 4 + tile(w["k"]).astype("<f4").tobytes()
    assert models["interleave"][0].read_text() == mha_param(), "the .param is not changed"
    sidecar = json.loads((models["interleave"][0].parent / "mha.gsurg.json").read_text())
    expand = f"reshape([{G}, {D}, -1]) | repeat_interleave(axis=0, n={GROUP}) as fp32"
    assert sidecar["layers"]["attn1"] == [
        f"gqa-expand-kv: weight k_weight <- model.layers.1.self_attn.k_proj.weight | {expand}",
        f"gqa-expand-kv: weight v_weight <- model.layers.1.self_attn.v_proj.weight | {expand}",
    ]


def test_expanded_mha_matches_native_gqa_sdpa_and_numpy(models: dict[str, tuple[Path, Path]]) -> None:
    ref = reference(X)
    native = outputs(models["sdpa"])
    expanded = outputs(models["interleave"])
    assert native.shape == expanded.shape == (T, E)
    np.testing.assert_allclose(native, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(expanded, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(expanded, native, rtol=1e-5, atol=1e-5)


def test_tile_order_gives_different_outputs(models: dict[str, tuple[Path, Path]]) -> None:
    native = outputs(models["sdpa"])
    tiled = outputs(models["tile"])
    assert np.max(np.abs(tiled - native)) > 1e-2, "tile order must not pass for interleave"
    untouched = outputs(models["mha"])
    assert np.max(np.abs(untouched - native)) > 1e-2, "without the rule the k/v weights are zeros"


def test_inconsistent_group_fails_the_size_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vars hold no arithmetic, so group = heads / kv_heads is given separately; a wrong one cannot slip
    through: the expanded tensor no longer has the slot's element count."""
    ckpt = checkpoint(tmp_path)
    param, binf = mha_model(tmp_path)
    sets = [a for s in [*SETS, "group=4", f"checkpoint={ckpt}"] for a in ("--set", s)]
    out = tmp_path / "out"
    assert main(["apply", str(RULE), str(param), "--bin", str(binf), "--out", str(out), *sets]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "gsurg: error: rule gqa-expand-kv: layer attn0, weight k_weight: "
        "model.layers.0.self_attn.k_proj.weight [8, 16] gives "
        "[8, 4, 16] after its transforms, 512 elements, but the params load 256 elements [256]"
    ]
    assert not out.exists() or not any(out.iterdir())
