"""Calibrated block quantization in the storage policy (``storage.gptq``, ``storage.awq``,
``storage.mixed``; issue 38 item 4) on a hand-written graph: x -> Split -> (Gemm a, Gemm b) -> add ->
Gemm c, calibrated on inputs with a few large channels and strong correlations.

Oracles: numpy computes every Gemm's inputs and outputs from the samples and the weights (so the output
errors are measured from outputs, not through the quantizer's Hessians), the codes are read back with
``blocks.unpack`` from the records the policy wrote, and the ncnn wheel runs the written files. Rule-file
mistakes are run through ``gsurg apply`` and must exit 2 naming the key."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphsurgeon.cli import main
from graphsurgeon.formats.emit_text import write_param_text
from graphsurgeon.formats.model_bin import read_bin, write_bin
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.ir.graph import Graph
from graphsurgeon.pipeline.calibrate import calibrate_graph, export_inputs
from graphsurgeon.pipeline.calibrated_quant import CalibratedQuant
from graphsurgeon.pipeline.storage_policy import apply_storage_policy
from graphsurgeon.quant.blocks import BlockFormat, dequantize, quantize
from graphsurgeon.quant.mixed import stored_bits
from graphsurgeon.rewrite.sections import Awq, Calibrate, Gptq, Mixed, StoragePolicy
from graphsurgeon.rewrite.select import Selector
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run

K, N, M = 64, 96, 32  # a, b: [N, K]; c: [M, N]
PARAM = f"""7767517
6 8
Input in0 0 1 in0
Split split 1 2 in0 x1 x2
Gemm a 1 1 x1 ya 3=1 5=1 8={N} 9={K}
Gemm b 1 1 x2 yb 3=1 5=1 8={N} 9={K}
BinaryOp add 2 1 ya yb y 0=0
Gemm c 1 1 y out0 3=1 5=1 8={M} 9={N}
"""
TAG_FP32 = b"\0\0\0\0"


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "a": (rng.standard_normal((N, K)) * 0.08).astype(np.float32),
        "b": (rng.standard_t(4, (N, K)) * 0.05).astype(np.float32),
        "c": (rng.standard_normal((M, N)) * 0.1).astype(np.float32),
    }


def _samples(seed: int, count: int = 6) -> list[tuple[np.ndarray, ...]]:
    """Rows from 8 shared factors (the same for every seed) plus noise, every eighth channel 20x larger."""
    mix = np.random.default_rng(100).standard_normal((8, K))
    rng = np.random.default_rng(seed)
    gain = np.ones(K)
    gain[::8] = 20.0
    out: list[tuple[np.ndarray, ...]] = []
    for i in range(count):
        rows = 10 + 3 * i
        x = (rng.standard_normal((rows, 8)) @ mix + 0.3 * rng.standard_normal((rows, K))) * gain
        out.append((x.astype(np.float32),))
    return out


def _model(folder: Path, weights: dict[str, np.ndarray]) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    param, bin_path = folder / "m.param", folder / "m.bin"
    param.write_text(PARAM)
    bin_path.write_bytes(b"".join(TAG_FP32 + weights[n].astype("<f4").tobytes() for n in ("a", "b", "c")))
    return param, bin_path


def _convert(
    tmp: Path, policy: StoragePolicy, samples: list[tuple[np.ndarray, ...]], *, budget: int = 1 << 30
) -> tuple[Graph, CalibratedQuant | None, Path, Path]:
    """Calibrate and store as ``apply`` does, write the result to ``tmp/out`` (the spilled results stay
    under ``tmp`` for the caller to read back through the graph's weights)."""
    param, bin_path = _model(tmp / "in", _weights())
    graph = read_param_text(param)
    read_bin(graph, bin_path)
    inputs = export_inputs(graph)
    calq = CalibratedQuant.plan(graph, policy, set(), "m")
    assert policy.calibrate is not None
    request = calq.request(tmp, budget) if calq is not None else None
    report = calibrate_graph(
        graph, policy.calibrate, inputs, samples, label="m", scratch=tmp, activations=request
    )
    if calq is not None:
        calq.finish()
    apply_storage_policy(graph, policy, set(), report.layer_ids, calibrated=calq)
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    write_param_text(graph, out / "m.param")
    write_bin(graph, out / "m.bin")
    return graph, calq, out / "m.param", out / "m.bin"


def _effective(graph: Graph, name: str, block: int) -> np.ndarray:
    """What a layer's stored codes and scales (and input scales) multiply an input row by."""
    layer = graph.layer(name)
    term = int(layer.get("quantize_term"))
    fmt = BlockFormat(term // 100, block)
    k = int(layer.get("constantK"))
    packed = np.asarray(layer.weights["B"].numpy(), dtype=np.uint8).reshape(int(layer.get("constantN")), -1)
    deq = dequantize(packed, np.asarray(layer.weights["B_quantize_scales"].numpy()), fmt, k)
    if term % 100 // 10 == 1:
        deq = deq * np.asarray(layer.weights["B_input_scales"].numpy(), dtype=np.float32)[None, :]
    return deq.astype(np.float64)


def _inputs(samples: list[tuple[np.ndarray, ...]], w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every Gemm's input rows over the samples, at fp32 (numpy)."""
    x = np.concatenate([s[0] for s in samples]).astype(np.float64)
    y = x @ w["a"].T.astype(np.float64) + x @ w["b"].T.astype(np.float64)
    return {"a": x, "b": x, "c": y}


def _out_error(x: np.ndarray, w: np.ndarray, w_hat: np.ndarray) -> float:
    return float(((x @ (w_hat - w.astype(np.float64)).T) ** 2).sum())


def _rounding(w: np.ndarray, block: int, bits: int = 4) -> np.ndarray:
    fmt = BlockFormat(bits, block)
    q = quantize(w, fmt, "clip")
    return dequantize(q.packed, q.scales, fmt, w.shape[1]).astype(np.float64)


def _policy(**extra: Any) -> StoragePolicy:
    return StoragePolicy(default="int4", block=32, method="clip", calibrate=Calibrate(), **extra)


@pytest.fixture(scope="module")
def cal() -> list[tuple[np.ndarray, ...]]:
    return _samples(1)


def test_gptq_lowers_every_layers_output_error_and_the_wheel_computes_the_codes(
    tmp_path: Path, cal: list[tuple[np.ndarray, ...]]
) -> None:
    graph, calq, param, bin_path = _convert(tmp_path, _policy(gptq=Gptq()), cal)
    assert calq is not None and set(calq.low) == {"a", "b", "c"}
    w, xs = _weights(), _inputs(cal, _weights())
    for name in ("a", "b", "c"):
        assert int(graph.layer(name).get("quantize_term")) == 400  # 4 bits, block 32, no input scales
        eff = _effective(graph, name, 32)
        rounded = _out_error(xs[name], w[name], _rounding(w[name], 32))
        assert _out_error(xs[name], w[name], eff) < 0.7 * rounded
    # held-out inputs: the whole graph's output is closer to fp32 than rounding's
    held = np.concatenate([s[0] for s in _samples(2)]).astype(np.float32)
    net = fp32_net(param, bin_path)
    try:
        got = run(net, {"in0": held}, ["out0"])["out0"].astype(np.float64)
    finally:
        net.clear()
    h64 = held.astype(np.float64)
    mid = h64 @ _effective(graph, "a", 32).T + h64 @ _effective(graph, "b", 32).T
    numpy_out = mid @ _effective(graph, "c", 32).T
    assert np.abs(got - numpy_out).max() < 1e-4 * np.abs(numpy_out).max()
    ref = (h64 @ w["a"].T + h64 @ w["b"].T) @ w["c"].T.astype(np.float64)
    rtn = (h64 @ _rounding(w["a"], 32).T + h64 @ _rounding(w["b"], 32).T) @ _rounding(w["c"], 32).T
    assert ((got - ref) ** 2).sum() < ((rtn - ref) ** 2).sum()


def test_a_split_input_is_collected_once_and_groups_give_the_same_files(
    tmp_path: Path, cal: list[tuple[np.ndarray, ...]]
) -> None:
    policy = _policy(gptq=Gptq())
    param, bin_path = _model(tmp_path / "probe", _weights())
    graph = read_param_text(param)
    read_bin(graph, bin_path)
    calq = CalibratedQuant.plan(graph, policy, set(), "m")
    assert calq is not None
    assert calq.request(tmp_path).blobs == {"in0": K, "y": N}  # a and b read in0 through the Split
    calq.close()
    _, _, _, one = _convert(tmp_path / "one", policy, cal)
    _, small, _, split = _convert(tmp_path / "two", policy, cal, budget=8 * K * K)
    assert small is not None
    assert split.read_bytes() == one.read_bytes()


def test_awq_writes_input_scales_the_wheel_applies(tmp_path: Path, cal: list[tuple[np.ndarray, ...]]) -> None:
    graph, calq, param, bin_path = _convert(tmp_path, _policy(awq=Awq()), cal)
    assert calq is not None
    w, xs = _weights(), _inputs(cal, _weights())
    terms = {n: int(graph.layer(n).get("quantize_term")) for n in ("a", "b", "c")}
    assert terms["a"] == 410 and terms["b"] == 410  # the large channels of in0 are worth scaling
    for name, term in terms.items():
        eff = _effective(graph, name, 32)
        assert _out_error(xs[name], w[name], eff) <= _out_error(xs[name], w[name], _rounding(w[name], 32))
        if term == 410:
            layer = graph.layer(name)
            assert layer.weights["B_input_scales"].shape == (int(layer.get("constantK")),)
    x = cal[0][0]
    net = fp32_net(param, bin_path)
    try:
        got = run(net, {"in0": x}, ["out0"])["out0"].astype(np.float64)
    finally:
        net.clear()
    x64 = x.astype(np.float64)
    expected = (x64 @ _effective(graph, "a", 32).T + x64 @ _effective(graph, "b", 32).T) @ _effective(
        graph, "c", 32
    ).T
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()


def test_mixed_raises_within_the_budget(tmp_path: Path, cal: list[tuple[np.ndarray, ...]]) -> None:
    budget = 6.0
    graph, calq, _, _ = _convert(tmp_path, _policy(mixed=Mixed(storage="int8", budget=budget)), cal)
    assert calq is not None and calq.raised  # room for at least one of a, b (2.5 of 4 extra bits each)
    bits = {n: int(graph.layer(n).get("quantize_term")) // 100 for n in ("a", "b", "c")}
    assert {n for n, b in bits.items() if b == 8} == set(calq.raised)
    shapes = {"a": (N, K), "b": (N, K), "c": (M, N)}
    total = sum(stored_bits(BlockFormat(bits[n], 32), *shapes[n]) for n in shapes)
    assert total / sum(r * c for r, c in shapes.values()) <= budget
    assert calq.average is not None and calq.average <= budget


def test_a_layer_calibration_keeps_fp32_is_not_quantized(
    tmp_path: Path, cal: list[tuple[np.ndarray, ...]]
) -> None:
    peak_c_input = float(np.abs(_inputs(cal, _weights())["c"]).max())
    policy = StoragePolicy(
        default="int4",
        block=32,
        calibrate=Calibrate(limit=peak_c_input * 0.99, match=Selector(name="c")),
        gptq=Gptq(),
    )
    graph, calq, _, _ = _convert(tmp_path, policy, cal)
    assert calq is not None and "c" in calq.skipped and "fp32" in calq.skipped["c"]
    assert graph.layer("c").get("quantize_term") == 0 and graph.layer("a").get("quantize_term") == 400


RULES = """\
version: 1
name: m
inputs: {{model: {{param: m.param, bin: m.bin}}}}
graphs:
  g:
    input: model
    output: {{param: o.param, bin: o.bin}}
    storage:
{storage}
"""


@pytest.mark.parametrize(
    ("storage", "named"),
    [
        ("{default: int4, gptq: {}}", "gptq quantizes from the calibration samples: give calibrate too"),
        ("{default: int4, calibrate: {}, gptq: {damp: 0}}", "storage.gptq.damp"),
        ("{default: int4, calibrate: {}, gptq: {dampp: 0.1}}", "storage.gptq.dampp"),
        ("{default: int4, calibrate: {}, awq: {grid: 0}}", "storage.awq.grid"),
        ("{default: int4, calibrate: {}, mixed: {budget: 0}}", "budget: give the average bits per weight"),
        ("{default: int4, calibrate: {}, mixed: {budget: 5, storage: int4}}", "storage.mixed.storage"),
        ("{default: int6, calibrate: {}, mixed: {budget: 7, storage: int6}}", "no more bits than default"),
        ("{default: int4, calibrate: {}, mixed: {}}", "storage.mixed.budget"),
        ("{default: int4, calibrate: {}, mixed: {budget: 4.2}}", "storage.mixed.budget: budget 4.2"),
    ],
)
def test_a_bad_storage_section_is_exit_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], storage: str, named: str
) -> None:
    _model(tmp_path, _weights())
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(storage=textwrap.indent(storage, " " * 6)))
    assert main(["apply", str(rules), "--out", str(tmp_path / "out"), "-q"]) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out" / "o.bin").exists()


def _diff(out: Path, map_text: str, tmp: Path) -> int:
    """``gsurg diff-bin`` of the written .bin against the weights as a checkpoint, through ``map_text``."""
    from safetensors.numpy import save_file

    save_file(_weights(), str(tmp / "ckpt.safetensors"))
    (tmp / "map.yaml").write_text(map_text)
    argv = ["diff-bin", str(out / "m.bin"), str(tmp / "ckpt.safetensors"), "--map", str(tmp / "map.yaml")]
    return main([*argv, "--atol", "0", "--rtol", "0", "--fail-on-diff", "-q"])


def test_diff_bin_checks_awq_codes_in_the_scaled_space_and_gptq_codes_only_where_marked(
    tmp_path: Path, cal: list[tuple[np.ndarray, ...]]
) -> None:
    _, _, _, awq_bin = _convert(tmp_path / "awq", _policy(awq=Awq()), cal)
    plain_map = "a.B: a\nb.B: b\nc.B: c\n"
    assert _diff(awq_bin.parent, plain_map, tmp_path / "awq") == 0  # nearest levels of W / input_scale
    _, _, _, gptq_bin = _convert(tmp_path / "gptq", _policy(gptq=Gptq()), cal)
    assert _diff(gptq_bin.parent, plain_map, tmp_path / "gptq") == 1  # not nearest levels: caught
    marked = "".join(f"{n}.B: {{tensor: {n}, quantized: error-compensated}}\n" for n in "abc")
    assert _diff(gptq_bin.parent, marked, tmp_path / "gptq") == 0


def test_diff_bin_fails_an_awq_weight_whose_input_scale_is_broken(
    tmp_path: Path, cal: list[tuple[np.ndarray, ...]]
) -> None:
    _, _, param, bin_path = _convert(tmp_path, _policy(awq=Awq()), cal)
    records = read_bin(read_param_text(param), bin_path)
    rec = next(r for r in records if r.layer == "a" and r.slot == "B_input_scales")
    data = bytearray(bin_path.read_bytes())
    data[rec.offset : rec.offset + 4] = np.float32(-1.0).tobytes()
    bin_path.write_bytes(bytes(data))
    assert _diff(bin_path.parent, "a.B: a\nb.B: b\nc.B: c\n", tmp_path) == 1
