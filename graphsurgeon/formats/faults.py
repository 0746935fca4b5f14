"""Fault injection for the output protocol: named steps at which a test can make the process die.

The writers call ``fault_point(label)`` at every step of a group commit and of the recovery of an
interrupted one (labels such as ``staged:0``, ``committed``, ``renamed:1``, ``recover-removed:0``). Two
environment variables drive it, both read at each call so a forked test child can set them:

- ``GSURG_FAULT_TRACE=FILE`` appends every label reached to FILE, one per line. Tests learn the steps
  from a traced run of the code itself, so a step added later is covered without editing a list.
- ``GSURG_FAULT_AT=LABEL`` stops the process the first time LABEL is reached. By default it is killed
  with SIGKILL: no ``finally`` blocks, no ``atexit``, no flush, exactly a ``kill -9`` (and, for the files,
  a power cut minus the page cache). ``GSURG_FAULT_ACTION=stop`` sends SIGSTOP instead, which leaves a
  live run (its locks held) frozen at that step until SIGCONT.

With neither variable set a call costs two dictionary look-ups.
"""

from __future__ import annotations

import os
import signal

TRACE_ENV = "GSURG_FAULT_TRACE"
AT_ENV = "GSURG_FAULT_AT"
ACTION_ENV = "GSURG_FAULT_ACTION"


def fault_point(label: str) -> None:
    """Record ``label`` (with GSURG_FAULT_TRACE) and die or freeze here when GSURG_FAULT_AT names it."""
    trace = os.environ.get(TRACE_ENV)
    if trace:
        with open(trace, "a", encoding="utf-8") as fh:
            fh.write(label + "\n")
    if os.environ.get(AT_ENV) != label:
        return
    if os.environ.get(ACTION_ENV) == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(137)  # not reached where SIGKILL exists
