"""A kill at any step of a group commit leaves the old set or the new set, never a mix, once the next gsurg
run that writes into the folder has run; it never touches the user's other files.

The steps are not listed here: a clean run with GSURG_FAULT_TRACE records every fault point the code
passes, and the test kills a fresh copy of the scenario at each one (SIGKILL, in a separate process).
"Old" bytes are what the test put in the folder; "new" bytes are what an uninterrupted run of the same
command writes (for ``fmt --bin`` the new .bin is also the input .bin byte for byte, checked below): the
property under test is that the folder holds one of the two complete sets, not what the sets contain.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from graphsurgeon.formats.faults import ACTION_ENV, AT_ENV, TRACE_ENV
from tests.atomic_harness import MATMUL_RULE, MLP, REPO, SQUEEZENET, resume, run_gsurg, tree

# Files a user keeps beside the outputs, including look-alikes of gsurg's staging names that are not
# gsurg's: no lock owns the first; the second's "lock" does not hold gsurg's record; the last is the
# naming of older gsurg versions, whose owner cannot be told. None of them may be touched.
USER_FILES = {
    "notes.txt": b"my notes\n",
    "keep/data.bin": b"\x00\x01user data",
    ".gsurg-0123456789abcdef-0.x.bin": b"looks like staging, no lock",
    ".gsurg-fedcba9876543210.lock": b"not gsurg's lock\n",
    ".gsurg-fedcba9876543210-0.x.param": b"looks like staging, foreign lock",
    ".x.bin.k3j4abcd.tmp": b"an old-style temp file",
}


@dataclass(frozen=True)
class Scenario:
    """A command writing ``targets`` (paths relative to the work folder, with their old bytes) into
    ``folders``, and the follow-up commands that write other files into those folders."""

    name: str
    argv: Callable[[Path], list[str]]
    targets: dict[str, bytes]
    folders: tuple[str, ...]

    def setup(self, work: Path) -> None:
        for folder in self.folders:
            for name, data in USER_FILES.items():
                path = work / folder / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        for rel, data in self.targets.items():
            (work / rel).write_bytes(data)

    def next_runs(self, work: Path) -> list[list[str]]:
        """One command per output folder that writes an unrelated file there (synth-bin of the mlp)."""
        return [["synth-bin", f"{MLP}.param", "-o", str(work / f / "other.bin"), "-q"] for f in self.folders]

    def state(self, work: Path, new: dict[str, bytes]) -> str:
        """'old', 'new' or 'mixed' (each target is the old or the new bytes; anything else fails)."""
        kinds = set()
        for rel, old in self.targets.items():
            path = work / rel
            assert path.exists(), f"{rel} is missing"
            data = path.read_bytes()
            assert data in (old, new[rel]), f"{rel} holds neither the old nor the new bytes"
            kinds.add("old" if data == old else "new")
        return kinds.pop() if len(kinds) == 1 else "mixed"

    def leftovers(self, work: Path) -> list[str]:
        """Every name in the output folders that is neither the user's, a target, nor other.bin."""
        expected = {name.split("/")[0] for name in USER_FILES} | {"other.bin"}
        expected |= {rel.split("/")[-1] for rel in self.targets}
        return sorted(
            f"{folder}/{name}"
            for folder in self.folders
            for name in os.listdir(work / folder)
            if name not in expected
        )

    def check_user_files(self, work: Path) -> None:
        for folder in self.folders:
            for name, data in USER_FILES.items():
                assert (work / folder / name).read_bytes() == data, f"{folder}/{name} was touched"
            assert not (work / folder / "keep").is_symlink()


def _fmt(work: Path) -> list[str]:
    return [
        "fmt", f"{SQUEEZENET}.param", "-o", str(work / "out/x.param"),
        "--bin", f"{SQUEEZENET}.bin", "--out-bin", str(work / "out/x.bin"), "-q",
    ]  # fmt: skip


def _fmt_two_folders(work: Path) -> list[str]:
    return [
        "fmt", f"{SQUEEZENET}.param", "-o", str(work / "a/x.param"),
        "--bin", f"{SQUEEZENET}.bin", "--out-bin", str(work / "b/x.bin"), "-q",
    ]  # fmt: skip


def _apply(work: Path) -> list[str]:
    return ["apply", str(MATMUL_RULE), f"{MLP}.param", "--bin", f"{MLP}.bin", "--out", str(work / "out")]


OLD_PARAM = Path(f"{MLP}.param").read_bytes()
OLD_BIN = Path(f"{MLP}.bin").read_bytes()

SCENARIOS = [
    Scenario("fmt", _fmt, {"out/x.param": OLD_PARAM, "out/x.bin": OLD_BIN}, ("out",)),
    Scenario("fmt-two-folders", _fmt_two_folders, {"a/x.param": OLD_PARAM, "b/x.bin": OLD_BIN}, ("a", "b")),
    Scenario(
        "apply",
        _apply,
        {
            "out/mlp.param": Path(f"{SQUEEZENET}.param").read_bytes(),
            "out/mlp.bin": Path(f"{SQUEEZENET}.bin").read_bytes()[:4096],
            "out/mlp.gsurg.json": b"{}\n",
        },
        ("out",),
    ),
]


def _steps(scenario: Scenario, tmp: Path) -> tuple[list[str], dict[str, bytes]]:
    """The fault points of a clean run, in order, and the bytes that run wrote."""
    work, trace = tmp / "clean", tmp / "clean.trace"
    scenario.setup(work)
    child = run_gsurg(scenario.argv(work), env={TRACE_ENV: str(trace)})
    assert child.code == 0, child.stderr
    steps = trace.read_text().split()
    assert len(steps) == len(set(steps)), f"fault labels must name one instant each: {steps}"
    new = {rel: (work / rel).read_bytes() for rel in scenario.targets}
    if scenario.name.startswith("fmt"):  # fmt --bin copies unchanged weights byte for byte
        assert next(v for k, v in new.items() if k.endswith(".bin")) == Path(f"{SQUEEZENET}.bin").read_bytes()
    return steps, new


def _kill(scenario: Scenario, work: Path, step: str) -> None:
    scenario.setup(work)
    child = run_gsurg(scenario.argv(work), env={AT_ENV: step})
    assert child.signal == signal.SIGKILL, f"{step}: not killed there ({child.code}, {child.stderr})"


def _finish(scenario: Scenario, work: Path, new: dict[str, bytes], step: str) -> str:
    """Run the follow-up commands; the folder must then hold one complete set and nothing of gsurg's."""
    for argv in scenario.next_runs(work):
        child = run_gsurg(argv)
        assert child.code == 0, f"{step}: {child.stderr}"
    final = scenario.state(work, new)
    assert final in ("old", "new"), f"kill at {step} left a mixed set after the next run"
    assert scenario.leftovers(work) == [], f"kill at {step}: leftovers after the next run"
    scenario.check_user_files(work)
    return final


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_kill_at_every_step_leaves_the_old_or_the_new_set(scenario: Scenario, tmp_path: Path) -> None:
    steps, new = _steps(scenario, tmp_path)
    assert len(steps) >= 2 * len(scenario.targets)
    finals = []
    for i, step in enumerate(steps):
        work = tmp_path / f"kill{i}"
        _kill(scenario, work, step)
        state = scenario.state(work, new)
        allowed = set(scenario.leftovers(work))
        assert all(name.split("/")[-1].startswith(".gsurg-") for name in allowed)
        scenario.check_user_files(work)
        final = _finish(scenario, work, new, step)
        if state != "old":  # a kill that already shows new files can only end with the new set
            assert final == "new", f"kill at {step}: {state} before the next run, {final} after"
        finals.append(final)
        shutil.rmtree(work)
    # one commit point: every kill before it keeps the old set, every kill after it gives the new one
    assert finals[0] == "old" and finals[-1] == "new", list(zip(steps, finals, strict=True))
    first_new = finals.index("new")
    assert finals[first_new:] == ["new"] * (len(finals) - first_new), list(zip(steps, finals, strict=True))


@pytest.mark.slow  # about 40 s: every recovery step after every commit step, ~300 child processes
@pytest.mark.parametrize("scenario", SCENARIOS[:2], ids=lambda s: s.name)
def test_a_kill_during_recovery_is_recovered_by_the_run_after(scenario: Scenario, tmp_path: Path) -> None:
    """Kill the first run at each step, then kill the recovering run at each of its own steps: a third
    run still leaves one complete set (the same one as without the second kill) and no leftovers."""
    steps, new = _steps(scenario, tmp_path)
    nested = 0
    for i, step in enumerate(steps):
        work, trace = tmp_path / f"k{i}", tmp_path / f"k{i}.trace"
        _kill(scenario, work, step)
        for argv in scenario.next_runs(work):
            assert run_gsurg(argv, env={TRACE_ENV: str(trace)}).code == 0
        expected = scenario.state(work, new)
        recovery_steps = trace.read_text().split() if trace.exists() else []
        recovery_steps = [s for s in recovery_steps if s.startswith("recover")]
        shutil.rmtree(work)
        for j, rstep in enumerate(recovery_steps):
            work = tmp_path / f"k{i}r{j}"
            _kill(scenario, work, step)
            killed = False
            for argv in scenario.next_runs(work):
                child = run_gsurg(argv, env={AT_ENV: rstep})
                killed = killed or child.signal == signal.SIGKILL
            assert killed, f"recovery step {rstep} was not reached"
            assert _finish(scenario, work, new, f"{step} then {rstep}") == expected
            nested += 1
            shutil.rmtree(work)
    assert nested > 0  # some kills leave something to recover


def test_a_live_run_keeps_its_staging_files_while_another_run_writes_there(tmp_path: Path) -> None:
    """A run frozen (SIGSTOP) after staging both files holds its lock: a second run into the same folder
    must neither remove its staging files nor complete anything; resumed, the first run commits."""
    scenario = SCENARIOS[0]
    steps, new = _steps(scenario, tmp_path)
    work = tmp_path / "live"
    scenario.setup(work)
    frozen_at = [s for s in steps if s.startswith("staged")][-1]
    child = run_gsurg(scenario.argv(work), env={AT_ENV: frozen_at, ACTION_ENV: "stop"})
    try:
        assert child.stopped, child.stderr
        staged = {name: (work / name).stat().st_size for name in scenario.leftovers(work)}
        assert any(size > 1000 for size in staged.values())
        other = run_gsurg(scenario.next_runs(work)[0])
        assert other.code == 0, other.stderr
        assert "removed" not in other.stderr
        assert {name: (work / name).stat().st_size for name in scenario.leftovers(work)} == staged
        assert scenario.state(work, new) == "old"
    finally:
        done = resume(child)
    assert done.code == 0
    assert scenario.state(work, new) == "new"
    assert scenario.leftovers(work) == []
    scenario.check_user_files(work)


def test_leftovers_of_a_killed_run_are_removed_and_reported(tmp_path: Path) -> None:
    """Issue 7 item 2: a kill while writing leaves hidden staging files; the next run into the folder
    removes exactly those (not a look-alike) and says how many and how large."""
    scenario = SCENARIOS[0]
    steps, new = _steps(scenario, tmp_path)
    work = tmp_path / "w"
    _kill(scenario, work, [s for s in steps if s.startswith("staged")][-1])
    left = [n for n in scenario.leftovers(work) if not n.endswith(".lock")]
    assert len(left) == 2, left  # the staged .param and .bin
    size = sum((work / n).stat().st_size for n in left)
    assert size > 2_000_000  # the .bin
    child = run_gsurg(scenario.next_runs(work)[0])
    assert child.code == 0
    folder = work / "out"
    want = (
        f"gsurg: removed 2 stale staging file(s) ({size / 1e6:.1f} MB) left by an interrupted run in {folder}"
    )
    assert want in child.stderr.splitlines(), child.stderr
    assert scenario.leftovers(work) == []
    assert scenario.state(work, new) == "old"
    scenario.check_user_files(work)


def test_a_reader_warns_about_a_pending_commit(tmp_path: Path) -> None:
    """Killed between its renames, a run leaves a committed journal; lint reading that model says so
    (it does not complete it: readers never write)."""
    scenario = SCENARIOS[0]
    steps, new = _steps(scenario, tmp_path)
    work = tmp_path / "w"
    _kill(scenario, work, next(s for s in steps if s.startswith("renamed")))
    assert scenario.state(work, new) == "mixed"
    before = tree(work)
    child = run_gsurg(["lint", str(work / "out/x.param"), "--bin", str(work / "out/x.bin")])
    warnings = [line for line in child.stderr.splitlines() if line.startswith("gsurg: warning:")]
    assert any(str(work / "out/x.param") in w and "pending" in w for w in warnings), child.stderr
    assert tree(work) == before


def test_the_fault_hook_works_in_a_real_gsurg_process(tmp_path: Path) -> None:
    """The same hook through ``python -m graphsurgeon.cli`` (not a fork of the test process)."""
    scenario = SCENARIOS[0]
    steps, new = _steps(scenario, tmp_path)
    work = tmp_path / "w"
    scenario.setup(work)
    env = {**os.environ, AT_ENV: next(s for s in steps if s.startswith("renamed")), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "graphsurgeon.cli", *scenario.argv(work)], env=env, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert scenario.state(work, new) == "mixed"
    assert _finish(scenario, work, new, "real process") == "new"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another user")
def test_leftovers_of_another_user_are_left_alone(tmp_path: Path) -> None:
    """Recovery acts only on the running user's own lock, journal and staging files: planted (or another
    user's) files cannot make it remove or rename anything."""
    scenario = SCENARIOS[0]
    steps, new = _steps(scenario, tmp_path)
    for step in ([s for s in steps if s.startswith("staged")][-1], "committed"):
        work = tmp_path / step
        _kill(scenario, work, step)
        state = scenario.state(work, new)
        left = scenario.leftovers(work)
        for name in left:
            os.chown(work / name, 65534, 65534)
        before = tree(work)
        child = run_gsurg(scenario.next_runs(work)[0])
        assert child.code == 0, child.stderr
        assert "removed" not in child.stderr and "completed" not in child.stderr
        after = tree(work)
        del after["out/other.bin"]
        assert after == before
        assert scenario.state(work, new) == state
