"""Side-file templates render in a bounded sandbox (issue 14, items 6 and 9): no template can run code,
and a template that fails, recurses or would make a huge value is one ``gsurg: error`` line naming the
side file and template, exit 2, with nothing written.

Oracles: a marker file a shell command would create; hand-written expectations of the error line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.pipeline import template_sandbox
from tests.rule_language_harness import CHAIN, err_line, write


def _apply(tmp_path: Path, template: str) -> int:
    write(tmp_path, "t.j2", template)
    model = write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ngraphs:\n  main: {}\nside_files:\n  - {template: t.j2, output: x.txt}\n",
    )
    return main(["apply", str(rules), str(model), "--out", str(tmp_path / "out")])


@pytest.mark.parametrize(
    "template",
    [
        "{{ cycler.__init__.__globals__.os.popen('touch MARK').read() }}",
        "{{ joiner.__init__.__globals__.os.system('touch MARK') }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ self._TemplateReference__context.cycler.__init__.__globals__.os.popen('touch MARK') }}",
    ],
)
def test_a_template_cannot_run_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _apply(tmp_path, template) == 2
    line = err_line(capsys)
    assert "side file x.txt: template" in line and "unsafe" in line, line
    assert not (tmp_path / "MARK").exists()
    assert not (tmp_path / "out" / "x.txt").exists()


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{{ 1/0 }}", "ZeroDivisionError: division by zero"),
        ("{{ 'a' * 10**10 }}", "repeating a value of length 1"),
        ("{{ [0] * 10000000000 }}", "repeating a value of length 1"),
        ("{{ 2 ** 100000 }}", "the exponent 100000 is beyond 64"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "macros or includes nest too deeply"),
        ("{{ 'a'.ljust(10**9) }}", "ljust with a width of 1000000000"),
        ("{{ 'x'|center(99999999999) }}", "the filter center with a width"),
        ("{{ '%999999999d' % 1 }}", "a format width or precision of 999999999"),
        ("{{ '{:>999999999}'.format(1) }}", "a format width or precision of 999999999"),
        ("{{ 'ab'.replace('', 'x' * 10000000) }}", "replace would make a value longer"),
        # the probe's: the replace *filter*, and a doubling ~ in a loop, each step under the per-value bound
        ("{{ ('x' * 16000000) | replace('x', 'y' * 42) | length }}", "the filter replace would make a value"),
        (
            "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
            "{% endfor %}",
            "~ would make a value longer",
        ),
        # many values, each within every bound: their sum is what the whole render may allocate
        (
            "{% for i in range(100) %}{{ ('x' * 1000000) | replace('x', 'y' * 10) | length }}{% endfor %}",
            "the template allocated more than 67108864 characters or items in all",
        ),
        ("{{ lipsum(10**9) }}", "'lipsum' is undefined"),
        ("{{ [1]|json(10**9) }}", "json indent 1000000000"),
        ("{{ nothing }}", "'nothing' is undefined"),
    ],
)
def test_a_failing_template_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str, reason: str
) -> None:
    assert _apply(tmp_path, template) == 2
    line = err_line(capsys)
    assert line.startswith("gsurg: error: side file x.txt: template ") and reason in line, line
    assert not (tmp_path / "out" / "x.txt").exists()


def test_a_failing_template_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _apply(tmp_path, "fine\n{{ rule_set }}\n{{ 1/0 }}\n") == 2
    assert "template " + str(tmp_path / "t.j2") + ":3: ZeroDivisionError" in err_line(capsys)


def test_rendering_is_bounded_in_time_and_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(template_sandbox, "TIME_LIMIT", 0.5)
    start = time.monotonic()
    busy = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    assert _apply(tmp_path, busy) == 2
    assert time.monotonic() - start < 10
    assert "rendering took more than 0.5 s" in err_line(capsys)
    monkeypatch.setattr(template_sandbox, "MAX_OUTPUT", 1000)
    assert _apply(tmp_path, "{% for i in range(100) %}{{ 'x' * 100 }}{% endfor %}") == 2
    assert "the rendered text is longer than 1000 bytes" in err_line(capsys)


def test_an_ordinary_template_still_renders(tmp_path: Path) -> None:
    template = (
        "{{ rule_set }} {{ graphs.main.param }} {{ graphs.main.outputs|json }} {{ '%5d'|format(3) }} "
        "{{ 'ab'.replace('a', 'c') }} {{ 5000000000 }} {{ 2 ** 10 }} {{ 'a' ~ 1 }} {{ ['a', 'b']|join('-') }}"
        " {{ 'xyz'|replace('y', 'Y') }}\n"
    )
    assert _apply(tmp_path, template) == 0
    assert (tmp_path / "out" / "x.txt").read_text() == 't m.param ["y"]     3 cb 5000000000 1024 a1 a-b xYz\n'


def test_only_an_export_source_runs_code_and_the_user_is_told_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rule file without ``source:`` runs no code (--dry-run says so); with it, --dry-run's output says
    so before the source is imported (stdout comes first: the import fails here), and stderr keeps its one
    error line."""
    model = write(tmp_path, "m.param", CHAIN)
    plain = write(tmp_path, "plain.yaml", "version: 1\nname: t\ngraphs:\n  main: {}\n")
    assert main(["apply", str(plain), str(model), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "dry run: nothing written; no code ran" in captured.out
    assert "note:" not in captured.err
    sourced = write(
        tmp_path,
        "sourced.yaml",
        "version: 1\nname: t\nsource: {export: nope.py:build}\ninputs:\n  sub: {export: sub}\n"
        "graphs:\n  main: {input: sub}\n",
    )
    assert main(["apply", str(sourced), "--dry-run"]) == 2
    captured = capsys.readouterr()
    notes = [line for line in captured.out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1, captured.out
    assert "running its export source" in notes[0] and "nope.py:build" in notes[0], notes
    assert "Python code" in notes[0]
    errors = captured.err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("gsurg: error:") and "nope.py" in errors[0], errors


def test_dry_run_names_a_config_reader_before_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``source.config`` is Python too: its note comes before its first line runs, and --dry-run's last line
    does not claim that no code ran."""
    write(tmp_path, "config.json", "{}")
    write(tmp_path, "c.py", "def read(folder):\n    print('READER RAN')\n    return {'x': 3}\n")
    model = write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        f"version: 1\nname: t\nvars:\n  a: ${{config.x}}\nsource: {{export: none.py:build, checkpoint: "
        f"{tmp_path}, config: c.py:read}}\ngraphs:\n  main: {{}}\n",
    )
    assert main(["apply", str(rules), str(model), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    ran = out.index("READER RAN")
    said = "c.py:read (source.config)"
    notes = [i for i, line in enumerate(out) if line.startswith("note:") and said in line]
    assert notes and notes[0] < ran, out
    assert out[-1] == "dry run: nothing written; its source: Python code ran", out


def _convert_with_verifier(tmp_path: Path, module: str, ref: str) -> Path:
    """A rule file without ``source:`` that copies ``module`` (a .py that leaves MARK when imported) into
    its outputs and writes a model.json naming it as the verifier ``ref``; returns the output folder."""
    write(tmp_path, module, "open('MARK', 'w').close()\n\ndef verify(*args):\n    raise SystemExit(0)\n")
    write(tmp_path, "model.j2", '{"nets": {}, "decoder": {}, "verifier": {"ref": "' + ref + '"}}\n')
    model = write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ngraphs:\n  main: {}\nside_files:\n"
        f"  - {{copy: {module}, output: {module}}}\n  - {{template: model.j2, output: model.json}}\n",
    )
    assert main(["apply", str(rules), str(model), "--out", str(tmp_path / "out")]) == 0
    return tmp_path / "out"


def test_verify_never_runs_a_verifier_that_a_conversion_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule file without ``source:`` can write a model.json naming a ``.py`` it copied beside it; ``gsurg
    verify`` on that folder refuses the verifier before importing anything (the import would run it)."""
    monkeypatch.chdir(tmp_path)
    out = _convert_with_verifier(tmp_path, "evil.py", "evil.py:verify")
    capsys.readouterr()
    assert main(["verify", str(out)]) == 2
    line = err_line(capsys)
    assert "verifier 'evil.py:verify' lies inside the folder being verified" in line, line
    assert not (tmp_path / "MARK").exists()


def test_verify_never_imports_a_module_a_conversion_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with a dotted verifier name: run from inside the output folder, the import system would find
    the copied module there (``python -m`` puts the current folder on sys.path)."""
    out = _convert_with_verifier(tmp_path, "evilmod_gsurg_test.py", "evilmod_gsurg_test:verify")
    capsys.readouterr()
    monkeypatch.chdir(out)
    monkeypatch.syspath_prepend(str(out))
    assert main(["verify", "."]) == 2
    line = err_line(capsys)
    assert "lies inside the folder being verified" in line, line
    assert not (out / "MARK").exists()


def test_a_template_is_a_path_beside_the_rule_file_not_a_name_in_the_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Model templates live with their models (issue 15, item 6): a bare name is a path beside the rule
    file, never a lookup in the package's ``emit/`` (which holds the .param writer's template)."""
    model = write(tmp_path, "m.param", CHAIN)
    rules = write(
        tmp_path,
        "r.yaml",
        "version: 1\nname: t\ngraphs:\n  main: {}\nside_files:\n"
        "  - {template: ncnn_param.j2, output: x.txt}\n",
    )
    assert main(["apply", str(rules), str(model), "--out", str(tmp_path / "out")]) == 2
    line = err_line(capsys)
    assert f"template {tmp_path / 'ncnn_param.j2'} not found" in line, line
    assert sorted((tmp_path / "out").iterdir()) == []  # the group never committed: not the graph either
