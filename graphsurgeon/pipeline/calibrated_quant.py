"""Block quantization from the calibration samples (``storage.gptq``, ``storage.awq``, ``storage.mixed``):
the weights the storage policy block-quantizes, quantized while calibration runs, from the statistics of
their inputs (``activation_stats``).

For every weight the policy would block-quantize (``storage_policy.decisions``) and a calibrated section
selects, the input blob (the catalog's ``weight_quantize.input``, followed up through Splits) is asked of
calibration. As each group of blobs is collected, their weights are quantized — unless calibration marked
the layer to keep fp32 — and the results are written to a scratch folder (``_Spill``), so that neither the
Hessians nor the codes of the whole model are held at once. For each weight (``_quantize``):

* **awq** (``quant.awq``): the input scales with the least output error on the calibration inputs; when
  the search keeps ``alpha = 0`` the weight stays in the plain format;
* **gptq** (``quant.gptq``): error compensation under the input's Hessian (of the scaled input, after
  awq). GPTQ is greedy and its damping is a guess, so its result is kept only when its output error on the
  calibration inputs is below that of rounding the same (scaled) matrix; the apply log counts the others;
* with neither, rounding to nearest by the policy's ``method``, as without calibration.

**mixed** quantizes every weight at the ``default`` storage that no storage rule chose (the candidates)
at both its storage and ``mixed.storage``, measures the relative output error each removes
(``quant.mixed``), and after the last group raises the best ones within ``mixed.budget``. The budget is
per graph, over its candidates.

A weight whose input blob cannot be read as rows of its ``K`` values, or whose layer is kept fp32, is
left to the policy's ordinary path (rounding, or fp32), and the log says so.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Graph, Layer
from graphsurgeon.pipeline.activation_stats import (
    HESSIAN_BUDGET,
    ActivationRequest,
    ActivationStats,
    source_blob,
)
from graphsurgeon.pipeline.quantize_weights import QUANT_BITS, Precomputed, matrix_shape, matrix_values
from graphsurgeon.pipeline.storage_policy import block_quantized, decisions
from graphsurgeon.quant.awq import awq_search, effective_weight, scaled_weight
from graphsurgeon.quant.blocks import AUTO_METHOD, BlockFormat, Quantized, QuantMethod, dequantize, quantize
from graphsurgeon.quant.gptq import HessianError, gptq_quantize, output_energy, output_error
from graphsurgeon.quant.mixed import BudgetError, Candidate, average_bits, choose, stored_bits
from graphsurgeon.rewrite.sections import StoragePolicy
from graphsurgeon.rewrite.select import Selector, find
from graphsurgeon.schema.catalog import WeightQuantizeSpec


class CalibratedQuantError(GsurgError):
    """A calibrated quantization that cannot run: names the graph and the storage key."""


@dataclass
class _Target:
    layer: Layer
    wq: WeightQuantizeSpec
    storage: str
    blob: str
    rows: int
    cols: int
    gptq: bool
    awq: bool
    mixable: bool


@dataclass
class _Outcome:
    """One weight quantized at one storage, spilled: loaders, how, and its output errors on the
    calibration inputs (of this result and of plain rounding) and stored bits."""

    result: Precomputed
    error: float
    plain_error: float
    bits: int


class _Spill:
    """Arrays written to a scratch folder and read back memory-mapped when the .bin is written."""

    def __init__(self, scratch: Path | None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gsurg-quant-", dir=scratch))
        self._count = 0

    def keep(self, array: np.ndarray) -> Callable[[], np.ndarray]:
        path = self.folder / f"{self._count}.npy"
        self._count += 1
        np.save(path, np.ascontiguousarray(array), allow_pickle=False)
        return lambda: np.load(path, mmap_mode="r", allow_pickle=False)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class CalibratedQuant:
    """One graph's calibrated quantization (module docstring): ``request`` for calibration, then
    ``outcome`` per layer for the storage policy; ``lines`` for the log."""

    graph: Graph
    policy: StoragePolicy
    label: str
    targets: list[_Target] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # layer -> why it was not calibrated
    low: dict[str, _Outcome] = field(default_factory=dict)
    high: dict[str, _Outcome] = field(default_factory=dict)
    energy: dict[str, float] = field(default_factory=dict)
    raised: list[str] = field(default_factory=list)
    kept_rounding: int = 0  # weights where gptq did not beat rounding on the calibration inputs
    average: float | None = None  # mixed: bits per weight over its candidates, as chosen
    candidates: int = 0  # mixed: how many weights it could raise
    _spill: _Spill | None = None

    @classmethod
    def plan(
        cls, graph: Graph, policy: StoragePolicy, pinned: set[tuple[int, str]], label: str
    ) -> CalibratedQuant | None:
        """The weights to quantize from calibration, or None when no calibrated section is active or the
        policy block-quantizes nothing."""
        gptq, awq, mixed = (policy.calibrated(k) for k in ("gptq", "awq", "mixed"))
        if not (gptq or awq or mixed):
            return None
        gptq_ids = _selected(graph, policy.gptq.match if policy.gptq is not None else None)
        awq_ids = _selected(graph, policy.awq.match if policy.awq is not None else None)
        out = cls(graph, policy, label)
        for d in decisions(graph, policy, pinned):
            wq = block_quantized(d)
            if wq is None:
                continue
            layer = d.layer
            mixable = mixed and not d.explicit and d.name == policy.default
            use_gptq = gptq and (gptq_ids is None or id(layer) in gptq_ids)
            use_awq = awq and (awq_ids is None or id(layer) in awq_ids)
            if not (use_gptq or use_awq or mixable):
                continue
            spec = layer.spec
            pos = wq.input_position(spec) if wq.input is not None and spec is not None else None
            if pos is None or pos >= len(layer.inputs):
                out.skipped[layer.name] = f"the catalog names no input of {layer.type} its weight multiplies"
                continue
            rows, cols = matrix_shape(layer, wq)
            blob = source_blob(layer.inputs[pos]).name
            out.targets.append(_Target(layer, wq, d.name, blob, rows, cols, use_gptq, use_awq, mixable))
        if not out.targets:
            return None
        out._check_budget()
        return out

    def _check_budget(self) -> None:
        """Refuse a mixed budget below what the low storage alone takes, before calibration runs."""
        mixed = self.policy.mixed
        if mixed is None or not self.policy.calibrated("mixed"):
            return
        fmts = {t.layer.name: BlockFormat(QUANT_BITS[t.storage], self.policy.block) for t in self.targets}
        cands = [
            Candidate(t.layer.name, t.rows * t.cols, stored_bits(fmts[t.layer.name], t.rows, t.cols), 0, 0.0)
            for t in self.targets
            if t.mixable
        ]
        try:
            choose(cands, mixed.budget)
        except BudgetError as err:
            raise CalibratedQuantError(f"graph {self.label}: storage.mixed.budget: {err}") from None

    def keys(self) -> str:
        """The active calibrated sections, as the storage keys a message names."""
        return "/".join(k for k in ("gptq", "awq", "mixed") if self.policy.calibrated(k))

    def request(self, scratch: Path | None, budget: int = HESSIAN_BUDGET) -> ActivationRequest:
        """What calibration is to collect (``budget``: bytes of Hessians per run over the samples); the
        results are spilled under ``scratch``."""
        self._spill = _Spill(scratch)
        blobs: dict[str, int] = {}
        for t in self.targets:
            if blobs.setdefault(t.blob, t.cols) != t.cols:
                raise CalibratedQuantError(
                    f"graph {self.label}: blob {t.blob} feeds weights of {blobs[t.blob]} and {t.cols} columns"
                )
        order = {b.name: i for i, b in enumerate(b for x in self.graph.layers for b in x.outputs)}
        ordered = dict(sorted(blobs.items(), key=lambda kv: order.get(kv[0], -1)))
        return ActivationRequest(ordered, self._consume, budget)

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()

    def _consume(self, stats: dict[str, ActivationStats], kept: Set[int]) -> None:
        for t in self.targets:
            st = stats.get(t.blob)
            if st is None:
                continue
            name = t.layer.name
            if id(t.layer) in kept:
                self.skipped[name] = "calibration keeps the layer fp32"
                continue
            if not st.usable:
                self.skipped[name] = f"its input blob {t.blob}: {st.problem or 'no calibration rows'}"
                continue
            w = matrix_values(t.layer, t.wq)
            self.energy[name] = output_energy(w, st.hessian)
            try:
                self.low[name] = self._quantize(t, w, st, t.storage)
                if t.mixable:
                    assert self.policy.mixed is not None
                    self.high[name] = self._quantize(t, w, st, self.policy.mixed.storage)
            except HessianError as err:
                self.low.pop(name, None)
                self.skipped[name] = f"its input blob {t.blob}: {err}"

    def _method(self, bits: int) -> QuantMethod:
        method = self.policy.method
        return AUTO_METHOD[bits] if method == "auto" else method

    def _quantize(self, t: _Target, w: np.ndarray, st: ActivationStats, storage: str) -> _Outcome:
        assert self._spill is not None
        fmt = BlockFormat(QUANT_BITS[storage], self.policy.block)
        method = self._method(fmt.bits)
        h, k = st.hessian, t.cols
        plain = quantize(w, fmt, method)
        plain_error = output_error(w, dequantize(plain.packed, plain.scales, fmt, k), h)
        how: list[str] = [method]
        input_scales: np.ndarray | None = None
        q, error = plain, plain_error
        matrix, hessian = w, h
        compensated = False
        if t.awq:
            assert self.policy.awq is not None
            choice, q_awq = awq_search(w, h, st.mean_abs, fmt, method, grid=self.policy.awq.grid)
            if choice.scaled:
                input_scales = choice.input_scales
                q, error = q_awq, choice.error
                matrix = scaled_weight(w, input_scales)
                hessian = h * np.outer(input_scales, input_scales).astype(np.float64)
            how.append(f"awq alpha {choice.alpha:.2f}")
        if t.gptq:
            assert self.policy.gptq is not None
            q_g = gptq_quantize(matrix, hessian, fmt, method, damp=self.policy.gptq.damp)
            e_g = output_error(w, _effective(q_g, fmt, input_scales, k), h)
            if e_g < error:
                q, error, compensated = q_g, e_g, True
                how.append("gptq")
            else:
                self.kept_rounding += 1
                how.append("gptq kept rounding")
        ratio = error / plain_error if plain_error > 0 else 1.0
        how.append(f"calibration output error x{ratio:.3g} of rounding")
        spill = self._spill
        result = Precomputed(
            storage,
            spill.keep(q.packed),
            spill.keep(q.scales),
            None if input_scales is None else spill.keep(input_scales),
            ", ".join(how),
            compensated,
        )
        bits = stored_bits(fmt, t.rows, k, input_scales=input_scales is not None)
        return _Outcome(result, error, plain_error, bits)

    def finish(self) -> None:
        """Choose the raised weights (mixed), once every group is in."""
        mixed = self.policy.mixed
        if mixed is None or not self.policy.calibrated("mixed"):
            return
        cands = []
        for t in self.targets:
            name = t.layer.name
            if not t.mixable or name not in self.low:
                continue
            low, high = self.low[name], self.high[name]
            energy = self.energy[name]
            gain = (low.error - high.error) / energy if energy > 0 else 0.0
            cands.append(Candidate(name, t.rows * t.cols, low.bits, high.bits, gain))
        try:
            self.raised = choose(cands, mixed.budget)
        except BudgetError as err:
            raise CalibratedQuantError(f"graph {self.label}: storage.mixed.budget: {err}") from None
        self.average = average_bits(cands, set(self.raised))
        self.candidates = len(cands)

    def outcome(self, layer: Layer) -> Precomputed | None:
        name = layer.name
        if name in self.raised:
            return self.high[name].result
        got = self.low.get(name)
        return got.result if got is not None else None

    def lines(self) -> list[str]:
        """What it did, for the apply log and the sidecar."""
        out = []
        if self.low:
            err = sum(o.error for o in self.low.values())
            plain = sum(o.plain_error for o in self.low.values())
            kinds = sorted({k for t in self.targets if t.layer.name in self.low for k in _kinds(t)})
            ratio = err / plain if plain > 0 else 1.0
            line = (
                f"calibrated quantization ({', '.join(kinds)}): {len(self.low)} weight(s), output error on "
                f"the calibration samples x{ratio:.3g} of rounding's"
            )
            if self.kept_rounding:
                line += f"; gptq lost to rounding on {self.kept_rounding}, which kept rounding"
            out.append(line)
        if self.policy.mixed is not None and self.average is not None:
            out.append(
                f"mixed: {len(self.raised)} of {self.candidates} weight(s) raised to "
                f"{self.policy.mixed.storage} within budget {self.policy.mixed.budget:g}: "
                f"{self.average:.4g} bits per weight"
                + (f" ({', '.join(self.raised)})" if self.raised else "")
            )
        out += [f"not calibrated: {name}: {why}" for name, why in self.skipped.items()]
        return out


def _effective(q: Quantized, fmt: BlockFormat, input_scales: np.ndarray | None, k: int) -> np.ndarray:
    if input_scales is None:
        return dequantize(q.packed, q.scales, fmt, k)
    return effective_weight(q, fmt, input_scales, k)


def _kinds(t: _Target) -> list[str]:
    return [k for k, on in (("awq", t.awq), ("gptq", t.gptq), ("mixed", t.mixable)) if on]


def _selected(graph: Graph, match: Selector | None) -> set[int] | None:
    return None if match is None else {id(x) for x in find(graph, match)}
