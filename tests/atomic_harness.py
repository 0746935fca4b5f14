"""Run ``gsurg`` in a child process and look at output folders, for the output-protocol tests.

``run_gsurg`` forks: the child sets its environment, umask and file-size limit, points fds 1 and 2 at
files, and calls the CLI's ``main`` exactly as the ``gsurg`` script does, then ``os._exit``s with its
return code. A fault (``GSURG_FAULT_AT``) kills it with a real SIGKILL, so nothing of the child's cleanup
runs; forking avoids paying the interpreter and import start-up (about 2 s here) for each of the many
kills a test makes. One test in test_atomic_kill.py also drives the same hook through a real
``python -m graphsurgeon.cli`` process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import signal
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

from graphsurgeon.cli import main
from graphsurgeon.formats.param_any import read_param

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
SQUEEZENET = CORPUS / "ncnn-assets" / "squeezenet_v1.1"
MLP = REPO / "examples" / "quickstart" / "mlp"
MATMUL_RULE = REPO / "rules" / "matmul-weight-slots.yaml"


@dataclass
class Child:
    """A finished (or stopped) child: exit code, or the signal that killed or stopped it."""

    pid: int
    code: int | None
    signal: int | None
    stopped: bool
    stdout: str
    stderr: str


def run_gsurg(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    umask: int | None = None,
    fsize: int | None = None,
) -> Child:
    """Run ``gsurg argv`` in a forked child and wait until it exits, is killed, or stops itself."""
    _warm_up()
    with tempfile.TemporaryDirectory(prefix="gsurg-child-") as io_dir:
        out, err = os.path.join(io_dir, "out"), os.path.join(io_dir, "err")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            _child(argv, env or {}, umask, fsize, out, err)
        return _wait(pid, out, err)


@functools.cache
def _warm_up() -> None:
    """Load the layer catalog and the .param grammar once here, so children inherit them (a cold child
    spends about 0.15 s on them; the tests fork hundreds)."""
    read_param(f"{MLP}.param")


def resume(child: Child) -> Child:
    """SIGCONT a child that stopped itself (GSURG_FAULT_ACTION=stop) and wait for it to finish."""
    assert child.stopped
    os.kill(child.pid, signal.SIGCONT)
    _, status = os.waitpid(child.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return Child(child.pid, code if code >= 0 else None, -code if code < 0 else None, False, "", "")


def _wait(pid: int, out: str, err: str) -> Child:
    _, status = os.waitpid(pid, os.WUNTRACED)
    stdout = Path(out).read_text(errors="replace") if os.path.exists(out) else ""
    stderr = Path(err).read_text(errors="replace") if os.path.exists(err) else ""
    if os.WIFSTOPPED(status):
        return Child(pid, None, os.WSTOPSIG(status), True, stdout, stderr)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return Child(pid, None, -code, False, stdout, stderr)
    return Child(pid, code, None, False, stdout, stderr)


def _child(
    argv: list[str], env: dict[str, str], umask: int | None, fsize: int | None, out: str, err: str
) -> None:
    code = 99
    try:
        os.environ.update(env)
        if umask is not None:
            os.umask(umask)
        fo = open(out, "w")  # noqa: SIM115 - kept open until _exit
        fe = open(err, "w")  # noqa: SIM115
        os.dup2(fo.fileno(), 1)
        os.dup2(fe.fileno(), 2)
        sys.stdout, sys.stderr = fo, fe
        if fsize is not None:  # `ulimit -f`: writes past fsize fail with EFBIG once SIGXFSZ is ignored
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        code = main(argv)
    except BaseException:
        traceback.print_exc()
        code = 99
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def tree(folder: Path) -> dict[str, bytes]:
    """Every regular file under ``folder`` (hidden ones too), by path relative to it."""
    files = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            files[str(path.relative_to(folder))] = path.read_bytes()
    return files


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777
