"""Token embeddings read as a runtime reads them: rows of the tied matrix in ``lm_head``'s .bin, as
``model.json``'s ``embedding_matrix`` describes it.

A runtime of a tied model (``runtime_cpp``'s ``Embeddings``) never loads the ``embed`` net: it reads the rows
from the one matrix the ``lm_head`` Gemm holds. When that matrix is stored as int4/int6/int8 codes
(``block_quant``), those rows are the codes times ``1 / scale`` — not the float rows an ``embed`` net holds —
so a verifier that means to compute what the runtime computes takes them from here. A conversion may also
leave the ``embed`` net out (a VLM rule file does when the tied matrix is block-quantized); the rows then
come from here whatever the matrix's storage (fp32, fp16 or bf16 when calibration kept ``lm_head`` float).
Otherwise float storages keep the ``embed`` net, whose rows are the same values (one tied tensor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from graphsurgeon.ir.weights import Storage
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
        ids = _checked_ids(ids, self.rows_count)
        return dequantize(self._packed[ids], self._scales[ids], self.fmt, self.cols)


#: How each float storage a tied matrix may have is laid out (its ncnn tag is ``Storage.tag``; RAW has none).
_FLOAT_DTYPES = {Storage.FP32: "<f4", Storage.RAW: "<f4", Storage.FP16: "<f2", Storage.BF16: "<u2"}


class FloatEmbeddings:
    """The tied matrix stored as floats (fp32, fp16 or bf16, after its ncnn tag; ``raw``: fp32 without
    one), memory-mapped; ``rows(ids)`` widens to float32 exactly as ncnn does on load."""

    def __init__(self, folder: Path, entry: dict[str, Any]) -> None:
        storage = next((s for s in _FLOAT_DTYPES if s.value == entry["storage"]), None)
        if storage is None:
            name = entry["storage"]
            raise VerifyError(f"{folder / 'model.json'}: embedding_matrix.storage {name!r} cannot be read")
        tag, dtype = storage.tag, _FLOAT_DTYPES[storage]
        self.path = folder / entry["bin"]
        self.rows_count, self.cols = (int(d) for d in entry["shape"])
        offset, size = int(entry["offset"]), self.path.stat().st_size
        width = np.dtype(dtype).itemsize
        if offset + self.rows_count * self.cols * width > size:
            raise VerifyError(
                f"{self.path}: {size} bytes, too short for model.json's embedding_matrix "
                f"({self.rows_count} x {self.cols} {storage} at byte {offset})"
            )
        if tag is not None:
            tag_offset = int(entry["tag_offset"])
            found = int(np.fromfile(self.path, "<u4", 1, offset=tag_offset)[0])
            declared = entry.get("tag")
            if tag_offset + 4 != offset or found != tag or (declared is not None and int(declared) != tag):
                raise VerifyError(
                    f"{self.path}: the weight tag at byte {tag_offset} is {found:#x}, not the {storage} tag "
                    f"{tag:#x} 4 bytes before model.json's embedding_matrix.offset {offset}"
                )
        self.storage = storage
        self._values = np.memmap(self.path, dtype, "r", offset, (self.rows_count, self.cols))

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``[len(ids), cols]`` float32; an id outside the matrix is a VerifyError."""
        ids = _checked_ids(ids, self.rows_count)
        picked = np.asarray(self._values[ids])
        if self.storage is Storage.BF16:  # the top 16 bits of a float32
            return (picked.astype(np.uint32) << 16).view(np.float32)
        return picked.astype(np.float32)


def _checked_ids(ids: np.ndarray, rows: int) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    bad = ids[(ids < 0) | (ids >= rows)]
    if bad.size:
        raise VerifyError(f"token id {int(bad[0])} is outside the embedding matrix ({rows} rows)")
    return ids


def runtime_embeddings(folder: Path, doc: dict[str, Any]) -> QuantizedEmbeddings | FloatEmbeddings | None:
    """Where a verifier takes its token rows from, for ``doc`` (a model.json): the tied matrix when it is
    block-quantized or when there is no ``embed`` net; None when the ``embed`` net gives them (untied, or a
    float tied matrix beside an ``embed`` net). A tied model.json with neither is a VerifyError."""
    entry = doc.get("embedding_matrix")
    has_net = "embed" in (doc.get("nets") or {})
    if not doc.get("tie_word_embeddings") or not isinstance(entry, dict):
        if has_net:
            return None
        raise VerifyError("model.json: no embed net, and no tied embedding_matrix to read the rows from")
    if "block_quant" in entry:
        return QuantizedEmbeddings(folder, entry)
    return None if has_net else FloatEmbeddings(folder, entry)
