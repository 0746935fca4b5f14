"""Fault injection: every fault class, injected into each corpus model that ships real weights, must be caught
by ``gsurg lint`` (exit 1, an error with the expected check id naming the right layer, line or offset). The
same suite records what the ``ncnn`` wheel does with each faulty model (rejected by ``load_param`` or
``load_model``, or loaded), so the table in ``benchmarks/bench_lint_faults.py`` shows which faults ncnn lets
through. The faults themselves are in ``graphsurgeon.testing.lint_faults``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from graphsurgeon.testing.lint_faults import (
    FAULTS,
    NCNN_REJECTS,
    Fault,
    Model,
    caught,
    fp16_tagged_bf16,
    lint_json,
    ncnn_load,
    ncnn_rejects,
    shift_minus_4,
    shift_plus_4,
    unknown_tag,
    write_fault,
)
from graphsurgeon.testing.lint_faults import load_model as _load
from tests.conftest import CORPUS

ASSETS = CORPUS / "ncnn-assets"
MODELS = ("squeezenet_v1.1", "nanodet_m", "mnet.25-opt")


def load_model(name: str) -> Model:
    return _load(ASSETS / f"{name}.param", ASSETS / f"{name}.bin")


#: Faults gsurg lint does not catch (kept as strict xfails so a fix shows up).
KNOWN_MISSES: dict[str, str] = {}


def _cases() -> list[object]:
    cases: list[object] = []
    for fault in FAULTS:
        reason = KNOWN_MISSES.get(fault.inject.__name__)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        for model in MODELS:
            cases.append(pytest.param(fault, model, marks=marks, id=f"{fault.inject.__name__}-{model}"))
    return cases


# --- the tests --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_unmodified_corpus_models_lint_clean(model: str) -> None:
    code, report = lint_json(ASSETS / f"{model}.param", ASSETS / f"{model}.bin")
    assert code == 0
    assert report["summary"]["errors"] == 0 and report["findings"] == []
    assert report["summary"]["weights"] == len(load_model(model).records)


@pytest.mark.parametrize("model", MODELS)
def test_unmodified_corpus_models_load_in_ncnn(model: str) -> None:
    assert ncnn_load(ASSETS / f"{model}.param", ASSETS / f"{model}.bin") == {"load_param": 0, "load_model": 0}


@pytest.mark.parametrize(("fault", "model"), _cases())
def test_lint_catches_the_injected_fault(
    fault: Fault, model: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    param, weights, injected = write_fault(fault, load_model(model), tmp_path)
    record_property("site", injected.site)
    code, report = lint_json(param, weights)
    assert code == 1, (injected.site, report["findings"])
    hit = caught(injected.expect, report["findings"])
    assert hit is not None, (injected.expect, report["findings"])


@pytest.mark.parametrize(("fault", "model"), [(f, m) for f in FAULTS for m in MODELS])
def test_what_ncnn_does_with_the_fault(
    fault: Fault, model: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """Recorded, not required: the point of lint is the faults ncnn loads anyway."""
    param, weights, _ = write_fault(fault, load_model(model), tmp_path)
    result = ncnn_load(param, weights)
    record_property("ncnn", result)
    assert "crash" not in result, result
    assert ncnn_rejects(result) is NCNN_REJECTS[fault.name], result


def test_injection_sites_are_where_the_walk_says() -> None:
    """The .bin faults change the bytes at the recorded offset of the middle tagged weight, nothing before."""
    m = load_model("squeezenet_v1.1")
    rec = m.middle_tagged
    assert struct.unpack_from("<I", m.data, rec.offset)[0] == rec.tag
    for fault in (unknown_tag, fp16_tagged_bf16, shift_plus_4, shift_minus_4):
        data = fault(m).data
        assert data[: rec.offset] == m.data[: rec.offset]
        assert data[rec.offset : rec.offset + 4] != m.data[rec.offset : rec.offset + 4]
