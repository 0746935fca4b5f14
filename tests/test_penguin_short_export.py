"""rules/penguin_vl.yaml's short export (issue 37 item 4): at fp32 the conversion traces one LLM layer, one
encoder layer and 16 vocabulary rows and grows them back (``inputs.*.repeat``, the whole-vocabulary rules);
tracing the whole model (``export_short=false``, what every conversion did before, and what a calibrated
storage still does) gives the same .bin files, byte for byte, and the same layers in the same order.
``gsurg verify`` of the short conversion is in tests/test_penguin_verify.py (the default conversion)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from graphsurgeon.cli import main
from graphsurgeon.formats.param_text import read_param_text

NETS = ("vision_embed_patch", "vision_encoder", "vision_projector", "embed", "decoder", "lm_head")

pytestmark = pytest.mark.usefixtures("shared_exports")


@pytest.mark.slow
def test_the_short_export_grown_back_writes_the_same_bytes_as_tracing_everything(tmp_path: Path) -> None:
    short, full = tmp_path / "short", tmp_path / "full"
    assert main(["apply", "penguin_vl", "--out", str(short)]) == 0
    assert main(["apply", "penguin_vl", "--set", "export_short=false", "--out", str(full)]) == 0
    for name in NETS:
        assert (short / f"{name}.ncnn.bin").read_bytes() == (full / f"{name}.ncnn.bin").read_bytes(), name
        ours = [x.type for x in read_param_text(short / f"{name}.ncnn.param")]
        assert ours == [x.type for x in read_param_text(full / f"{name}.ncnn.param")], name
    for name in ("decoder", "vision_encoder"):
        assert any(x.name.endswith("_r1") for x in read_param_text(short / f"{name}.ncnn.param")), name
