"""A VLM's halves stored apart (issue 38, item 5): every shipped VLM rule file takes ``vision_storage``
(default: ``storage``), so the vision tower can be quantized with the LLM half kept at fp32, and the
reverse. Read back from the written files (``net_storages``: the codes and float records each .bin holds),
not from what the rule file claims; ``gsurg eval`` labels such a conversion by both storages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.verify.conversion_storage import net_storages

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_exports")]

LLM_NETS = {"embed", "decoder", "lm_head"}


def _convert(family: str, out: Path, storage: str, vision: str) -> dict[str, str]:
    argv = [
        "apply",
        family,
        "--out",
        str(out),
        "--set",
        f"storage={storage}",
        "--set",
        f"vision_storage={vision}",
    ]
    assert main([*argv, "-q"]) == 0
    return net_storages(out, json.loads((out / "model.json").read_text()))


@pytest.mark.parametrize("family", ["penguin_vl", "qwen3_vl", "minicpm_v2"])
def test_the_vision_half_and_the_llm_half_are_stored_apart(family: str, tmp_path: Path) -> None:
    vision_int8 = _convert(family, tmp_path / "v8", "fp32", "int8")
    vision = {n for n in vision_int8 if n not in LLM_NETS}
    assert vision and LLM_NETS & set(vision_int8)
    # every vision net with a matrix is int8 (a net of tables alone, such as Qwen3-VL's pos_embed or an
    # LLM's embed, is not listed: nothing in it is rounded at an int storage)
    assert {vision_int8[n] for n in vision} == {"int8"} and "pos_embed" not in vision_int8
    assert {s for n, s in vision_int8.items() if n in LLM_NETS} == {"fp32"}
    llm_int4 = _convert(family, tmp_path / "l4", "int4", "fp32")
    assert {llm_int4[n] for n in vision} == {"fp32"}
    assert llm_int4["decoder"] == llm_int4["lm_head"] == "int4" and "embed" not in llm_int4
