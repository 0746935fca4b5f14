"""Calibration prompts from a text file (``calibration_text``, issue 38 item 4): what the Qwen3 export
source runs a calibrated storage on when the rule file names one. Oracle: the checkpoint's own tokenizer
(HF ``tokenizers``) encoding each line."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

from graphsurgeon.export.errors import ExportError  # noqa: E402
from graphsurgeon.models.common.llm_calibration import text_prompts  # noqa: E402
from graphsurgeon.models.common.llm_export import build  # noqa: E402

FAMILY = Path(__file__).resolve().parents[1] / "graphsurgeon" / "models" / "qwen3_llm"
TRAINED, TINY = FAMILY / "trained", FAMILY / "tiny"


def test_each_nonempty_line_is_one_prompt_of_the_checkpoints_tokens(tmp_path: Path) -> None:
    text = tmp_path / "cal.txt"
    text.write_text("largest of 21 77 84? 84\n\n  \nis 34 more or less than 47? less\n", encoding="utf-8")
    prompts = text_prompts(text, TRAINED / "tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(str(TRAINED / "tokenizer.json"))
    lines = [line for line in text.read_text().splitlines() if line.strip()]
    assert [p.ids.tolist() for p in prompts] == [[tok.encode(x, add_special_tokens=False).ids] for x in lines]
    assert all(p.ids.dtype == torch.int64 and p.rows is None for p in prompts)


def test_the_export_source_calibrates_on_the_text_when_the_rule_file_names_it(tmp_path: Path) -> None:
    text = tmp_path / "cal.txt"
    text.write_text("largest of 21 77 84? 84\nwhat is word 2 of: cat dog sun box? dog\n", encoding="utf-8")
    specs = {s.name: s for s in build({"calibration_text": str(text)}, TRAINED)}
    assert specs["embed"].calibration is not None and specs["decoder"].calibration is not None
    embed = list(specs["embed"].calibration)
    assert len(embed) == 2
    decoder = list(specs["decoder"].calibration)
    assert [s[0].shape[1] for s in decoder] == [e[0].shape[1] for e in embed]  # rows of those prompts


@pytest.mark.parametrize(
    ("content", "checkpoint", "message"),
    [
        ("\n \n", TRAINED, "no line holds a prompt"),
        (b"\xff\xfe".decode("latin-1"), TRAINED, "not UTF-8"),
        ("one line\n", TINY, "has no tokenizer.json"),
    ],
)
def test_a_text_it_cannot_use_is_one_clear_error(
    tmp_path: Path, content: str, checkpoint: Path, message: str
) -> None:
    text = tmp_path / "cal.txt"
    text.write_bytes(content.encode("latin-1"))
    with pytest.raises(ExportError, match=message):
        text_prompts(text, checkpoint / "tokenizer.json")
