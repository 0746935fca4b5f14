"""Safetensors files written by hand for tests (the format, not the library, so the reader is checked
against an independent writer): u64 LE header length, JSON header (dtype, shape, data_offsets), data."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np


def bf16_bytes(values: np.ndarray) -> bytes:
    """bf16 bytes of values that are exact in bf16 (the low 16 bits of each float32 are zero)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view("<u4")
    assert np.all(bits & 0xFFFF == 0), "test values must be exact in bf16"
    return (bits >> 16).astype("<u2").tobytes()


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> Path:
    """Write ``{name: (dtype, shape, raw bytes)}`` as one safetensors file."""
    header: dict[str, object] = {}
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path
