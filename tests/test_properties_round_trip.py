"""Property tests (hypothesis) for the readers and writers: round trips.

Random valid graphs survive text emit → parse unchanged (and emit is a fixed point), and .param.bin
emit → parse keeps layer types, param values (bit for bit) and the link structure.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsurgeon.formats.emit_text import emit_param_text
from graphsurgeon.formats.model_bin import planned_loads
from graphsurgeon.formats.param_bin import emit_param_bin, parse_param_bin
from graphsurgeon.formats.param_text import parse_param_text
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.params import Param
from graphsurgeon.schema.catalog import ParamSpec, ValueType
from tests.properties_harness import SLOW, bits_f32

FLT_MAX = float(np.finfo(np.float32).max)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

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
