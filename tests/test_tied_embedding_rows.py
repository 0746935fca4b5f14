"""One copy of a tied matrix (issue 17, item 1): a VLM conversion whose tied matrix is block-quantized
writes no ``embed`` net (a graph ``when:`` in the rule file; its export is not even made), and readers take
the token rows from ``lm_head``'s .bin as ``runtime_cpp``'s ``Embeddings`` does
(``graphsurgeon/verify/embedding_matrix.py``).

Oracles: the ncnn wheel's Embed layer, run on the ``embed`` net of the float conversions, against the rows
read from ``lm_head``'s .bin once ``nets.embed`` is taken out of a copy of their model.json; the model.json
schema of the family; hand-made broken files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.cli import main
from graphsurgeon.formats.json_schema import load_schema
from graphsurgeon.pipeline.prepare import prepare
from graphsurgeon.verify.embedding_matrix import FloatEmbeddings, QuantizedEmbeddings, runtime_embeddings
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.ncnn_fp32 import fp32_net, run

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "rules" / "penguin_vl.yaml"
SCHEMA = REPO / "graphsurgeon" / "models" / "penguin_vl" / "penguin_vl.v2.schema.json"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_exports")]


@pytest.fixture(scope="module")
def conversions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tied")
    out = {}
    for storage in ("fp32", "fp16", "int8"):
        argv = ["apply", str(RULES), "--out", str(root / storage), "--set", f"storage={storage}", "-q"]
        assert main(argv) == 0, storage
        out[storage] = root / storage
    return out


def _doc(folder: Path) -> dict:
    return json.loads((folder / "model.json").read_text())


def test_a_block_quantized_tied_matrix_leaves_the_embed_net_out(conversions: dict[str, Path]) -> None:
    quantized = _doc(conversions["int8"])
    assert "embed" not in quantized["nets"] and quantized["tie_word_embeddings"] is True
    assert not list(conversions["int8"].glob("embed.*"))
    assert "block_quant" in quantized["embedding_matrix"]
    assert load_schema(SCHEMA).violation(quantized) is None  # the family's contract allows it
    assert isinstance(runtime_embeddings(conversions["int8"], quantized), QuantizedEmbeddings)
    for storage in ("fp32", "fp16"):  # float storages keep the net the wheel's chains read
        assert "embed" in _doc(conversions[storage])["nets"], storage
        assert runtime_embeddings(conversions[storage], _doc(conversions[storage])) is None


def test_the_embed_export_is_not_made_when_no_graph_will_read_it() -> None:
    prepared = prepare(str(RULES), None, None, {"storage": "int8"}, work_parent=None)
    try:
        assert "embed" not in prepared.exported and {"decoder", "lm_head"} <= set(prepared.exported)
        assert "embed" not in prepared.rules.graphs
    finally:
        prepared.close()


@pytest.mark.parametrize("storage", ["fp32", "fp16"])
def test_float_rows_from_lm_head_equal_the_embed_nets(
    conversions: dict[str, Path], tmp_path: Path, storage: str
) -> None:
    folder = conversions[storage]
    doc = _doc(folder)
    ids = np.arange(doc["vocab_size"], dtype=np.int32)
    net = fp32_net(folder / doc["nets"]["embed"]["param"], folder / doc["nets"]["embed"]["bin"])
    expected = run(net, {"in0": ids.view(np.float32)}, ["out0"])["out0"].reshape(len(ids), -1)
    copy = tmp_path / storage
    shutil.copytree(folder, copy)
    del doc["nets"]["embed"]
    assert load_schema(SCHEMA).violation(doc) is None
    reader = runtime_embeddings(copy, doc)
    assert isinstance(reader, FloatEmbeddings) and reader.storage == doc["embedding_matrix"]["storage"]
    np.testing.assert_array_equal(reader.rows(ids), expected)
    with pytest.raises(VerifyError, match=r"token id 9999 is outside the embedding matrix"):
        reader.rows(np.array([9999]))


def test_a_tied_matrix_whose_tag_disagrees_is_refused_with_its_byte(
    conversions: dict[str, Path], tmp_path: Path
) -> None:
    copy = tmp_path / "fp32"
    shutil.copytree(conversions["fp32"], copy)
    doc = _doc(copy)
    del doc["nets"]["embed"]
    entry = doc["embedding_matrix"]
    raw = bytearray((copy / entry["bin"]).read_bytes())
    raw[entry["tag_offset"]] = 7
    (copy / entry["bin"]).write_bytes(bytes(raw))
    with pytest.raises(
        VerifyError, match=rf"the weight tag at byte {entry['tag_offset']} is 0x7, not the fp32"
    ):
        runtime_embeddings(copy, doc)
    untied = dict(doc, tie_word_embeddings=False)
    with pytest.raises(VerifyError, match="no embed net, and no tied embedding_matrix"):
        runtime_embeddings(copy, untied)
    # the schema wants the net of an untied model
    assert str(load_schema(SCHEMA).violation(untied)) == 'entry "nets.embed" is missing'
