"""The .param grammar accepts what ncnn 1.0.20261020 accepts and types every literal as ncnn does."""

from __future__ import annotations

import os
import subprocess
import sys

import ncnn
import numpy as np
import pytest

from graphsurgeon.errors import ParamSyntaxError
from graphsurgeon.formats.emit_text import emit_param_text
from graphsurgeon.formats.param_text import parse_param_text
from graphsurgeon.ir.params import Param
from graphsurgeon.schema.catalog import ValueType as V


def ncnn_accepts(text: str) -> bool:
    net = ncnn.Net()
    return net.load_param_mem(text) == 0


def one_layer(line: str) -> str:
    return f"7767517\n2 3\nInput in 0 1 x\n{line}\n"


@pytest.mark.parametrize(
    ("line", "pid", "expected"),
    [
        ("Crop c 1 1 x y 9=1, 10=3, 11=0,", 9, Param(V.INT_ARRAY, (1,))),
        ("Crop c 1 1 x y -23309=2,0,1 -23310=2,-233,5 -23311=2,0,1", 10, Param(V.INT_ARRAY, (-233, 5))),
        ("Eltwise e 1 1 x y 0=1 1=1.0,2.5", 1, Param(V.FLOAT_ARRAY, (1.0, 2.5))),
        ("Eltwise e 1 1 x y 0=1 1=1.5,2", 1, Param(V.FLOAT_ARRAY, (1.5, 2.0))),  # float first: ints convert
        ("Eltwise e 1 1 x y 0=1 -23301=0", 1, Param(V.INT_ARRAY, ())),
        ("BinaryOp b 1 1 x y 0=2 1=1 2=3.0", 2, Param(V.FLOAT, 3.0)),
        ("BinaryOp b 1 1 x y 0=2 1=1 2=-1.5E-3", 2, Param(V.FLOAT, float(np.float32(-1.5e-3)))),
        ("BinaryOp b 1 1 x y 0=2 1=1 2=1e5", 2, Param(V.FLOAT, 1e5)),
        ("RMSNorm n 1 1 x y 0=8 1=1e-06 2=0", 1, Param(V.FLOAT, float(np.float32(1e-6)))),
        ('Reshape r 1 1 x y 6="0w,-1"', 6, Param(V.STRING, "0w,-1")),
        ("Reshape r 1 1 x y 6=abc,def", 6, Param(V.STRING, "abc,def")),
        ('Reshape r 1 1 x y 6="a b"', 6, Param(V.STRING, "a b")),
        ("Concat c 1 1 x y 0=-2", 0, Param(V.INT, -2)),
        ("Permute p 1 1 x y 0=+2", 0, Param(V.INT, 2)),
    ],
)
def test_literals_are_typed_like_ncnn(line: str, pid: int, expected: Param) -> None:
    text = one_layer(line)
    graph = parse_param_text(text)
    assert graph.layers[1].params[pid] == expected
    assert ncnn_accepts(text), "ncnn itself must accept the same text"


def test_tabs_crlf_blank_lines_and_header_spacing() -> None:
    text = "7767517\r\n2\t3\r\n\r\nInput\tin\t0 1 x\t0=4\r\nReLU  r 1 1   x y\r\n\r\n"
    graph = parse_param_text(text)
    assert [layer.type for layer in graph.layers] == ["Input", "ReLU"]
    assert graph.layers[0].params[0] == Param(V.INT, 4)
    assert ncnn_accepts(text)


def test_127_character_value_tokens_are_read_and_128_are_not() -> None:
    ok = "1." + "0" * 125
    graph = parse_param_text(one_layer(f"BinaryOp b 1 1 x y 0=2 1=1 2={ok}"))
    assert graph.layers[1].params[2] == Param(V.FLOAT, 1.0)
    with pytest.raises(ParamSyntaxError, match="at most 127"):
        parse_param_text(one_layer(f"BinaryOp b 1 1 x y 0=2 1=1 2={ok}0"))


def test_custom_types_and_unknown_params_are_kept_verbatim() -> None:
    text = "7767517\n2 3\nInput in 0 1 x\nYoloV5Focus f 1 1 x y 0=3 29=1.5 7=abc -23305=2,1,2\n"
    graph = parse_param_text(text)
    layer = graph.layers[1]
    assert layer.spec is None
    assert layer.params == {
        0: Param(V.INT, 3),
        29: Param(V.FLOAT, 1.5),
        7: Param(V.STRING, "abc"),
        5: Param(V.INT_ARRAY, (1, 2)),
    }
    again = emit_param_text(parse_param_text(emit_param_text(graph)))
    assert again == emit_param_text(graph)
    assert "YoloV5Focus f 1 1 x y 0=3 -23305=2,1,2 7=abc 29=1.5" in again


def test_errors_name_file_line_and_column() -> None:
    text = "7767517\n2 3\nInput in 0 1 x\nReLU r 1 1 x y 0=\n"
    with pytest.raises(ParamSyntaxError) as info:
        parse_param_text(text, path="m.param")
    err = info.value
    assert (err.path, err.line) == ("m.param", 4)
    assert str(err).startswith("m.param:4:")
    assert "followed directly by its value" in str(err)
    with pytest.raises(ParamSyntaxError, match=r"m.param:4:18: unexpected '1x'; expected an int or a float"):
        parse_param_text("7767517\n2 3\nInput in 0 1 x\nReLU r 1 1 x y 0=1x\n", path="m.param")


def test_lines_after_the_counted_layers_are_ignored_like_ncnn() -> None:
    text = "7767517\n2 2\nInput in 0 1 x\nReLU r 1 1 x y\nNoop extra 1 1 y z\n"
    graph = parse_param_text(text, path="m.param")
    assert [layer.name for layer in graph.layers] == ["in", "r"]
    assert graph.notes and "m.param:5" in graph.notes[0]
    assert ncnn_accepts(text)


def test_emitted_literals_follow_the_safe_writer_rules() -> None:
    text = one_layer("Eltwise e 1 1 x y 0=1 1=1,2,3 2=7.0 3=0.1 4=1e-10 5=-3.4028235e+38 6=x")
    out = emit_param_text(parse_param_text(text))
    line = out.splitlines()[3]
    assert line == "Eltwise e 1 1 x y 0=1 -23301=3,1,2,3 2=7.0 3=0.1 4=1e-10 5=-3.4028235e+38 6=x"
    assert ncnn_accepts(out)


def test_syntax_messages_are_the_same_in_every_run() -> None:
    """The terminals a message lists come from a set, whose order follows the per-process string hash
    seed; the message must not change from one run to the next."""
    script = (
        "from graphsurgeon.errors import ParamSyntaxError\n"
        "from graphsurgeon.formats.param_text import parse_param_text\n"
        "from graphsurgeon.rewrite.pattern_values import parse_pattern_lines\n"
        "for parse, text in ((parse_pattern_lines, 'Conv %c 1 1 %x * 1=#'),\n"
        "                    (parse_param_text, '7767517\\n2 2\\nInput in 0 1 x\\nReLU r 1 1 x y 0=#\\n')):\n"
        "    try:\n"
        "        parse(text)\n"
        "    except ParamSyntaxError as err:\n"
        "        print(err)\n"
    )
    outputs = set()
    for seed in range(6):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        cmd = [sys.executable, "-c", script]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        assert proc.stdout.count("; expected ") == 2, proc.stdout
        outputs.add(proc.stdout)
    assert len(outputs) == 1, outputs
