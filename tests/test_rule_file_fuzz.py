"""A property test of ``gsurg apply`` on generated hostile rule files (issue 14: keep what found the
loader's failures in the suite, bounded in time): YAML pieces (aliases, recursive anchors, tags, complex
keys, control characters, null variables), includes (missing, self, another file, one outside the rule
file's folder), output paths (``..``, absolute, NUL, an input's name), copy sources and templates (a FIFO,
``/dev/zero``, a folder, an input, a "secret" outside the rule file's folder by path or link), templates made
of hostile jinja2 snippets, name regexes and expressions, and random edits of the whole text.

Whatever the file, the run exits 0, or 2 with exactly one ``gsurg: error:`` line and no traceback; nothing
outside ``--out`` is created, changed or removed (the inputs stay byte-identical, and a sentinel folder the
file names by absolute path stays empty), and no output holds the secret's line.

Oracles: a snapshot of every file outside ``--out`` before the run; the exit code and stderr's lines."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphsurgeon.cli import main
from tests.rule_language_harness import CHAIN

# each choice: (benign values, hostile values); a hostile one is drawn one time in six, so about a fifth of
# the files are benign throughout and run to the end
OUTPUTS = (
    ["x.txt", "sub/x.txt"],
    [
        "../x.txt",
        "sub/../../x.txt",
        "{abs}/x.txt",
        "~/x.txt",
        "a\\0b",
        "",
        ".",
        "m.param",
        "../m.param",
        "../r.yaml",
        "../t.j2",
        "../inc.yaml",
    ],
)
COPIES = (
    ["t.j2", "m.param"],
    ["/dev/zero", "fifo", ".", "missing", "a\\0b", "{abs}", "{secret}", "../secret.txt", "link-out"],
)
#: a file beside the rule file's folder, standing for /etc/passwd: no output may hold it (issue 40 item 6)
SECRET = "root:x:0:0:fuzz secret line"
SNIPPETS = (
    [
        "{{ rule_set }}",
        "{{ graphs.main.param }}",
        "{% for i in range(3) %}{{ i }}{% endfor %}",
        "{{ vars|json }}",
        "{{ data|json(2) }}",
    ],
    [
        "{{ 1/0 }}",
        "{{ 'a' * 10**10 }}",
        "{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}",
        "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
        "{{ 'x'.ljust(10**9) }}",
        "{{ nothing }}",
        "{% include '../r.yaml' %}",
        "{{",
    ],
)
EXTRAS = (
    [""],
    [
        "x: &a [*a]\n",
        "nulls: {k: null}\n",
        "? [a, b]\n: 1\n",
        "y: \x07\n",
        "z: !!python/object/apply:os.system ['touch PWNED']\n",
        "w: !!int abc\n",
        "a: &a [l, l, l, l, l, l, l, l]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c]\n",
        "deep: " + "[" * 200 + "]" * 200 + "\n",
    ],
)
INCLUDES: tuple[list[str | None], list[str | None]] = (
    [None, "inc.yaml"],
    ["r.yaml", "missing.yaml", "fifo", "{abs}", "a\\0b", "{secret}", "../secret.txt", "link-out"],
)
GRAPH_OUTPUTS: tuple[list[str | None], list[str | None]] = (
    [None, "g.param", "sub/g.param"],
    ["../g.param", "{abs}/g.param", "m.param", "../t.j2"],
)
REGEXES: tuple[list[str | None], list[str | None]] = (
    [None, ".*", "r.*"],
    ["(a+)+$", r"(\w)\1", "(", "(r|r0)+"],
)
EXPRESSIONS = (
    ["1", "${1 + 2}", "x${1}y"],
    [
        "${1/0}",
        "${" + "-" * 300 + "1}",
        "${" + "(" * 300 + "1" + ")" * 300 + "}",
        "${k}",
        "${nope}",
        "${2**100}",
    ],
)
EDITS = ([0], [1, 2, 3])


T = TypeVar("T")


def pick(draw: st.DrawFn, choice: tuple[list[T], list[T]]) -> T:
    benign, hostile = choice
    return draw(st.sampled_from(hostile if draw(st.integers(0, 5)) == 0 else benign))


@st.composite
def rule_files(draw: st.DrawFn) -> str:
    side_kind = draw(st.sampled_from(["template", "copy"]))
    source = pick(draw, COPIES) if side_kind == "copy" else pick(draw, (["t.j2"], ["{secret}", "link-out"]))
    lines = ["version: 1", "name: fuzz"]
    include = pick(draw, INCLUDES)
    if include is not None:
        lines.append(f"include: ['{include}']")
    lines.append(f"vars: {{k: '{pick(draw, EXPRESSIONS)}'}}")
    lines += ["graphs:", "  main:"]
    graph_out = pick(draw, GRAPH_OUTPUTS)
    if graph_out is not None:
        lines.append(f"    output: {{param: '{graph_out}'}}")
    regex = pick(draw, REGEXES)
    if regex is not None:
        lines += [
            "    rules:",
            "      - name: pick",
            f"        match: {{name: '{regex}'}}",
            "        expect: {min: 0}",
        ]
    output = pick(draw, OUTPUTS)
    lines += ["side_files:", f'  - {{{side_kind}: "{source}", output: "{output}", data: {{n: "${{k}}"}}}}']
    text = "\n".join(lines) + "\n" + pick(draw, EXTRAS)
    edits = pick(draw, EDITS)
    for _ in range(edits):  # random edits: a character inserted or removed
        at = draw(st.integers(0, len(text)))
        if draw(st.booleans()) and at < len(text):
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + draw(st.sampled_from(list("{}[]:&*!'\"\n -#%|>\x00\x1b\\é"))) + text[at:]
    return text


@st.composite
def templates(draw: st.DrawFn) -> str:
    return " ".join(pick(draw, SNIPPETS) for _ in range(draw(st.integers(0, 4))))


def _snapshot(root: Path, skip: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == skip or skip in here.parents:
            dirnames[:] = []
            continue
        for name in [*filenames, *dirnames]:
            path = here / name
            if path == skip:
                continue
            if path.is_symlink() or not path.is_file():
                out[str(path)] = "special" if not path.is_dir() else "dir"
            else:
                out[str(path)] = path.read_bytes()
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules=rule_files(), template=templates())
def test_apply_on_a_hostile_rule_file_exits_cleanly_and_writes_only_into_out(
    rules: str, template: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        outside = root / "outside"
        outside.mkdir()
        src = root / "src"
        src.mkdir()
        (src / "m.param").write_text(CHAIN)
        (src / "t.j2").write_text(template + "\n")
        (src / "inc.yaml").write_text("version: 1\nname: inc\nvars: {j: 2}\ngraphs: {}\n")
        os.mkfifo(src / "fifo")
        (root / "secret.txt").write_text(SECRET + "\n")
        os.symlink(root / "secret.txt", src / "link-out")
        (src / "r.yaml").write_text(
            rules.replace("{abs}", str(outside)).replace("{secret}", str(root / "secret.txt")),
            encoding="utf-8",
            errors="surrogatepass",
        )
        out = root / "out"
        before = _snapshot(root, out)
        err = io.StringIO()
        cwd = os.getcwd()
        os.chdir(src)  # a template's shell command would create PWNED here
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = main(["apply", str(src / "r.yaml"), str(src / "m.param"), "--out", str(out)])
        finally:
            os.chdir(cwd)
        lines = err.getvalue().splitlines()
        assert "Traceback" not in err.getvalue()
        assert code in (0, 2), (code, lines)
        if code == 2:
            errors = [line for line in lines if line.startswith("gsurg: error:")]
            assert len(errors) == 1, lines
        assert _snapshot(root, out) == before
        assert list(outside.iterdir()) == []
        written = [p for p in out.rglob("*") if p.is_file()] if out.is_dir() else []
        assert not [p for p in written if SECRET.encode() in p.read_bytes()]
