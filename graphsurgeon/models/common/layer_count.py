"""The number of layers a checkpoint holds under a name prefix, checked against what its config claims
before any module or tensor table is built: a config that claims 10^9 layers of a 2-layer checkpoint must
be one error line, not a model built until memory runs out."""

from __future__ import annotations

import re
from collections.abc import Iterable

from graphsurgeon.formats.safetensors import CheckpointError


def check_layer_count(
    stored: Iterable[str], prefix: str, claimed: int, key: str, config: str, ckpt: str
) -> None:
    """``stored`` (the checkpoint's tensor names) holds layers ``prefix0.`` .. ``prefix{claimed-1}.`` and
    none beyond; else a ``CheckpointError`` naming the config file and key (``config``, ``key``) and the
    checkpoint (``ckpt``). A gap inside the range is left to the missing-tensor check, which names it."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    held = {int(m.group(1)) for name in stored if (m := pattern.match(name))}
    count = max(held) + 1 if held else 0
    if count != claimed:
        raise CheckpointError(f"{config}: {key} is {claimed}, but {ckpt} holds {count} layer(s) {prefix}N")
