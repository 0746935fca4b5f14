"""What every VLM fixture's training script shares, whatever the model: the sample it trains on, batches of
one image grid, the auxiliary loss's tensors, greedy answers by recomputation, accuracy per kind, the
weight initialisation, and the training loop with its curve.

A family's ``train.py`` owns the model, its processor, tokenizer and checkpoint layout: it turns items into
``VqaSample``s, gives a ``Trainer`` its loss and next-token functions, and writes the folder. The loop
here is the one every fixture is trained and recorded with (``lm_training``'s schedule and record).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from . import vqa
from .lm_training import TrainingRecord, learning_rate, training_args
from .vqa_supervision import AuxiliaryHeads


@dataclass
class VqaSample:
    """One item as a model sees it: its patches ``[N, patch_dim]`` in the processor's order, the grid
    that decides which samples batch together, prompt ids and answer ids (EOS included), and the
    auxiliary targets: per image row ``[M, 5]`` (``vqa_supervision.patch_targets``) and per named object
    (``grounding_targets``)."""

    pixels: np.ndarray
    grid: tuple[int, int]
    prompt: list[int]
    answer: list[int]
    item: vqa.VqaItem
    patch_targets: np.ndarray
    named: list[tuple[int, int, int, int, int]]


def by_grid(batch: Sequence[VqaSample], size: int) -> list[list[VqaSample]]:
    """``batch`` cut into runs of at most ``size`` samples of one grid each, grids in order of first
    appearance."""
    groups: dict[tuple[int, int], list[VqaSample]] = {}
    for sample in batch:
        groups.setdefault(sample.grid, []).append(sample)
    return [g[i : i + size] for g in groups.values() for i in range(0, len(g), size)]


def auxiliary_loss(
    heads: AuxiliaryHeads, batch: Sequence[VqaSample], features: torch.Tensor, hidden: torch.Tensor
) -> torch.Tensor:
    """``heads.loss`` on a batch: ``features [B * M, C]`` (the image rows the LLM reads, samples in
    order) and ``hidden [B, T, C]`` (the LLM's final hidden state), at each named object's token."""
    patches = torch.from_numpy(np.concatenate([s.patch_targets for s in batch]))
    rows = [(k, *named) for k, s in enumerate(batch) for named in s.named]
    where = torch.tensor([r[:2] for r in rows], dtype=torch.int64).reshape(-1, 2)
    named = torch.tensor([r[2:] for r in rows], dtype=torch.int64).reshape(-1, 4)
    return heads.loss(features, patches, hidden[where[:, 0], where[:, 1]], named)


#: ``(samples of one grid, their sequences so far) -> each one's next token``.
NextTokens = Callable[[Sequence[VqaSample], list[list[int]]], list[int]]


@torch.no_grad()
def greedy_answers(
    next_tokens: NextTokens,
    decode: Callable[[list[int]], str],
    data: Sequence[VqaSample],
    eos: int,
    max_answer: int,
    batch: int = 64,
) -> list[str]:
    """Each sample's greedy answer text (its tokens up to EOS, at most ``max_answer``), batched per grid;
    ``next_tokens`` recomputes the whole sequences at each step (answers are short)."""
    answers: dict[int, str] = {}
    order = {id(s): k for k, s in enumerate(data)}
    for group in by_grid(data, batch):
        seqs = [list(s.prompt) for s in group]
        done = [False] * len(group)
        for _ in range(max_answer):
            for k, token in enumerate(next_tokens(group, seqs)):
                if not done[k]:
                    seqs[k].append(int(token))
                    done[k] = token == eos
            if all(done):
                break
        for sample, seq in zip(group, seqs, strict=True):
            new = seq[len(sample.prompt) :]
            answers[order[id(sample)]] = decode(new[: new.index(eos)] if eos in new else new)
    return [answers[k].strip() for k in range(len(data))]


def accuracy(answers: Sequence[str], items: Sequence[vqa.VqaItem]) -> float:
    return sum(a.split() == i.answer.split() for a, i in zip(answers, items, strict=True)) / len(items)


def by_kind(answers: Sequence[str], items: Sequence[vqa.VqaItem]) -> dict[str, float]:
    """Accuracy per question kind, in ``vqa.KINDS`` order (kinds without items left out)."""
    out = {}
    for kind in vqa.KINDS:
        pairs = [(a, i) for a, i in zip(answers, items, strict=True) if i.kind == kind]
        if pairs:
            out[kind] = accuracy([a for a, _ in pairs], [i for _, i in pairs])
    return out


def init_weights(
    named: Iterable[tuple[str, nn.Parameter]], seed: int, unit: tuple[str, ...], small: tuple[str, ...]
) -> None:
    """Parameters whose names end with one of ``unit`` set to 1 (norm weights), biases 0, those ending
    with one of ``small`` normal(0, 0.02) (embeddings), every other matrix normal with std
    ``1/sqrt(fan_in)`` (transformers' fixed 0.02 is several times smaller at these widths: measured on
    the first VLM fixture, the encoder then needs several times more steps to tell two digits apart)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in named:
            if name.endswith(unit):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            elif name.endswith(small):
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) / math.sqrt(param[0].numel()))


def final_result(answer: Callable[[list[vqa.VqaItem]], list[str]]) -> dict[str, Any]:
    """A written checkpoint's greedy accuracy on the 500 held-out items, with their images and with the
    images blanked, through ``answer`` (the family's reference), beside the chance level."""
    items = list(vqa.eval_items())
    with_image = answer(items)
    blank = answer([vqa.blank(i) for i in items])
    return {
        "eval_items": len(items),
        "eval_accuracy": accuracy(with_image, items),
        "eval_accuracy_by_kind": by_kind(with_image, items),
        "blank_accuracy": accuracy(blank, items),
        "chance_accuracy": vqa.chance_accuracy(items),
    }


@dataclass
class Trainer:
    """The loop: ``settings`` (steps, peak_lr, warmup, weight_decay, eval_every, seed, data_seed, chunk,
    batch), ``parameters`` to optimise (the model's and the auxiliary heads'), ``loss`` of one batch,
    ``answers`` of held-out samples (greedy), and ``make_samples`` turning items into samples; the
    gradient's norm is clipped to 1 over ``clipped`` (the model's parameters)."""

    settings: dict[str, Any]
    parameters: list[nn.Parameter]
    clipped: list[nn.Parameter]
    loss: Callable[[Sequence[VqaSample]], torch.Tensor]
    answers: Callable[[Sequence[VqaSample]], list[str]]
    make_samples: Callable[[Sequence[vqa.VqaItem]], list[VqaSample]]
    set_mode: Callable[[bool], Any]  # the model's train(True) / eval (False)

    def batches(self, chunk: int) -> list[list[VqaSample]]:
        """Chunk ``chunk`` of the training stream as batches of one grid each, in a seeded order."""
        items = vqa.make_items(self.settings["data_seed"] + chunk, self.settings["chunk"])
        batches = by_grid(self.make_samples(items), self.settings["batch"])
        order = np.random.default_rng([self.settings["seed"], chunk]).permutation(len(batches))
        return [batches[int(i)] for i in order]

    def run(self, record: TrainingRecord) -> None:
        """Train for ``steps``, recording the loss every 25 steps and the greedy accuracy on the first
        ``eval_items`` held-out items every ``eval_every`` steps and at the end."""
        s = self.settings
        optimizer = torch.optim.AdamW(
            self.parameters, lr=s["peak_lr"], weight_decay=s["weight_decay"], betas=(0.9, 0.98)
        )
        held_out_items = vqa.eval_items(s["eval_items"])
        held_out = self.make_samples(held_out_items)
        self.set_mode(True)
        steps, queue, chunk = s["steps"], list[list[VqaSample]](), 0
        for step in range(steps):
            if not queue:
                queue, chunk = self.batches(chunk), chunk + 1
            batch = queue.pop(0)
            lr = learning_rate(step, steps, s["peak_lr"], s["warmup"])
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = self.loss(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.clipped, 1.0)
            optimizer.step()
            value = float(loss.detach())
            if (step + 1) % s["eval_every"] == 0 or step + 1 == steps:
                self.set_mode(False)
                answers = self.answers(held_out)
                self.set_mode(True)
                acc, kinds = accuracy(answers, held_out_items), by_kind(answers, held_out_items)
                shares = {f"accuracy_{k}": round(v, 4) for k, v in kinds.items()}
                record.point(step=step + 1, loss=round(value, 5), lr=lr, accuracy=acc, **shares)
                shown = " ".join(f"{k} {v:.0%}" for k, v in kinds.items())
                print(f"step {step + 1}: loss {value:.4f}, held-out {acc:.1%} ({shown})", flush=True)
            elif step % 25 == 0:
                record.point(step=step, loss=round(value, 5), lr=lr)
                seconds = time.monotonic() - record.started
                print(f"step {step}: loss {value:.4f} ({seconds:.0f} s)", flush=True)
        self.set_mode(False)


def trainer_main(
    module: str, doc: str, train: Callable[[Path, str], TrainingRecord], argv: list[str] | None
) -> int:
    """A VLM trainer's command line (``lm_training.training_args``: ``OUT [--threads N]``, the first
    paragraph of ``doc`` as its description): train into OUT, then print the held-out accuracy with the
    images and blanked, beside chance."""
    out, command = training_args(module, doc.split("\n\n")[0], argv)
    result = train(out, command).result
    print(
        f"held-out accuracy {result['eval_accuracy']:.1%}, blank images {result['blank_accuracy']:.1%} "
        f"(chance {result['chance_accuracy']:.1%}) -> {out}"
    )
    return 0
