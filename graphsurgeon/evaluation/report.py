"""``gsurg eval``'s report as text (a table and per-kind accuracy) or as a Markdown table (``--format
markdown``), one row per conversion and precision, each naming the backend that answered it (the ncnn
wheel, or the C++ runner with ``--runner``); the JSON form is ``run.report_json``."""

from __future__ import annotations

from graphsurgeon.evaluation.run import WHEEL, EvalReport, EvalRow


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def _kl(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}"


def _cells(row: EvalRow) -> list[str]:
    return [
        row.folder,
        row.storage,
        row.precision,
        f"{_pct(row.accuracy)} ({row.correct}/{row.items})",
        _pct(row.agreement),
        _kl(row.mean_kl),
        f"{row.same_answers}/{row.items}" if row.compared else "—",
        row.backend,
    ]


HEADER = [
    "conversion",
    "storage",
    "precision",
    "task accuracy",
    "agreement",
    "mean KL",
    "same answer",
    "backend",
]


def _head(report: EvalReport) -> list[str]:
    lines = [f"set {report.set_name}: {report.items} items, chance accuracy {_pct(report.chance)}"]
    if report.reference is not None:
        lines.append(
            f"reference {report.reference} at fp32: task accuracy {_pct(report.reference_accuracy)}; "
            "agreement and KL teacher-forced on its answers"
        )
    if any(row.backend != WHEEL for row in report.rows):
        lines.append(
            "rows answered by the C++ runner (its batch mode gives tokens, not logits): agreement and KL not "
            "available; same answer compares their text with the reference's (answered in the ncnn wheel)"
        )
    return lines


def to_text(report: EvalReport) -> str:
    rows = [HEADER, *(_cells(r) for r in report.rows)]
    widths = [max(len(r[k]) for r in rows) for k in range(len(HEADER))]
    lines = _head(report)
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    for row in report.rows:
        kinds = ", ".join(f"{k} {_pct(c / n if n else 0.0)}" for k, (c, n) in sorted(row.by_kind.items()))
        lines.append(f"{row.folder} at {row.precision}: {kinds}")
        lines += [f"  error: {e}" for e in row.errors[:5]]
    return "\n".join(lines)


def to_markdown(report: EvalReport) -> str:
    kinds = sorted({k for r in report.rows for k in r.by_kind})
    header = [*HEADER, *kinds]
    lines = [f"<!-- {line} -->" for line in _head(report)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report.rows:
        per_kind = [_pct(row.by_kind[k][0] / row.by_kind[k][1]) if k in row.by_kind else "—" for k in kinds]
        lines.append("| " + " | ".join([*_cells(row), *per_kind]) + " |")
    return "\n".join(lines)
