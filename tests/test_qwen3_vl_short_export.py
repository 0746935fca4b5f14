"""rules/qwen3_vl.yaml's short export (issue 37 item 4): the conversion traces the text layers the DeepStack
features go into plus one, the ViT blocks up to the last tap plus two, and 16 vocabulary rows, and grows
them back (``inputs.*.repeat``, the whole-vocabulary rules). The shipped tiny model is no deeper than that
(4 layers, 3 taps; 6 blocks, last tap 4), so here it is deepened by two text layers and two ViT blocks
(the tensors of the last two of each, scaled, so every layer differs): tracing the whole model
(``export_short=false``, what every conversion did before) gives the same .bin files, byte for byte, the
same layers in the same order, and ``gsurg verify`` (HF transformers' own model) passes the short one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsurgeon.cli import main
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.verify.run import VerifyOptions, run_verify
from tests.conftest import REPO

TINY = REPO / "graphsurgeon" / "models" / "qwen3_vl" / "tiny"
NETS = ("patch_embed", "pos_embed", "vision", "merger", "deepstack_merger0", "embed", "decoder", "lm_head")


def _deepen(folder: Path) -> Path:
    """The tiny checkpoint with text layers 4, 5 and ViT blocks 6, 7 made from the last two of each."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(TINY, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    for prefix, old, new in (
        ("model.language_model.layers.", (2, 3), (4, 5)),
        ("model.visual.blocks.", (4, 5), (6, 7)),
    ):
        for a, b in zip(old, new, strict=True):
            for name in [n for n in tensors if n.startswith(f"{prefix}{a}.")]:
                tensors[name.replace(f"{prefix}{a}.", f"{prefix}{b}.", 1)] = tensors[name] * (1.0 + 0.01 * b)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["text_config"]["num_hidden_layers"] = 6
    config["vision_config"]["depth"] = 8
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder


@pytest.mark.slow
def test_the_short_export_grown_back_writes_the_same_bytes_and_verifies(tmp_path: Path) -> None:
    ckpt = _deepen(tmp_path / "deep")
    short, full = tmp_path / "short", tmp_path / "full"
    assert main(["apply", "qwen3_vl", "--checkpoint", str(ckpt), "--out", str(short)]) == 0
    argv = ["apply", "qwen3_vl", "--checkpoint", str(ckpt), "--set", "export_short=false", "--out", str(full)]
    assert main(argv) == 0
    for name in NETS:
        assert (short / f"{name}.ncnn.bin").read_bytes() == (full / f"{name}.ncnn.bin").read_bytes(), name
        ours = [x.type for x in read_param_text(short / f"{name}.ncnn.param")]
        assert ours == [x.type for x in read_param_text(full / f"{name}.ncnn.param")], name
    for name in ("decoder", "vision"):
        copies = {x.name for x in read_param_text(short / f"{name}.ncnn.param") if x.name.endswith("_r2")}
        assert copies, f"{name}: the last traced layer was copied twice"
    options = VerifyOptions(checkpoint=ckpt, tokens=4)
    options.prompts = ["Describe the image."]
    report = run_verify(short, options)
    assert report.passed, [s.stage for s in report.stages if not s.passed]
