"""Reads the YAML weight map ``diff-bin --map`` takes: which checkpoint tensor each ncnn weight must equal.

``pipeline.weight_map_side`` writes such maps beside the models ``apply`` converts; a hand-written one reads
the same way.

A map pairs ncnn weights with checkpoint tensors, one entry a line::

    fc1.weight: model.layers.0.mlp.up_proj.weight
    attn.k_weight: {tensor: model.layers.0.self_attn.k_proj.weight,
                    transforms: [{repeat_interleave: {axis: 0, n: 2}}]}

The key is ``layer.slot`` (split at the last dot, so layer names may contain dots). Transforms apply to the
checkpoint tensor in the order given: ``transpose`` (an axes list, or bare / null for a 2-D transpose),
``reshape`` (a shape list, one -1 allowed), ``repeat_interleave`` (``axis`` and ``n``: every slice along
``axis`` repeated ``n`` times in place, as torch's ``repeat_interleave`` does for GQA key/value heads).
``quantized: error-compensated`` marks block-quantized codes a calibrated quantizer (GPTQ) chose to cancel
the layer's output error rather than to round each value: diff-bin then reports how far they are from the
tensor but does not hold them to the nearest level.

Checkpoints are a single ``.safetensors`` file or a sharded one named by its ``*.safetensors.index.json``.
Headers are read directly (8-byte little-endian length, JSON with dtype/shape/data_offsets, then data) so
tensors without transforms stream with ``preadv`` like .bin records; bf16 has no numpy dtype and is widened
to float32 by shifting its bits into the high half. Tensors that need a transpose or a repeat are loaded
one at a time (fp32/fp16 through ``safetensors``' numpy API) in their stored dtype.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import yaml

from graphsurgeon.formats.safetensors import CheckpointError
from graphsurgeon.input_files import read_input
from graphsurgeon.transforms import Transform, TransformError, parse_transform


@dataclass(frozen=True, slots=True)
class MapEntry:
    key: str  # "layer.slot" as written
    layer: str
    slot: str
    tensor: str
    transforms: tuple[Transform, ...]
    compensated: bool = False  # ``quantized: error-compensated``: codes not meant to be nearest levels


#: What ``quantized:`` of an entry may say: the codes were made to cancel the layer's output error (GPTQ),
#: so diff-bin measures their values but does not hold them to the nearest level.
COMPENSATED = "error-compensated"


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate keys (plain YAML silently keeps the last one)."""


def _construct_unique(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if isinstance(key, (list, dict)):  # unhashable: a set or dict of them would raise TypeError
            message = "a key must be a name, not a list or mapping"
            raise yaml.constructor.ConstructorError(None, None, message, key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_pairs(node, deep=True))


def _construct_int(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int:
    """An int, or a YAML error at its line (Python refuses an int of over 4300 digits with a ValueError)."""
    try:
        return int(yaml.constructor.SafeConstructor.construct_yaml_int(loader, node))
    except ValueError:
        digits = sum(c.isdigit() for c in str(node.value))
        problem = f"an integer of {digits} digits (at most {sys.get_int_max_str_digits()})"
        raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def load_map(path: str) -> list[MapEntry]:
    """Read a weight map (a regular file of at most TEXT_LIMIT bytes); CheckpointError names the file and
    the entry for anything malformed."""
    raw = read_input(path, what="a weight map", error=CheckpointError)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise CheckpointError(f"{path}:{line}: not UTF-8 text") from None
    loader: _UniqueKeyLoader | None = None
    try:
        loader = _UniqueKeyLoader(text)  # its reader refuses control characters here
        data = loader.get_single_data()
    except RecursionError:
        raise CheckpointError(f"{path}: not valid YAML: nested too deeply") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        at = f":{mark.line + 1}" if mark is not None else ""
        raise CheckpointError(f"{path}{at}: not valid YAML: {err.problem}") from None
    except yaml.YAMLError as err:
        raise CheckpointError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    except ValueError as err:  # PyYAML's scanner builds some scalars itself: chr() of a "\U00110000" escape
        raise CheckpointError(f"{path}:{loader.line + 1 if loader else 1}: not valid YAML: {err}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict) or not data:
        raise CheckpointError(f"{path}: a weight map is a YAML mapping of `layer.slot: tensor-name`")
    entries = []
    for key, value in data.items():
        where = f"{path}: entry {key!r}"
        if not isinstance(key, str) or "." not in key.strip(".") or key.startswith("."):
            raise CheckpointError(f"{where}: the key must be `layer.slot`")
        layer, slot = key.rsplit(".", 1)
        transforms: tuple[Transform, ...] = ()
        compensated = False
        try:
            if isinstance(value, str):
                tensor = value
            elif isinstance(value, dict) and isinstance(value.get("tensor"), str):
                extra = set(value) - {"tensor", "transforms", "quantized"}
                if extra:
                    raise ValueError(
                        f"unknown field(s) {sorted(map(str, extra))} (known: tensor, transforms, quantized)"
                    )
                if value.get("quantized", COMPENSATED) != COMPENSATED:
                    raise ValueError(f"quantized: the one value is {COMPENSATED}, not {value['quantized']!r}")
                compensated = "quantized" in value
                items = value.get("transforms") or []
                if not isinstance(items, list):
                    raise ValueError("transforms must be a list")
                tensor, transforms = value["tensor"], tuple(parse_transform(t) for t in items)
            else:
                raise ValueError("the value must be a tensor name or {tensor: NAME, transforms: [...]}")
        except (ValueError, TransformError) as err:
            raise CheckpointError(f"{where}: {err}") from None
        entries.append(MapEntry(key, layer, slot, tensor, transforms, compensated))
    return entries
