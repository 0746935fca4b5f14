"""Progress of long commands (``apply``, ``verify``): on a terminal, tqdm bars and one-line messages on
stderr; when stderr is not a terminal, nothing (or plain lines with ``--verbose``), so logs and CI stay
quiet."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from tqdm import tqdm


class Progress:
    def __init__(self, *, verbose: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.verbose = verbose

    def __call__(self, message: str) -> None:
        """One step: a line above any bar on a terminal, a plain line with --verbose, else nothing."""
        if self.live:
            tqdm.write(f"gsurg: {message}", file=self.stream)
        elif self.verbose:
            print(f"gsurg: {message}", file=self.stream, flush=True)

    @contextmanager
    def bar(self, description: str, total: int, unit: str = "B") -> Iterator[Callable[[int], None]]:
        """A bar for ``total`` units on a terminal; yields the function that advances it."""
        if not self.live:
            self(f"{description} ({total} {unit})") if self.verbose else None
            yield lambda n: None
            return
        with tqdm(
            total=total, desc=description, unit=unit, unit_scale=True, file=self.stream, leave=False
        ) as t:
            yield t.update
