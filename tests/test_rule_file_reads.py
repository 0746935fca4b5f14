"""What a rule file may read, and where it may write without ``--out`` (issue 40 item 6).

A rule file that runs no Python reads like data: every path it names (an include, an input model, a
checkpoint, a side file's copy source, template or schema) must lie under its own folder, gsurg's own
files, or a path the user gave (``--set``, the command line); its ``outputs.dir`` must lie under the working
folder or a path the user gave. ``--trust-rule-file`` lifts both; ``--dry-run`` lists every file the run
would read.

Oracles: a "secret" file in a folder of its own (standing for ``/etc/passwd``); hand-written expectations
of the one error line (file, line, key, the path); the output folder not created; exit 2; and, trusted,
the secret's bytes copied as the rule file asked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from tests.rule_language_harness import CHAIN, err_line, write

SECRET = "root:x:0:0:the secret line\n"


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """``work/`` (the working folder) holding ``rules/`` (the rule file's folder, with its model and a
    template) and ``elsewhere/secret.txt`` beside ``work/``."""
    work = tmp_path / "work"
    rules = work / "rules"
    model = write(rules, "m.param", CHAIN)
    write(rules, "t.j2", "{{ rule_set }}\n")
    secret = write(tmp_path / "elsewhere", "secret.txt", SECRET)
    monkeypatch.chdir(work)
    return {"work": work, "rules": rules, "model": model, "secret": secret}


HEAD = "version: 1\nname: t\ngraphs:\n  main: {}\n"


def _apply(rule: Path, *args: str) -> int:
    return main(["apply", str(rule), *args, "-q"])


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("copy: {secret}", "copy"),
        ("template: {secret}", "template"),
        ("copy: ../../elsewhere/secret.txt", "copy"),
    ],
)
def test_a_side_file_cannot_read_outside(
    layout: dict[str, Path], capsys: pytest.CaptureFixture[str], entry: str, key: str
) -> None:
    text = HEAD + "side_files:\n  - {" + entry.format(secret=layout["secret"]) + ", output: s.txt}\n"
    rule = write(layout["rules"], "r.yaml", text)
    assert _apply(rule, str(layout["model"]), "--out", "out") == 2
    line = err_line(capsys)
    assert f"r.yaml:6: side_files.0.{key} {layout['secret']} lies outside what a rule file may read" in line
    assert "--trust-rule-file" in line
    assert not (layout["work"] / "out").exists()


def test_an_include_cannot_reach_outside(layout: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rule = write(layout["rules"], "r.yaml", "include: [../../elsewhere/secret.txt]\n" + HEAD)
    assert _apply(rule, str(layout["model"]), "--out", "out") == 2
    line = err_line(capsys)
    assert f"r.yaml:1: included rule file {layout['secret']} lies outside" in line
    assert "secret line" not in line  # refused before it is read: no YAML error quoting it


def test_a_link_in_the_rule_folder_cannot_lead_out(
    layout: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    os.symlink(layout["secret"], layout["rules"] / "innocent.txt")
    rule = write(layout["rules"], "r.yaml", HEAD + "side_files:\n  - {copy: innocent.txt, output: s.txt}\n")
    assert _apply(rule, str(layout["model"]), "--out", "out") == 2
    assert f"side_files.0.copy {layout['secret']} lies outside" in err_line(capsys)
    assert not (layout["work"] / "out").exists()


def test_an_input_named_only_by_the_rule_file_is_refused_but_one_the_user_gave_is_read(
    layout: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = write(layout["secret"].parent, "m.param", CHAIN)
    named = "version: 1\nname: t\ninputs:\n  model: {param: " + str(elsewhere) + "}\ngraphs:\n  main: {}\n"
    rule = write(layout["rules"], "r.yaml", named)
    assert _apply(rule, "--out", "out") == 2
    assert f"r.yaml:4: inputs.model.param {elsewhere} lies outside" in err_line(capsys)
    given = "version: 1\nname: t\nvars: {m: {path: none}}\n"
    given += "inputs:\n  model: {param: '${m}'}\ngraphs:\n  main: {}\n"
    rule = write(layout["rules"], "given.yaml", given)
    assert _apply(rule, "--set", f"m={elsewhere}", "--out", "out") == 0
    assert (layout["work"] / "out" / "m.param").is_file()


def test_outputs_dir_outside_the_working_folder_needs_the_user(
    layout: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    away = tmp_path / "away"
    rule = write(layout["rules"], "r.yaml", HEAD + f"outputs: {{dir: {away}}}\n")
    assert _apply(rule, str(layout["model"])) == 2
    line = err_line(capsys)
    assert f"r.yaml:5: outputs.dir {away} lies outside the working folder" in line and "--out" in line
    assert not away.exists()
    up = write(layout["rules"], "up.yaml", HEAD + "outputs: {dir: ../../../away}\n")
    assert _apply(up, str(layout["model"])) == 2
    assert "outputs.dir" in err_line(capsys) and not away.exists()
    # the same folder given by the user: --out, or a --set value the rule file's outputs.dir uses
    assert _apply(rule, str(layout["model"]), "--out", str(away)) == 0
    chosen = write(layout["rules"], "chosen.yaml", HEAD + "vars: {dest: x}\noutputs: {dir: '${dest}'}\n")
    assert _apply(chosen, str(layout["model"]), "--set", f"dest={tmp_path / 'chosen'}") == 0
    assert (tmp_path / "chosen" / "m.param").is_file()
    # inside the working folder, as before
    inside = write(layout["rules"], "inside.yaml", HEAD + "outputs: {dir: ../built}\n")
    assert _apply(inside, str(layout["model"])) == 0
    assert (layout["work"] / "built" / "m.param").is_file()


def test_trust_lifts_both(layout: dict[str, Path], tmp_path: Path) -> None:
    away = tmp_path / "away"
    text = HEAD + f"outputs: {{dir: {away}}}\nside_files:\n  - {{copy: {layout['secret']}, output: s.txt}}\n"
    rule = write(layout["rules"], "r.yaml", text)
    assert _apply(rule, str(layout["model"]), "--trust-rule-file") == 0
    assert (away / "s.txt").read_text() == SECRET


def test_dry_run_lists_every_file_the_rule_file_reads(
    layout: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    write(layout["rules"], "base.yaml", "version: 1\nname: base\n")
    text = "include: [base.yaml]\n" + HEAD + "side_files:\n  - {template: t.j2, output: t.txt}\n"
    rule = write(layout["rules"], "r.yaml", text)
    assert main(["apply", str(rule), str(layout["model"]), "--dry-run"]) == 0
    out = capsys.readouterr().out
    reads = [line.removeprefix("reads: ") for line in out.splitlines() if line.startswith("reads: ")]
    rules = layout["rules"]
    assert set(reads) == {str(rules / n) for n in ("base.yaml", "r.yaml", "m.param", "t.j2")}
    assert main(["apply", str(rule), str(layout["model"]), "--dry-run", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(doc["reads"]) == sorted(reads) and doc["dry_run"] is True
    assert not (layout["work"] / "out").exists()


def test_a_shipped_conversion_reads_only_its_own_files(capsys: pytest.CaptureFixture[str]) -> None:
    """``gsurg apply NAME`` reads gsurg's own files, confined as any rule file is, without a trust flag."""
    assert main(["apply", "qwen3_llm", "--dry-run", "--format", "json"]) == 0
    reads = json.loads(capsys.readouterr().out)["reads"]
    package = Path(__file__).resolve().parent.parent
    assert reads and all(Path(r).resolve().is_relative_to(package) for r in reads), reads


def test_links_inside_a_folder_the_user_gave_are_the_users(
    layout: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A Hugging Face cache snapshot is a folder of links into ``../../blobs``: given with ``--set``, the
    files the rule file reads through it are read; a ``..`` out of it is still refused."""
    blobs = tmp_path / "hub" / "blobs"
    write(blobs, "0a1b2c", "the tokenizer\n")
    snapshot = tmp_path / "hub" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    os.symlink("../../blobs/0a1b2c", snapshot / "tokenizer.json")
    text = (
        HEAD
        + "vars: {checkpoint: x}\nside_files:\n  - {copy: '${checkpoint}/tokenizer.json', output: t.json}\n"
    )
    rule = write(layout["rules"], "r.yaml", text)
    assert _apply(rule, str(layout["model"]), "--set", f"checkpoint={snapshot}", "--out", "out") == 0
    assert (layout["work"] / "out" / "t.json").read_text() == "the tokenizer\n"
    escape = text.replace("${checkpoint}/tokenizer.json", "${checkpoint}/../../blobs/0a1b2c")
    rule = write(layout["rules"], "escape.yaml", escape)
    assert _apply(rule, str(layout["model"]), "--set", f"checkpoint={snapshot}", "--out", "out2") == 2
    assert "side_files.0.copy" in err_line(capsys) and not (layout["work"] / "out2").exists()
