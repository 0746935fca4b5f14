"""Writes the ``weight_map`` side file of ``apply``: the YAML map ``diff-bin`` reads, from weight_pairing.

Per written graph with weights, a map ``layer.slot: tensor`` or ``{tensor, transforms: [...]}`` (a
``slice`` of rows for a part of a fused tensor, a ``reshape`` when the shapes differ), paired by
``weight_pairing``, with a header saying what it proves and the command that checks it;
``check.weight_map`` reads it back.

**What the check proves.** ``gsurg diff-bin X.ncnn.bin CHECKPOINT --map X.weights.yaml --fail-on-diff``
walks the .bin with its .param and compares every weight with its tensor: it passes only when every stored
weight is paired and equal — exactly (``--atol 0 --rtol 0``) for fp32 records, within the rounding bound of
the storage for fp16 (``|a-b| <= 2^-25 + 2^-11 |b|``: half a unit in the last place, subnormals included)
and bf16 (``2^-134 + 2^-8 |b|``). So every stored byte is a checkpoint value at the right place: nothing
shifted, truncated, corrupted or invented. It does not prove which op uses a weight or how: that is
``gsurg verify``'s job, which runs the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from graphsurgeon.check.weight_map import COMPENSATED
from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.model_bin import WeightRecord
from graphsurgeon.formats.safetensors import CheckpointError, checkpoint_path
from graphsurgeon.ir.graph import Graph
from graphsurgeon.ir.weights import Storage
from graphsurgeon.pipeline.checkpoint_pool import CheckpointPool
from graphsurgeon.pipeline.weight_pairing import Pairing, WeightMatcher

#: (atol, rtol) within which diff-bin must find a record stored this way equal to its tensor: the largest
#: rounding error of the storage (round to nearest even), normal and subnormal ranges.
TOLERANCE = {
    Storage.FP16: (2.0**-25, 2.0**-11),
    Storage.BF16: (2.0**-134, 2.0**-8),
}


class WeightMapError(GsurgError):
    """A weight_map side file whose checkpoint cannot be found."""


@dataclass(frozen=True)
class WrittenGraph:
    """What a weight map needs of one written graph."""

    name: str
    graph: Graph
    bin_name: str | None
    records: list[WeightRecord]


@dataclass(frozen=True)
class WeightMap:
    """One map written: its file, the graph, its pairings and the tolerance that checks it."""

    output: str
    graph: str
    checkpoint: str
    pairings: list[Pairing]

    @property
    def tolerance(self) -> tuple[float, float]:
        tols = [TOLERANCE[p.storage] for p in self.pairings if p.storage in TOLERANCE]
        return (max(t[0] for t in tols), max(t[1] for t in tols)) if tols else (0.0, 0.0)

    @property
    def ambiguous(self) -> list[Pairing]:
        return [p for p in self.pairings if p.also]

    def summary(self) -> str:
        amb = self.ambiguous
        note = f", {len(amb)} ambiguous (resolved by name order)" if amb else ""
        return (
            f"weight map {self.output}: {len(self.pairings)} weight(s) paired with checkpoint tensors{note}"
        )


def find_checkpoint(path: str) -> str:
    """The checkpoint file a ``weight_map`` names (``formats.safetensors.checkpoint_path``)."""
    try:
        return checkpoint_path(path)
    except CheckpointError as err:
        raise WeightMapError(f"weight_map {err}") from None


def build_maps(
    checkpoint: str,
    graphs: list[WrittenGraph],
    output: str,
    wanted: list[str] | None,
    pool: CheckpointPool | None = None,
) -> list[WeightMap]:
    """The maps of every graph in ``wanted`` (default: all) that wrote weights; ``output`` holds
    ``{graph}``. The checkpoint comes from the run's ``pool`` (the one its weight actions read), or is
    opened for this call alone."""
    path = find_checkpoint(checkpoint)
    source = pool if pool is not None else CheckpointPool()
    matcher = WeightMatcher(source.get(path))
    try:
        maps = []
        for g in graphs:
            if (wanted is not None and g.name not in wanted) or g.bin_name is None or not g.records:
                continue
            pairings = matcher.pair_graph(g.graph, g.records, g.bin_name)
            maps.append(WeightMap(output.replace("{graph}", g.name), g.name, path, pairings))
        return maps
    finally:
        if source is not pool:
            source.close()


def _entry(p: Pairing) -> str | dict[str, object]:
    transforms: list[dict[str, object]] = []
    if p.rows is not None:
        transforms.append({"slice": {"axis": 0, "start": p.rows[0], "stop": p.rows[1]}})
    if p.reshape is not None:
        transforms.append({"reshape": list(p.reshape)})
    if not transforms and not p.compensated:
        return p.tensor
    entry: dict[str, object] = {"tensor": p.tensor}
    if transforms:
        entry["transforms"] = transforms
    if p.compensated:
        entry["quantized"] = COMPENSATED
    return entry


def render(m: WeightMap, bin_name: str) -> bytes:
    """The map file: a comment header, then one ``layer.slot`` entry per weight, in file order."""
    atol, rtol = m.tolerance
    how = "exactly" if (atol, rtol) == (0.0, 0.0) else "within its storage's rounding"
    quantized = [p for p in m.pairings if p.quantized]
    lines = [
        f"# gsurg weight map of {bin_name} (graph {m.graph}): every weight record it stores, paired with",
        "# the checkpoint tensor whose values it holds. Check it, in the output folder, with",
        f"#   gsurg diff-bin {bin_name} {m.checkpoint} --map {m.output} \\",
        f"#     --atol {atol!r} --rtol {rtol!r} --fail-on-diff",
        f"# which passes only when every {'float ' if quantized else ''}weight equals its tensor {how}: "
        "every stored value is a",
        "# checkpoint value at its place (nothing shifted, corrupted or invented). It does not prove which",
        "# op uses a weight or how: gsurg verify runs the model for that.",
    ]
    if quantized:
        lines += [
            f"# {len(quantized)} weight(s) are block-quantized codes, each named with the tensor they were",
            "# made from; their scales records have no entry (diff-bin reads each with its weight). --atol",
            "# and --rtol do not apply to them: diff-bin checks, in quantization steps, that every value",
            "# (code / scale) is the level nearest its tensor's value (within half a step) or saturated on",
            "# its side, and that every scale is finite and > 0.",
        ]
    compensated = [p for p in m.pairings if p.compensated]
    if compensated:
        lines += [
            f"# {len(compensated)} of them are marked quantized: {COMPENSATED}: GPTQ chose their codes to",
            "# cancel the layer's output error on the calibration samples, not to round each value, so",
            "# diff-bin reports how far they are from the tensor and checks only their scales.",
        ]
    for p in m.ambiguous:
        lines.append(f"# ambiguous: {p.layer}.{p.slot} holds the same values as {', '.join(p.also)};")
        lines.append(f"#   named {p.tensor}, the first in name order no other weight had taken")
    entries = {f"{p.layer}.{p.slot}": _entry(p) for p in m.pairings}
    body = yaml.safe_dump(entries, sort_keys=False, default_flow_style=None, width=1 << 16)
    return ("\n".join(lines) + "\n" + body).encode("utf-8")
