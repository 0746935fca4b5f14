"""Writing weights in bounded pieces: new records are encoded chunk by chunk, synthesized values do not depend
on the chunking, and unchanged records are copied in one in-kernel copy per run of adjacent records.

Oracles: numpy's own float16 conversion, a bfloat16 rounding written here on the integer bits (ties to even),
the record layout of ncnn-format.md §3.2 (tag, payload, zero padding to 4 bytes), and the source file's
bytes. The peak-RSS bound itself is measured in benchmarks/bench_core.py, not here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.formats.model_bin import read_bin, write_bin
from graphsurgeon.formats.param_text import parse_param_text, read_param_text
from graphsurgeon.ir.encode import StorageOverflow, record_chunks
from graphsurgeon.ir.weights import Storage, Weight
from graphsurgeon.synth import synthesize_weights
from tests.conftest import CORPUS

N = 10_007  # odd and prime: no chunk size divides it, and 2-byte storages need padding
LIMIT = 1000
ITEM = {Storage.FP32: 4, Storage.RAW: 4, Storage.FP16: 2, Storage.BF16: 2, Storage.INT8: 1, Storage.BYTES: 1}
TAG = {Storage.FP32: "00000000", Storage.FP16: "476b3001", Storage.BF16: "838b3401", Storage.INT8: "384b0d00"}


def bf16_by_hand(values: np.ndarray) -> bytes:
    """Keep the upper 16 bits; round up when the lower 16 exceed half, or equal it with an odd upper."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    upper, lower = bits >> 16, bits & 0xFFFF
    up = (lower > 0x8000) | ((lower == 0x8000) & ((upper & 1) == 1))
    out = (upper + up).astype(np.uint16)
    out[np.isnan(values)] = 0x7FC0
    return out.astype("<u2").tobytes()


def record_by_hand(values: np.ndarray, storage: Storage) -> bytes:
    if storage in (Storage.FP32, Storage.RAW):
        payload = values.astype("<f4").tobytes()
    elif storage is Storage.FP16:
        payload = values.astype("<f2").tobytes()
    elif storage is Storage.BF16:
        payload = bf16_by_hand(values)
    else:
        payload = values.tobytes()
    tag = bytes.fromhex(TAG[storage]) if storage in TAG else b""
    return tag + payload + b"\0" * (-len(payload) % 4)


def values_for(storage: Storage) -> np.ndarray:
    rng = np.random.default_rng(11)
    if storage is Storage.INT8:
        return rng.integers(-128, 128, size=N, dtype=np.int8)
    if storage is Storage.BYTES:
        return rng.integers(0, 256, size=N, dtype=np.uint8)
    values = (rng.standard_normal(N) * 3).astype(np.float32)
    values[::97] = np.float32(1.00390625)  # 0x3F808000: a bfloat16 tie with an even upper half (rounds down)
    values[1::97] = np.float32(1.01171875)  # 0x3F818000: a tie with an odd upper half (rounds up)
    return values


def in_blocks(values: np.ndarray, size: int) -> Iterator[np.ndarray]:
    """Blocks through one reused buffer, as synth yields them: a consumer keeping one would see it change."""
    buf = np.empty(size, dtype=values.dtype)
    for start in range(0, values.size, size):
        block = buf[: min(size, values.size - start)]
        block[:] = values[start : start + size]
        yield block


def weights_for(values: np.ndarray, storage: Storage) -> dict[str, Weight]:
    load_type = 1 if storage is Storage.RAW else 3 if storage is Storage.BYTES else 0
    return {
        "array": Weight.from_array(values, load_type=load_type, storage=storage),
        "make": Weight.lazy(lambda: values.copy(), shape=(N,), load_type=load_type, storage=storage),
        "streamed": Weight.streamed(
            lambda: in_blocks(values, 2500), shape=(N,), load_type=load_type, storage=storage
        ),
    }


@pytest.mark.parametrize("storage", list(ITEM), ids=lambda s: s.value)
def test_records_are_encoded_in_bounded_chunks_equal_to_the_whole_encoding(storage: Storage) -> None:
    values = values_for(storage)
    expected = record_by_hand(values, storage)
    for source, weight in weights_for(values, storage).items():
        chunks = [bytes(c) for c in record_chunks(weight, max_elems=LIMIT)]
        assert max(len(c) for c in chunks) <= LIMIT * ITEM[storage], source
        assert len(chunks) >= N // LIMIT, source  # the payload really is cut up
        assert b"".join(chunks) == expected, source


def test_an_overflow_counts_every_chunk_and_names_the_first_index() -> None:
    values = np.zeros(N, dtype=np.float32)
    values[[1500, 7000, 7001]] = [1e6, -7e4, 65520.0]  # 65520 rounds to fp16 inf; 65504 is the largest finite
    weight = Weight.from_array(values, load_type=0, storage=Storage.FP16)
    with pytest.raises(
        StorageOverflow, match=r"^3 value\(s\) overflow fp16, the first 1000000\.0 at flat index 1500$"
    ):
        for _ in record_chunks(weight, max_elems=LIMIT):
            pass


def test_a_new_weight_that_yields_the_wrong_count_is_refused() -> None:
    short = Weight.streamed(
        lambda: iter([np.zeros(10, np.float32)]), shape=(11,), load_type=0, storage=Storage.FP32
    )
    with pytest.raises(ValueError, match=r"\(11 elements\) produced 10 values"):
        b"".join(record_chunks(short))


FC = "7767517\n2 2\nInput in 0 1 x 0=1000\nInnerProduct fc 1 1 x y 0=2500 1=1 2=2500000\n"


@pytest.mark.parametrize("storage", [Storage.FP32, Storage.FP16, Storage.BF16], ids=lambda s: s.value)
def test_synthesized_values_do_not_depend_on_the_chunk_size(storage: Storage) -> None:
    graph = parse_param_text(FC)  # a 2.5M-element weight: more than two seeded blocks
    synthesize_weights(graph, seed=5, storage=storage)
    weight = graph.layer("fc").weights["weight"]
    records = {
        k: b"".join(bytes(c) for c in record_chunks(weight, max_elems=k)) for k in (999_983, 1 << 20, 3 << 20)
    }
    assert len(set(records.values())) == 1
    whole = weight.numpy().reshape(-1)
    assert whole.std() > 0.01 and np.isfinite(whole).all()
    assert records[1 << 20] == record_by_hand(whole, storage)


def counted(monkeypatch: pytest.MonkeyPatch, name: str, refuse: bool) -> list[int]:
    """Count calls of os.<name>; with ``refuse``, copy_file_range fails as on a filesystem without it."""
    calls: list[int] = []
    real = getattr(os, name)

    def wrapper(*args: object) -> object:
        calls.append(1)
        if refuse:
            raise OSError(18, "Invalid cross-device link")
        return real(*args)

    monkeypatch.setattr(os, name, wrapper)
    return calls


@pytest.mark.parametrize("kernel", [True, False], ids=["copy_file_range", "pread-fallback"])
def test_an_unchanged_model_is_copied_in_one_run(
    kernel: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    param = CORPUS / "ncnn-assets" / "squeezenet_v1.1.param"  # 52 records, 4.7 MiB: under one 8 MiB pread
    graph = read_param_text(param)
    records = read_bin(graph, param.with_suffix(".bin"))
    assert len(records) > 50
    copies = counted(monkeypatch, "copy_file_range", refuse=not kernel)
    preads = counted(monkeypatch, "pread", refuse=False)
    write_bin(graph, tmp_path / "o.bin")
    assert (tmp_path / "o.bin").read_bytes() == param.with_suffix(".bin").read_bytes()
    assert (len(copies), len(preads)) == ((1, 0) if kernel else (1, 1))


THREE_FC = (
    "7767517\n4 4\nInput in 0 1 x 0=2\nInnerProduct a 1 1 x y 0=2 1=1 2=4\n"
    "InnerProduct b 1 1 y z 0=2 1=1 2=4\nInnerProduct c 1 1 z w 0=2 1=1 2=4\n"
)


def test_a_changed_weight_splits_the_copy_around_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "in.bin"  # per layer: tag 0, 4 fp32 weights, 2 raw fp32 biases (28 bytes)
    weights = [np.arange(4, dtype="<f4") + 10 * i for i in range(3)]
    biases = [np.array([i, -i], dtype="<f4") for i in range(3)]
    src.write_bytes(
        b"".join(b"\0\0\0\0" + w.tobytes() + b.tobytes() for w, b in zip(weights, biases, strict=True))
    )
    graph = parse_param_text(THREE_FC)
    read_bin(graph, src)
    new = np.array([0.5, 1.5, 2.5, 3.5], dtype=np.float32)
    graph.layer("b").weights["weight"] = Weight.from_array(new, load_type=0, storage=Storage.FP16)
    copies = counted(monkeypatch, "copy_file_range", refuse=False)
    write_bin(graph, tmp_path / "o.bin")
    raw = src.read_bytes()
    fp16_record = bytes.fromhex("476b3001") + new.astype("<f2").tobytes()
    assert (tmp_path / "o.bin").read_bytes() == raw[:28] + fp16_record + raw[48:]
    assert len(copies) == 2  # layer a's two records; then b's bias and all of c, adjacent in the source
