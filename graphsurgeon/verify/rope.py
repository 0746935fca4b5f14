"""Per-position inputs of a decoder step: RoPE ``inv_freq`` (HF default and Llama 3 scaling), cos/sin
rows for absolute positions, and the additive causal mask."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

MASKED = np.float32(-1e38)
"""Additive mask value for a hidden key: large and finite, as nihui/ncnn_llm uses (a fully masked row then
gives uniform weights; with ``-inf`` ncnn's softmax would compute 0/0 = NaN)."""

RopeWidth = Literal["full", "half"]


def rope_inv_freq(head_dim: int, theta: float = 1_000_000.0) -> np.ndarray:
    """HF's default ``inv_freq`` (float32, ``head_dim/2`` values): ``1 / theta^(2j/D)``, each power a scalar
    float32 one, i.e. C's ``powf`` — what torch's float32 power and the C++ runtime give. numpy's vectorised
    float32 power differs from ``powf`` in the last bit for about a third of the values on an AVX-512 CPU,
    and an 8-bit Gemm, which quantizes its inputs per block as it runs, can turn one such bit into another
    token."""
    base = np.float32(theta)
    d = np.float32(head_dim)
    return np.array(
        [np.float32(1.0) / (base ** (np.float32(j) / d)) for j in range(0, head_dim, 2)], np.float32
    )


def cos_sin(angles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of float32 ``angles``, each computed in double and rounded to float32, as the C++
    runtime computes its tables (numpy's float32 cos differs from that in the last bit for ~15 % of
    values)."""
    wide = np.asarray(angles, dtype=np.float32).astype(np.float64)
    return np.cos(wide).astype(np.float32), np.sin(wide).astype(np.float32)


def llama3_inv_freq(
    head_dim: int,
    theta: float = 500_000.0,
    factor: float = 32.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position: int = 8192,
) -> np.ndarray:
    """``inv_freq`` with HF's ``rope_type="llama3"`` scaling (Llama 3.2 1B: the defaults)."""
    inv = rope_inv_freq(head_dim, theta).astype(np.float64)
    low_wavelen = original_max_position / low_freq_factor
    high_wavelen = original_max_position / high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(is_mid, mid, scaled).astype(np.float32)


def rope_tables(
    positions: Sequence[int] | np.ndarray, inv_freq: np.ndarray, *, width: RopeWidth = "full"
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin rows for absolute ``positions`` (float32 angles as HF computes them; ``cos_sin``).

    ``full``: ``[T, D]`` = ``cat(freqs, freqs)`` (HF layout; R1020 RotaryEmbed also accepts a full row whose
    halves differ). ``half``: ``[T, D/2]`` (also the only layout ``0=1`` interleaved reads)."""
    pos = np.asarray(positions, dtype=np.float32).reshape(-1, 1)
    freqs = pos * np.asarray(inv_freq, dtype=np.float32).reshape(1, -1)
    if width == "full":
        freqs = np.concatenate([freqs, freqs], axis=1)
    return cos_sin(freqs)


def causal_mask(start: int, length: int) -> np.ndarray:
    """The additive mask ``[length, start+length]`` for query positions ``start..start+length-1``:
    key ``j`` is visible to query ``start+i`` iff ``j <= start+i`` (0), else ``MASKED``."""
    q = np.arange(start, start + length).reshape(-1, 1)
    k = np.arange(start + length).reshape(1, -1)
    return np.where(k <= q, np.float32(0.0), MASKED).astype(np.float32)
