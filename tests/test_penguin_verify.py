"""``gsurg verify`` on the Penguin-VL conversions of ``rules/penguin_vl.yaml`` (issue 9, items 4 and 5): the
six nets in the ncnn wheel against the fp32 PyTorch reference, stage by stage, and greedy tokens.

The default conversion and the ``rope=explicit`` one pass with the default cases (3 prompts x 2 corpus
images of different non-square sizes + a text-only prompt, 32 tokens); the JSON report has every stage;
and three wrong conversions, each a rule file that includes ``rules/penguin_vl.yaml`` and changes one
thing, fail (exit 1) at the stage where the error enters, ``encoder layer 0``, with the patch embed before
it still passing:

* k/v heads tiled (0,1,0,1: ``Tile`` on the head axis before SDPA) instead of SDPA's grouping 0,0,1,1;
* the column angle dropped: the cos/sin inputs cropped to their first half (the row angle), which
  ``RotaryEmbed`` then applies to both halves;
* a Slice axis off by one in the explicit-RoPE graph: the tables ``[1, N, D]`` cut at axis 3 (the torch
  dim of ``[1, 1, N, D]``, batch not dropped) instead of 2, so ncnn cannot compute the layer.

Oracles: the reference (itself checked against transformers and float64 numpy in test_penguin_reference.py)
and, for the runtime tables, the formula of penguin-vl.md section 3 written out by hand."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("pnnx")

from graphsurgeon.cli import main
from graphsurgeon.models.common import verify_stages
from graphsurgeon.models.penguin_vl import verify as penguin_verify
from graphsurgeon.models.penguin_vl.make_tiny import SHIPPED
from graphsurgeon.models.penguin_vl.ncnn_chain import vision_rope_tables
from graphsurgeon.verify.llm_chain import read_model_json
from graphsurgeon.verify.run import VerifyOptions
from tests.conftest import CORPUS, REPO

RULES = REPO / "rules" / "penguin_vl.yaml"
IMAGE = CORPUS / "images" / "desert.jpg"
STAGE_LINE = re.compile(r"^(?P<stage>.+?)\s+(?:[-\d.]+|-)\s+\S+\s+\S+\s+\S+\s+(?P<result>ok|FAIL.*)$")

pytestmark = pytest.mark.usefixtures("shared_exports")


class Conversions:
    """Each conversion of rules/penguin_vl.yaml made once per module, when a test first needs it."""

    ARGS: ClassVar[dict[str, list[str]]] = {"fused": [], "explicit": ["--set", "rope=explicit"]}

    def __init__(self, root: Path) -> None:
        self.root = root

    def __getitem__(self, name: str) -> Path:
        out = self.root / name
        if not out.exists():
            assert main(["apply", str(RULES), "--out", str(out), *self.ARGS[name]]) == 0
        return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Conversions:
    return Conversions(tmp_path_factory.mktemp("penguin"))


def _stages(text: str) -> list[tuple[str, str]]:
    """(stage, result) of every row of the text table."""
    rows = []
    for line in text.splitlines():
        m = STAGE_LINE.match(line)
        if m and not line.startswith("stage "):
            rows.append((m["stage"], m["result"]))
    return rows


def test_the_vision_tables_follow_the_2d_rope_formula() -> None:
    """penguin-vl.md section 3, by hand: patch p = r*gw + c gets [r*f_0, r*f_1, c*f_0, c*f_1] with
    f_i = theta^(-2i/D); here theta 100, D 4, so f = (1, 0.1)."""
    cos, sin = vision_rope_tables((2, 3), 100.0, 4)
    assert cos.shape == sin.shape == (6, 4) and cos.dtype == np.float32
    for p, (r, c) in enumerate((r, c) for r in range(2) for c in range(3)):
        angles = [r * 1.0, r * 0.1, c * 1.0, c * 0.1]
        np.testing.assert_allclose(cos[p], [math.cos(a) for a in angles], rtol=0, atol=1e-6)
        np.testing.assert_allclose(sin[p], [math.sin(a) for a in angles], rtol=0, atol=1e-6)


def test_verify_passes_on_the_default_conversion_with_every_stage_in_json(
    converted: Conversions, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = converted["fused"]
    capsys.readouterr()  # what apply printed, when this test made the conversion
    assert main(["verify", str(folder), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"]
    model = read_model_json(folder)
    layers, eos = model["vision"]["layers"], model["tokens"]["eos"]
    # the default cases: 3 prompts x 2 images of different non-square sizes, then one text-only prompt
    cases = [t["case"] for t in doc["tokens"]]
    images = sorted({m[1] for c in cases if (m := re.search(r"\+ (.+ \((\d+)x(\d+)\))$", c))})
    assert len(cases) == 7 and len(images) == 2 and cases[-1] == "prompt 1, text only"
    grids = [tuple(map(int, re.findall(r"\((\d+)x(\d+)\)$", name)[0])) for name in images]
    assert grids[0] != grids[1] and all(h != w for h, w in grids)
    for t in doc["tokens"]:
        assert t["passed"] and t["ours"] == t["reference"]
        assert len(t["ours"]) == 32 or t["ours"][-1] in eos  # model.json lists the EOS ids
    vision = ["patch embed", *(f"encoder layer {i}" for i in range(layers)), "encoder output", "projector"]
    expected = {f"{name}: {stage}" for name in images for stage in vision}
    for t in doc["tokens"]:
        steps = [f"decode step {i} logits" for i in range(1, len(t["reference"]))]
        expected |= {f"{t['case']}: {stage}" for stage in ("fused embeddings", "prefill logits", *steps)}
    stages = {s["stage"]: s for s in doc["stages"]}
    assert set(stages) == expected and len(doc["stages"]) == len(expected)
    assert all(s["passed"] and s["cosine"] >= 0.99999 and s["nonfinite"] == 0 for s in stages.values())


@pytest.mark.slow
def test_verify_passes_on_the_explicit_rope_conversion(
    converted: Conversions, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = converted["explicit"]
    graph = (folder / "vision_encoder.ncnn.param").read_text()
    assert "RotaryEmbed" not in graph and "Slice" in graph  # the lowered form is what is verified
    capsys.readouterr()
    assert main(["verify", str(folder)]) == 0
    text = capsys.readouterr().out
    rows = _stages(text)
    assert rows and all(result == "ok" for _, result in rows)
    assert sum(stage.endswith("encoder layer 1") for stage, _ in rows) == 2  # both images, every layer
    assert len(re.findall(r": 32 tokens, equal$", text, re.M)) == 7 and text.rstrip().endswith("PASSED")


def test_without_the_corpus_the_verifier_generates_non_square_images(
    converted: Conversions, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(verify_stages, "CORPUS_IMAGES", tmp_path / "absent")
    first = penguin_verify.default_images()
    again = penguin_verify.default_images()
    assert [n for n, _ in first] == ["generated 300x200", "generated 190x260"]
    for (_, a), (_, b) in zip(first, again, strict=True):
        assert a.width != a.height and np.array_equal(np.asarray(a), np.asarray(b))
    folder = converted["fused"]
    options = VerifyOptions(checkpoint=SHIPPED, prompts=["Describe the image."], tokens=4)
    report = penguin_verify.verify(folder, read_model_json(folder), options)
    assert report.passed and [t.case.split(" + ")[-1][:9] for t in report.tokens[:2]] == ["generated"] * 2


KV_TILED = """
graphs:
  vision_encoder:
    input: vision_encoder
    output: {param: vision_encoder.ncnn.param, bin: vision_encoder.ncnn.bin}
    interface: {inputs: [in0, in1, in2], outputs: [out0]}
    rules:
      - name: kv-tiled
        description: k/v heads repeated 0,1,0,1 (Tile on the head axis) instead of SDPA's grouping 0,0,1,1
        match:
          pattern: |
            Permute %pv 1 1 %a %v 0=2
            SDPA %s 3 1 %q %k %v %o 5=0
        expect: {count: "${vision_layers}"}
        do:
          - replace: |
              Permute %pv 1 1 %a %v 0=2
              Tile tile_k{match} 1 1 %k kt 0=0 1=2
              Tile tile_v{match} 1 1 %v vt 0=0 1=2
              SDPA %s 3 1 %q kt vt %o 5=0
      - {name: sort, pass: toposort}
"""

ROW_ANGLE_ONLY = """
graphs:
  vision_encoder:
    input: vision_encoder
    output: {param: vision_encoder.ncnn.param, bin: vision_encoder.ncnn.bin}
    interface: {inputs: [in0, in1, in2], outputs: [out0]}
    rules:
      - name: row-half-tables
        description: the cos/sin inputs cropped to their first half (the row angle) before they fan out
        match:
          pattern: "Split %sp 1 4 %t %a %b %c %d"
          where: ["t == 'in1' or t == 'in2'"]
        expect: {count: 2}
        do:
          - replace: |
              Crop row_half{match} 1 1 %t half -23309=1,0 -23310=1,${vision_head_dim // 2} -23311=1,-1
              Split %sp 1 4 half %a %b %c %d
"""

SLICE_AXIS = """
vars: {rope: explicit}
graphs:
  vision_encoder:
    input: vision_encoder
    output: {param: vision_encoder.ncnn.param, bin: vision_encoder.ncnn.bin}
    interface: {inputs: [in0, in1, in2], outputs: [out0]}
    rules:
      - name: table-slice-axis-off-by-one
        description: the cos/sin tables [1, N, D] cut at axis 3 (the torch dim) instead of 2
        match: {type: Slice, params: {axis: 2}, producer: {type: ExpandDims}}
        expect: {count: 2}
        do: [{set: {axis: 3}}]
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "changed", "why"),
    [
        (KV_TILED, "Tile ", r"0\.\d+ .* FAIL$"),
        (ROW_ANGLE_ONLY, "Crop ", r"0\.\d+ .* FAIL$"),
        (SLICE_AXIS, " 1=3", r"FAIL: vision_encoder: ncnn returned -100 computing blob"),
    ],
    ids=["kv-tiled", "column-angle-dropped", "slice-axis-off-by-one"],
)
def test_a_wrong_rule_fails_verify_at_the_first_encoder_layer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, changed: str, why: str
) -> None:
    rules = tmp_path / "wrong.yaml"
    rules.write_text(f"version: 1\nname: wrong\ninclude: [{RULES}]\n{body}")
    out = tmp_path / "out"
    assert main(["apply", str(rules), "--out", str(out)]) == 0
    assert changed in (out / "vision_encoder.ncnn.param").read_text()  # the one change is there
    capsys.readouterr()
    argv = ["verify", str(out), "--image", str(IMAGE), "--prompt", "Describe the image.", "--tokens", "4"]
    assert main(argv) == 1
    text = capsys.readouterr().out
    rows = _stages(text)
    first = next(i for i, (_, result) in enumerate(rows) if result != "ok")
    stage = rows[first][0]
    assert re.fullmatch(r"desert\.jpg \(\d+x\d+\): encoder layer 0", stage), rows[: first + 1]
    assert rows[0][0].endswith("patch embed") and first == 1  # the stage before it still passes
    line = next(x for x in text.splitlines() if x.startswith(stage))
    assert re.search(why, line), line
    assert text.rstrip().endswith("FAILED")
