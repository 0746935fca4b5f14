"""``gsurg eval``: conversions answering an evaluation set in the ncnn wheel, judged by task accuracy and,
against a reference conversion (normally the fp32 one), by teacher-forced next-token agreement and mean KL.

For every conversion folder and precision: each item is answered greedily and scored by ``is_correct``;
with a reference, the reference answers each item greedily first (once, at fp32), then the conversion is
fed the reference's tokens step by step and its argmax and next-token distribution are compared at every
step: **agreement** is the share of steps whose argmax is the reference's token, **mean KL** the mean of
``KL(reference || conversion)`` over the same steps (``verify.criteria.kl_divergence``).

With ``runner`` (``gsurg eval --runner``) each conversion answers through the C++ runner's batch mode
instead (``runner_batch``): accuracy and, against the reference (answered in the wheel), the share of
answers equal to the reference's; the runner gives no logits, so agreement and KL are not measured for
those rows (None). Each row says which backend answered it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphsurgeon.evaluation.answers import Answer, Answerer, Question, is_correct
from graphsurgeon.evaluation.errors import EvalError
from graphsurgeon.evaluation.runner_batch import RunnerOptions, runner_answers
from graphsurgeon.input_files import read_json_input
from graphsurgeon.plugins import load_callable
from graphsurgeon.registry import find_family
from graphsurgeon.verify.conversion_storage import net_storages
from graphsurgeon.verify.criteria import kl_divergence

Progress = Callable[[str], None]
WHEEL = "ncnn wheel"  # the backend of a row the C++ runner did not answer


@dataclass
class EvalRow:
    """One conversion at one precision over the whole set."""

    folder: str
    storage: str
    precision: str
    items: int
    correct: int
    by_kind: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (correct, items)
    forced_steps: int = 0
    agreeing_steps: int = 0
    kl_sum: float = 0.0
    same_answers: int = 0  # items whose answer text equals the reference's
    same_tokens: int = 0  # items whose answer tokens equal the reference's
    compared: bool = False  # answered beside a reference (same_answers and same_tokens count)
    backend: str = WHEEL  # what answered: the wheel, or the C++ runner (RunnerOptions.label)
    errors: list[str] = field(default_factory=list)
    net_storage: dict[str, str] = field(default_factory=dict)  # each net's own storage label

    @property
    def accuracy(self) -> float:
        return self.correct / self.items if self.items else 0.0

    @property
    def agreement(self) -> float | None:
        return self.agreeing_steps / self.forced_steps if self.forced_steps else None

    @property
    def mean_kl(self) -> float | None:
        return self.kl_sum / self.forced_steps if self.forced_steps else None


@dataclass
class EvalReport:
    set_name: str
    items: int
    chance: float
    reference: str | None
    rows: list[EvalRow] = field(default_factory=list)
    reference_accuracy: float | None = None


def open_answerer(folder: Path, precision: str, threads: int) -> Answerer:
    """The answerer of ``folder``'s family (model.json ``family``, its manifest's ``evaluator``)."""
    doc = read_json_input(folder / "model.json", what="a model.json", error=EvalError)
    if not isinstance(doc, dict) or not isinstance(doc.get("family"), str):
        raise EvalError(f"{folder / 'model.json'}: no 'family' entry")
    family = find_family(doc["family"])
    if family.evaluator is None:
        raise EvalError(f"{folder / 'model.json'}: family {family.name!r} has no evaluator (its family.yaml)")
    opener = load_callable(family.evaluator, family.folder, what="evaluator", error=EvalError)
    answerer: Answerer = opener(folder, doc, precision=precision, threads=threads)
    return answerer


def _storage(folder: Path) -> tuple[str, dict[str, str]]:
    """The conversion's storage label, ``a+b`` for nets stored apart (a VLM's halves), and each net's."""
    doc = read_json_input(folder / "model.json", what="a model.json", error=EvalError)
    nets = net_storages(folder, doc)
    distinct = sorted(set(nets.values()))
    return (distinct[0] if len(distinct) == 1 else "+".join(distinct)) if distinct else "fp32", nets


def _answer_all(
    answerer: Answerer, items: Sequence[Question], max_tokens: int, progress: Progress | None, label: str
) -> list[Answer]:
    out = []
    for k, item in enumerate(items):
        if progress is not None and k % 50 == 0:
            progress(f"{label}: item {k + 1} of {len(items)}")
        out.append(answerer.answer(item, max_tokens))
    return out


def evaluate(
    folders: Sequence[Path],
    items: Sequence[Question],
    *,
    set_name: str,
    chance: float,
    reference: Path | None = None,
    precisions: Sequence[str] = ("fp32",),
    max_tokens: int = 8,
    threads: int = 1,
    progress: Progress | None = None,
    runner: RunnerOptions | None = None,
) -> EvalReport:
    """Every folder at every precision over ``items``; see the module docstring."""
    report = EvalReport(set_name, len(items), chance, str(reference) if reference else None)
    ref_answers: list[Answer] | None = None
    if reference is not None:
        ref = open_answerer(reference, "fp32", threads)
        try:
            ref_answers = _answer_all(ref, items, max_tokens, progress, f"reference {reference}")
        finally:
            ref.close()
        report.reference_accuracy = sum(
            is_correct(a, i) for a, i in zip(ref_answers, items, strict=True)
        ) / max(1, len(items))
    if runner is not None:
        runner.check()
    for folder in folders:
        storage, nets = _storage(folder)
        for precision in precisions:
            row = EvalRow(str(folder), storage, precision, len(items), 0, net_storage=nets)
            if runner is not None:
                row.backend = runner.label
                answers = runner_answers(
                    folder,
                    _family(folder),
                    items,
                    runner=runner,
                    precision=precision,
                    threads=threads,
                    max_tokens=max_tokens,
                    progress=progress,
                )
                _score_answers(row, answers, items, ref_answers)
            else:
                answerer = open_answerer(folder, precision, threads)
                try:
                    _score(row, answerer, items, ref_answers, max_tokens, progress)
                finally:
                    answerer.close()
            report.rows.append(row)
    return report


def _family(folder: Path) -> str:
    doc = read_json_input(folder / "model.json", what="a model.json", error=EvalError)
    if not isinstance(doc, dict) or not isinstance(doc.get("family"), str):
        raise EvalError(f"{folder / 'model.json'}: no 'family' entry")
    family: str = doc["family"]
    return family


def _score_answers(
    row: EvalRow, answers: Sequence[Answer], items: Sequence[Question], ref_answers: list[Answer] | None
) -> None:
    """Accuracy (overall and per kind), errors and, beside a reference, the answers equal to its own."""
    row.compared = ref_answers is not None
    for k, (answer, item) in enumerate(zip(answers, items, strict=True)):
        hit = is_correct(answer, item)
        row.correct += hit
        done, total = row.by_kind.get(item.kind, (0, 0))
        row.by_kind[item.kind] = (done + hit, total + 1)
        if answer.error:
            row.errors.append(f"item {k + 1}: {answer.error}")
        if ref_answers is not None:
            row.same_answers += answer.text.strip() == ref_answers[k].text.strip()
            row.same_tokens += answer.tokens == ref_answers[k].tokens


def _score(
    row: EvalRow,
    answerer: Answerer,
    items: Sequence[Question],
    ref_answers: list[Answer] | None,
    max_tokens: int,
    progress: Progress | None,
) -> None:
    label = f"{row.folder} at {row.precision}"
    answers = _answer_all(answerer, items, max_tokens, progress, label)
    _score_answers(row, answers, items, ref_answers)
    if ref_answers is None:
        return
    for item, want in zip(items, ref_answers, strict=True):
        forced = answerer.answer(item, max_tokens, forced=want.tokens)
        for token, theirs, ours_logits, ours in zip(
            want.tokens, want.logits, forced.logits, forced.tokens, strict=False
        ):
            row.forced_steps += 1
            row.agreeing_steps += ours == token
            row.kl_sum += kl_divergence(theirs, ours_logits)


def report_json(report: EvalReport) -> dict[str, Any]:
    """The report as one JSON object (``--format json``)."""
    return {
        "set": report.set_name,
        "items": report.items,
        "chance_accuracy": report.chance,
        "reference": report.reference,
        "reference_accuracy": report.reference_accuracy,
        "rows": [
            {
                "folder": r.folder,
                "storage": r.storage,
                "net_storage": r.net_storage,
                "precision": r.precision,
                "accuracy": r.accuracy,
                "correct": r.correct,
                "by_kind": {k: {"correct": c, "items": n} for k, (c, n) in sorted(r.by_kind.items())},
                "agreement": r.agreement,
                "mean_kl": r.mean_kl,
                "forced_steps": r.forced_steps,
                "same_answers": r.same_answers,
                "same_tokens": r.same_tokens,
                "backend": r.backend,
                "errors": r.errors,
            }
            for r in report.rows
        ],
    }
