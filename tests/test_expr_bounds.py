"""The expression evaluator is bounded: no huge powers, no int beyond int64, no float overflow, integer sizes
only; each broken bound is one error naming the expression (exit 2 for a ``--custom`` declaration, a
finding naming the layer for a model whose params overflow a size).

The expected values are plain arithmetic written out here; the evaluator's results are not reused.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from graphsurgeon.check.context import LintOptions
from graphsurgeon.check.lint import run_lint
from graphsurgeon.cli import main
from graphsurgeon.errors import CatalogError
from graphsurgeon.schema.catalog import load_catalog
from graphsurgeon.schema.expr import compile_expr, evaluate, evaluate_size

MAX_INT32 = 2**31 - 1
MODEL = "7767517\n2 2\nInput in 0 1 x\nFoo f 1 1 x y 0=3 1={p1}\n"


def test_powers_are_computed_only_when_small() -> None:
    assert evaluate("2 ** 62", {}) == 4611686018427387904
    assert evaluate("x ** 64", {"x": 1}) == 1
    assert evaluate("(e // h) ** -0.5", {"e": 64, "h": 1}) == 0.125  # the catalog's own MHA scale default
    with pytest.raises(CatalogError, match=r"'x \*\* 65'.*exponent 65"):
        evaluate("x ** 65", {"x": 1})  # the exponent bound holds even where the result would be small
    with pytest.raises(CatalogError, match=r"'2 \*\* 63'.*int64"):
        evaluate("2 ** 63", {})
    with pytest.raises(CatalogError, match=r"'x \*\* 0.5'.*not a real number"):
        evaluate("x ** 0.5", {"x": -8})


def test_nine_to_the_nine_to_the_nine_is_refused_when_compiled() -> None:
    """9**9 = 387420489 is the exponent of the outer power: refused before anything is raised to it, at
    compile time (no name in it), even inside an expression that reads names."""
    with pytest.raises(CatalogError, match=r"'9\*\*9\*\*9'.*exponent 387420489"):
        compile_expr("9**9**9")
    with pytest.raises(CatalogError, match=r"'p0 \+ 9\*\*9\*\*9'"):
        compile_expr("p0 + 9**9**9")


def test_every_int_result_fits_in_int64() -> None:
    big = 2**62
    assert evaluate("a - 1 + a", {"a": big}) == 9223372036854775807  # exactly the largest int64
    with pytest.raises(CatalogError, match=r"'a \+ a - 1'.*9223372036854775808"):
        evaluate("a + a - 1", {"a": big})  # the same value, but through 2**63
    assert evaluate("a * b", {"a": MAX_INT32, "b": MAX_INT32}) == 4611686014132420609
    with pytest.raises(CatalogError, match=r"'a \* 4 // 8'.*18446744073709551616.*int64"):
        evaluate("a * 4 // 8", {"a": big})  # the intermediate a*4 = 2**64 overflows, the result would not
    with pytest.raises(CatalogError, match="int64"):
        evaluate("-a - a - 1", {"a": big})
    with pytest.raises(CatalogError, match="int64"):
        evaluate("prod([a, a, a])", {"a": MAX_INT32})
    with pytest.raises(CatalogError, match="int64"):
        compile_expr("100000000000000000000")  # a literal beyond int64


def test_floats_must_stay_finite_and_sizes_must_be_ints() -> None:
    with pytest.raises(CatalogError, match=r"'1e308\*10'.*inf"):
        evaluate("1e308*10", {})
    with pytest.raises(CatalogError, match=r"'x \* x'"):
        evaluate("x * x", {"x": 1e200})
    assert evaluate_size("n // 2", {"n": 5}) == 2
    with pytest.raises(CatalogError, match=r"'n / 2' gives 2.5; a size must be an integer"):
        evaluate_size("n / 2", {"n": 5})
    with pytest.raises(CatalogError, match=r"gives 2.0"):
        evaluate_size("n / 2", {"n": 4})  # a float even when it is whole


def test_arithmetic_takes_numbers_only() -> None:
    """``[0] * 2**40`` would try to build a list of a trillion elements."""
    with pytest.raises(CatalogError, match="numbers"):
        evaluate("[0] * n", {"n": 2**40})
    assert evaluate("len(xs) + sum(xs)", {"xs": [1, 2, 3]}) == 9


@pytest.mark.parametrize(
    ("slot", "words"),
    [
        ("tagged(9**9**9)", ["'9**9**9'", "exponent 387420489"]),
        ("tagged(1e308*10)", ["'1e308*10'", "inf"]),
        ("tagged(10**30)", ["'10**30'", "int64"]),
        ("tagged(p0/2)", ["'p0/2'", "integer"]),
        ("raw(2.5)", ["'2.5'", "integer"]),
    ],
)
def test_a_custom_declaration_that_breaks_a_bound_exits_2(
    tmp_path: Path, slot: str, words: list[str]
) -> None:
    """Run as a user would, in a subprocess (``9**9**9`` hung here before, so a timeout guards the run)."""
    model = tmp_path / "m.param"
    model.write_text(MODEL.format(p1=1))
    (tmp_path / "m.bin").write_bytes(b"")
    argv = ["lint", str(model), "--bin", str(tmp_path / "m.bin"), "--custom", f"Foo:w={slot}"]
    proc = subprocess.run(
        [sys.executable, "-m", "graphsurgeon.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("gsurg: error: --custom 'Foo:w=")
    for word in words:
        assert word in line


def test_a_custom_size_that_overflows_for_this_model_is_a_finding_naming_layer_and_expression(
    tmp_path: Path,
) -> None:
    """p0 = 3, p1 = 2**31 - 1: p0 * p1 * p1 is about 1.4e19, beyond int64."""
    model = tmp_path / "m.param"
    model.write_text(MODEL.format(p1=MAX_INT32))
    (tmp_path / "m.bin").write_bytes(b"")
    options = LintOptions(bin_path=str(tmp_path / "m.bin"))
    report = run_lint(str(model), options, custom=["Foo:w=tagged(p0*p1*p1)"])
    [(check, layer, message)] = [(f.check, f.layer, f.message) for f in report.findings]
    assert (check, layer) == ("bin-walk", "f")
    assert "'p0*p1*p1'" in message and str(3 * MAX_INT32 * MAX_INT32) in message and "int64" in message


def test_a_catalog_size_that_overflows_int64_names_layer_and_expression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MemoryData reads w*h*d*c elements; with each at 2**31 - 1 that is a 124-bit number. ``fmt --bin``
    exits 2 with one line naming the .param, the layer and the catalog's expression."""
    md = load_catalog().layers["MemoryData"]
    (count_expr,) = [w.count for w in md.weights if w.name == "data"]
    dims = " ".join(f"{pid}={MAX_INT32}" for pid in (0, 1, 2, 11))
    model = tmp_path / "m.param"
    model.write_text(f"7767517\n1 1\nMemoryData md 0 1 x {dims}\n")
    weights = tmp_path / "m.bin"
    weights.write_bytes(struct.pack("<4f", 1, 2, 3, 4))
    out = ["-o", str(tmp_path / "o.param"), "--out-bin", str(tmp_path / "o.bin")]
    code = main(["fmt", str(model), "--bin", str(weights), *out])
    err = capsys.readouterr().err
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(f"gsurg: error: {model}") and "layer md" in line
    assert f"{count_expr!r}" in line and "int64" in line
    assert not (tmp_path / "o.bin").exists()
