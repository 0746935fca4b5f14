"""The rules shipped in rules/: golden structure plus a numeric check in the ncnn wheel (fp32 options)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.cli import main
from graphsurgeon.formats.emit_text import write_param_text
from graphsurgeon.formats.model_bin import write_bin
from graphsurgeon.formats.param_text import parse_param_text, read_param_text
from graphsurgeon.ir.weights import Weight
from graphsurgeon.verify.kv_session import KVDecoder, lockstep, max_abs_diff
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run
from tests.conftest import CORPUS, REPO

RULES = REPO / "rules"


def _model(tmp_path: Path, text: str, weights: dict[tuple[str, str], np.ndarray]) -> tuple[Path, Path]:
    graph = parse_param_text(text)
    for (layer, slot), values in weights.items():
        graph.layer(layer).weights[slot] = Weight.from_array(values, load_type=1)
    param, model = tmp_path / "m.param", tmp_path / "m.bin"
    write_param_text(graph, param)
    write_bin(graph, model)
    return param, model


# ---- matmul-weight-slots -------------------------------------------------------------------------------

MATMUL = "7767517\n3 3\nInput in 0 1 x 0=4 1=3\nMemoryData w 0 1 wb 0=5 1=4\nMatMul mm 2 1 x wb y 0=0\n"
W = (np.arange(20, dtype=np.float32).reshape(4, 5) - 7) / 10  # [K=4, N=5]: asymmetric, so slots matter


def test_matmul_weight_slots_turns_memorydata_b_into_a_gemm_constant(tmp_path: Path) -> None:
    param, model = _model(tmp_path, MATMUL, {("w", "data"): W})
    out = tmp_path / "out"
    rules = RULES / "matmul-weight-slots.yaml"
    assert main(["apply", str(rules), str(param), "--bin", str(model), "--out", str(out), "--strict"]) == 0
    lines = (out / "m.param").read_text().splitlines()
    assert lines[1:] == [
        "2 2",
        "Input in 0 1 x 0=4 1=3",
        "Gemm mm 1 1 x y 2=0 3=0 4=0 5=1 6=0 7=0 8=5 9=4 10=-1",
    ]
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    before = run(fp32_net(param, model), {"x": x}, ["y"])["y"]
    after = run(fp32_net(out / "m.param", out / "m.bin"), {"x": x}, ["y"])["y"]
    np.testing.assert_allclose(before, x @ W, atol=1e-5)
    np.testing.assert_allclose(after, x @ W, atol=1e-5)


def test_the_weight_is_found_by_its_role_not_by_a_token_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A one-off script that takes "the MemoryData before the MatMul" as the weight breaks on W @ x (the
    constant on the A side). The rule binds the weight to the blob feeding input B, so it does not match,
    and the run fails with the closest miss instead of writing a wrong model."""
    lhs = "7767517\n3 3\nInput in 0 1 x 0=3 1=5\nMemoryData w 0 1 wb 0=4 1=2\nMatMul mm 2 1 wb x y 0=0\n"
    param, model = _model(tmp_path, lhs, {("w", "data"): np.ones((2, 4), np.float32)})
    rules = RULES / "matmul-weight-slots.yaml"
    assert main(["apply", str(rules), str(param), "--bin", str(model), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "matched 0 time(s), expected at least 1" in err and "no layer fits line 2 (MatMul %mm)" in err
    # nor can a rule take a weight from an operand that has none: MatMul itself has no weight slots
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (RULES / "matmul-weight-slots.yaml").read_text().replace('from: "%const.data"', 'from: "%mm.B"')
    )
    param2, model2 = _model(tmp_path, MATMUL, {("w", "data"): W})
    assert main(["apply", str(bad), str(param2), "--bin", str(model2), "--out", str(tmp_path / "o2")]) == 2
    assert "has no weight 'B'" in capsys.readouterr().err


# ---- axis-from-torch ---------------------------------------------------------------------------------------

CONCAT = (
    "7767517\n3 3\nInput a 0 1 xa 0=4 1=3 2=2\nInput b 0 1 xb 0=4 1=5 2=2\n"
    "Concat cat 2 1 xa xb y 0=2\n"  # written with the torch dim (2 of [1, C, H, W]): one axis too far
)


def test_axis_from_torch_converts_the_dim_for_the_batched_rank(tmp_path: Path) -> None:
    param, model = _model(tmp_path, CONCAT, {})
    out = tmp_path / "out"
    argv = ["apply", str(RULES / "axis-from-torch.yaml"), str(param), "--out", str(out)]
    assert main([*argv, "--set", "layers=cat", "--set", "dim=2", "--set", "rank=4", "--set", "batch=0"]) == 0
    assert read_param_text(out / "m.param").layer("cat").get("axis") == 1
    xa = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)  # torch [1, 2, 3, 4]
    xb = np.random.default_rng(3).standard_normal((2, 5, 4)).astype(np.float32)  # torch [1, 2, 5, 4]
    y = run(fp32_net(out / "m.param", model), {"xa": xa, "xb": xb}, ["y"])["y"]
    expected = np.concatenate([xa[None], xb[None]], axis=2)[0]  # torch.cat(dim=2), batch dropped
    np.testing.assert_array_equal(y, expected)


# ---- gqa-native --------------------------------------------------------------------------------------------

QWEN = CORPUS / "llm" / "qwen3_0.6b_decoder.ncnn.param"
LLAMA = CORPUS / "llm" / "llama3.2_1b_decoder.ncnn.param"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("param", "chains", "hidden", "heads_per_kv"),
    [(QWEN, 56, 1024, 2), (LLAMA, 32, 2048, 4)],  # qwen3: 16 q / 8 kv heads; llama3.2: 32 q / 8 kv heads
    ids=["qwen3", "llama3.2"],
)
def test_gqa_native_keeps_outputs_over_prefill_and_decode_and_shrinks_the_cache(
    param: Path,
    chains: int,
    hidden: int,
    heads_per_kv: int,
    tmp_path: Path,
    fp16_weights: Callable[[Path, int], Path],
) -> None:
    model = fp16_weights(param, 3)  # synth-bin --seed 3 --storage fp16, as test_kv_harness.py's
    out = tmp_path / "out"
    argv = ["apply", str(RULES / "gqa-native.yaml"), str(param), "--out", str(out), "--strict"]
    assert main([*argv, "--set", f"kv_chains={chains}"]) == 0
    x = 0.1 * np.random.default_rng(7).standard_normal((8, hidden)).astype(np.float32)
    with KVDecoder(param, model) as tiled, KVDecoder(out / param.name, model) as native:
        a, b = lockstep([tiled, native], x, [5, 1, 1, 1])  # prefill 5 tokens, then three decode steps
    scale = float(np.abs(a.hidden).max())
    assert np.isfinite(a.hidden).all() and scale > 0.1
    assert max_abs_diff(a, b) <= 1e-5 * scale
    # the cache holds kv heads instead of query heads at every step: half for qwen3, a quarter for llama3.2
    assert [heads_per_kv * n for n in b.cache_bytes] == a.cache_bytes
