"""A time limit for a test step that could block forever (reading a FIFO): SIGALRM raises ``Hung`` in the
main thread, so the test fails instead of hanging the suite."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

ALARM_SECONDS = 10


class Hung(Exception):
    pass


@contextmanager
def alarm(seconds: int = ALARM_SECONDS) -> Iterator[None]:
    def ring(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"still running after {seconds} s (waiting on a FIFO?)")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
