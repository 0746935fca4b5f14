"""The vision sub-modules of graphsurgeon/models/penguin_vl/parts.py through pnnx 20261020 and the ncnn wheel:
what the export will build on.

Each part is traced at one patch count and converted with a second (``inputshape2``, so the patch count
stays free), then run in ncnn (fp32 options) on a third, non-square grid and compared with the torch
reference. The fused encoder becomes ``RotaryEmbed 0=0`` reading the full-width per-patch tables (right
on the pinned ncnn, which applies each half of a table to its half of the head); the explicit one has no
RotaryEmbed, only Slice/BinaryOp/Concat. Oracles: the ncnn wheel's numbers and the layer types in the
``.param`` pnnx writes.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")
pytestmark = pytest.mark.slow  # three pnnx conversions, ~35 s
if shutil.which("pnnx") is None:
    pytest.skip("the pnnx executable is not installed", allow_module_level=True)

from graphsurgeon.models.penguin_vl.make_tiny import SHIPPED  # noqa: E402
from graphsurgeon.models.penguin_vl.model import load_model  # noqa: E402
from graphsurgeon.models.penguin_vl.parts import (  # noqa: E402
    VisionEmbedPatch,
    VisionEncoder,
    VisionProjector,
    vision_rope_inputs,
)
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run  # noqa: E402

TRACE, SECOND, RUN = (3, 4), (4, 5), (5, 7)  # grids: traced, pnnx's second shape, run in ncnn


def _shape(t: Any) -> str:
    return "[" + ",".join(str(d) for d in t.shape) + "]"


def _convert(module: Any, first: tuple[Any, ...], second: tuple[Any, ...], where: Path) -> tuple[Path, Path]:
    where.mkdir(parents=True, exist_ok=True)
    pt = where / "part.pt"
    torch.jit.trace(module.eval(), first).save(str(pt))
    result = subprocess.run(
        [
            "pnnx",
            str(pt),
            "inputshape=" + ",".join(_shape(t) for t in first),
            "inputshape2=" + ",".join(_shape(t) for t in second),
            "fp16=0",
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return where / "part.ncnn.param", where / "part.ncnn.bin"


def _types(param: Path) -> collections.Counter[str]:
    return collections.Counter(line.split()[0] for line in param.read_text().splitlines()[2:])


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def model() -> Any:
    torch.set_num_threads(1)
    return load_model(SHIPPED)


def _hidden(model: Any, grid: tuple[int, int], seed: int) -> Any:
    n = grid[0] * grid[1]
    return torch.randn(1, n, model.config.vision.hidden_size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("rope", ["fused", "explicit"])
def test_the_vision_encoder_converts_and_runs_any_grid(tmp_path: Path, model: Any, rope: str) -> None:
    part = VisionEncoder(model, rope)  # type: ignore[arg-type]
    args = [(_hidden(model, g, i), *vision_rope_inputs(model, g)) for i, g in enumerate((TRACE, SECOND, RUN))]
    param, weights = _convert(part, args[0], args[1], tmp_path)
    types = _types(param)
    assert types["SDPA"] == model.config.vision.num_hidden_layers and "Tile" not in types
    if rope == "fused":
        assert types["RotaryEmbed"] == 2 * model.config.vision.num_hidden_layers
        assert all(
            " 0=0" in line for line in param.read_text().splitlines() if line.startswith("RotaryEmbed")
        )
    else:
        assert "RotaryEmbed" not in types and types["Slice"] > 0 and types["Concat"] > 0
    hidden, cos, sin = args[2]
    with torch.no_grad():
        expected = part(hidden, cos, sin)[0].numpy()
    net = fp32_net(param, weights)
    out = run(net, {"in0": hidden[0].numpy(), "in1": cos[0].numpy(), "in2": sin[0].numpy()}, ["out0"])["out0"]
    assert out.shape == expected.shape
    assert _cosine(out, expected) > 0.99999
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-3 * np.abs(expected).max())


def test_patch_embed_and_projector_convert_and_run_any_patch_count(tmp_path: Path, model: Any) -> None:
    width = model.config.vision.patch_dim
    pixels = [
        torch.rand(1, g[0] * g[1], width, generator=torch.Generator().manual_seed(7)) * 2 - 1
        for g in (TRACE, SECOND, RUN)
    ]
    for name, part, inputs in (
        ("embed", VisionEmbedPatch(model), pixels),
        ("projector", VisionProjector(model), [_hidden(model, g, 9) for g in (TRACE, SECOND, RUN)]),
    ):
        param, weights = _convert(part, (inputs[0],), (inputs[1],), tmp_path / name)
        assert "Gemm" in _types(param) or "InnerProduct" in _types(param)
        with torch.no_grad():
            expected = part(inputs[2])[0].numpy()
        out = run(fp32_net(param, weights), {"in0": inputs[2][0].numpy()}, ["out0"])["out0"]
        out = out.reshape(expected.shape)
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-4 * np.abs(expected).max(), err_msg=name)
