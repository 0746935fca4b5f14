"""``gsurg diff-bin`` of block-quantized Gemm weights (issue 17, item 1): codes checked in quantization steps
against a checkpoint tensor through a map, or against the same weight stored as floats in another .bin;
the scales record read with its weight; faults in codes and scales named by row, column, block and byte.

Oracle: the quantized records are built here from the format facts alone (``quant_bin_harness``: a
min-max quantizer in float64 and a packer that puts code ``k`` at bit ``k * bits`` of its row, least
significant bit first, two's complement), never by ``graphsurgeon.quant.blocks``; every expected place,
offset and count is computed here with plain numpy.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphsurgeon.cli import main as gsurg
from tests.quant_bin_harness import QModel, pack_rows, quantize_minmax, write_model

FORMATS = [(4, 32), (6, 64), (8, 128), (4, 128), (8, 32)]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = gsurg(["diff-bin", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _json(capsys: pytest.CaptureFixture[str], m: QModel, *extra: str) -> tuple[int, dict[str, Any]]:
    rc, out, _ = _run(capsys, str(m.bin), str(m.ckpt), "--map", str(m.map), "--format", "json", *extra)
    return rc, json.loads(out)


@pytest.mark.parametrize(("bits", "block"), FORMATS)
def test_a_quantized_weight_passes_in_steps_with_its_scales(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bits: int, block: int
) -> None:
    m = write_model(tmp_path, bits, block)
    rc, doc = _json(capsys, m, "--fail-on-diff")
    assert rc == 0, doc
    [pair] = doc["pairs"]
    assert (pair["a"]["name"], pair["b"]["name"], pair["how"], pair["status"]) == ("fc.B", "w", "map", "pass")
    assert pair["a"]["shape"] == [m.n, m.k] and pair["a"]["storage"] == "bytes" and "cosine" not in pair
    q = pair["quantized"]
    assert q["format"] == f"int{bits} block {block}" and (q["bits"], q["block_size"]) == (bits, block)
    assert q["shape"] == [m.n, m.k] and q["weight"] == "fc.B"
    assert 0.3 < q["max_steps"] <= 0.5 and q["saturated"] == 0 and q["wrong"] == 0 and q["bad_scales"] == 0
    assert q["first_wrong"] is None and q["first_bad_scale"] is None
    assert q["scales"] == "fc.B_quantize_scales" and q["scales_offset"] == m.scales_offset
    assert doc["unpaired"] == {"a": [], "b": []}  # the scales record is no weight of its own
    s = doc["summary"]
    assert s["quantized"] == {
        "pairs": 1,
        "passed": 1,
        "failed": 0,
        "max_steps": q["max_steps"],
        "saturated": 0,
        "wrong": 0,
        "bad_scales": 0,
    }
    assert (s["pairs"], s["passed"], s["result"]) == (1, 1, "PASSED")
    # the expected largest error, from the test's own float64 arithmetic
    y = m.w.astype(np.float64) * np.repeat(m.scales.astype(np.float64), block, axis=1)[:, : m.k]
    assert q["max_steps"] == pytest.approx(float(np.abs(y - m.codes).max()), abs=1e-12)


def test_the_text_and_md_reports_show_the_quantized_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = write_model(tmp_path, 4, 32)
    rc, text, _ = _run(capsys, str(m.bin), str(m.ckpt), "--map", str(m.map), "--fail-on-diff")
    lines = text.splitlines()
    assert rc == 0 and lines[-1] == "PASSED"
    assert any("atol and rtol do not apply" in line for line in lines[:8])
    head = lines.index("quantized (checked in steps):")
    cells = [re.split(r"\s{2,}", line) for line in lines[head + 1 : head + 3]]
    assert cells[0] == [
        *("a", "b", "how", "shape", "format", "max steps", "saturated", "wrong", "bad scales"),
        *("first wrong (row,col)", "result"),
    ]
    assert cells[1][:5] == ["fc.B", "w", "map", f"{m.n}x{m.k}", "int4 block 32"]
    assert cells[1][6:] == ["0", "0", "0", "-", "PASS"] and float(cells[1][5]) <= 0.5
    assert "1 quantized pair(s) checked in steps: 1 passed, max error" in lines[-2]
    assert "0 saturated" in lines[-2] and "unpaired: 0 in a, 0 in b" in lines[-2]
    rc, md, _ = _run(capsys, str(m.bin), str(m.ckpt), "--map", str(m.map), "--format", "md")
    assert rc == 0 and "**Quantized (checked in steps)**" in md and md.rstrip().endswith("**PASSED**")
    assert f"| fc.B | w | map | {m.n}x{m.k} | int4 block 32 |" in md


@pytest.mark.parametrize(("bits", "block"), FORMATS)
def test_one_code_one_level_off_fails_naming_row_column_and_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bits: int, block: int
) -> None:
    good = write_model(tmp_path / "good", bits, block)
    qmax = (1 << (bits - 1)) - 1
    y = good.w.astype(np.float64) * np.repeat(good.scales.astype(np.float64), block, axis=1)[:, : good.k]
    # a value clearly nearest its level, whose code can move up one level
    candidates = np.argwhere((np.abs(y - good.codes) < 0.4) & (good.codes < qmax) & (good.codes > 0))
    r, c = (int(i) for i in candidates[len(candidates) // 2])
    codes = good.codes.copy()
    codes[r, c] += 1
    m = write_model(tmp_path / "bad", bits, block, codes=codes)
    rc, doc = _json(capsys, m, "--fail-on-diff")
    assert rc == 1 and doc["summary"]["result"] == "FAILED"
    q = doc["pairs"][0]["quantized"]
    assert doc["pairs"][0]["status"] == "fail" and q["wrong"] == 1 and q["bad_scales"] == 0
    assert q["first_wrong"] == {
        "row": r,
        "col": c,
        "block": c // block,
        "offset": r * math.ceil(good.k * bits / 8) + c * bits // 8,  # the codes record starts the file
        "code": int(codes[r, c]),
        "steps": pytest.approx(float(y[r, c]), rel=1e-12),
    }
    assert doc["summary"]["quantized"]["failed"] == 1
    rc, text, _ = _run(capsys, str(m.bin), str(m.ckpt), "--map", str(m.map), "--fail-on-diff")
    assert rc == 1 and text.rstrip().endswith("FAILED")
    assert f"{r},{c} (block {c // block})" in text
    assert f"1 of {m.n * m.k} value(s) are neither the level nearest" in text
    assert f"first fc.B row {r}, column {c} (block {c // block}, byte offset" in text


def _scales_fault(scales: np.ndarray, r: int, b: int, how: str) -> np.ndarray:
    out = scales.copy()
    out[r, b] = {"zero": 0.0, "nan": np.nan, "negative": -scales[r, b], "inf": np.inf}[how]
    return out


@pytest.mark.parametrize("how", ["zero", "nan", "negative", "inf"])
def test_a_bad_scale_fails_naming_its_record_row_block_and_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    good = write_model(tmp_path / "good", 6, 32)
    r, b = 2, 1
    m = write_model(tmp_path / "bad", 6, 32, scales=_scales_fault(good.scales, r, b, how))
    rc, doc = _json(capsys, m, "--fail-on-diff")
    assert rc == 1
    q = doc["pairs"][0]["quantized"]
    offset = m.scales_offset + (r * m.scales.shape[1] + b) * 4
    value = {"zero": 0.0, "nan": "nan", "negative": -float(good.scales[r, b]), "inf": "inf"}[how]
    assert q["bad_scales"] == 1 and q["first_bad_scale"] == {
        "row": r,
        "block": b,
        "offset": offset,
        "value": value,
    }
    assert q["wrong"] == 0  # that block's values are left to the scale's fault
    rc, text, _ = _run(capsys, str(m.bin), str(m.ckpt), "--map", str(m.map), "--fail-on-diff")
    assert rc == 1 and f"first fc.B_quantize_scales row {r}, block {b} (offset {offset})" in text
    assert "1 scale(s) are not finite and > 0" in text


def test_a_doubled_scale_makes_many_values_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bits, block, r, b = 8, 32, 3, 0
    good = write_model(tmp_path / "good", bits, block)
    scales = good.scales.copy()
    scales[r, b] *= 2
    m = write_model(tmp_path / "bad", bits, block, scales=scales)
    rc, doc = _json(capsys, m)
    q = doc["pairs"][0]["quantized"]
    # the oracle: under the doubled scale a value is right only at its nearest level or saturated
    qmax = (1 << (bits - 1)) - 1
    x = good.w[r, b * block : (b + 1) * block].astype(np.float64) * float(scales[r, b])
    code = good.codes[r, b * block : (b + 1) * block]
    saturated = (np.abs(x) > qmax + 0.5) & (code == np.sign(x) * qmax)
    wrong = ~saturated & (np.abs(x - code) > 0.5 + 1e-3)
    assert rc == 0 and doc["summary"]["result"] == "FAILED"  # no --fail-on-diff: exit 0, report FAILED
    assert q["wrong"] == int(wrong.sum()) > block // 2 and q["bad_scales"] == 0
    assert q["saturated"] == int(saturated.sum())
    first = int(np.argmax(wrong))
    assert (q["first_wrong"]["row"], q["first_wrong"]["col"]) == (r, b * block + first)


def test_clipped_outliers_are_saturated_and_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bits, block = 4, 32
    m = write_model(tmp_path, bits, block, clip=0.6)  # scales for 60 % of each block's range
    rc, doc = _json(capsys, m, "--fail-on-diff")
    q = doc["pairs"][0]["quantized"]
    qmax = (1 << (bits - 1)) - 1
    y = m.w.astype(np.float64) * np.repeat(m.scales.astype(np.float64), block, axis=1)[:, : m.k]
    expected = int(((np.abs(y) > qmax + 0.5) & (np.abs(m.codes) == qmax)).sum())
    assert rc == 0 and q["saturated"] == expected > 0 and q["wrong"] == 0 and q["max_steps"] <= 0.5


def test_a_float_bin_against_a_quantized_bin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = write_model(tmp_path / "q", 4, 64)
    for order in ((m.float_bin, m.bin), (m.bin, m.float_bin)):
        rc, out, _ = _run(capsys, *map(str, order), "--fail-on-diff", "--format", "json")
        doc = json.loads(out)
        assert rc == 0 and doc["unpaired"] == {"a": [], "b": []}, doc
        [pair] = doc["pairs"]
        assert pair["how"] == "name" and pair["quantized"]["format"] == "int4 block 64"
        assert pair["a"]["shape"] == pair["b"]["shape"] == [m.n, m.k]
    # a NaN on the float side: no code stands for it
    w = m.w.copy()
    w[1, 5] = np.nan
    nan = write_model(tmp_path / "nan", 4, 64, float_values=w)
    rc, out, _ = _run(capsys, str(nan.float_bin), str(m.bin), "--fail-on-diff", "--format", "json")
    q = json.loads(out)["pairs"][0]["quantized"]
    assert rc == 1 and q["wrong"] == 1 and (q["first_wrong"]["row"], q["first_wrong"]["col"]) == (1, 5)


def test_two_quantized_bins_compare_codes_and_scales_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_model(tmp_path / "a", 8, 64)
    b = write_model(tmp_path / "b", 8, 64)
    rc, out, _ = _run(capsys, str(a.bin), str(b.bin), "--fail-on-diff", "--format", "json", "--atol", "0")
    doc = json.loads(out)
    assert rc == 0 and [p["a"]["name"] for p in doc["pairs"]] == ["fc.B", "fc.B_quantize_scales"]
    assert all(p["quantized"] is None and p["identical"] for p in doc["pairs"])
    c = write_model(tmp_path / "c", 8, 32)  # the same values, other blocks: codes and scales differ
    rc, out, _ = _run(capsys, str(a.bin), str(c.bin), "--fail-on-diff")
    assert rc == 1 and "quantized as int8 block 64 in a, int8 block 32 in b" in out


def test_a_truncated_quantized_bin_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = write_model(tmp_path, 4, 32)
    m.bin.write_bytes(m.bin.read_bytes()[:-4])
    rc, _, err = _run(capsys, str(m.bin), str(m.ckpt), "--map", str(m.map), "--fail-on-diff")
    assert rc == 2
    assert f"{m.bin}, layer fc, weight B_quantize_scales, offset {m.scales_offset}:" in err
    assert "truncated" in err


def test_packer_matches_the_format_facts() -> None:
    """The test's own packer against bytes worked out by hand: int4 codes 1, -1, 7, -8 are nibbles 0x1,
    0xf, 0x7, 0x8, low nibble first; int6 codes 1, -1 are bits 000001 111111 -> 0xc1 0x0f."""
    assert pack_rows(np.array([[1, -1, 7, -8]]), 4) == bytes([0xF1, 0x87])
    assert pack_rows(np.array([[1, -1]]), 6) == bytes([0xC1, 0x0F])
    assert pack_rows(np.array([[-128, 127, -1]]), 8) == bytes([0x80, 0x7F, 0xFF])
    codes, scales = quantize_minmax(np.array([[0.5, -1.0, 0.25]], np.float32), 8, 32)
    assert scales.tolist() == [[127.0]] and codes.tolist() == [[64, -127, 32]]  # 63.5 rounds away from 0
