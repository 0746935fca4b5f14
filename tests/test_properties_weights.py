"""Property tests (hypothesis) for the readers and writers: new weights.

New weights written as fp16 / bf16 / fp32 read back as numpy's fp16 cast, round-to-nearest-even bf16
(an independent reference below) and exact fp32.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from graphsurgeon.errors import BinFormatError
from graphsurgeon.formats.model_bin import read_bin, write_bin
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.params import Param
from graphsurgeon.ir.weights import Storage, Weight
from graphsurgeon.schema.catalog import ValueType
from tests.properties_harness import bits_f32

_counter = itertools.count()


# ---- c. weights through write_bin / read_bin ---------------------------------------------------
def bf16_reference(values: np.ndarray) -> np.ndarray:
    """Round each float32 to bfloat16, nearest with ties to even, on the integer bits (NaN stays NaN)."""
    out = []
    for bits in values.astype(np.float32).view(np.uint32).tolist():
        if (bits & 0x7F800000) == 0x7F800000 and bits & 0x007FFFFF:
            out.append(float("nan"))
            continue
        upper, lower = bits >> 16, bits & 0xFFFF
        if lower > 0x8000 or (lower == 0x8000 and upper & 1):
            upper += 1  # carries into the exponent: the largest finite values round to infinity
        out.append(bits_f32(upper << 16))
    return np.array(out, dtype=np.float32)


def fc_graph(n: int) -> Graph:
    graph = Graph()
    graph.add_layer("Input", "in", [], ["x"])
    graph.add_layer(
        "InnerProduct", "fc", ["x"], ["y"], {0: Param(ValueType.INT, 1), 2: Param(ValueType.INT, n)}
    )
    return graph


TAGS = {Storage.FP32: 0, Storage.FP16: 0x01306B47, Storage.BF16: 0x01348B83}


def write_and_read(values: np.ndarray, storage: Storage, folder: Path) -> tuple[np.ndarray, bytes]:
    graph = fc_graph(values.size)
    graph.layer("fc").weights["weight"] = Weight.from_array(values, load_type=0, storage=storage)
    path = folder / f"c{next(_counter)}.bin"
    write_bin(graph, path)
    raw = path.read_bytes()
    back = fc_graph(values.size)
    (record,) = read_bin(back, path)
    assert record.storage is storage
    decoded = np.array(back.layer("fc").weights["weight"].numpy())
    path.unlink()
    return decoded, raw


def reference(values: np.ndarray, storage: Storage) -> np.ndarray:
    if storage is Storage.FP16:
        with np.errstate(over="ignore"):
            return values.astype(np.float16).astype(np.float32)
    if storage is Storage.BF16:
        return bf16_reference(values)
    return values.copy()


float_bits = st.integers(0, 2**32 - 1).filter(lambda b: not ((b & 0x7F800000) == 0x7F800000 and b & 0x7FFFFF))
weight_elements = st.one_of(
    st.floats(width=32, allow_nan=False),
    float_bits.map(bits_f32),
    st.sampled_from(
        [
            65504.0,  # fp16 max
            65519.996,  # rounds to fp16 max
            65520.0,  # rounds to fp16 inf
            6e-08,  # fp16 subnormal
            bits_f32(0x3F808000),  # bf16 tie, even below: rounds down
            bits_f32(0x3F818000),  # bf16 tie, odd below: rounds up
            bits_f32(0x7F7FFFFF),  # FLT_MAX: bf16 rounds to inf
            -0.0,
        ]
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=arrays(np.float32, st.integers(1, 33), elements=weight_elements),
    storage=st.sampled_from([Storage.FP16, Storage.BF16, Storage.FP32]),
)
def test_new_weights_read_back_as_the_reference_rounding(
    tmp_path: Path, values: np.ndarray, storage: Storage
) -> None:
    expected = reference(values, storage)
    if (np.isfinite(values) & ~np.isfinite(expected)).any():  # the storage cannot hold a finite value
        with pytest.raises(BinFormatError, match=f"overflow {storage.value}"):
            write_and_read(values, storage, tmp_path)
        return
    decoded, raw = write_and_read(values, storage, tmp_path)
    assert decoded.dtype == np.float32
    # bit equality (keeps -0.0 and the infinities honest)
    assert decoded.view(np.uint32).tolist() == expected.view(np.uint32).tolist()
    width = 4 if storage is Storage.FP32 else 2
    assert len(raw) == 4 + math.ceil(values.size * width / 4) * 4
    assert int.from_bytes(raw[:4], "little") == TAGS[storage]
    assert raw[4 + values.size * width :] == b"\0" * (len(raw) - 4 - values.size * width), "zero padding"


NAN_BITS = [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0xFFFF8000, 0x7FFFFFFF]


@pytest.mark.parametrize("storage", [Storage.FP32, Storage.FP16, Storage.BF16])
def test_nan_weights_stay_nan(tmp_path: Path, storage: Storage) -> None:
    values = np.array(NAN_BITS, dtype=np.uint32).view(np.float32)
    decoded, _ = write_and_read(values, storage, tmp_path)
    assert np.isnan(decoded).all(), decoded.view(np.uint32).tolist()


def test_bf16_reference_on_known_values() -> None:
    """The independent reference itself, on hand-checked cases."""
    cases = {
        0x3F800000: 0x3F800000,  # 1.0 exact
        0x3F808000: 0x3F800000,  # tie, lower half even: down
        0x3F818000: 0x3F820000,  # tie, lower half odd: up
        0x3F808001: 0x3F810000,  # above the tie: up
        0x7F7FFFFF: 0x7F800000,  # FLT_MAX: to +inf
        0xFF7FFFFF: 0xFF800000,  # -FLT_MAX: to -inf
        0x00000001: 0x00000000,  # smallest subnormal: to +0
        0x80000000: 0x80000000,  # -0.0
    }
    got = bf16_reference(np.array(list(cases), dtype=np.uint32).view(np.float32))
    assert got.view(np.uint32).tolist() == list(cases.values())
