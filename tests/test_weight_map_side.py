"""The ``weight_map`` side file (issue 9, item 4): per graph, the ``gsurg diff-bin`` map pairing every stored
weight with the checkpoint tensor holding its values — on the quickstart model, whose .bin is read here by
hand (an fp16 InnerProduct weight, its fp32 bias, a MemoryData [32, 10]) to make the checkpoints.

Oracles: the checkpoints are written from bytes decoded by hand; the expected maps are written out by hand;
``gsurg diff-bin`` then compares the written files themselves.
"""

from __future__ import annotations

import shutil
import struct
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from safetensors.numpy import save_file

from graphsurgeon.cli import main
from tests.conftest import REPO

MLP = REPO / "examples" / "quickstart"
PROJ_OFFSET = 1156  # tag + 512 halfs of fc1.weight, then 32 floats of fc1.bias


def _weights() -> dict[str, np.ndarray]:
    raw = (MLP / "mlp.bin").read_bytes()
    assert struct.unpack_from("<I", raw, 0)[0] == 0x01306B47  # fc1.weight is fp16
    return {
        "fc1.weight": np.frombuffer(raw, "<f2", 512, 4).astype(np.float32).reshape(32, 16),
        "fc1.bias": np.frombuffer(raw, "<f4", 32, 1028).copy(),
        "proj.data": np.frombuffer(raw, "<f4", 320, PROJ_OFFSET).reshape(32, 10).copy(),
    }


def _rules(folder: Path, checkpoint: str, output: str = "{graph}.weights.yaml") -> Path:
    path = folder / "map.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            version: 1
            name: map-only
            vars: {{ckpt: {{path: {checkpoint}}}}}
            graphs: {{main: {{}}}}
            side_files:
              - {{weight_map: "${{ckpt}}", output: "{output}"}}
            """
        )
    )
    return path


def _apply(folder: Path, checkpoint: str, out: Path) -> int:
    rules = _rules(folder, checkpoint)
    return main(
        ["apply", str(rules), str(MLP / "mlp.param"), "--bin", str(MLP / "mlp.bin"), "--out", str(out)]
    )


def _diff(out: Path, checkpoint: Path, *extra: str) -> int:
    return main(
        [
            "diff-bin",
            str(out / "mlp.bin"),
            str(checkpoint),
            "--map",
            str(out / "main.weights.yaml"),
            "--atol",
            "0",
            "--rtol",
            "0",
            "--fail-on-diff",
            *extra,
        ]
    )


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    w = _weights()
    path = tmp_path / "ckpt" / "model.safetensors"
    path.parent.mkdir()
    save_file(
        {
            "mlp.fc1.weight": w["fc1.weight"],
            "mlp.fc1.bias": w["fc1.bias"],
            "mlp.layers.10.proj": w["proj.data"],  # two tensors with the same values: by name order,
            "mlp.layers.2.proj": w["proj.data"].copy(),  # numbers as numbers, layers.2 comes first
            "mlp.unused": np.ones(320, np.float32),
        },
        str(path),
    )
    return path


def test_the_map_pairs_every_weight_and_diff_bin_passes_exactly(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert _apply(tmp_path, "ckpt", out) == 0  # the folder holding one .safetensors
    assert "weight map main.weights.yaml: 3 weight(s) paired with checkpoint tensors, 1 ambiguous" in (
        capsys.readouterr().out
    )
    text = (out / "main.weights.yaml").read_text()
    assert yaml.safe_load(text) == {
        "fc1.weight": "mlp.fc1.weight",
        "fc1.bias": "mlp.fc1.bias",
        "proj.data": {"tensor": "mlp.layers.2.proj", "transforms": [{"reshape": [320]}]},
    }
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert f"#   gsurg diff-bin mlp.bin {checkpoint} --map main.weights.yaml \\" in header
    assert "#     --atol 2.9802322387695312e-08 --rtol 0.00048828125 --fail-on-diff" in header  # fc1 is fp16
    assert "# ambiguous: proj.data holds the same values as mlp.layers.10.proj;" in header
    assert _diff(out, checkpoint) == 0
    assert capsys.readouterr().out.rstrip().endswith("PASSED")


def test_a_corrupted_weight_fails_diff_bin_naming_it(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert _apply(tmp_path, str(checkpoint), out) == 0
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    data = bytearray((broken / "mlp.bin").read_bytes())
    at = PROJ_OFFSET + 4 * 37
    value = struct.unpack_from("<f", data, at)[0]
    struct.pack_into("<f", data, at, value + 0.25)
    (broken / "mlp.bin").write_bytes(bytes(data))
    capsys.readouterr()
    assert _diff(broken, checkpoint) == 1
    report = capsys.readouterr().out
    failing = [line for line in report.splitlines() if "FAIL" in line and "proj.data" in line]
    assert failing and report.rstrip().endswith("FAILED")
    assert not any("fc1" in line and "FAIL" in line for line in report.splitlines())
    assert _diff(out, checkpoint) == 0  # the original still passes


def test_a_weight_no_tensor_holds_is_an_error_naming_layer_slot_and_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = _weights()
    ckpt = tmp_path / "t.safetensors"
    save_file(
        {"fc1.weight": w["fc1.weight"], "fc1.bias": w["fc1.bias"], "proj_t": w["proj.data"].T.copy()},
        str(ckpt),
    )
    out = tmp_path / "out"
    assert _apply(tmp_path, str(ckpt), out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(
        f"gsurg: error: mlp.bin: layer proj, weight data, offset {PROJ_OFFSET}: no tensor of {ckpt} holds "
        "its 320 values; 1 tensor(s) have 320 elements: proj_t (a map pairs values as stored, only reshaped"
    )
    assert not (out / "mlp.bin").exists() and not (out / "main.weights.yaml").exists()  # nothing written


def test_a_tensor_equal_only_where_the_probe_looks_is_no_partner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """proj.data's 320 values differ from the tensor's at index 100 only, between the places a probe reads
    (the first, middle and last 64): the full comparison must refuse it."""
    w = _weights()
    almost = w["proj.data"].reshape(-1).copy()
    almost[100] += 1.0
    ckpt = tmp_path / "a.safetensors"
    save_file({"w": w["fc1.weight"], "b": w["fc1.bias"], "p": almost.reshape(32, 10)}, str(ckpt))
    assert _apply(tmp_path, str(ckpt), tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert f"layer proj, weight data, offset {PROJ_OFFSET}: no tensor of {ckpt} holds its 320 values" in err


def test_an_fp16_weight_pairs_with_the_tensor_it_rounds_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fc1.weight is stored fp16: a checkpoint holding values that round to it (not equal to it) pairs, and
    diff-bin passes at fp16's rounding bound but not exactly."""
    w = _weights()
    nudged = np.nextafter(w["fc1.weight"], np.float32(np.inf))  # one fp32 ulp up: rounds back to fp16
    assert np.array_equal(nudged.astype(np.float16), w["fc1.weight"].astype(np.float16))
    ckpt = tmp_path / "n.safetensors"
    save_file({"w": nudged, "b": w["fc1.bias"], "p": w["proj.data"]}, str(ckpt))
    out = tmp_path / "out"
    assert _apply(tmp_path, str(ckpt), out) == 0
    assert yaml.safe_load((out / "main.weights.yaml").read_text())["fc1.weight"] == "w"
    assert _diff(out, ckpt) == 1
    assert _diff(out, ckpt, "--atol", "2.9802322387695312e-08", "--rtol", "0.00048828125") == 0


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            ["a.safetensors", "b.safetensors"],
            "several checkpoints (a.safetensors, b.safetensors); name the file",
        ),
        ([], "the folder holds no .safetensors checkpoint"),
    ],
)
def test_a_checkpoint_folder_must_hold_one_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: list[str], message: str
) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name in files:
        save_file({"x": np.zeros(2, np.float32)}, str(folder / name))
    assert _apply(tmp_path, "ckpt", tmp_path / "out") == 2
    assert capsys.readouterr().err.strip() == f"gsurg: error: weight_map {folder}: {message}"


def test_a_weight_map_output_names_each_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = _rules(tmp_path, "ckpt", output="weights.yaml")
    assert main(["apply", str(rules), str(MLP / "mlp.param"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("a weight_map output names one file per graph: put {graph} in it"), err


def test_the_map_and_the_weight_actions_read_one_open_checkpoint(
    tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint named by ``checkpoints:`` (the weight actions') and by a ``weight_map`` is opened once
    for the run, and closed at its end (issue 15, item 4)."""
    from graphsurgeon.formats.safetensors import Checkpoint
    from graphsurgeon.pipeline import checkpoint_pool

    opened: list[str] = []
    closed: list[str] = []

    class Counted(Checkpoint):
        def __init__(self, path: str) -> None:
            opened.append(path)
            super().__init__(path)

        def close(self) -> None:
            closed.append(self.path)
            super().close()

    monkeypatch.setattr(checkpoint_pool, "Checkpoint", Counted)
    rules = _rules(tmp_path, "ckpt")
    rules.write_text(rules.read_text() + "checkpoints: {ck: {path: ckpt/model.safetensors}}\n")
    out = tmp_path / "out"
    argv = ["apply", str(rules), str(MLP / "mlp.param"), "--bin", str(MLP / "mlp.bin"), "--out", str(out)]
    assert main(argv) == 0
    assert opened == [str(checkpoint)] and closed == opened
    assert _diff(out, checkpoint) == 0


def test_a_weight_that_is_one_row_range_of_a_fused_tensor_is_mapped_as_that_slice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """proj.data [32, 10] stored as the middle third of a [96, 10] tensor (a fused projection's rows, e.g.
    nn.MultiheadAttention's in_proj_weight): the map names the tensor with a slice of rows 32:64, and
    diff-bin, reading the map, finds the weight equal to those rows."""
    w = _weights()
    rng = np.random.default_rng(0)
    fused = np.concatenate([rng.standard_normal((32, 10)), w["proj.data"], rng.standard_normal((32, 10))])
    ckpt = tmp_path / "f.safetensors"
    save_file({"w": w["fc1.weight"], "b": w["fc1.bias"], "fused": fused.astype(np.float32)}, str(ckpt))
    out = tmp_path / "out"
    assert _apply(tmp_path, str(ckpt), out) == 0
    entries = yaml.safe_load((out / "main.weights.yaml").read_text())
    slice_ = {"slice": {"axis": 0, "start": 32, "stop": 64}}
    assert entries["proj.data"] == {"tensor": "fused", "transforms": [slice_, {"reshape": [320]}]}
    capsys.readouterr()
    assert _diff(out, ckpt) == 0
    assert "PASSED" in capsys.readouterr().out


def test_a_column_range_of_a_fused_tensor_is_no_partner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A column range is a strided copy, not a contiguous part: proj.data [32, 10] as columns 10:20 of a
    [32, 30] tensor is refused, the error saying what a map can pair."""
    w = _weights()
    rng = np.random.default_rng(1)
    fused = np.concatenate(
        [rng.standard_normal((32, 10)), w["proj.data"], rng.standard_normal((32, 10))], axis=1
    )
    ckpt = tmp_path / "c.safetensors"
    save_file({"w": w["fc1.weight"], "b": w["fc1.bias"], "fused": fused.astype(np.float32)}, str(ckpt))
    assert _apply(tmp_path, str(ckpt), tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "no tensor of" in err and "as a row range of a fused tensor" in err and "column-sliced" in err
