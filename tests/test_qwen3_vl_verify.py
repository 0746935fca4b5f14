"""``gsurg verify`` on Qwen3-VL (issue 16, item 4): the verifier ``graphsurgeon/models/qwen3_vl/verify.py``
runs the converted nets through ``graphsurgeon/models/qwen3_vl/ncnn_chain.py`` (model.json only) against HF
transformers' own ``Qwen3VLForConditionalGeneration`` and ``generate``.

One module-scoped apply of the tiny model passes every stage with the default cases (three prompts x a
portrait and a landscape image, a prompt with both images, a text-only prompt; 32 tokens).
Wrong conversions fail it: rule files that include ``rules/qwen3_vl.yaml`` and change one thing exit 1 at
the stages the error reaches: the DeepStack features multiplied by zero before the decoder adds them, the
merger's exact GELU set to tanh, and (through the vars model.json declares them with) block-sectioned
MRoPE and the position table resampled without aligned corners. A model.json claiming a layout nothing
computes is refused (exit 2, naming the key) before anything is compared. The position counter is the
runtime's (no rule file or model.json key holds it), so that wrong variant is a runtime: the same nets
with the shared ``graphsurgeon.verify.mrope`` counter advancing by w' fail exactly the portrait cases.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsurgeon.cli import main
from graphsurgeon.verify import mrope
from graphsurgeon.verify.mrope import Image, Prompt, Segment, Token
from tests.conftest import REPO

RULES = REPO / "rules" / "qwen3_vl.yaml"
TOKENS = 32

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_exports")]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("qwen3_vl_verify") / "out"
    assert main(["apply", str(RULES), "--out", str(out)]) == 0
    return out


def _verify(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any] | None, str]:
    """``gsurg verify FOLDER --format json``: exit code, the report (None when there is none) and stderr."""
    capsys.readouterr()
    code = main(["verify", str(folder), "--format", "json", "--tokens", str(TOKENS)])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else None), out.err


def _variant(tmp_path: Path, name: str, graphs: str = "", values: dict[str, str] | None = None) -> Path:
    """Apply a rule file that includes rules/qwen3_vl.yaml and extends its ``graphs`` or overrides some of
    its vars; returns the output."""
    text = f"version: 1\nname: {name}\ninclude: [{json.dumps(str(RULES))}]\n"
    if values:
        text += "vars:\n" + "".join(f"  {key}: {value}\n" for key, value in values.items())
    if graphs:
        text += f"graphs:\n{graphs}"
    rules = tmp_path / f"{name}.yaml"
    rules.write_text(text)
    out = tmp_path / "out"
    assert main(["apply", str(rules), "--out", str(out)]) == 0
    return out


def test_verify_passes_every_stage_and_every_token_of_the_tiny_model(
    converted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, _ = _verify(converted, capsys)
    assert code == 0 and report is not None and report["passed"]
    stages = {s["stage"]: s for s in report["stages"]}
    assert all(s["passed"] and s["cosine"] >= 0.99999 for s in stages.values())
    doc = json.loads((converted / "model.json").read_text())
    depth, taps = doc["vision"]["depth"], len(doc["vision"]["deepstack"])
    images = sorted({name.split(": ")[0] for name in stages if name.endswith(": patch embed")})
    assert len(images) == 2
    grids = [tuple(int(v) for v in name.rsplit("(", 1)[1].rstrip(")").split("x")) for name in images]
    assert any(h > w for h, w in grids) and any(w > h for h, w in grids)  # a portrait and a landscape grid
    for image in images:
        per_image = [s for s in stages if s.startswith(image + ": ")]
        blocks = [s for s in per_image if ": ViT block " in s]
        assert len(blocks) == depth and sum("DeepStack merger" in s for s in per_image) == taps
        assert {f"{image}: patch embed + position embedding", f"{image}: merger"} <= set(per_image)
    cases = [t["case"] for t in report["tokens"]]
    assert len(cases) == 3 * 2 + 2 and "prompt 1 + images 1 and 2" in cases and "prompt 1, text only" in cases
    for t in report["tokens"]:
        assert t["passed"] and t["ours"] == t["reference"] and len(t["ours"]) == TOKENS, t["case"]
        steps = [s for s in stages if s.startswith(t["case"] + ": decode step ")]
        assert len(steps) == TOKENS - 1 and f"{t['case']}: prefill logits" in stages
        assert f"{t['case']}: fused embeddings" in stages


def test_a_rule_file_that_drops_deepstack_fails_verify_from_the_first_image_logits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _variant(
        tmp_path,
        "qwen3-vl-deepstack-dropped",
        "  decoder:\n    extend: true\n    rules:\n      - name: drop-deepstack\n"
        "        match:\n          pattern: |\n            Input %i 0 1 %ds\n"
        "            BinaryOp %add 2 1 %h %ds %out 0=0\n        expect: {count: 3}\n"
        "        do:\n          - replace: |\n              Input %i 0 1 %ds\n"
        "              BinaryOp ds_times_zero 1 1 %ds ds_zero 0=2 1=1 2=0.0\n"
        "              BinaryOp %add 2 1 %h ds_zero %out 0=0\n",
    )
    code, report, _ = _verify(out, capsys)
    assert code == 1 and report is not None
    failing = {s["stage"] for s in report["stages"] if not s["passed"]}
    # the vision nets are the same; the decoder ignores the features, so image prompts go wrong at once
    assert not any(": ViT block " in s or "merger" in s or "fused embeddings" in s for s in failing)
    image_cases = [t["case"] for t in report["tokens"] if "text only" not in t["case"]]
    assert all(f"{case}: prefill logits" in failing for case in image_cases)
    assert not any(s.startswith("prompt 1, text only") for s in failing)  # no image rows: nothing to add
    assert [t["passed"] for t in report["tokens"]].count(False) >= len(image_cases) - 1


def test_a_rule_file_with_a_tanh_gelu_in_the_merger_fails_verify_by_the_logits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 4's last wrong rule file. The merger output moves by ~1e-3 of its scale (cosine still above
    0.99999 there), which the decoder carries into the logits: some decode step falls below the bound."""
    out = _variant(
        tmp_path,
        "qwen3-vl-tanh-merger",
        "  merger:\n    extend: true\n    rules:\n      - name: tanh-merger-gelu\n"
        "        match: {type: GELU, params: {fast_gelu: 0}}\n        expect: {count: 1}\n"
        "        do: [{set: {fast_gelu: 1}}]\n",
    )
    assert "GELU" in (out / "merger.ncnn.param").read_text() and " 0=1" in (
        next(x for x in (out / "merger.ncnn.param").read_text().splitlines() if x.startswith("GELU"))
    )
    code, report, _ = _verify(out, capsys)
    assert code == 1 and report is not None
    failing = [s for s in report["stages"] if not s["passed"]]
    assert failing and all("logits" in s["stage"] and s["cosine"] < 0.99999 for s in failing)
    merger = [s for s in report["stages"] if s["stage"].endswith(": merger")]
    assert all(s["max_abs"] > 1e-4 * s["scale"] for s in merger)  # the merger did change


def test_a_rule_file_declaring_block_sectioned_mrope_fails_verify_on_every_image_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 4's first wrong rule file: Qwen2.5-VL's block sections instead of the interleaved layout, which
    model.json then declares (decoder.rope.layout) and the runtime builds its cos/sin with. Text-only prompts
    are unaffected (T = H = W there); every prompt with an image fails at its prefill logits."""
    out = _variant(tmp_path, "qwen3-vl-block-mrope", values={"mrope_layout": "block"})
    assert json.loads((out / "model.json").read_text())["decoder"]["rope"]["layout"] == "block"
    code, report, _ = _verify(out, capsys)
    assert code == 1 and report is not None
    failing = {s["stage"] for s in report["stages"] if not s["passed"]}
    for t in report["tokens"]:
        if "text only" in t["case"]:
            assert t["passed"] and not any(s.startswith(t["case"] + ": ") for s in failing)
        else:
            assert f"{t['case']}: prefill logits" in failing, t["case"]


def test_a_rule_file_resampling_the_position_table_without_aligned_corners_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 4's fourth wrong rule file: the learned position table resampled with PyTorch's half-pixel
    convention instead of aligned corners. Every image fails from its first stage that holds the table."""
    out = _variant(tmp_path, "qwen3-vl-unaligned", values={"position_align_corners": "false"})
    table = json.loads((out / "model.json").read_text())["vision"]["position_embedding"]
    assert table["align_corners"] is False
    code, report, _ = _verify(out, capsys)
    assert code == 1 and report is not None
    stages = report["stages"]
    patch = [s for s in stages if s["stage"].endswith(": patch embed")]
    placed = [s for s in stages if s["stage"].endswith(": patch embed + position embedding")]
    assert patch and all(s["passed"] for s in patch)  # the patch embedding itself is right
    assert placed and all(not s["passed"] for s in placed)
    failing = {s["stage"] for s in stages if not s["passed"]}
    for t in report["tokens"]:  # every image prompt goes wrong from its prefill; text only does not
        image_case = "text only" not in t["case"]
        assert (f"{t['case']}: prefill logits" in failing) == image_case, t["case"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (("decoder", "rope", "layout"), "sideways"),  # a layout no runtime computes
        (("vision", "position_embedding", "interpolation"), "bicubic"),
    ],
)
def test_a_model_json_claiming_a_layout_nothing_computes_is_refused(
    converted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: tuple[str, ...], value: Any
) -> None:
    out = shutil.copytree(converted, tmp_path / "out")
    doc = json.loads((out / "model.json").read_text())
    node = doc
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    (out / "model.json").write_text(json.dumps(doc, indent=2))
    code, report, err = _verify(out, capsys)
    assert code == 2 and report is None
    lines = [x for x in err.splitlines() if x.startswith("gsurg: error:")]
    assert len(lines) == 1 and ".".join(key) in lines[0] and str(out / "model.json") in lines[0]


def _advance_by_width(segments: Sequence[Segment], merge: int) -> Prompt:
    """Qwen3-VL's position counter with the ncnn_llm port's bug (qwen3-vl.md section 7): after an image
    the counter moves on by w' instead of max(h', w')."""
    tokens: list[Token] = []
    images: list[Image] = []
    p = 0
    for seg in segments:
        if seg.grid is None:
            for _ in range(seg.count):
                tokens.append(Token(len(tokens), "text", (p, p, p)))
                p += 1
            continue
        rows, cols = seg.grid[1] // merge, seg.grid[2] // merge
        images.append(Image(len(images), seg.grid, (1, rows, cols), len(tokens), rows * cols))
        for j in range(rows * cols):
            tokens.append(Token(len(tokens), "image", (p, p + j // cols, p + j % cols), len(images) - 1, j))
        p += cols
    return Prompt(tuple(tokens), tuple(images), p)


def test_a_runtime_advancing_the_position_by_the_image_width_fails_verify_on_portrait_images(
    converted: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 4's third wrong variant is not a conversion: no rule file or model.json key holds the position
    counter, which is the runtime's (ncnn_chain calls ``graphsurgeon.verify.mrope.positions``, the counter
    ``gsurg rope`` prints). The same nets with the counter swapped for the w' one: the portrait cases
    (h' > w') fail, the landscape ones (where max(h', w') = w') still pass, so the verifier tells the two
    apart."""
    monkeypatch.setattr(mrope, "positions", _advance_by_width)
    code, report, _ = _verify(converted, capsys)
    assert code == 1 and report is not None
    results = {t["case"]: t for t in report["tokens"]}
    failing = {s["stage"] for s in report["stages"] if not s["passed"]}
    for case in results:
        wrong = any(f"{case}: {x}" in failing for x in ("prefill logits", "decode step 1 logits"))
        grid = case.rsplit("(", 1)[1].rstrip(")").split("x") if case.endswith(")") else None
        if grid is not None and int(grid[0]) > int(grid[1]):  # portrait: the text after it moves
            assert wrong, case
        elif grid is not None or "text only" in case:  # landscape or no image: the same positions
            assert not any(s.startswith(case + ": ") for s in failing) and results[case]["passed"], case
        else:  # both images, the portrait one first
            assert wrong, case
