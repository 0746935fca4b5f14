"""Every output of ``gsurg apply`` lands inside its output folder and none is an input of the run (issue 14,
item 5): side files and graph outputs with ``..`` or absolute paths, a symbolic link inside ``--out``
leading out, an output that is the rule file, a template, a copy source or a hard link to the model; and
copy sources that are not regular files (item 8: ``/dev/zero``, a FIFO).

Oracles: the inputs' bytes before the run, and hand-written expectations of the one error line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.errors import OutputError
from graphsurgeon.pipeline.output_guard import OutputGuard, input_identities
from tests.rule_language_harness import CHAIN, err_line, write

HEAD = "version: 1\nname: t\ngraphs:\n  main: {}\n"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _run(tmp_path: Path, rules: str, out: str = "out", *flags: str) -> int:
    src = tmp_path / "src"
    model = write(src, "m.param", CHAIN)
    write(src, "t.j2", "{{ rule_set }}\n")
    path = write(src, "r.yaml", rules)
    return main(["apply", str(path), str(model), "--out", str(tmp_path / out), *flags])


@pytest.mark.parametrize(
    "output",
    ["../m.param", "../r.yaml", "../src/t.j2", "sub/../../m.param", "/tmp/gsurg-escape.txt", "~/x.txt"],
)
def test_a_side_file_cannot_leave_the_output_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    """The reported data loss: ``copy: t.j2, output: ../mlp.bin`` replaced the model and exited 0."""
    rules = HEAD + f"side_files:\n  - {{copy: t.j2, output: '{output}'}}\n"
    (tmp_path / "out").mkdir()
    before = None
    code = None
    try:
        write(tmp_path / "src", "m.param", CHAIN)
        before = _snapshot(tmp_path)
        code = _run(tmp_path, rules, "out/inner")
    finally:
        Path("/tmp/gsurg-escape.txt").unlink(missing_ok=True)
    assert code == 2
    line = err_line(capsys)
    assert "r.yaml:6: side_files.0.output" in line and "output folder" in line, line
    after = _snapshot(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before
    assert not (tmp_path / "out" / "inner").exists()


@pytest.mark.parametrize("key", ["param", "bin"])
def test_a_graph_output_cannot_leave_the_output_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    other = "bin: g.bin" if key == "param" else "param: g.param"
    rules = f"version: 1\nname: t\ngraphs:\n  main:\n    output: {{{key}: ../x.{key}, {other}}}\n"
    assert _run(tmp_path, rules) == 2
    assert f"r.yaml:5: graphs.main.output.{key}" in err_line(capsys)
    assert not (tmp_path / f"x.{key}").exists()


def test_the_guard_checks_names_filled_at_write_time(tmp_path: Path) -> None:
    """``{graph}`` of a weight map is filled with a graph's name (``'../../esc'`` is a valid YAML key) only
    when the file is written, so each write is checked again."""
    guard = OutputGuard(tmp_path / "out", input_identities([]))
    assert guard.target("a/b.txt") == tmp_path / "out" / "a" / "b.txt"
    for name in ("../../esc.weights.yaml", "/abs.txt", "a\0b"):
        with pytest.raises(OutputError, match=r"output folder|NUL|absolute"):
            guard.target(name)


def test_a_symbolic_link_inside_out_leading_out_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "out" / "link")
    rules = HEAD + "side_files:\n  - {copy: t.j2, output: link/x.txt}\n"
    assert _run(tmp_path, rules) == 2
    line = err_line(capsys)
    assert "link/x.txt" in line and "outside the output folder" in line, line
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("which", ["m.param", "r.yaml", "t.j2"])
def test_an_output_that_is_an_input_through_a_link_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    """A target in --out that is a hard link to an input is that input (same device and inode): no output
    may be an input of the run, whatever its path says."""
    src = tmp_path / "src"
    write(src, "m.param", CHAIN)
    write(src, "t.j2", "{{ rule_set }}\n")
    rules_text = HEAD + "side_files:\n  - {copy: t.j2, output: x.txt}\n"
    write(src, "r.yaml", rules_text)
    (tmp_path / "out").mkdir()
    os.link(src / which, tmp_path / "out" / "x.txt")
    before = _snapshot(src)
    assert main(["apply", str(src / "r.yaml"), str(src / "m.param"), "--out", str(tmp_path / "out")]) == 2
    line = err_line(capsys)
    assert "x.txt: refusing to overwrite an input of the run" in line, line
    assert _snapshot(src) == before


def test_the_default_output_names_never_replace_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    model = write(src, "m.param", CHAIN)
    rules = write(src, "r.yaml", HEAD)
    assert main(["apply", str(rules), str(model), "--out", str(src)]) == 2
    assert "refusing to overwrite an input" in err_line(capsys)
    assert model.read_text() == CHAIN


@pytest.mark.parametrize("source", ["/dev/zero", "fifo", "folder"])
def test_a_copy_source_must_be_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str
) -> None:
    """/dev/zero wrote a 3.6 GB staging file; a FIFO hung. (/dev/zero lies outside what a rule file may read:
    trusted, the copy is still refused for what it is.)"""
    (tmp_path / "src").mkdir()
    if source == "fifo":
        os.mkfifo(tmp_path / "src" / "fifo")
        source = str(tmp_path / "src" / "fifo")
    elif source == "folder":
        source = str(tmp_path / "src")
    rules = HEAD + f"side_files:\n  - {{copy: '{source}', output: x.txt}}\n"
    assert _run(tmp_path, rules, "out", *(["--trust-rule-file"] if source == "/dev/zero" else [])) == 2
    line = err_line(capsys)
    assert f"side file x.txt: copy source {source} is a" in line and "not a file" in line, line
    assert not (tmp_path / "out" / "x.txt").exists()
    assert not [p for p in (tmp_path / "out").glob("*") if p.name.startswith(".") and "x.txt" in p.name]


@pytest.mark.parametrize("field", ["side", "graph"])
def test_a_nul_in_an_output_path_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    if field == "side":
        rules = HEAD + 'side_files:\n  - {copy: t.j2, output: "a\\0b"}\n'
        place = "r.yaml:6: side_files.0.output"
    else:
        rules = 'version: 1\nname: t\ngraphs:\n  main:\n    output: {param: "a\\0b"}\n'
        place = "r.yaml:5: graphs.main.output.param"
    assert _run(tmp_path, rules) == 2
    line = err_line(capsys)
    assert place in line and "holds a NUL character" in line, line
