"""Property tests (hypothesis) for the readers and writers: byte mutations.

Random byte mutations of a valid .param, .param.bin and .bin either read cleanly or raise a GsurgError;
nothing else escapes and nothing hangs.
"""

from __future__ import annotations

import itertools
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.emit_text import emit_param_text
from graphsurgeon.formats.model_bin import planned_loads, read_bin, write_bin
from graphsurgeon.formats.param_bin import emit_param_bin, parse_param_bin
from graphsurgeon.formats.param_text import parse_param_text, read_param_text
from graphsurgeon.ir.weights import Storage, Weight
from tests.properties_harness import SLOW

# ---- b. byte mutations -------------------------------------------------------------------------
INTERESTING_WORDS = [0, 1, -1, -233, -23300, -23400, 7767517, 0x01306B47, 0x01348B83, 0x000D4B38, 2**31 - 1]


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "word"]))
        pos = draw(st.integers(0, max(len(buf), 1) - 1)) if buf else 0
        if op == "flip" and buf:
            buf[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del buf[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del buf[pos:]
        elif op == "word":
            word = struct.pack("<i", draw(st.sampled_from(INTERESTING_WORDS)))
            aligned = pos - pos % 4 if draw(st.booleans()) else pos
            buf[aligned : aligned + 4] = word
    return bytes(buf)


BASE_PARAM = """7767517
8 9
Input in 0 1 data 0=8 1=8 2=3
Convolution conv 1 1 data c1 0=4 1=3 4=1 5=1 6=108 9=2 -23310=1,0.1
Split sp 1 2 c1 c2 c3
BinaryOp add 2 1 c2 c3 s 0=0
Reshape rs 1 1 s f 0=-1 6="0w,-1"
InnerProduct fc 1 1 f y 0=5 1=1 2=1280
Crop cr 1 1 y yc -23309=1,0 -23310=1,5 -23311=1,0
Softmax prob 1 1 yc prob 0=0
"""


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, bytes]:
    """A valid model with an fp16-tagged conv weight, raw biases and an fp32-tagged fc weight."""
    folder = tmp_path_factory.mktemp("mutations")
    graph = parse_param_text(BASE_PARAM)
    rng = np.random.default_rng(7)
    for layer, aw in planned_loads(graph):
        storage = Storage.FP16 if layer.name == "conv" and aw.load_type == 0 else None
        values = rng.standard_normal(aw.count).astype(np.float32)
        layer.weights[aw.name] = Weight.from_array(values, load_type=aw.load_type, storage=storage)
    write_bin(graph, folder / "base.bin")
    return folder, (folder / "base.bin").read_bytes(), emit_param_bin(graph)


_counter = itertools.count()


@settings(max_examples=1000, deadline=None, suppress_health_check=SLOW)
@given(data=mutated(BASE_PARAM.encode()))
def test_mutated_param_text_parses_or_raises_gsurg_error(
    base_model: tuple[Path, bytes, bytes], data: bytes
) -> None:
    folder = base_model[0]
    path = folder / f"p{next(_counter)}.param"
    path.write_bytes(data)
    start = time.monotonic()
    try:
        graph = read_param_text(path)
    except GsurgError as err:
        event(f"rejected: {type(err).__name__}")
        return
    finally:
        assert time.monotonic() - start < 5
        path.unlink()
    graph.check_links()
    event("read")
    try:
        text = emit_param_text(graph)
    except GsurgError:
        event("read, but the writer refused it")
        return  # something the reader took that the safe writer refuses is reported, never a crash
    assert parse_param_text(text).signature() == graph.signature()


@settings(max_examples=1000, deadline=None, suppress_health_check=SLOW)
@given(st.data())
def test_mutated_param_bin_parses_or_raises_gsurg_error(
    base_model: tuple[Path, bytes, bytes], data: st.DataObject
) -> None:
    blob = data.draw(mutated(base_model[2]))
    start = time.monotonic()
    try:
        graph = parse_param_bin(blob)
    except GsurgError as err:
        event(f"rejected: {type(err).__name__}")
        return
    finally:
        assert time.monotonic() - start < 5
    graph.check_links()
    event("read")


@settings(max_examples=1000, deadline=None, suppress_health_check=SLOW)
@given(st.data())
def test_mutated_bin_walks_or_raises_gsurg_error(
    base_model: tuple[Path, bytes, bytes], data: st.DataObject
) -> None:
    folder, base_bin, _ = base_model
    blob = data.draw(mutated(base_bin))
    n = next(_counter)
    path, out = folder / f"w{n}.bin", folder / f"w{n}.out.bin"
    path.write_bytes(blob)
    graph = parse_param_text(BASE_PARAM)
    start = time.monotonic()
    try:
        records = read_bin(graph, path)
    except GsurgError as err:
        event(f"rejected: {type(err).__name__}")
        return
    finally:
        assert time.monotonic() - start < 5
    event(f"walked ({sum(r.storage is Storage.QUANT_TABLE for r in records)} quant-table records)")
    # it walked: every record decodes, and writing back is byte-exact
    assert records[-1].offset + records[-1].nbytes == len(blob)
    for layer in graph.layers:
        for weight in layer.weights.values():
            assert weight.numpy().shape == weight.shape
    write_bin(graph, out)
    assert out.read_bytes() == blob
    path.unlink()
    out.unlink()


def test_mutation_bases_are_valid(base_model: tuple[Path, bytes, bytes]) -> None:
    folder, base_bin, base_param_bin = base_model
    graph = parse_param_text(BASE_PARAM)
    assert graph.notes == [] and len(graph.blobs) == 9
    assert emit_param_text(graph) == BASE_PARAM
    records = read_bin(graph, folder / "base.bin")
    assert [(r.layer, r.slot, r.storage) for r in records] == [
        ("conv", "weight", Storage.FP16),
        ("conv", "bias", Storage.RAW),
        ("fc", "weight", Storage.FP32),
        ("fc", "bias", Storage.RAW),
    ]
    # conv: tag + 108 halfs (216 bytes), bias 4 fp32; fc: tag + 1280 fp32, bias 5 fp32
    assert [r.offset for r in records] == [0, 220, 236, 5360]
    assert len(base_bin) == 5380
    assert parse_param_bin(base_param_bin).signature()[0][0] == "Input"
