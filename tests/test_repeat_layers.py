"""``inputs.NAME.repeat`` (graphsurgeon/pipeline/repeat_layers.py): a short exported stack grown to its full
depth. Its success is checked byte for byte against tracing every layer in
tests/test_minicpm_v2_convert.py; here, on the embedded tiny MiniCPM-V-2 decoder traced as one layer (the
checkpoint has two), what it refuses: one line naming the graph and what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from graphsurgeon.cli import main
from graphsurgeon.formats.model_bin import read_bin
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.formats.safetensors import Checkpoint
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.residual import residual_stream
from graphsurgeon.ir.weights import Weight
from graphsurgeon.pipeline.repeat_layers import RepeatError, repeat_last_layer
from graphsurgeon.rewrite.sections import RepeatSpec
from tests.conftest import REPO

LAYER = r"llm\.model\.layers\.(\d+)\."  # where the tiny MiniCPM-V-2 names a layer
TINY = REPO / "graphsurgeon" / "models" / "minicpm_v2" / "tiny"
SHORT = f"""\
version: 1
name: short-decoder
vars:
  checkpoint: {{path: {TINY}}}
  export_llm_layers: 1
  export_vision_layers: 1
  export_vocab_rows: 16
source:
  export: graphsurgeon.models.minicpm_v2.export:build
  checkpoint: ${{checkpoint}}
inputs:
  decoder: {{export: decoder}}
graphs:
  decoder:
    input: decoder
    output: {{param: decoder.ncnn.param, bin: decoder.ncnn.bin}}
"""


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The decoder traced with one layer, written as pnnx made it."""
    folder = tmp_path_factory.mktemp("short")
    (folder / "short.yaml").write_text(SHORT, encoding="utf-8")
    assert main(["apply", str(folder / "short.yaml"), "--out", str(folder / "out")]) == 0
    return folder / "out"


@pytest.fixture
def checkpoints() -> Iterator[dict[str, Checkpoint]]:
    ckpt = Checkpoint(str(TINY / "model.safetensors"))
    try:
        yield {"model": ckpt}
    finally:
        ckpt.close()


def _graph(short: Path) -> Graph:
    graph = read_param_text(short / "decoder.ncnn.param")
    read_bin(graph, str(short / "decoder.ncnn.bin"))
    return graph


@pytest.mark.slow
def test_one_copy_makes_the_second_layer_reading_its_own_tensors(
    short: Path, checkpoints: dict[str, Checkpoint]
) -> None:
    graph = _graph(short)
    before = len(graph.layers)
    assert len(residual_stream(graph, "in0")) == 2
    summary = repeat_last_layer(
        graph, RepeatSpec(stream="in0", times=1, index=LAYER), checkpoints, "graph decoder"
    )
    assert "layer 0" in summary and "copied 1 times" in summary
    assert len(residual_stream(graph, "in0")) == 4
    copies = [x for x in graph.layers if x.name.endswith("_r1")]
    assert len(graph.layers) > before and copies
    first_gemm = next(x for x in copies if x.type == "Gemm")
    values = first_gemm.weights["B"].numpy().reshape(-1)
    want = (
        checkpoints["model"].source("llm.model.layers.1.self_attn.q_proj.weight", ()).read(0, values.size)[0]
    )
    assert (values == want).all()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"stream": "nope", "times": 1, "index": LAYER}, "graph decoder: repeat: no blob 'nope'"),
        ({"stream": "in0", "times": 1, "index": r"layers\.\d+\."}, "must have exactly one group"),
        ({"stream": "in0", "times": 1, "index": r"vpm\.blocks\.(\d+)\."}, "has no layer number where"),
        (
            {"stream": "in0", "times": 1, "adds": 3, "index": LAYER},
            "has 2 adds, fewer than the 3 of one layer",
        ),
        (
            {"stream": "in0", "times": 2, "index": LAYER},
            "graph decoder: repeat, layer 2: ",
        ),  # the checkpoint has 0 and 1
    ],
    ids=["no-stream", "index-without-group", "index-not-found", "too-few-adds", "no-such-layer"],
)
def test_a_repeat_that_cannot_grow_the_stack_is_one_line_naming_the_graph(
    short: Path, checkpoints: dict[str, Checkpoint], spec: dict[str, object], message: str
) -> None:
    with pytest.raises(RepeatError) as err:
        repeat_last_layer(_graph(short), RepeatSpec.model_validate(spec), checkpoints, "graph decoder")
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_a_weight_no_tensor_holds_is_refused_not_copied(
    short: Path, checkpoints: dict[str, Checkpoint]
) -> None:
    """Copying a weight the checkpoint does not hold would give every layer the template's values."""
    graph = _graph(short)
    gemm = next(x for x in graph.layers if x.type == "Gemm")
    old = gemm.weights["B"]
    gemm.weights["B"] = Weight.from_array(old.numpy() * 2, load_type=old.load_type, storage=old.storage)
    with pytest.raises(RepeatError, match=f"layer {gemm.name}, weight B: no tensor of .* holds its values"):
        repeat_last_layer(graph, RepeatSpec(stream="in0", times=1, index=LAYER), checkpoints, "graph decoder")
