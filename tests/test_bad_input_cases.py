"""Malformed inputs through the real CLI entry, one table of cases (text .param header, layer lines and
params, non-text files, .bin against the fc fixture, .param.bin, synth-bin): exit 2, one ``gsurg: error:``
line naming the exact place (file:line for text .param, layer / weight / byte offset for .bin and
.param.bin), no traceback, no output file (writes are atomic) and untouched inputs.

Offsets and line numbers are computed by hand from the file formats (text header and layer lines; .bin
records: tag + payload); they are not read back from gsurg. The fixtures and case builders are in
``tests/bad_input_harness.py``.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from tests.bad_input_harness import (
    BIAS,
    BIN_FOR_NARROWER_FC,
    BIN_FOR_WIDER_FC,
    FC_PARAM,
    GOOD_BIN,
    IN,
    MAGIC,
    TAG_FP16,
    WEIGHTS,
    Case,
    H,
    bin_case,
    i32,
    param_bin_case,
    synth_case,
    text_case,
    two_layers,
)

LONG_VALUE = "1." + "0" * 126  # 128 characters
CASES = [
    # ---- text .param: header ---------------------------------------------------------------------
    pytest.param(text_case(f"{MAGIC + 1}\n1 1\n{IN}", 1, "bad magic"), id="bad-magic"),
    pytest.param(text_case(f"2 2\n{IN}ReLU r 1 1 x y\n", 1), id="magic-missing"),
    pytest.param(text_case("", 1), id="empty-file"),
    pytest.param(text_case(H, 1), id="magic-only"),
    pytest.param(text_case(f"{H}abc 1\n{IN}", 2), id="layer-count-not-a-number"),
    pytest.param(text_case(f"{H}2.0 2\n{IN}ReLU r 1 1 x y\n", 2), id="layer-count-float"),
    pytest.param(text_case(f"{H}-1 2\n{IN}", 2, "max_net_count"), id="layer-count-negative"),
    pytest.param(text_case(f"{H}1 0\n{IN}", 2, "max_net_count"), id="blob-count-zero"),
    pytest.param(
        text_case(f"{H}3 2\n{IN}ReLU r 1 1 x y\n", 2, "3 layers", "only 2"), id="layer-count-too-large"
    ),
    pytest.param(text_case(f"{H}2 1\n{IN}ReLU r 1 1 x y\n", 2, "1 blobs"), id="blob-count-too-small"),
    pytest.param(
        text_case(f"{H}1 1000001\n{IN}", 2),
        id="blob-count-over-max-net-count",
    ),
    pytest.param(
        text_case(f"{H}1 99999999999\n{IN}", 2),
        id="blob-count-over-int32",
    ),
    pytest.param(text_case("\ufeff" + f"{H}1 1\n{IN}", 1), id="utf8-bom"),
    # ---- text .param: layer lines ----------------------------------------------------------------
    pytest.param(
        text_case(two_layers("ReLU r 1 1 x"), 4, "1 bottom(s) and 1 top(s)"), id="truncated-layer-line"
    ),
    pytest.param(text_case(two_layers("ReLU r one 1 x y"), 4, "'one'"), id="bottom-count-not-a-number"),
    pytest.param(text_case(two_layers("ReLU r -1 1 x y"), 4, "negative"), id="bottom-count-negative"),
    pytest.param(
        text_case(f"{H}3 3\n{IN}ReLU r 1 1 x y\nSigmoid s 1 1 x y\n", 5, "duplicate top", "'y'"),
        id="duplicate-top",
    ),
    pytest.param(text_case(two_layers("ReLU r 1 1 x x"), 4, "duplicate top", "'x'"), id="top-equals-input"),
    pytest.param(
        text_case(two_layers("Split s 1 2 x a a", counts="2 3"), 4, "same top twice"),
        id="same-top-twice-in-one-layer",
    ),
    pytest.param(
        # line 4 reads y (legal on its own: ncnn makes an empty orphan); line 5 then produces y: the error
        text_case(f"{H}3 3\n{IN}ReLU r 1 1 y z\nSigmoid s 1 1 x y\n", 5, "'y'", "line 4"),
        id="blob-read-before-produced",
    ),
    pytest.param(
        text_case(f"{H}2 2\n{IN}# a comment\nReLU r 1 1 x y\n", 4), id="comment-line-is-not-a-layer"
    ),
    pytest.param(
        text_case(two_layers("ReLU " + "n" * 256 + " 1 1 x y"), 4, "256 bytes"), id="name-256-chars"
    ),
    pytest.param(
        text_case(two_layers("ReLU " + "é" * 128 + " 1 1 x y"), 4),
        id="name-256-utf8-bytes",
    ),
    pytest.param(
        text_case(f"{H}2 2\n{IN}BinaryOp op 1 1 x y\n0=2 1=1 2=3.0\n", 5), id="params-on-continuation-line"
    ),
    # ---- text .param: params ---------------------------------------------------------------------
    pytest.param(text_case(two_layers("ReLU r 1 1 x y 32=1"), 4, "param id 32"), id="param-id-32"),
    pytest.param(text_case(two_layers("ReLU r 1 1 x y -23332=1,1"), 4, "param id 32"), id="old-array-id-32"),
    pytest.param(
        text_case(two_layers("Crop c 1 1 x y -23309=3,1,2"), 4, "-23309", "3 element(s)", "has 2"),
        id="old-array-bad-length",
    ),
    pytest.param(
        text_case(two_layers("Crop c 1 1 x y -23309=1,5,"), 4),
        id="old-array-trailing-comma",
    ),
    pytest.param(
        text_case(two_layers("Crop c 1 1 x y -23309=0,"), 4),
        id="old-array-empty-trailing-comma",
    ),
    pytest.param(
        text_case(two_layers("Eltwise e 1 1 x y 0=1 -23301=2,1.0,2"), 4, "mixed-type", "-23301"),
        id="old-array-mixed-types",
    ),
    pytest.param(
        text_case(two_layers("Slice s 1 1 x y 0=1,2.5"), 4, "mixed-type", "param 0"),
        id="natural-array-int-then-float",
    ),
    pytest.param(text_case(two_layers("ReLU r 1 1 x y 1=1e39"), 4, "1e39", "overflows"), id="float-overflow"),
    pytest.param(
        text_case(two_layers("Noop r 1 1 x y 0=3.4028236e38"), 4, "overflows"), id="float-just-over-flt-max"
    ),
    pytest.param(text_case(two_layers("ReLU r 1 1 x y 0=2147483648"), 4, "32 bits"), id="int-overflow"),
    pytest.param(
        text_case(two_layers(f"ReLU r 1 1 x y 0={LONG_VALUE}"), 4, "128 bytes"), id="value-128-chars"
    ),
    pytest.param(
        text_case(two_layers("Eltwise e 1 1 x y 1=1.0," + "2" * 128), 4, "128 bytes"),
        id="array-element-128-chars",
    ),
    pytest.param(
        text_case(two_layers('Reshape r 1 1 x y 6="0w,-1'), 4, '"0w,-1'), id="unterminated-quoted-string"
    ),
    pytest.param(
        text_case(two_layers('Reshape r 1 1 x y 6="' + "a" * 256 + '"'), 4, "ncnn reads at most"),
        id="string-256-chars",
    ),
    pytest.param(
        text_case(two_layers('Reshape r 1 1 x y 6="' + "é" * 128 + '"'), 4),
        id="string-256-utf8-bytes",
    ),
    pytest.param(text_case(two_layers("ReLU r 1 1 x y 0="), 4, "end of line"), id="key-without-value"),
    pytest.param(
        text_case(two_layers("ReLU r 1 1 x y 0= 1"), 4),
        id="blank-between-key-and-value",
    ),
    pytest.param(text_case(two_layers("ReLU r 1 1 x y 0=1.5.3"), 4, "'1.5.3'"), id="float-two-dots"),
    pytest.param(text_case(two_layers("ReLU r 1 1 x y 0=1e"), 4, "'1e'"), id="float-bare-exponent"),
    pytest.param(text_case(two_layers("ReLU r 1 1 x y 0=0x10"), 4, "'0x10'"), id="hex-int"),
    pytest.param(text_case(two_layers("ReLU r 1 1 x y 0==1"), 4), id="double-equals"),
    pytest.param(text_case(two_layers("Noop r 1 1 x y 0=1,,2"), 4), id="array-empty-element"),
    pytest.param(text_case(two_layers('Noop r 1 1 x y 0="a"b'), 4), id="text-after-closing-quote"),
    # ---- not text at all -------------------------------------------------------------------------
    pytest.param(
        text_case(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xff", 1, "not UTF-8"), id="binary-garbage"
    ),
    pytest.param(
        text_case(f"{H}2 2\n{IN}ReLU r 1 1 x ".encode() + b"\xff\xfe\n", 4, "not UTF-8"),
        id="non-utf8-in-layer-line",
    ),
    # ---- .bin against the fc fixture -------------------------------------------------------------
    pytest.param(
        bin_case(GOOD_BIN[:60], "layer fc", "weight bias", "offset 52", "needs 12 bytes", "8 bytes later"),
        id="bin-truncated-in-bias",
    ),
    pytest.param(bin_case(GOOD_BIN + bytes(8), "offset 64", "8 more bytes"), id="bin-8-trailing-bytes"),
    pytest.param(bin_case(GOOD_BIN + bytes(2), "offset 64", "2 more bytes"), id="bin-partial-trailing-word"),
    pytest.param(
        bin_case(
            struct.pack("<f", 0.5) + GOOD_BIN[4:], "layer fc", "weight weight", "offset 0", "look like fp32"
        ),
        id="bin-unknown-tag-float-0.5",
    ),
    pytest.param(
        bin_case(
            WEIGHTS.tobytes() + BIAS.tobytes(), "layer fc", "weight weight", "offset 0", "look like fp32"
        ),
        id="bin-missing-tag",
    ),
    pytest.param(
        # fp16 record: tag + 12 halfs = 28 bytes; only the tag and 20 payload bytes are present
        bin_case(
            TAG_FP16 + WEIGHTS.astype("<f2").tobytes()[:20],
            "layer fc",
            "weight weight",
            "offset 0",
            "needs 28 bytes",
            "24 bytes later",
        ),
        id="bin-fp16-tag-file-too-short",
    ),
    pytest.param(
        # the fp16 weight record ends at 28; the raw bias (12 bytes) is missing
        bin_case(TAG_FP16 + WEIGHTS.astype("<f2").tobytes(), "layer fc", "weight bias", "offset 28"),
        id="bin-fp16-weight-then-no-bias",
    ),
    pytest.param(bin_case(BIN_FOR_WIDER_FC, "offset 64", "20 more bytes"), id="bin-for-wider-param"),
    pytest.param(
        bin_case(BIN_FOR_NARROWER_FC, "layer fc", "weight weight", "offset 0", "needs 52 bytes"),
        id="bin-for-narrower-param",
    ),
    pytest.param(bin_case(b"", "layer fc", "weight weight", "offset 0", "file size 0"), id="bin-zero-length"),
    pytest.param(
        bin_case(
            GOOD_BIN,
            "layer fc",
            "weight weight",
            "-12 elements",
            param=FC_PARAM.replace(" 2=12", " 2=-12"),
            names="m.param",
        ),
        id="bin-negative-weight-count-in-param",
    ),
    # ---- .param.bin ------------------------------------------------------------------------------
    pytest.param(
        param_bin_case(i32(MAGIC) + b"\x01\x00", "offset 4", "layer count"), id="pbin-truncated-header"
    ),
    pytest.param(
        # words: magic 0, counts 4 8, Input type 12, bottoms 16, tops 20, top index 24, -233 at 28
        param_bin_case(i32(MAGIC, 1, 1, 16, 0, 1, 5, -233), "offset 24", "blob index"),
        id="pbin-blob-index-out-of-range",
    ),
    pytest.param(
        param_bin_case(i32(MAGIC, 1, 1, 9999, 0, 1, 0, -233), "offset 12", "9999"),
        id="pbin-unknown-type-index",
    ),
    pytest.param(
        # Input writes blob 0 (top index at 24); ReLU at 32: counts 36 40, bottom 0 at 44, top 0 again at 48
        param_bin_case(i32(MAGIC, 2, 1, 16, 0, 1, 0, -233, 26, 1, 1, 0, 0, -233), "offset 48"),
        id="pbin-duplicate-top",
    ),
    pytest.param(
        # Input 0=4 without the -233 end marker: the params run into end of file at 36
        param_bin_case(i32(MAGIC, 1, 1, 16, 0, 1, 0, 0, 4), "offset 36", "layer 0 params"),
        id="pbin-missing-end-of-params",
    ),
    pytest.param(
        param_bin_case(i32(MAGIC, 1, 1, 16, 0, 1, 0, -233) + bytes(4), "offset 32", "4 bytes after"),
        id="pbin-trailing-bytes",
    ),
    pytest.param(
        # not the bin magic, so it is read as text; 0x85 (in 7767518 = 0x0076855e) is not UTF-8
        Case(
            files={"m.param.bin": i32(MAGIC + 1, 1, 1, 16, 0, 1, 0, -233)},
            argv=["fmt", "{tmp}/m.param.bin", "-o", "{tmp}/out.param"],
            expect=["{tmp}/m.param.bin:1:"],
        ),
        id="pbin-bad-magic",
    ),
    # ---- synth-bin -----------------------------------------------------------------------------
    pytest.param(
        synth_case(two_layers("ReLU r 1 1 x y 0=1.5.3"), "{tmp}/s.param:4:", "'1.5.3'"),
        id="synth-param-syntax-error",
    ),
    pytest.param(
        synth_case(
            two_layers("InnerProduct fc 1 1 x y 0=3 1=1 2=-12"), "{tmp}/s.param", "layer fc", "weight weight"
        ),
        id="synth-negative-weight-count",
    ),
    pytest.param(
        synth_case(
            two_layers("InnerProduct fc 1 1 x y 0=3 1=1"),
            "{tmp}/s.param",
            "layer fc",
            "weight weight",
            forbid=(".tmp",),
        ),
        id="synth-zero-weight-count",
    ),
]


def _fill(text: str, tmp: Path) -> str:
    return text.replace("{tmp}", str(tmp))


def _names(line: str, want: str) -> bool:
    """``want`` occurs in ``line`` as a whole item: "offset 4" must not match "offset 48" (a ``want`` that
    ends in punctuation, like ``path:4:``, is matched as it is)."""
    tail = r"(?![0-9A-Za-z_])" if want[-1:].isalnum() else ""
    return re.search(re.escape(want) + tail, line) is not None


@pytest.mark.parametrize("case", CASES)
def test_malformed_input_is_one_precise_error_line(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, data in case.files.items():
        (tmp_path / name).write_bytes(data)
    argv = [_fill(a, tmp_path) for a in case.argv]

    code = main(argv)
    captured = capsys.readouterr()

    assert "Traceback" not in captured.err + captured.out
    assert code == 2, captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    (line,) = lines
    assert line.startswith("gsurg: error: ")
    for want in case.expect:
        assert _names(line, _fill(want, tmp_path)), want
    for unwanted in case.forbid:
        assert unwanted not in line
    assert captured.out == ""
    for out in case.outputs:
        assert not (tmp_path / out).exists(), f"{out} was created"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(case.files), "stray (temporary) files"
    for name, data in case.files.items():
        assert (tmp_path / name).read_bytes() == data, f"input {name} changed"


def test_case_count() -> None:
    assert len(CASES) >= 30


def test_the_fixtures_themselves_are_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every bin case above breaks exactly one thing: the unbroken fixture goes through cleanly."""
    (tmp_path / "m.param").write_text(FC_PARAM)
    (tmp_path / "m.bin").write_bytes(GOOD_BIN)
    argv = ["fmt", str(tmp_path / "m.param"), "-o", str(tmp_path / "o.param")]
    assert main([*argv, "--bin", str(tmp_path / "m.bin"), "--out-bin", str(tmp_path / "o.bin")]) == 0
    assert (tmp_path / "o.bin").read_bytes() == GOOD_BIN
    (tmp_path / "f16.bin").write_bytes(TAG_FP16 + WEIGHTS.astype("<f2").tobytes() + BIAS.tobytes())
    assert main([*argv, "--bin", str(tmp_path / "f16.bin"), "--out-bin", str(tmp_path / "o16.bin")]) == 0
    (tmp_path / "ok.param.bin").write_bytes(i32(MAGIC, 1, 1, 16, 0, 1, 0, -233))
    assert main(["fmt", str(tmp_path / "ok.param.bin"), "-o", str(tmp_path / "ok.param")]) == 0
    (tmp_path / "two.param").write_text(two_layers("ReLU r 1 1 x y 0=1.5"))
    assert main(["fmt", str(tmp_path / "two.param"), "-o", str(tmp_path / "two.out.param")]) == 0
    assert main(["synth-bin", str(tmp_path / "m.param"), "-o", str(tmp_path / "s.bin")]) == 0
    assert (tmp_path / "s.bin").stat().st_size == 64
    assert capsys.readouterr().err == ""
