"""Block-quantized Gemm weights written by hand for the diff-bin tests, from the format facts alone (the
docstring of ``graphsurgeon/quant/blocks.py``, ncnn 1.0.20261020's ``gemm.cpp``), never with gsurg's
quantizer or packer:

* Gemm ``quantize_term`` (param 18) = bits * 100 + block code (0, 1, 2 for 32, 64, 128 values);
* ``B`` is ``N`` rows of ``ceil(K * bits / 8)`` bytes, code ``k`` of a row at bit ``k * bits``, least
  significant bit first, two's complement; the record is padded to 4 bytes and has no tag;
* ``B_quantize_scales`` follows, ``N x ceil(K / block)`` raw float32; a value is ``code / scale``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

N, K = 6, 70  # K is no multiple of any block size: every row ends in a short block
BLOCK_CODE = {32: 0, 64: 1, 128: 2}
TAG_FP32 = b"\x00\x00\x00\x00"


def quantize_minmax(w: np.ndarray, bits: int, block: int, clip: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Codes ``[N, K]`` (int64) and float32 scales ``[N, blocks]``: each block's scale maps ``clip`` times
    its largest magnitude to the largest level; codes rounded half away from zero in float64, clipped."""
    qmax = (1 << (bits - 1)) - 1
    n, k = w.shape
    blocks = -(-k // block)
    scales = np.empty((n, blocks), dtype=np.float32)
    codes = np.empty((n, k), dtype=np.int64)
    for b in range(blocks):
        part = w[:, b * block : (b + 1) * block]
        absmax = np.abs(part).max(axis=1).astype(np.float32)
        scale = (np.float32(qmax) / (absmax * np.float32(clip))).astype(np.float32)
        scales[:, b] = scale
        y = part.astype(np.float64) * scale.astype(np.float64)[:, None]
        codes[:, b * block : (b + 1) * block] = np.clip(np.sign(y) * np.floor(np.abs(y) + 0.5), -qmax, qmax)
    return codes, scales


def pack_rows(codes: np.ndarray, bits: int) -> bytes:
    """Each row as one little-endian integer holding code ``k`` (two's complement, ``bits`` wide) at bit
    ``k * bits``, written in ``ceil(K * bits / 8)`` bytes."""
    k = codes.shape[1]
    mask = (1 << bits) - 1
    out = bytearray()
    for row in codes:
        acc = 0
        for i, q in enumerate(row):
            acc |= (int(q) & mask) << (i * bits)
        out += acc.to_bytes((k * bits + 7) // 8, "little")
    return bytes(out)


@dataclass
class QModel:
    """One hand-made model: the quantized .bin (``m.bin``, its .param beside it), the same weight as fp32
    (``f.bin``), the checkpoint (tensor ``w``) and the map ``fc.B: w``; ``codes`` and ``scales`` are the
    quantizer's, before any fault replaced them in the file."""

    bin: Path
    float_bin: Path
    ckpt: Path
    map: Path
    w: np.ndarray
    codes: np.ndarray
    scales: np.ndarray
    scales_offset: int
    n: int = N
    k: int = K


def write_model(
    folder: Path,
    bits: int,
    block: int,
    *,
    codes: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    clip: float = 1.0,
    float_values: np.ndarray | None = None,
    seed: int = 7,
) -> QModel:
    """Quantize a seeded ``[N, K]`` matrix (min-max, or ``clip`` of the range), then write it with
    ``codes``/``scales`` replaced when given (faults), and its float twin with ``float_values``."""
    folder.mkdir(parents=True, exist_ok=True)
    w = (np.random.default_rng(seed).standard_normal((N, K)) * 0.05).astype(np.float32)
    good_codes, good_scales = quantize_minmax(w, bits, block, clip)
    codes = good_codes if codes is None else codes
    scales = good_scales if scales is None else scales
    packed = pack_rows(codes, bits)
    packed += b"\x00" * (-len(packed) % 4)
    term = bits * 100 + BLOCK_CODE[block]
    head = "7767517\n2 2\nInput in 0 1 x\n"
    (folder / "m.param").write_text(f"{head}Gemm fc 1 1 x y 3=1 5=1 8={N} 9={K} 18={term}\n")
    (folder / "m.bin").write_bytes(packed + np.ascontiguousarray(scales, dtype="<f4").tobytes())
    (folder / "f.param").write_text(f"{head}Gemm fc 1 1 x y 3=1 5=1 8={N} 9={K}\n")
    twin = w if float_values is None else float_values
    (folder / "f.bin").write_bytes(TAG_FP32 + np.ascontiguousarray(twin, dtype="<f4").tobytes())
    save_file({"w": w}, str(folder / "ckpt.safetensors"))
    (folder / "map.yaml").write_text("fc.B: w\n")
    return QModel(
        folder / "m.bin",
        folder / "f.bin",
        folder / "ckpt.safetensors",
        folder / "map.yaml",
        w,
        good_codes,
        good_scales,
        len(packed),
    )
