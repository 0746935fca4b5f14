"""Token embeddings read as a runtime reads them: rows of the tied matrix in ``lm_head``'s .bin when
``model.json``'s ``embedding_matrix`` says it is block-quantized (``block_quant``), dequantized per row.

A runtime of a tied model (``runtime_cpp``'s ``Embeddings``) never loads the ``embed`` net: it reads the rows
from the one matrix the ``lm_head`` Gemm holds. When that matrix is stored as int4/int6/int8 codes, those
rows are the codes times ``1 / scale`` — not the float rows the ``embed`` net holds — so a verifier that
means to compute what the runtime computes takes them from here. Float storages keep the ``embed`` net,
whose rows are the same values (one tied tensor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.quant.blocks import BlockFormat, dequantize
from graphsurgeon.verify.errors import VerifyError


class QuantizedEmbeddings:
    """The block-quantized tied matrix of a conversion, memory-mapped; ``rows(ids)`` dequantizes."""

    def __init__(self, folder: Path, entry: dict[str, Any]) -> None:
        quant = entry["block_quant"]
        self.path = folder / entry["bin"]
        self.fmt = BlockFormat(int(quant["bits"]), int(quant["block_size"]))
        self.rows_count, self.cols = (int(d) for d in entry["shape"])
        row_bytes = int(quant["row_bytes"])
        if row_bytes != self.fmt.packed_row_bytes(self.cols):
            raise VerifyError(
                f"{folder / 'model.json'}: embedding_matrix.block_quant.row_bytes {row_bytes} is not "
                f"{self.fmt.packed_row_bytes(self.cols)} ({self.cols} columns of {self.fmt.bits} bits)"
            )
        blocks = self.fmt.block_count(self.cols)
        offset, scales_offset = int(entry["offset"]), int(quant["scales_offset"])
        size = self.path.stat().st_size
        if offset + self.rows_count * row_bytes > size or scales_offset + self.rows_count * blocks * 4 > size:
            raise VerifyError(
                f"{self.path}: {size} bytes, too short for model.json's embedding_matrix "
                f"({self.rows_count} rows at byte {offset}, scales at byte {scales_offset})"
            )
        self._packed = np.memmap(self.path, np.uint8, "r", offset, (self.rows_count, row_bytes))
        self._scales = np.memmap(self.path, "<f4", "r", scales_offset, (self.rows_count, blocks))

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``[len(ids), cols]`` float32; an id outside the matrix is a VerifyError."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        bad = ids[(ids < 0) | (ids >= self.rows_count)]
        if bad.size:
            raise VerifyError(
                f"token id {int(bad[0])} is outside the embedding matrix ({self.rows_count} rows)"
            )
        return dequantize(self._packed[ids], self._scales[ids], self.fmt, self.cols)


def quantized_embeddings(folder: Path, doc: dict[str, Any]) -> QuantizedEmbeddings | None:
    """The block-quantized tied matrix ``doc`` (a model.json) describes, or None when it has none."""
    entry = doc.get("embedding_matrix")
    if not isinstance(entry, dict) or "block_quant" not in entry or not doc.get("tie_word_embeddings"):
        return None
    return QuantizedEmbeddings(folder, entry)
