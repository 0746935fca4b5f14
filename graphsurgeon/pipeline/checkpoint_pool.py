"""The checkpoints a rule run reads, each opened once: the weight actions (a rule file's ``checkpoints:``)
and a ``weight_map`` side file naming the same file read one ``Checkpoint`` — its header (and a sharded
one's index and shard headers) parsed once, each shard's reader opened once — and the run closes them all
at its end."""

from __future__ import annotations

import os

from graphsurgeon.formats.safetensors import Checkpoint


class CheckpointPool:
    """Open checkpoints by real path (a symbolic link or another spelling of a path finds the same one)."""

    def __init__(self) -> None:
        self._open: dict[str, Checkpoint] = {}

    def get(self, path: str) -> Checkpoint:
        """The open checkpoint at ``path`` (a ``.safetensors`` file or ``*.safetensors.index.json``)."""
        key = os.path.realpath(path)
        if key not in self._open:
            self._open[key] = Checkpoint(path)
        return self._open[key]

    @property
    def opened(self) -> int:
        """How many checkpoints are open."""
        return len(self._open)

    def close(self) -> None:
        for ckpt in self._open.values():
            ckpt.close()
        self._open.clear()
