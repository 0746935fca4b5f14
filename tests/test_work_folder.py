"""The work folders of pnnx exports (hardening, round three, item 7): a kill -9 during the export left a
``.X.gsurg-work-*`` folder beside --out's folder that no later run removed. A run's folder holds a lock
the run keeps; the next run of the same --out removes the folders whose lock it can take (their runs died),
and leaves a live run's, a kept one (--keep-work) and anything not of its kind alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from graphsurgeon.pipeline.work_folder import LOCK_NAME, clear_dead, make_work_folder
from tests.conftest import REPO

HOLD = (
    "import sys, time\n"
    "from graphsurgeon.pipeline.work_folder import make_work_folder\n"
    "w = make_work_folder(sys.argv[1])\n"
    "print(w.path, flush=True)\n"
    "time.sleep(600)\n"
)


def _holder(out: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process that made its work folder for ``out`` and holds it, as a run inside its export does."""
    env = os.environ | {"PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_killed_runs_folder_is_cleared_by_the_next_run_and_a_live_ones_is_not(tmp_path: Path) -> None:
    out = tmp_path / "out"
    killed, killed_folder = _holder(out)
    live, live_folder = _holder(out)
    try:
        (killed_folder / "decoder.pnnx.param").write_text("half an export")
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert killed_folder.is_dir()  # nothing ran its cleanup
        kept = make_work_folder(str(out))
        kept.close(keep=True)  # --keep-work: the folder stays, without its lock
        stranger = tmp_path / ".other.gsurg-work-abc"  # another --out's kind
        stranger.mkdir()
        (stranger / LOCK_NAME).write_text("")
        ours = make_work_folder(str(out))
        try:
            assert not killed_folder.exists()
            assert live_folder.is_dir() and (live_folder / LOCK_NAME).is_file()
            assert kept.path.is_dir() and not (kept.path / LOCK_NAME).exists()
            assert stranger.is_dir()
            assert ours.path.parent == tmp_path and ours.path.name.startswith(".out.gsurg-work-")
        finally:
            ours.close(keep=False)
        assert not ours.path.exists()
    finally:
        live.kill()
        live.wait()
    assert clear_dead(str(out)) == [live_folder]  # dead now, so the next run clears it
