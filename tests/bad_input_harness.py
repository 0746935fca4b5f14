"""What test_bad_input_cases.py and test_bad_input_cli.py share: the pieces of a text .param (magic on
line 1, counts on line 2, ``Input in`` on line 3), the InnerProduct fixture with its .bin laid out by
hand (offsets in the comments), and ``Case``: one malformed input for ``gsurg fmt`` or ``gsurg
synth-bin``, with the builders of each kind."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

MAGIC = 7767517
H = f"{MAGIC}\n"  # line 1; the counts are line 2, the first layer line 3
IN = "Input in 0 1 x\n"  # line 3 in every one-layer fixture below


def two_layers(line4: str, counts: str = "2 2") -> str:
    """Magic (line 1), counts (line 2), ``Input in`` (line 3) and the layer under test (line 4)."""
    return f"{H}{counts}\n{IN}{line4}\n"


def i32(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


# ---- the weight fixture ------------------------------------------------------------------------
# InnerProduct fc: 0=num_output 3, 1=bias_term 1, 2=weight_data_size 12. Its .bin is
#   offset 0: 4-byte tag (0 = fp32), offset 4: 12 fp32 weights (48 bytes), offset 52: 3 raw fp32 biases,
#   end at 64.
FC_PARAM = H + "3 3\nInput in 0 1 x 0=4\nInnerProduct fc 1 1 x y 0=3 1=1 2=12\nReLU r 1 1 y z\n"
WEIGHTS = (np.arange(12, dtype=np.float32) + 1) * np.float32(0.25)  # 0.25, 0.5, … : fp32-looking words
BIAS = np.array([0.5, -0.5, 1.5], dtype=np.float32)
TAG_FP32 = i32(0)
TAG_FP16 = (0x01306B47).to_bytes(4, "little")
GOOD_BIN = TAG_FP32 + WEIGHTS.tobytes() + BIAS.tobytes()
assert len(GOOD_BIN) == 64

# A .bin written for "InnerProduct 0=4 1=1 2=16": 4 + 64 + 16 = 84 bytes; and for "0=2 1=1 2=8": 4 + 32 + 8.
BIN_FOR_WIDER_FC = TAG_FP32 + np.ones(16, np.float32).tobytes() + np.ones(4, np.float32).tobytes()
BIN_FOR_NARROWER_FC = TAG_FP32 + np.ones(8, np.float32).tobytes() + np.ones(2, np.float32).tobytes()
assert (len(BIN_FOR_WIDER_FC), len(BIN_FOR_NARROWER_FC)) == (84, 44)


@dataclass(frozen=True)
class Case:
    """One malformed input. ``files`` are written into tmp_path; ``argv`` and ``expect`` may use
    ``{tmp}`` for tmp_path. ``outputs`` must not exist afterwards."""

    files: dict[str, bytes]
    argv: list[str]
    expect: list[str]
    outputs: list[str] = field(default_factory=lambda: ["out.param"])
    forbid: list[str] = field(default_factory=list)


def text_case(text: str | bytes, line: int, *extra: str, name: str = "bad.param") -> Case:
    """``gsurg fmt bad.param -o out.param``; the error must name ``bad.param:<line>:``."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return Case(
        files={name: data},
        argv=["fmt", f"{{tmp}}/{name}", "-o", "{tmp}/out.param"],
        expect=[f"{{tmp}}/{name}:{line}:", *extra],
    )


def bin_case(data: bytes, *expect: str, param: str = FC_PARAM, names: str = "m.bin") -> Case:
    """``gsurg fmt m.param --bin m.bin -o out.param --out-bin out.bin``; the error must name the .bin (or,
    when the params themselves are wrong, the file ``names``)."""
    return Case(
        files={"m.param": param.encode(), "m.bin": data},
        argv=[
            "fmt",
            "{tmp}/m.param",
            "-o",
            "{tmp}/out.param",
            "--bin",
            "{tmp}/m.bin",
            "--out-bin",
            "{tmp}/out.bin",
        ],
        expect=[f"{{tmp}}/{names}", *expect],
        outputs=["out.param", "out.bin"],
    )


def param_bin_case(data: bytes, *expect: str) -> Case:
    return Case(
        files={"m.param.bin": data},
        argv=["fmt", "{tmp}/m.param.bin", "-o", "{tmp}/out.param"],
        expect=["{tmp}/m.param.bin", *expect],
    )


def synth_case(text: str, *expect: str, forbid: tuple[str, ...] = ()) -> Case:
    return Case(
        files={"s.param": text.encode()},
        argv=["synth-bin", "{tmp}/s.param", "-o", "{tmp}/out.bin"],
        expect=list(expect),
        outputs=["out.bin"],
        forbid=list(forbid),
    )
