"""graphsurgeon.export: specs checked, modules traced and converted by pnnx, and every error on the way.

Oracles: torch computes what the exported model must compute, the ncnn wheel (exact fp32 options) runs the
export; expected shapes and messages are written by hand. Real pnnx exports take ~1-2 s each; the error
paths of the pnnx subprocess use small fake executables (shell scripts) in place of pnnx.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pnnx")
F = torch.nn.functional
Module: Any = torch.nn.Module

from graphsurgeon.export.errors import ExportError  # noqa: E402
from graphsurgeon.export.pnnx_run import export_all, find_pnnx  # noqa: E402
from graphsurgeon.export.spec import ExportSpec  # noqa: E402
from graphsurgeon.export.trace_inputs import plan  # noqa: E402
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run  # noqa: E402


class MixAlongSeq(Module):
    """Two-head attention over the sequence with a [T,T] additive mask: reshapes that carry the dynamic
    length T (a static export would freeze T in them), softmax along T. The LayerNorm first tells pnnx
    where the batch is (a Linear reading a graph input directly is wrapped in Reshapes to 3-D)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 6)

    def forward(self, x: Any, mask: Any) -> Any:
        t = x.shape[1]
        heads = self.fc(self.norm(x)).view(1, t, 2, 3).transpose(1, 2)  # [1,2,T,3]
        # the mask as [1,1,T,T]: ncnn adds a 2-D [T,T] to a 3-D [2,T,T] per channel, unlike torch
        weights = torch.softmax(heads @ heads.transpose(2, 3) + mask.unsqueeze(1), dim=-1)  # [1,2,T,T]
        return (weights @ heads).transpose(1, 2).reshape(1, t, 6)


def _mix_inputs(t: int, seed: int) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.triu(torch.full((t, t), -1e38), diagonal=1)[None]
    return torch.randn(1, t, 8, generator=gen), mask


def _mix_spec() -> ExportSpec:
    torch.manual_seed(0)
    return ExportSpec("mix", MixAlongSeq().eval(), _mix_inputs(5, 0), {"seq": [(0, 1), (1, 1), (1, 2)]})


def test_a_module_with_a_dynamic_dim_runs_in_ncnn_at_other_lengths(tmp_path: Path) -> None:
    spec = _mix_spec()
    models = export_all([spec], tmp_path / "work")
    assert set(models) == {"mix"} and models["mix"].param.parent == (tmp_path / "work").resolve()
    net = fp32_net(models["mix"].param, models["mix"].bin)
    for t in (3, 12):  # neither the example length 5 nor the second trace length 9
        x, mask = _mix_inputs(t, seed=t)
        with torch.no_grad():
            want = spec.module(x, mask)[0].numpy()
        got = run(net, {"in0": x[0].numpy(), "in1": mask[0].numpy()}, ["out0"])["out0"]
        assert got.shape == want.shape == (t, 6)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    left = sorted(p.name for p in (tmp_path / "work").iterdir())
    assert "mix.ncnn.param" in left and "mix.pnnx.log" in left
    assert not {"mix.pt", "mix.pnnx.bin", "mix.pnnx.onnx"} & set(left)  # the copies of the weights are gone


def test_the_second_trace_shape_changes_every_use_of_a_dim_together() -> None:
    p = plan(_mix_spec())
    # 5 -> 8 would collide with the static width 8, so the second length is 9
    assert p.sizes == {"seq": (5, 9)}
    assert p.inputshape == "[1,5,8]f32,[1,5,5]f32"
    assert p.inputshape2 == "[1,9,8]f32,[1,9,9]f32"
    ids = ExportSpec(
        "e", torch.nn.Embedding(10, 4).eval(), (torch.zeros(1, 3, dtype=torch.int64),), {"n": [(0, 1)]}
    )
    q = plan(ids)
    assert (q.inputshape, q.inputshape2) == ("[1,3]i64", "[1,6]i64")
    assert q.second_inputs[0].dtype == torch.int64 and not q.second_inputs[0].any()
    static = plan(ExportSpec("s", torch.nn.Linear(4, 2).eval(), (torch.zeros(1, 4),)))
    assert static.inputshape2 is None and static.sizes == {}


class CausalAttention(Module):
    def forward(self, q: Any, k: Any, v: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_an_op_pnnx_cannot_convert_is_named_with_pnnx_reason(tmp_path: Path) -> None:
    x = torch.rand(1, 2, 5, 8)
    spec = ExportSpec("attn", CausalAttention().eval(), (x, x, x), {"seq": [(0, 2), (1, 2), (2, 2)]})
    with pytest.raises(ExportError) as err:
        export_all([spec], tmp_path)
    msg = str(err.value)
    assert msg.startswith(
        "sub-model attn: pnnx left ops ncnn does not have: F.scaled_dot_product_attention x1"
    )
    assert "is_causal=True" in msg and "attn.ncnn.param" in msg and "\n" not in msg
    assert (tmp_path / "attn.pt").exists()  # a failure keeps every file for debugging


# ---- the pnnx executable ----------------------------------------------------------------------------------


def _fake_pnnx_package(monkeypatch: pytest.MonkeyPatch, root: Path, script: str | None, mode: int) -> Path:
    """A module named pnnx whose folder holds ``script`` as its executable ``pnnx``."""
    pkg = root / "fakepnnx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    exe = pkg / "pnnx"
    if script is not None:
        exe.write_text(script)
        exe.chmod(mode)
    fake = types.ModuleType("pnnx")
    fake.__file__ = str(pkg / "__init__.py")
    monkeypatch.setitem(sys.modules, "pnnx", fake)
    return exe


def test_a_missing_pnnx_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pnnx", None)  # import pnnx raises ImportError
    monkeypatch.setenv("PATH", str(tmp_path))  # and nothing named pnnx on PATH
    with pytest.raises(ExportError, match=r"^pnnx is not installed: .*pip install"):
        export_all([_mix_spec()], tmp_path / "work")
    assert not (tmp_path / "work").exists()  # found out before any work


def test_a_pnnx_that_is_not_executable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_pnnx_package(monkeypatch, tmp_path, "#!/bin/sh\nexit 0\n", 0o644)
    with pytest.raises(ExportError, match=f"^pnnx is not executable: {exe}"):
        find_pnnx()


def test_pnnx_on_path_is_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pnnx_package(monkeypatch, tmp_path, None, 0)  # the package has no executable
    (tmp_path / "bin").mkdir()
    on_path = tmp_path / "bin" / "pnnx"
    on_path.write_text("#!/bin/sh\nexit 0\n")
    on_path.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert find_pnnx() == on_path


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (
            "#!/bin/sh\necho 'pnnxparam = x' >&2\necho 'input_shapes[0] expect [1,5] got [1,6]' >&2\n"
            "echo '' >&2\necho '######## pass_level0' >&2\nexit 255\n",
            "sub-model mix: pnnx exited with code 255: input_shapes[0] expect [1,5] got [1,6] (log: ",
        ),
        (
            "#!/bin/sh\necho 'RuntimeError: shape is invalid' >&2\nkill -ABRT $$\n",
            "sub-model mix: pnnx was killed by SIGABRT: RuntimeError: shape is invalid (log: ",
        ),
        ("#!/bin/sh\nexit 0\n", "sub-model mix: pnnx exited 0 but wrote no mix.ncnn.param: (no output)"),
    ],
    ids=["exit-code", "signal", "no-output"],
)
def test_a_failing_pnnx_gives_its_last_meaningful_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, expected: str
) -> None:
    _fake_pnnx_package(monkeypatch, tmp_path, script, 0o755)
    with pytest.raises(ExportError) as err:
        export_all([_mix_spec()], tmp_path / "work")
    assert str(err.value).startswith(expected)
    if "(log: " in expected:
        log = tmp_path / "work" / "mix.pnnx.log"
        assert str(err.value).endswith(f"(log: {log.resolve()})") and log.read_text()


def test_pnnx_gets_fp32_both_shapes_and_outputs_inside_the_work_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args_file = tmp_path / "args"
    _fake_pnnx_package(
        monkeypatch, tmp_path, f'#!/bin/sh\nprintf "%s\\n" "$@" > {args_file}\nexit 1\n', 0o755
    )
    with pytest.raises(ExportError):
        export_all([_mix_spec()], tmp_path / "work")
    work = (tmp_path / "work").resolve()
    args = args_file.read_text().splitlines()
    assert args[0] == str(work / "mix.pt") and "fp16=0" in args
    assert "inputshape=[1,5,8]f32,[1,5,5]f32" in args and "inputshape2=[1,9,8]f32,[1,9,9]f32" in args
    outputs = [a.split("=", 1)[1] for a in args if a.split("=")[0].startswith(("pnnx", "ncnn"))]
    assert len(outputs) == 7 and all(Path(o).parent == work for o in outputs)


# ---- tracing ----------------------------------------------------------------------------------------------


class Raises(Module):
    def forward(self, x: Any) -> Any:
        raise RuntimeError("boom\nsecond line")


class FrozenReshape(Module):
    def forward(self, x: Any) -> Any:
        return x.reshape(1, 40) * 2  # 40 = 5 * 8 only at the example length


class FrozenPythonInt(Module):
    def forward(self, x: Any) -> Any:
        return x * int(x.shape[1])  # the trace keeps 5 as a constant


class OnlyFive(Module):
    def forward(self, x: Any) -> Any:
        if x.shape[1] != 5:
            raise ValueError("only 5 tokens")
        return x * 2


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (Raises(), r"^sub-model m: torch.jit.trace failed: RuntimeError: boom$"),
        (
            OnlyFive(),
            r"^sub-model m: the module fails at the second shape \(seq 5 -> 9\), so its dims cannot be "
            r"dynamic there: ValueError: only 5 tokens$",
        ),
        (
            FrozenReshape(),
            r"^sub-model m: the traced module fails at the second shape \(seq 5 -> 9\): RuntimeError: "
            r"shape '\[1, 40\]' is invalid for input of size 72",
        ),
        (
            FrozenPythonInt(),
            r"^sub-model m: at the second shape \(seq 5 -> 9\) output 0 of the trace differs",
        ),
    ],
    ids=["raises", "eager-fails", "frozen-reshape", "frozen-python-int"],
)
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_trace_failures_carry_torch_message(tmp_path: Path, module: Any, expected: str) -> None:
    spec = ExportSpec("m", module.eval(), (torch.rand(1, 5, 8),), {"seq": [(0, 1)]})
    with pytest.raises(ExportError, match=expected):
        export_all([spec], tmp_path)


# ---- checking specs ---------------------------------------------------------------------------------------


def _lin() -> Any:
    return torch.nn.Linear(8, 4).eval()


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        ([ExportSpec("a/b", _lin(), (torch.zeros(1, 8),))], "sub-model name 'a/b' is not a safe file stem"),
        (
            [ExportSpec("a", _lin(), (torch.zeros(1, 8),)), ExportSpec("a", _lin(), (torch.zeros(1, 8),))],
            "sub-model name 'a' is used twice",
        ),
        (
            [ExportSpec("a", _lin(), (torch.zeros(2, 8),))],
            "sub-model a: input 0 has shape [2, 8]; every input needs a leading batch dim 1",
        ),
        (
            [ExportSpec("a", _lin(), (torch.zeros(1, 8, dtype=torch.float64),))],
            "sub-model a: input 0 is torch.float64; ncnn inputs are float32, or int32/int64 ids",
        ),
        (
            [ExportSpec("a", torch.nn.Linear(8, 4), (torch.zeros(1, 8),))],
            "sub-model a: the module is in training mode (call .eval() before exporting)",
        ),
        (
            [ExportSpec("a", torch.nn.Linear(8, 4).half().eval(), (torch.zeros(1, 8),))],
            "sub-model a: weight is torch.float16; export works in fp32",
        ),
        (
            [ExportSpec("a", _lin(), (torch.zeros(1, 8),), {"n": [(1, 1)]})],
            "sub-model a: dynamic dim n: input 1 does not exist (1 inputs)",
        ),
        (
            [ExportSpec("a", _lin(), (torch.zeros(1, 8),), {"n": [(0, 2)]})],
            "sub-model a: dynamic dim n: input 0 has no dim 2 (shape [1, 8])",
        ),
        (
            [ExportSpec("a", _lin(), (torch.zeros(1, 8),), {"n": [(0, 0)]})],
            "sub-model a: dynamic dim n: dim 0 of input 0 is the batch dim, always 1",
        ),
        (
            [ExportSpec("a", _lin(), (torch.zeros(1, 3, 8), torch.zeros(1, 4)), {"n": [(0, 1), (1, 1)]})],
            "sub-model a: dynamic dim n: input 1 dim 1 has size 4 but an earlier use has 3",
        ),
        (
            [ExportSpec("a", _lin(), (torch.zeros(1, 3, 8),), {"n": [(0, 1)], "m": [(0, 1)]})],
            "sub-model a: input 0 dim 1 is a use of both n and m",
        ),
    ],
    ids=[
        "unsafe-name",
        "duplicate",
        "batch",
        "dtype",
        "training",
        "fp16-weights",
        "no-input",
        "no-dim",
        "batch-dynamic",
        "sizes",
        "two-symbols",
    ],
)
def test_bad_specs_are_refused_before_any_work(
    tmp_path: Path, specs: list[ExportSpec], expected: str
) -> None:
    with pytest.raises(ExportError) as err:
        export_all(specs, tmp_path / "work")
    assert str(err.value).startswith(expected)
    assert not (tmp_path / "work").exists()
