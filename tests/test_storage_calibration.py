"""The fp16 storage policy with calibration (issue 9, item 4) on a tiny exported model whose activations
really exceed fp16's range: LayerNorm -> fc1 -> ReLU -> fc2 -> fc3, with fc2's weights scaled up so its
outputs reach ~1e5 and fc3's scaled down again.

Oracles: torch computes every activation of the calibration samples (which layers must be marked follows
from those maxima and the limit, by hand); the .bin layout is written out by hand from the layer shapes and
ncnn's record format (4-byte tag, payload padded to 4) with the values torch holds; the ncnn wheel (exact
fp32 options) runs both conversions.

Here (x86-64, ncnn wheel 1.0.20261020) ncnn's fp16 options do not put activations in fp16 (penguin-vl.md
§10), so featmask ``31=`` is checked structurally: on which lines it appears.
"""

from __future__ import annotations

import json
import struct
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pnnx")

from graphsurgeon.cli import main  # noqa: E402
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run  # noqa: E402

TAG_FP16 = 0x01306B47

SOURCE = '''
from collections.abc import Sequence

import torch
from graphsurgeon.export.spec import ExportSpec

GAIN = 5e4  # fc2's outputs far above fp16's 65504, its weights still below it


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.norm = torch.nn.LayerNorm(8)
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 8)
        self.fc3 = torch.nn.Linear(8, 4)
        with torch.no_grad():
            for m in (self.fc1, self.fc2, self.fc3):
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
            self.fc2.weight.mul_(GAIN)
            self.fc3.weight.div_(GAIN)

    def forward(self, x):
        return self.fc3(self.fc2(torch.relu(self.fc1(self.norm(x)))))


def samples():
    gen = torch.Generator().manual_seed(1)
    example = torch.randn(1, 5, 8, generator=gen)
    calibration = [(torch.randn(1, 7, 8, generator=gen),), (2 * torch.randn(1, 3, 8, generator=gen),)]
    return example, calibration


class Lazy(Sequence):
    """Samples made when first read, as a source may hand them over."""

    def __init__(self, make):
        self.make = make

    def __len__(self):
        return len(self.make())

    def __getitem__(self, index):
        return self.make()[index]


def build(variables, checkpoint):
    example, calibration = samples()
    return [ExportSpec("tiny", Tiny().eval(), (example,), {"seq": [(0, 1)]}, Lazy(lambda: calibration))]
'''

pytestmark = pytest.mark.usefixtures("shared_exports")  # the runs differing in vars the source ignores

RULES = """
version: 1
name: tiny
vars: {storage: fp32, limit: 65504, rename: false}
source: {export: source.py:build}
inputs: {tiny: {export: tiny}}
graphs:
  tiny:
    input: tiny
    output: {param: tiny.param, bin: tiny.bin}
    storage:
      default: ${storage}
      calibrate: {when: "${storage == 'fp16'}", limit: "${limit}"}
    rules:
      - name: rename-input
        when: ${rename}
        match: {type: LayerNorm}
        expect: {count: 1}
        do: [{rename_blob: {in0: features}}]
"""

CHAIN = ("LayerNorm", "Gemm", "ReLU", "Gemm", "Gemm")  # the exported layers after Input, in order


def _load_source(folder: Path) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_calibration_source", folder / "source.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stage_maxima(module: Any) -> list[float]:
    """Largest |x| of x, and of each layer's output, over the calibration samples (torch)."""
    model = module.Tiny().eval()
    _, calibration = module.samples()
    peaks = np.zeros(6)
    with torch.no_grad():
        for (x,) in calibration:
            h0 = model.norm(x)
            h1 = model.fc1(h0)
            h2 = torch.relu(h1)
            h3 = model.fc2(h2)
            h4 = model.fc3(h3)
            peaks = np.maximum(peaks, [float(t.abs().max()) for t in (x, h0, h1, h2, h3, h4)])
    return [float(p) for p in peaks]


def _expected_marked(peaks: list[float], limit: float) -> list[bool]:
    """Layer k of the chain reads stage k and writes stage k+1: above the limit when either is."""
    return [max(peaks[k], peaks[k + 1]) > limit for k in range(len(CHAIN))]


def _layer_lines(param: Path) -> list[list[str]]:
    return [line.split() for line in param.read_text().splitlines()[2:]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("calibration")
    (root / "source.py").write_text(SOURCE)
    (root / "rules.yaml").write_text(RULES)
    module = _load_source(root)
    peaks = _stage_maxima(module)
    low = (max(peaks[:2]) + peaks[2]) / 2  # above the LayerNorm's blobs, below fc1's output
    runs = {
        "fp32": [],
        "fp16": ["--set", "storage=fp16"],
        "low": ["--set", "storage=fp16", "--set", f"limit={low}"],
        "renamed": ["--set", "storage=fp16", "--set", "rename=true"],
    }
    for name, argv in runs.items():
        assert main(["apply", str(root / "rules.yaml"), "--out", str(root / name), *argv]) == 0
    return {"root": root, "module": module, "peaks": peaks, "low": low}


def test_the_model_really_exceeds_fp16_in_fc2_only(tiny: dict[str, Any]) -> None:
    peaks = tiny["peaks"]
    assert peaks[4] > 65504 * 1.5  # fc2's output
    assert max(peaks[:4] + peaks[5:]) < 10  # everything else is small


@pytest.mark.parametrize(("run", "limit"), [("fp16", 65504.0), ("low", None)])
def test_calibration_marks_exactly_the_layers_whose_blobs_exceed_the_limit(
    tiny: dict[str, Any], run: str, limit: float | None
) -> None:
    limit = tiny["low"] if limit is None else limit
    expected = _expected_marked(tiny["peaks"], limit)
    lines = _layer_lines(tiny["root"] / run / "tiny.param")
    assert [t[0] for t in lines] == ["Input", *CHAIN]
    marked = [any(tok.startswith("31=") for tok in t) for t in lines[1:]]
    assert marked == expected
    assert all("31=3" in t for t, m in zip(lines[1:], marked, strict=True) if m)
    assert sum(expected) == (2 if run == "fp16" else 4)  # fc2 and fc3; then fc1 and the ReLU too


def _records(layout: list[tuple[str, int, bool]], data: bytes) -> list[tuple[int, bytes]]:
    """Walk ``data`` by hand: (name, element count, tagged) in load order; returns (tag, payload)."""
    out, pos = [], 0
    for _, count, tagged in layout:
        tag = struct.unpack_from("<I", data, pos)[0] if tagged else -1
        pos += 4 if tagged else 0
        size = (2 * count + 3) // 4 * 4 if tag == TAG_FP16 else 4 * count
        out.append((tag, data[pos : pos + size]))
        pos += size
    assert pos == len(data)
    return out


def test_fp16_stores_every_weight_fp16_except_in_the_calibrated_layers(tiny: dict[str, Any]) -> None:
    model = tiny["module"].Tiny().eval()
    fcs = (model.fc1, model.fc2, model.fc3)
    layout = [("ln.gamma", 8, False), ("ln.beta", 8, False)]
    for i, fc in enumerate(fcs):
        layout += [(f"fc{i + 1}.B", fc.weight.numel(), True), (f"fc{i + 1}.C", fc.bias.numel(), True)]
    values = [model.norm.weight, model.norm.bias]
    values += [t for fc in fcs for t in (fc.weight, fc.bias)]
    for name_of_run, fp16_records in (("fp32", set()), ("fp16", {"fc1.B", "fc1.C"})):
        recs = _records(layout, (tiny["root"] / name_of_run / "tiny.bin").read_bytes())
        for (name, _, tagged), (tag, payload), value in zip(layout, recs, values, strict=True):
            want = value.detach().numpy().reshape(-1)
            if name in fp16_records:
                assert tag == TAG_FP16, name
                got = np.frombuffer(payload, "<f2", count=want.size)
                assert np.array_equal(got, want.astype(np.float16)), name
            else:
                assert tag == (0 if tagged else -1), name
                assert np.array_equal(np.frombuffer(payload, "<f4"), want), name


def test_the_fp16_conversion_computes_what_the_fp32_one_does_within_fp16_rounding(
    tiny: dict[str, Any],
) -> None:
    x = np.random.default_rng(7).standard_normal((6, 8)).astype(np.float32)
    outs = {}
    for conversion in ("fp32", "fp16"):
        folder = tiny["root"] / conversion
        net = fp32_net(folder / "tiny.param", folder / "tiny.bin")
        outs[conversion] = run_out = run_net(net, x)
        net.clear()
        assert run_out.shape == (6, 4)
    with torch.no_grad():
        want = tiny["module"].Tiny().eval()(torch.from_numpy(x)[None])[0].numpy()
    assert np.allclose(outs["fp32"], want, rtol=1e-4, atol=1e-4)
    diff = np.abs(outs["fp16"] - outs["fp32"])
    # fc1's weights and bias rounded to fp16 (relative error <= 2^-11 each): the output moves by about that
    # much of its scale, and not at all when nothing was rounded.
    assert 0 < diff.max() <= 4 * 2.0**-11 * np.abs(outs["fp32"]).max()


def run_net(net: Any, x: np.ndarray) -> np.ndarray:
    return run(net, {"in0": x}, ["out0"])["out0"]


def test_the_sidecar_and_the_summary_report_what_calibration_found(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads((tiny["root"] / "fp16" / "tiny.gsurg.json").read_text())
    cal = doc["calibration"]
    names = [t[1] for t in _layer_lines(tiny["root"] / "fp16" / "tiny.param")]
    assert cal["limit"] == 65504 and cal["featmask"] == 3 and cal["samples"] == 2
    assert cal["inputs_fed"] == ["in0"] and cal["inputs_empty"] == []
    assert sorted(cal["marked"]) == sorted([names[4], names[5]])
    lines = _layer_lines(tiny["root"] / "fp16" / "tiny.param")
    blobs = ["in0", *[t[4 + int(t[2])] for t in lines[1:]]]  # each layer's one top
    measured = [cal["blob_max_abs"][b] for b in blobs]
    assert np.allclose(measured, tiny["peaks"], rtol=1e-5)
    assert cal["marked"][names[4]] == {"blob": blobs[4], "side": "output", "max_abs": measured[4]}
    assert doc["storage"] == [f"{names[2]}.B: fp32 -> fp16", f"{names[2]}.C_1xN: fp32 -> fp16"]  # fc1 only
    assert (
        main(["apply", str(tiny["root"] / "rules.yaml"), "--out", str(tmp_path), "--set", "storage=fp16"])
        == 0
    )
    out = capsys.readouterr().out
    assert f"2 layer(s) above 65504 keep fp32 weights and get 31|=3: {names[4]}" in out


def test_calibration_follows_an_input_a_rule_renamed(tiny: dict[str, Any]) -> None:
    lines = _layer_lines(tiny["root"] / "renamed" / "tiny.param")
    assert lines[0][-1] == "features"
    assert [any(t.startswith("31=") for t in x) for x in lines[1:]] == _expected_marked(tiny["peaks"], 65504)
    doc = json.loads((tiny["root"] / "renamed" / "tiny.gsurg.json").read_text())
    assert doc["calibration"]["inputs_fed"] == ["features"]


def test_the_default_storage_does_not_calibrate(tiny: dict[str, Any]) -> None:
    doc = json.loads((tiny["root"] / "fp32" / "tiny.gsurg.json").read_text())
    assert "calibration" not in doc and "storage" not in doc
    assert not any(t.startswith("31=") for x in _layer_lines(tiny["root"] / "fp32" / "tiny.param") for t in x)


def test_calibrating_a_model_that_is_not_an_export_is_one_clear_error(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "disk.yaml"
    rules.write_text(
        textwrap.dedent(
            """
            version: 1
            name: disk
            graphs:
              main:
                storage: {default: fp16, calibrate: {}}
            """
        )
    )
    folder = tiny["root"] / "fp32"
    argv = ["apply", str(rules), str(folder / "tiny.param"), "--bin", str(folder / "tiny.bin")]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "gsurg: error: graph main: storage.calibrate runs the graph on the export source's calibration "
        "samples, but it rewrites input 'model', which is not an export of the rule file's source"
    ]
    assert not (tmp_path / "out" / "tiny.bin").exists()


@pytest.mark.parametrize(
    ("calibration", "message"),
    [
        ("[(torch.zeros(1, 4),)]", "calibration sample 0, input 0: shape [1, 4]; the example's is [1, 5, 8]"),
        ("[(torch.zeros(1, 4, 8), torch.zeros(1, 4, 8))]", "calibration sample 0 has 2 tensor(s)"),
        ("[(torch.zeros(1, 4, 8, dtype=torch.int64),)]", "input 0: torch.int64, but the example input is"),
        ("[]", "calibration is an empty sequence"),
        ("1 / 0", "computing its calibration samples failed: ZeroDivisionError"),
    ],
)
def test_bad_calibration_samples_are_one_clear_error(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], calibration: str, message: str
) -> None:
    source = SOURCE.replace("Lazy(lambda: calibration)", f"Lazy(lambda: {calibration})")
    assert source != SOURCE
    (tmp_path / "source.py").write_text(source)
    (tmp_path / "rules.yaml").write_text(RULES)
    argv = ["apply", str(tmp_path / "rules.yaml"), "--out", str(tmp_path / "out"), "--set", "storage=fp16"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gsurg: error: sub-model tiny: ") and message in err[0], err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
