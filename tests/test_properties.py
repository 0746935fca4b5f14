"""Property tests (hypothesis) for the readers and writers.

a. Random valid graphs survive text emit → parse unchanged (and emit is a fixed point), and .param.bin
   emit → parse keeps layer types, param values (bit for bit) and the link structure.
b. Random byte mutations of a valid .param, .param.bin and .bin either read cleanly or raise a GsurgError;
   nothing else escapes and nothing hangs.
c. New weights written as fp16 / bf16 / fp32 read back as numpy's fp16 cast, round-to-nearest-even bf16
   (an independent reference below) and exact fp32.
"""

from __future__ import annotations

import itertools
import math
import struct
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from graphsurgeon.errors import BinFormatError, GsurgError
from graphsurgeon.formats.emit_text import emit_param_text
from graphsurgeon.formats.model_bin import planned_loads, read_bin, write_bin
from graphsurgeon.formats.param_bin import emit_param_bin, parse_param_bin
from graphsurgeon.formats.param_text import parse_param_text, read_param_text
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.params import Param
from graphsurgeon.ir.weights import Storage, Weight
from graphsurgeon.schema.catalog import ParamSpec, ValueType

FLT_MAX = float(np.finfo(np.float32).max)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]


def bits_f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


# ---- value strategies --------------------------------------------------------------------------
SPECIAL_FLOATS = [
    0.0,
    -0.0,
    bits_f32(1),  # smallest subnormal, 1.4e-45
    -bits_f32(1),
    bits_f32(0x007FFFFF),  # largest subnormal
    bits_f32(0x00800000),  # smallest normal, 1.1754944e-38
    -bits_f32(0x00800000),
    FLT_MAX,
    -FLT_MAX,
    bits_f32(0x7F7FFFFE),
    -1.2345678e-05,
    123456792.0,
    1e-05,
    0.1,
]
f32s = st.one_of(
    st.floats(width=32, allow_nan=False, allow_infinity=False), st.sampled_from(SPECIAL_FLOATS)
).map(lambda x: float(np.float32(x)))
int32s = st.one_of(
    st.integers(INT32_MIN, INT32_MAX), st.sampled_from([0, -1, 1, INT32_MIN, INT32_MAX, -233, 233, 16777217])
)


def utf8_at_most(limit: int) -> Callable[[str], bool]:
    return lambda s: len(s.encode("utf-8")) <= limit


# blob and layer names: no whitespace, no '=', 1..255 bytes; may be all digits
NAME_CHARS = st.one_of(
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="="), st.sampled_from("éß中😀")
)
names = st.one_of(
    st.text(NAME_CHARS, min_size=1, max_size=12),
    st.integers(0, 10**9).map(str),
    st.text(st.sampled_from("abcXYZ_0123.-"), min_size=250, max_size=255),
).filter(utf8_at_most(255))
# strings: bare ones (a letter, then no blank, comma or quote) and ones that need quotes
BARE_CHARS = st.one_of(
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters='",'), st.sampled_from("é中")
)
bare_strings = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from("abcxyzABCXYZ"),
    st.text(BARE_CHARS, max_size=30),
)
QUOTED_CHARS = st.one_of(
    st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"'), st.sampled_from("\t é中")
)
quoted_strings = st.one_of(
    st.text(QUOTED_CHARS, max_size=40),
    st.sampled_from(["", " ", "0w,-1", "a b", "1abc", "-1", "1.5", "inf", "nan", ",", "x,"]),
    st.text(st.sampled_from("ab ,1"), min_size=250, max_size=255),
)
strings = st.one_of(bare_strings, quoted_strings).filter(utf8_at_most(255))

param_values = st.one_of(
    st.builds(Param, st.just(ValueType.INT), int32s),
    st.builds(Param, st.just(ValueType.FLOAT), f32s),
    st.builds(Param, st.just(ValueType.INT_ARRAY), st.lists(int32s, max_size=6).map(tuple)),
    # an empty float array cannot survive the text form: see test_empty_float_array_round_trips_through_text
    st.builds(Param, st.just(ValueType.FLOAT_ARRAY), st.lists(f32s, min_size=1, max_size=6).map(tuple)),
    st.builds(Param, st.just(ValueType.STRING), strings),
)
random_params = st.dictionaries(st.integers(0, 29), param_values, max_size=5)

WEIGHT_FREE = [
    "ReLU",
    "Sigmoid",
    "TanH",
    "Split",
    "Concat",
    "BinaryOp",
    "Softmax",
    "Reshape",
    "Permute",
    "Noop",
]
LAYER_TYPES = [*WEIGHT_FREE, "InnerProduct", "Convolution"]


def arity(draw: st.DrawFn, layer_type: str) -> tuple[int, int]:
    if layer_type == "Split":
        return 1, draw(st.integers(1, 3))
    if layer_type == "Concat":
        return draw(st.integers(1, 3)), 1
    if layer_type == "BinaryOp":
        return draw(st.integers(1, 2)), 1
    if layer_type == "Noop":
        n = draw(st.integers(1, 2))
        return n, n
    return 1, 1


def weight_params(draw: st.DrawFn, layer_type: str) -> tuple[dict[int, Param], list[tuple[str, int]]]:
    """Consistent weight params for InnerProduct / Convolution, and the loads they imply."""
    num_output = draw(st.integers(1, 8))
    bias = draw(st.integers(0, 1))
    if layer_type == "InnerProduct":
        size = num_output * draw(st.integers(1, 8))
        params = {0: num_output, 1: bias, 2: size}
    else:
        kernel = draw(st.integers(1, 3))
        size = num_output * draw(st.integers(1, 4)) * kernel * kernel
        params = {0: num_output, 1: kernel, 5: bias, 6: size}
    typed = {pid: Param(ValueType.INT, v) for pid, v in params.items()}
    if draw(st.booleans()):  # fused activation: a float array the loader does not size anything from
        typed[10] = Param(ValueType.FLOAT_ARRAY, tuple(draw(st.lists(f32s, min_size=1, max_size=2))))
    loads = [("weight", size)] + ([("bias", num_output)] if bias else [])
    return typed, loads


@st.composite
def graphs(draw: st.DrawFn) -> tuple[Graph, dict[str, list[tuple[str, int]]]]:
    n_inputs = draw(st.integers(1, 3))
    plan = []
    for _ in range(draw(st.integers(1, 7))):
        layer_type = draw(st.sampled_from(LAYER_TYPES))
        plan.append((layer_type, *arity(draw, layer_type)))
    n_blobs = n_inputs + sum(n_out for _, _, n_out in plan)
    blob_names = draw(st.lists(names, min_size=n_blobs, max_size=n_blobs, unique=True))
    layer_names = draw(st.lists(names, min_size=len(plan) + 1, max_size=len(plan) + 1, unique=True))
    graph = Graph()
    graph.add_layer("Input", layer_names[0], [], blob_names[:n_inputs], draw(random_params))
    available = list(blob_names[:n_inputs])
    fresh = iter(blob_names[n_inputs:])
    loads: dict[str, list[tuple[str, int]]] = {}
    for (layer_type, n_in, n_out), name in zip(plan, layer_names[1:], strict=True):
        if layer_type in ("InnerProduct", "Convolution"):
            params, loads[name] = weight_params(draw, layer_type)
        else:
            params = draw(random_params)
        inputs = [draw(st.sampled_from(available)) for _ in range(n_in)]
        outputs = [next(fresh) for _ in range(n_out)]
        graph.add_layer(layer_type, name, inputs, outputs, params)
        available += outputs
    graph.check_links()
    return graph, loads


def first_appearance(graph: Graph) -> dict[str, int]:
    """Blob indices as ncnn numbers them: first appearance, bottoms before tops, layer by layer."""
    order: dict[str, int] = {}
    for layer in graph.layers:
        for blob in (*layer.inputs, *layer.outputs):
            order.setdefault(blob.name, len(order))
    return order


def raw_form(param: Param) -> tuple[str, bytes | str]:
    """What a .param.bin stores for a param: 4 bytes, an array of 4-byte words, or a string."""
    kind, value = param.kind, param.value
    if kind is ValueType.INT:
        return "scalar", struct.pack("<i", value)
    if kind is ValueType.FLOAT:
        return "scalar", struct.pack("<f", value)
    if kind.is_array:
        assert isinstance(value, tuple), param  # Param holds arrays as tuples
        code = "f" if kind is ValueType.FLOAT_ARRAY else "i"
        return "array", struct.pack(f"<{len(value)}{code}", *value)
    return "string", str(value)


# ---- a. random valid graphs --------------------------------------------------------------------
@settings(max_examples=400, deadline=None, suppress_health_check=SLOW)
@given(graphs())
def test_text_round_trip_of_random_graphs(sample: tuple[Graph, dict[str, list[tuple[str, int]]]]) -> None:
    graph, loads = sample
    text = emit_param_text(graph)
    back = parse_param_text(text, path="random.param")
    back.check_links()
    assert back.notes == []
    assert back.signature() == graph.signature()
    assert emit_param_text(back) == text, "emit must be a fixed point"
    assert len(text.splitlines()) == 2 + len(graph.layers)
    assert text.splitlines()[1] == f"{len(graph.layers)} {len(graph.blobs)}"
    found: dict[str, list[tuple[str, int]]] = {}
    for layer, aw in planned_loads(back):
        found.setdefault(layer.name, []).append((aw.name, aw.count))
    assert found == loads, "the weight params must size the same loads after the round trip"


def as_the_layer_sees_it(spec: ParamSpec | None, param: Param) -> Param:
    """The value R1020 hands the layer for a text literal (a float literal for an int param reads as the
    default), in the layer's own type: what a .param.bin, whose params are untyped, must hold. Ids the
    catalog does not know keep their literal."""
    if spec is None or param.kind is spec.type:
        return param
    if spec.type is ValueType.INT:  # get(int) on a float, array or string: the default
        return Param.of(ValueType.INT, spec.default)
    if spec.type is ValueType.FLOAT:  # get(float) converts an int; anything else gives the default
        return Param.of(ValueType.FLOAT, param.value if param.kind is ValueType.INT else spec.default)
    if spec.type.is_array:  # get(Mat) takes any array; the element type is the layer's
        return Param.of(spec.type, param.value if param.kind.is_array else spec.default)
    return Param.of(ValueType.STRING, spec.default)


@settings(max_examples=400, deadline=None, suppress_health_check=SLOW)
@given(graphs())
def test_param_bin_round_trip_of_random_graphs(
    sample: tuple[Graph, dict[str, list[tuple[str, int]]]],
) -> None:
    graph, _ = sample
    data = emit_param_bin(graph)
    back = parse_param_bin(data)
    back.check_links()
    order = first_appearance(graph)
    assert len(back.blobs) == len(graph.blobs) == len(order)
    assert struct.unpack_from("<3i", data) == (7767517, len(graph.layers), len(order))
    assert [layer.type for layer in back.layers] == [layer.type for layer in graph.layers]
    assert [layer.name for layer in back.layers] == [
        f"{layer.type}_{i}" for i, layer in enumerate(graph.layers)
    ]
    position = {id(layer): i for i, layer in enumerate(graph.layers)}
    back_position = {id(layer): i for i, layer in enumerate(back.layers)}
    for a, b in zip(graph.layers, back.layers, strict=True):
        assert [x.name for x in b.inputs] == [str(order[x.name]) for x in a.inputs]
        assert [x.name for x in b.outputs] == [str(order[x.name]) for x in a.outputs]
        assert b.params.keys() == a.params.keys()
        spec = a.spec
        assert spec is not None
        for pid, param in a.params.items():
            got = b.params[pid]
            pspec = spec.params.get(pid)
            want = as_the_layer_sees_it(pspec, param)
            # the bytes ncnn's untyped ParamDict holds are exactly the value the layer would see
            assert raw_form(got) == raw_form(want), (a.name, pid)
            if pspec is not None or param.kind in (ValueType.INT, ValueType.INT_ARRAY, ValueType.STRING):
                assert got == want, (a.name, pid)  # typed by the catalog, or untyped ints: identical
    for name, blob in graph.blobs.items():
        twin = back.blobs[str(order[name])]
        assert (twin.producer is None) == (blob.producer is None)
        if blob.producer is not None:
            assert back_position[id(twin.producer)] == position[id(blob.producer)]
        assert sorted(back_position[id(c)] for c in twin.consumers) == sorted(
            position[id(c)] for c in blob.consumers
        )
    assert emit_param_bin(back) == data, "emit_param_bin must be a fixed point"


def test_empty_float_array_round_trips_through_text() -> None:
    graph = Graph()
    graph.add_layer("Input", "in", [], ["x"])
    params = {0: Param(ValueType.INT, 1), 2: Param(ValueType.INT, 1), 10: Param(ValueType.FLOAT_ARRAY, ())}
    graph.add_layer("InnerProduct", "fc", ["x"], ["y"], params)
    assert parse_param_text(emit_param_text(graph)).signature() == graph.signature()


def test_int_literal_in_a_float_slot_is_seen_as_float32() -> None:
    graph = parse_param_text("7767517\n2 2\nInput in 0 1 x\nReLU r 1 1 x y 0=16777217\n")
    assert graph.layer("r").get("slope") == 16777216.0
    assert graph.layer("r").env()["slope"] == parse_param_bin(emit_param_bin(graph)).layers[1].env()["slope"]


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
