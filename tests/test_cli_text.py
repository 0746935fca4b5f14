"""Command-line text lives in ``cli/`` (issue 15, item 2): one ``report`` option group (``--format``,
``-q``) on every reporting command, ``apply``'s summary as JSON, ``--explain`` as data the command renders,
and ``diff_bins`` errors that name its parameters, spelled as flags only by the command line."""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

import pytest

from graphsurgeon.check.diff_bin import DiffOptionError, diff_bins
from graphsurgeon.cli import build_parser, main
from graphsurgeon.pipeline.apply import explain_rule
from tests.conftest import REPO

QUICK = REPO / "examples" / "quickstart"
SLOTS = REPO / "rules" / "matmul-weight-slots.yaml"
REPORTING = ["fmt", "lint", "synth-bin", "diff-bin", "apply", "verify", "rope"]


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[name]
    return found


@pytest.mark.parametrize("command", REPORTING)
def test_every_reporting_command_has_the_one_report_group(command: str) -> None:
    parser = _subparser(command)
    groups = {g.title: g for g in parser._action_groups}
    assert "report" in groups, f"gsurg {command}: no report option group"
    flags = {s for a in groups["report"]._group_actions for s in a.option_strings}
    assert flags == {"--format", "-q", "--quiet"}


def _model(tmp_path: Path) -> tuple[Path, Path]:
    param, bin_ = tmp_path / "mlp.param", tmp_path / "mlp.bin"
    shutil.copy(QUICK / "mlp.param", param)
    shutil.copy(QUICK / "mlp.bin", bin_)
    return param, bin_


def test_apply_json_says_what_the_text_says(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    param, bin_ = _model(tmp_path)
    args = ["apply", str(SLOTS), str(param), "--bin", str(bin_)]
    assert main([*args, "--out", str(tmp_path / "text")]) == 0
    text = capsys.readouterr().out
    assert main([*args, "--out", str(tmp_path / "json"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["folder"] == str(tmp_path / "json") and doc["dry_run"] is False
    (graph,) = doc["graphs"]
    for rule in graph["rules"]:
        assert f"rule {rule['rule']}: {rule['matches']} match(es) in {rule['iterations']}" in text
    assert graph["param"] == "mlp.param" and graph["bin"] == "mlp.bin"
    assert graph["layer_types_changed"]["Gemm"][1] > graph["layer_types_changed"]["Gemm"][0]
    assert (tmp_path / "json" / "mlp.param").read_bytes() == (tmp_path / "text" / "mlp.param").read_bytes()


def test_apply_quiet_prints_nothing_and_still_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    param, bin_ = _model(tmp_path)
    out = tmp_path / "out"
    assert main(["apply", str(SLOTS), str(param), "--bin", str(bin_), "--out", str(out), "-q"]) == 0
    assert capsys.readouterr().out == ""
    assert (out / "mlp.param").is_file() and (out / "mlp.bin").is_file()


def test_explain_is_data_the_command_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    param, bin_ = _model(tmp_path)
    rule = "memorydata-b-to-gemm"
    rule_names = SLOTS.read_text()
    assert f"name: {rule}" in rule_names, "the quick-start rule file renamed its rule"
    found = explain_rule(str(SLOTS), rule, str(param), str(bin_), {})
    matched = [c.layer_name for c in found.candidates if c.matched]
    assert found.graph and matched, found
    assert (
        main(["apply", str(SLOTS), str(param), "--bin", str(bin_), "--explain", rule, "--format", "json"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in doc["candidates"] if c["matched"]] == matched
    assert main(["apply", str(SLOTS), str(param), "--bin", str(bin_), "--explain", rule]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"rule {rule} on graph {found.graph} ({found.expected} expected):"
    assert sum(line.startswith("  MATCH ") for line in lines) == len(matched)


def test_diff_bins_names_its_parameters_and_the_command_its_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, bin_ = _model(tmp_path)
    with pytest.raises(DiffOptionError) as err:
        diff_bins(str(bin_), str(bin_), atol=math.nan)
    assert str(err.value).startswith("atol must be a finite number >= 0") and "--" not in str(err.value)
    with pytest.raises(DiffOptionError) as err:
        diff_bins(str(bin_), str(bin_), map_path="m.yaml")
    assert "needs map_path" in str(err.value)
    assert main(["diff-bin", str(bin_), str(bin_), "--atol", "nan"]) == 2
    assert "gsurg: error: --atol must be a finite number >= 0, not nan" in capsys.readouterr().err
    assert main(["diff-bin", str(bin_), str(bin_), "--map", "m.yaml"]) == 2
    assert "a safetensors side needs --map, and --map needs a safetensors side" in capsys.readouterr().err


def test_set_without_equals_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    param, bin_ = _model(tmp_path)
    assert main(["apply", str(SLOTS), str(param), "--bin", str(bin_), "--set", "novalue", "--dry-run"]) == 2
    assert "--set 'novalue': write key=value" in capsys.readouterr().err
