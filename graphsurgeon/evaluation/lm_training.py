"""The pieces every trained fixture's training script shares, whatever the model: question/answer batches
whose loss counts the answer tokens only, a warm-up + cosine learning rate, and the training curve the
script records beside the weights.

A training script (a family's ``train.py``) owns its model, tokenizer and data; it calls these so that
every fixture is trained and recorded the same way: a fixed seed and step count (the same command gives
the same weights on the same machine and thread count) and a ``training.json`` holding the command, the
settings and the curve.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

IGNORE = -100  # the target of a position whose loss is not counted (torch's cross_entropy ignore_index)


def answer_batch(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompt ids, answer ids)`` pairs -> ``ids [B, T]`` (prompt then answer, padded on the right with
    ``pad_id``) and ``targets [B, T]``: at position ``t`` the id at ``t+1`` where that id is part of the
    answer, ``IGNORE`` elsewhere. Right padding lies after everything a causal model reads, so it changes
    no counted position."""
    length = max(len(p) + len(a) for p, a in pairs)
    ids = torch.full((len(pairs), length), pad_id, dtype=torch.int64)
    targets = torch.full((len(pairs), length), IGNORE, dtype=torch.int64)
    for row, (prompt, answer) in enumerate(pairs):
        seq = [*prompt, *answer]
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.int64)
        first = len(prompt)
        targets[row, first - 1 : len(seq) - 1] = torch.tensor(list(answer), dtype=torch.int64)
    return ids, targets


def answer_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the counted positions of ``targets`` (logits ``[B, T, V]``)."""
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE
    )


def learning_rate(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps to ``peak``, then a cosine down to a tenth of it at ``steps``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


@dataclass
class TrainingRecord:
    """What ``training.json`` holds: how the weights were made and how training went."""

    command: str
    settings: dict[str, Any]
    curve: list[dict[str, float]] = field(default_factory=list)  # step, loss, lr, [accuracy], seconds
    result: dict[str, Any] = field(default_factory=dict)
    machine: str = field(default_factory=lambda: f"{platform.machine()} {platform.processor()}".strip())
    torch_threads: int = field(default_factory=torch.get_num_threads)
    started: float = field(default_factory=time.monotonic)

    def point(self, **values: float) -> None:
        """Append one curve point; ``seconds`` since the start is added."""
        self.curve.append({**values, "seconds": round(time.monotonic() - self.started, 1)})

    def write(self, path: Path) -> None:
        doc = asdict(self)
        doc.pop("started")
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def training_args(module: str, description: str, argv: list[str] | None) -> tuple[Path, str]:
    """A trainer's command line: ``OUT [--threads N]`` (torch's thread count set here; the fixtures used 2)
    -> the checkpoint folder to write and the command as ``training.json`` records it."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("out", type=Path, help="the checkpoint folder to write")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the fixtures used 2)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    given = argv if argv is not None else sys.argv[1:]
    return args.out, f"python -m {module} " + " ".join(shlex.quote(a) for a in given)
