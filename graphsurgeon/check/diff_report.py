"""What ``diff-bin`` found, and how it is shown: JSON for machines, a Polygraphy-style text report with a
closing ``PASSED`` / ``FAILED`` line, and a Markdown table.

JSON (``schema_version`` 1)::

    {"schema_version": 1, "summary": {...}, "pairs": [...], "unpaired": {"a": [...], "b": [...]},
     "warnings": [...]}

JSON has no infinities or NaNs; they are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"``.

A block-quantized weight checked against float values (``diff_quant``) has no float statistics: its pair
carries ``quantized`` (format, largest error in steps, saturated and wrong counts, bad scales) instead, and
is shown in a table of its own; ``--atol``/``--rtol`` do not apply to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from graphsurgeon.check.diff_quant import QuantStats
from graphsurgeon.check.diff_stats import PairStats, Tolerance

SCHEMA_VERSION = 1


@dataclass(slots=True)
class Endpoint:
    """One side of a pair (or an unpaired weight): where it lives and how it is stored."""

    name: str  # "layer.slot", a tensor name, or the file name in flat mode
    file: str
    offset: int  # the record's first byte (tag included) or the tensor's first data byte
    storage: str
    shape: tuple[int, ...]
    layer_type: str | None = None
    note: str | None = None  # transforms applied, or why it is unpaired

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "file": self.file,
            "offset": self.offset,
            "storage": self.storage,
            "shape": list(self.shape),
            "type": self.layer_type,
            "note": self.note,
        }


@dataclass(slots=True)
class PairResult:
    a: Endpoint
    b: Endpoint
    how: str  # "name" | "position" | "map" | "flat"
    stats: PairStats | None  # None when the element counts do not agree (or a transform does not fit)
    message: str | None = None
    quant: QuantStats | None = None  # a block-quantized weight checked in steps (then stats is None)

    @property
    def status(self) -> str:
        if self.quant is not None:
            return "pass" if self.quant.passed else "fail"
        if self.stats is None:
            return "shape-mismatch"
        return "pass" if self.stats.passed else "fail"


@dataclass(slots=True)
class DiffReport:
    a: str
    b: str
    param_a: str | None
    param_b: str | None
    map: str | None
    mode: str  # "param" | "checkpoint" | "flat"
    tol: Tolerance
    pairs: list[PairResult] = field(default_factory=list)
    unpaired_a: list[Endpoint] = field(default_factory=list)
    unpaired_b: list[Endpoint] = field(default_factory=list)
    unmapped_tensors: int = 0  # checkpoint tensors that no map entry names (listed, not a failure)
    warnings: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(p.status == "pass" for p in self.pairs) and not self.unpaired_a and not self.unpaired_b

    def summary(self) -> dict[str, Any]:
        stats = [p.stats for p in self.pairs if p.stats is not None]
        quant = [p.quant for p in self.pairs if p.quant is not None]
        hows = [p.how for p in self.pairs]
        return {
            "a": self.a,
            "b": self.b,
            "param_a": self.param_a,
            "param_b": self.param_b,
            "map": self.map,
            "mode": self.mode,
            "atol": self.tol.atol,
            "rtol": self.tol.rtol,
            "pairs": len(self.pairs),
            "by": {h: hows.count(h) for h in ("name", "position", "map", "flat") if h in hows},
            "passed": sum(p.status == "pass" for p in self.pairs),
            "failed": sum(p.status == "fail" for p in self.pairs),
            "shape_mismatch": sum(p.status == "shape-mismatch" for p in self.pairs),
            "unpaired_a": len(self.unpaired_a),
            "unpaired_b": len(self.unpaired_b),
            "unmapped_tensors": self.unmapped_tensors,
            "max_abs": max((s.max_abs for s in stats), default=0.0),
            "min_atol": max((s.min_atol for s in stats), default=0.0),
            "min_rtol": max((s.min_rtol for s in stats), default=0.0),
            "quantized": {
                "pairs": len(quant),
                "passed": sum(q.passed for q in quant),
                "failed": sum(not q.passed for q in quant),
                "max_steps": max((q.max_steps for q in quant), default=0.0),
                "saturated": sum(q.saturated for q in quant),
                "wrong": sum(q.wrong for q in quant),
                "bad_scales": sum(q.bad_scales for q in quant),
            },
            "result": "PASSED" if self.passed else "FAILED",
        }

    def to_json(self) -> dict[str, Any]:
        return _finite_json(
            {
                "schema_version": SCHEMA_VERSION,
                "summary": self.summary(),
                "pairs": [pair_json(p) for p in self.pairs],
                "unpaired": {
                    "a": [e.to_json() for e in self.unpaired_a],
                    "b": [e.to_json() for e in self.unpaired_b],
                },
                "warnings": self.warnings,
            }
        )


def pair_json(p: PairResult) -> dict[str, Any]:
    out: dict[str, Any] = {"a": p.a.to_json(), "b": p.b.to_json(), "how": p.how, "status": p.status}
    out["message"] = p.message
    out["quantized"] = None if p.quant is None else p.quant.to_json()
    s = p.stats
    if s is not None:
        out.update(
            count=s.count,
            identical=s.identical,
            cosine=s.cosine,
            max_abs=s.max_abs,
            max_abs_at=s.max_abs_at,
            max_abs_index=unravel(s.max_abs_at, p.a.shape),
            max_rel=s.max_rel,
            mean_abs=s.mean_abs,
            nan={"a": s.nan[0], "b": s.nan[1]},
            inf={"a": s.inf[0], "b": s.inf[1]},
            first_diff=None if s.first_diff is None else {"a": s.first_diff[0], "b": s.first_diff[1]},
            first_diff_at=s.first_diff_at,
            min_atol=s.min_atol,
            min_rtol=s.min_rtol,
        )
    return out


def unravel(flat: int | None, shape: tuple[int, ...]) -> list[int] | None:
    """A flat C-order index as a coordinate list in ``shape``."""
    if flat is None:
        return None
    out = []
    for dim in reversed(shape):
        flat, r = divmod(flat, dim)
        out.append(r)
    return out[::-1]


def _finite_json(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_json(v) for v in value]
    return value


# ---- text and Markdown --------------------------------------------------------------------------------

_COLUMNS = (
    "a",
    "b",
    "how",
    "shape",
    "storage",
    "cosine",
    "max_abs",
    "at",
    "max_rel",
    "mean_abs",
    "nan",
    "inf",
    "first diff (a/b)",
    "min atol",
    "min rtol",
    "result",
)


def _g(x: float) -> str:
    return f"{x:.6g}"


def _row(p: PairResult) -> list[str]:
    s = p.stats
    head = [p.a.name, p.b.name, p.how, "x".join(map(str, p.a.shape)), f"{p.a.storage}/{p.b.storage}"]
    if s is None:
        return [*head, *(["-"] * 10), "MISMATCH"]
    at = unravel(s.max_abs_at, p.a.shape)
    first = "-" if s.first_diff is None else f"{s.first_diff[0]}/{s.first_diff[1]}"
    return [
        *head,
        f"{s.cosine:.9g}",
        _g(s.max_abs),
        "-" if at is None else ",".join(map(str, at)),
        _g(s.max_rel),
        _g(s.mean_abs),
        f"{s.nan[0]}/{s.nan[1]}",
        f"{s.inf[0]}/{s.inf[1]}",
        first,
        _g(s.min_atol),
        _g(s.min_rtol),
        "PASS" if s.passed else "FAIL",
    ]


_QUANT_COLUMNS = (
    "a",
    "b",
    "how",
    "shape",
    "format",
    "max steps",
    "saturated",
    "wrong",
    "bad scales",
    "first wrong (row,col)",
    "result",
)


def _quant_row(p: PairResult) -> list[str]:
    q = p.quant
    assert q is not None
    w = q.first_wrong
    return [
        p.a.name,
        p.b.name,
        p.how,
        f"{q.rows}x{q.cols}",
        q.format,
        _g(q.max_steps),
        str(q.saturated),
        str(q.wrong),
        str(q.bad_scales),
        "-" if w is None else f"{w.row},{w.col} (block {w.block})",
        "PASS" if q.passed else "FAIL",
    ]


def _split(r: DiffReport) -> tuple[list[PairResult], list[PairResult]]:
    """The pairs of the float table (all when none is quantized) and those of the quantized table."""
    quant = [p for p in r.pairs if p.quant is not None]
    return [p for p in r.pairs if p.quant is None], quant


def _headline(r: DiffReport) -> list[str]:
    def side(path: str, param: str | None) -> str:
        return f"{path} (param {param})" if param else path

    lines = [f"a = {side(r.a, r.param_a)}", f"b = {side(r.b, r.param_b)}"]
    if r.map:
        lines.append(f"map = {r.map}")
    lines.append(f"check |a-b| <= atol + rtol*|b| with atol={r.tol.atol:g}, rtol={r.tol.rtol:g}")
    if any(p.quant is not None for p in r.pairs):
        lines.append(
            "check block-quantized weights in steps: each value (code / scale) the level nearest the float "
            "value (within half a step) or saturated at +-qmax on its side, every scale finite and > 0; "
            "atol and rtol do not apply to them"
        )
    return lines


def _tally(r: DiffReport) -> str:
    s = r.summary()
    by = ", ".join(f"{n} by {h}" for h, n in s["by"].items())
    unmapped = (
        f"; {s['unmapped_tensors']} checkpoint tensor(s) not in the map" if r.mode == "checkpoint" else ""
    )
    return (
        f"{s['pairs']} pair(s){f' ({by})' if by else ''}: {s['passed']} passed, {s['failed']} failed, "
        f"{s['shape_mismatch']} size mismatch(es); unpaired: {s['unpaired_a']} in a, {s['unpaired_b']} in b"
        f"{unmapped}; min atol {_g(s['min_atol'])} (at rtol {r.tol.rtol:g}), "
        f"min rtol {_g(s['min_rtol'])} (at atol {r.tol.atol:g}){_quant_tally(s['quantized'])}"
    )


def _quant_tally(q: dict[str, Any]) -> str:
    if not q["pairs"]:
        return ""
    failed = ""
    if q["failed"]:
        failed = f", {q['failed']} failed ({q['wrong']} wrong value(s), {q['bad_scales']} bad scale(s))"
    return (
        f"; {q['pairs']} quantized pair(s) checked in steps: {q['passed']} passed{failed}, "
        f"max error {_g(q['max_steps'])} step(s), {q['saturated']} saturated"
    )


def _notes(r: DiffReport) -> list[tuple[str, str]]:
    notes = [(f"{p.a.name} / {p.b.name}", p.message) for p in r.pairs if p.message]
    notes += [
        (f"{p.a.name} / {p.b.name}", problem)
        for p in r.pairs
        if p.quant is not None
        for problem in p.quant.problems()
    ]
    notes += [
        (f"{p.a.name} / {p.b.name}", f"transforms: {p.b.note or p.a.note}")
        for p in r.pairs
        if p.how == "map" and (p.a.note or p.b.note)
    ]
    return notes


def _unpaired(r: DiffReport) -> list[tuple[str, Endpoint]]:
    return [("a", e) for e in r.unpaired_a] + [("b", e) for e in r.unpaired_b]


def _describe(e: Endpoint) -> str:
    kind = f"{e.layer_type}, " if e.layer_type else ""
    return f"{e.name} ({kind}{e.storage}, shape {list(e.shape)}, offset {e.offset}): {e.note}"


def _text_table(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    table = [list(columns), *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]


def render_text(r: DiffReport) -> str:
    plain, quant = _split(r)
    lines = ["diff-bin", *(f"  {line}" for line in _headline(r)), ""]
    if plain or not quant:
        lines += _text_table(_COLUMNS, [_row(p) for p in plain])
    if quant:
        lines += [""] if plain else []
        table = _text_table(_QUANT_COLUMNS, [_quant_row(p) for p in quant])
        lines += ["quantized (checked in steps):", *table]
    notes = _notes(r)
    if notes:
        lines += ["", "notes:"] + [f"  {who}: {text}" for who, text in notes]
    unpaired = _unpaired(r)
    if unpaired:
        lines += ["", "unpaired:"] + [f"  in {side}: {_describe(e)}" for side, e in unpaired]
    lines += ["", _tally(r), "PASSED" if r.passed else "FAILED"]
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    return lines + ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]


def render_md(r: DiffReport) -> str:
    plain, quant = _split(r)
    lines = [f"## diff-bin: `{r.a}` vs `{r.b}`", ""]
    lines += [f"- {line}" for line in _headline(r)] + [""]
    if plain or not quant:
        lines += _md_table(_COLUMNS, [_row(p) for p in plain])
    if quant:
        lines += (
            ["", "**Quantized (checked in steps)**", ""]
            if plain
            else ["**Quantized (checked in steps)**", ""]
        )
        lines += _md_table(_QUANT_COLUMNS, [_quant_row(p) for p in quant])
    notes = _notes(r)
    if notes:
        lines += ["", "**Notes**", ""] + [f"- `{who}`: {_md_cell(text)}" for who, text in notes]
    unpaired = _unpaired(r)
    if unpaired:
        lines += ["", "**Unpaired**", ""] + [f"- in {side}: {_md_cell(_describe(e))}" for side, e in unpaired]
    lines += ["", _tally(r), "", f"**{'PASSED' if r.passed else 'FAILED'}**"]
    return "\n".join(lines) + "\n"
