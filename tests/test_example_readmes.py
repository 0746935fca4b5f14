"""The commands the READMEs give, run from the READMEs' own text (issue 15, item 9), so that the docs and
the code cannot drift apart.

Every fenced ```sh block of the top README and of each model guide (``graphsurgeon/models/*/README.md``,
``examples/quickstart/README.md``) is read from the file, and each of its lines, one plain command, is run in
order in a workspace shaped like the repository root: a copy of ``rules/`` (so a rule file's own output
folder, ``../out/…``, lands in the workspace, never in the checkout), ``examples/`` and ``graphsurgeon/``
linked, and ``../shared`` linked to the corpus beside the checkout. One workspace serves every README (they
write to different places), and a command the top README repeats from a guide, word for word, runs once.
``gsurg`` runs in this process (``graphsurgeon.cli.main``), ``python -m …`` as a child, both with this
checkout on the children's path. A block preceded by ``<!-- readme-test: skip (REASON) -->`` is not run (the
reason is part of the README); one preceded by ``<!-- readme-test: needs PROGRAM -->`` (``penguin_vl_run``,
``qwen3_vl_run``) runs only where the C++ runtime of this checkout is built
(``runtime_cpp/scripts/build_and_test.sh``, which the test command runs after the Python tests), with
``build/linux/runner/PROGRAM`` standing for the built program.

What a command must give, besides exit code 0: ``verify``, ``lint`` and ``diff-bin`` end in ``PASSED``;
every ``.param`` an ``apply`` writes loads in the ncnn wheel with its ``.bin`` and lints clean, and
``--explain`` writes nothing; ``fmt`` and ``synth-bin`` write their ``-o``; ``schema`` prints a JSON
Schema; ``conversions`` lists the shipped families; ``make_tiny`` writes a checkpoint folder; ``generate``
prints token ids; the runner prints text.

The model guides also share one shape (the same sections in the same order, the commands as numbered
steps), and the top README's quick start is the Penguin-VL guide's first two steps."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from graphsurgeon.cli import main
from graphsurgeon.verify.ncnn_fp32 import fp32_net
from tests.conftest import REPO
from tests.runtime_build import built_runner, newer_sources

TOP = "README.md"
GUIDES = (
    "examples/quickstart/README.md",
    "graphsurgeon/models/qwen3_llm/README.md",
    "graphsurgeon/models/penguin_vl/README.md",
    "graphsurgeon/models/qwen3_vl/README.md",
)
#: The sections every model guide has, in this order.
GUIDE_SECTIONS = (
    "What it converts",
    "Quick run",
    "Checkpoint and config",
    "Files here",
    "Verification",
    "Limits",
)
SKIP = re.compile(r"<!-- readme-test: skip \((?P<reason>[^)]+)\) -->")
NEEDS_RUNNER = re.compile(r"<!-- readme-test: needs (?P<program>penguin_vl_run|qwen3_vl_run) -->")
RUNNER_DIR_IN_README = "build/linux/runner/"  # + the program's name stands for the built program
#: The guides that run a C++ runtime program, and which.
RUNNER_GUIDES = {
    "penguin_vl_run": "graphsurgeon/models/penguin_vl/README.md",
    "qwen3_vl_run": "graphsurgeon/models/qwen3_vl/README.md",
}
#: What a shell would read as more than one plain command (operators, redirections, expansions).
SHELL_OPERATORS = set("();<>|&")


@dataclass(frozen=True)
class Block:
    """One ```sh block: where it starts, the numbered step it sits in, its commands and its marker."""

    line: int
    step: int | None
    section: str
    commands: tuple[str, ...]
    skip_reason: str | None
    needs_runner: str  # the runtime program the block runs ('' for none)


def read_blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    blocks: list[Block] = []
    step: int | None = None
    section = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section, step = line[3:].strip(), None
        elif m := re.match(r"(\d+)\. ", line):
            step = int(m.group(1))
        if line.strip() != "```sh":
            i += 1
            continue
        start = i + 1
        body: list[str] = []
        i += 1
        while lines[i].strip() != "```":
            body.append(lines[i].strip())
            i += 1
        previous = next((lines[k].strip() for k in range(start - 2, -1, -1) if lines[k].strip()), "")
        skip = SKIP.fullmatch(previous)
        blocks.append(
            Block(
                line=start,
                step=step,
                section=section,
                commands=_commands(body),
                skip_reason=skip.group("reason") if skip else None,
                needs_runner=needs.group("program") if (needs := NEEDS_RUNNER.fullmatch(previous)) else "",
            )
        )
        i += 1
    return blocks


def _commands(body: list[str]) -> tuple[str, ...]:
    """A block's lines as commands: a trailing backslash continues a command, ``#`` lines are comments."""
    commands: list[str] = []
    pending = ""
    for line in body:
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line and not line.startswith("#"):
            commands.append(line)
    return tuple(commands)


def blocks_of(readme: str) -> list[Block]:
    return read_blocks((REPO / readme).read_text(encoding="utf-8"))


@dataclass
class Workspace:
    """A folder shaped like the repository root, where a README's commands run."""

    root: Path
    #: every command run here so far, in order
    ran: list[str] = field(default_factory=list)

    @classmethod
    def make(cls, base: Path) -> Workspace:
        root = base / "repo"
        root.mkdir(parents=True)
        shutil.copytree(REPO / "rules", root / "rules")
        (root / "examples").symlink_to(REPO / "examples", target_is_directory=True)
        # the model families' folders, by path (a guide's commands may name a tiny checkpoint there)
        (root / "graphsurgeon").symlink_to(REPO / "graphsurgeon", target_is_directory=True)
        (base / "shared").symlink_to(REPO.parent / "shared", target_is_directory=True)
        return cls(root)

    def files(self) -> dict[Path, tuple[int, int]]:
        """Every regular file the workspace holds (not through the examples link), with mtime and size."""
        found: dict[Path, tuple[int, int]] = {}
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]
            for name in names:
                path = Path(folder) / name
                st = path.stat()
                found[path] = (st.st_mtime_ns, st.st_size)
        return found


def _python_path() -> str:
    """This checkout first on the path of every Python child (apply's export worker, ``python -m``)."""
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    """Run with ``folder`` as the current directory, and this checkout importable by child processes."""
    before, path = Path.cwd(), os.environ.get("PYTHONPATH")
    os.chdir(folder)
    os.environ["PYTHONPATH"] = _python_path()
    try:
        yield
    finally:
        os.chdir(before)
        if path is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = path


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def run_one(argv: list[str], ws: Workspace, runner: Path | None) -> Result:
    if argv[0] == "gsurg":
        out, err = io.StringIO(), io.StringIO()
        with inside(ws.root), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv[1:])
        return Result(code, out.getvalue(), err.getvalue())
    if argv[:2] == ["python", "-m"]:
        argv = [sys.executable, *argv[1:]]
    elif runner is not None and argv[0] == RUNNER_DIR_IN_README + runner.name:
        argv = [str(runner), *argv[1:]]
    else:
        raise AssertionError(f"a README command this test does not know how to run: {shlex.join(argv)}")
    env = os.environ | {"PYTHONPATH": _python_path()}
    done = subprocess.run(argv, cwd=ws.root, env=env, capture_output=True, text=True, timeout=600)
    return Result(done.returncode, done.stdout, done.stderr)


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def check_outputs(argv: list[str], result: Result, ws: Workspace, written: list[Path]) -> None:
    """What each kind of command must have given (its exit code is checked before)."""
    where = shlex.join(argv)
    if argv[0] == "gsurg":
        command = argv[1]
        if command in ("verify", "lint", "diff-bin"):
            assert _last_line(result.out) == "PASSED", (where, result.out[-2000:])
        elif command == "apply" and "--explain" in argv:
            assert "MATCH" in result.out and not written, (where, result.out, written)
        elif command == "apply":
            params = sorted(p for p in written if p.name.endswith((".param", ".param.bin")))
            assert params, (where, "wrote no .param", written)
            for param in params:
                model = param.with_name(param.name.removesuffix(".bin").removesuffix(".param") + ".bin")
                fp32_net(param, model, binary_param=param.name.endswith(".param.bin"))
                with inside(ws.root), contextlib.redirect_stdout(io.StringIO()) as out:
                    assert main(["lint", str(param), "--bin", str(model)]) == 0, (
                        where,
                        param,
                        out.getvalue(),
                    )
        elif command in ("fmt", "synth-bin"):
            target = _option(argv, "-o")
            assert target is not None and (ws.root / target) in written, (where, written)
        elif command == "eval":
            assert "task accuracy" in result.out and "set " in result.out, (where, result.out)
        elif command == "schema":
            assert "$defs" in json.loads(result.out), where
        elif command == "rope":
            assert "largest |Δangle|" in result.out, (where, result.out)
        elif command == "conversions":
            assert _last_line(result.out).endswith(" conversions") and "qwen3_llm:" in result.out, where
    elif argv[0].startswith(RUNNER_DIR_IN_README):
        assert result.out.strip(), (where, result.err)
    elif argv[2].endswith(".make_tiny"):
        assert (ws.root / argv[3] / "config.json").is_file(), (where, result.err)
    elif argv[2].endswith(".generate"):
        assert re.search(r"^tokens: \[\d+", result.out, re.M), (where, result.out)


def run_block(block: Block, readme: str, ws: Workspace, runner: Path | None = None) -> list[str]:
    """Run (and check) each command of ``block``, unless the workspace already ran it word for word;
    returns the block's commands."""
    for command in block.commands:
        if command in ws.ran:
            continue
        where = f"{readme}:{block.line}: {command}"
        tokens = list(shlex.shlex(command, posix=True, punctuation_chars=True))
        plain = not any(set(tok) <= SHELL_OPERATORS for tok in tokens) and not set("$`") & set(command)
        assert plain, f"{where}: a block that is run holds one plain command per line"
        argv = shlex.split(command, comments=True)
        before = ws.files()
        result = run_one(argv, ws, runner)
        assert result.code == 0, f"{where}: exit {result.code}\n{result.out[-3000:]}\n{result.err[-3000:]}"
        after = ws.files()
        written = [p for p, stamp in after.items() if before.get(p) != stamp]
        check_outputs(argv, result, ws, written)
        ws.ran.append(command)
    return list(block.commands)


@dataclass
class Readmes:
    """Each README's runnable blocks, run once per module in one shared workspace (the READMEs write to
    different places), so that a command the top README repeats from a guide, word for word, runs once; the
    runner test then reuses the Penguin-VL conversion."""

    ws: Workspace
    #: per README run so far, the commands it gave
    given: dict[str, list[str]] = field(default_factory=dict)

    def run(self, readme: str) -> list[str]:
        if readme not in self.given:
            commands: list[str] = []
            for block in blocks_of(readme):
                if block.skip_reason is None and not block.needs_runner:
                    commands += run_block(block, readme, self.ws)
            self.given[readme] = commands
        return self.given[readme]


@pytest.fixture(scope="module")
def readmes(tmp_path_factory: pytest.TempPathFactory) -> Readmes:
    return Readmes(Workspace.make(tmp_path_factory.mktemp("readmes")))


@pytest.mark.parametrize(
    "readme",
    [  # all but the quick-start guide run pnnx conversions, which `-m "not slow"` leaves out
        pytest.param(TOP, marks=pytest.mark.slow),
        GUIDES[0],
        pytest.param(GUIDES[1], marks=pytest.mark.slow),
        pytest.param(GUIDES[2], marks=pytest.mark.slow),
        pytest.param(GUIDES[3], marks=pytest.mark.slow),
    ],
)
def test_every_command_of_the_readme_runs_and_gives_what_it_says(readme: str, readmes: Readmes) -> None:
    commands = readmes.run(readme)  # each command is checked as it runs (run_block)
    assert commands, f"{readme} has no command to run"
    assert set(commands) <= set(readmes.ws.ran)


@pytest.mark.slow
@pytest.mark.parametrize("program", sorted(RUNNER_GUIDES))
def test_each_vlm_guide_runs_its_conversion_with_the_cpp_runtime(program: str, readmes: Readmes) -> None:
    readme = RUNNER_GUIDES[program]
    runner_blocks = [b for b in blocks_of(readme) if b.needs_runner]
    assert runner_blocks and all(b.needs_runner == program for b in runner_blocks)
    assert all(c.startswith(RUNNER_DIR_IN_README + program) for b in runner_blocks for c in b.commands)
    runner = built_runner(program)
    if runner is None:
        pytest.skip(
            f"{program} is not built for this checkout (runtime_cpp/scripts/build_and_test.sh builds it; "
            "the test command runs that after the Python tests)"
        )
    stale = newer_sources(runner)
    if stale:
        pytest.skip(f"{runner} is older than {len(stale)} of its sources (e.g. {stale[0]}): rebuild it")
    readmes.run(readme)
    for block in runner_blocks:
        run_block(block, readme, readmes.ws, runner)


@pytest.mark.parametrize("readme", [TOP, *GUIDES])
def test_every_block_not_run_says_why_and_every_marker_belongs_to_a_block(readme: str) -> None:
    text = (REPO / readme).read_text(encoding="utf-8")
    markers = re.findall(r"<!-- readme-test:[^>]*-->", text)
    blocks = blocks_of(readme)
    marked = [b for b in blocks if b.skip_reason is not None or b.needs_runner]
    assert len(markers) == len(marked), (markers, [b.line for b in marked])
    assert all(b.skip_reason is None or len(b.skip_reason.split()) >= 3 for b in blocks)


@pytest.mark.parametrize("readme", GUIDES)
def test_every_guide_has_the_same_sections_and_numbers_its_steps(readme: str) -> None:
    text = (REPO / readme).read_text(encoding="utf-8")
    sections = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    assert sections == list(GUIDE_SECTIONS), sections
    blocks = blocks_of(readme)
    assert blocks and all(b.section == "Quick run" and b.step is not None for b in blocks), [
        (b.line, b.section, b.step) for b in blocks
    ]
    steps = sorted({b.step for b in blocks if b.step is not None})
    assert steps == list(range(1, len(steps) + 1)), steps


def test_the_quick_start_is_the_penguin_vl_guides_first_steps_and_the_test_command_is_cis() -> None:
    top = blocks_of(TOP)
    first, test_command = top[0].commands[0], top[1].commands[0]
    installs, *conversion = first.split(" && ")
    assert installs.startswith("pip install ") and top[0].skip_reason is not None
    guide = [c for b in blocks_of(GUIDES[2]) if b.step in (1, 2) for c in b.commands]
    assert conversion == guide == ["gsurg apply rules/penguin_vl.yaml", "gsurg verify out/penguin_vl"]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci, "the README's test command is not the one .ci/run runs"
