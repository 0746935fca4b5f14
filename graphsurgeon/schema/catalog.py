"""Load the layer catalog (``catalog.yaml``) into typed specs and evaluate a layer's weight slots.

The catalog is data; this module only reads it. ``LayerSpec.env`` turns a layer's explicit params into the
values ncnn 1.0.20261020 would see (defaults, defaults that copy another param, and R1020's typed
``ParamDict::get``), and ``LayerSpec.active_weights`` lists the ``mb.load`` calls the layer would make.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from graphsurgeon.errors import CatalogError
from graphsurgeon.schema.expr import FUNCTIONS, Unresolved, evaluate, evaluate_size, names_in

CATALOG_PATH = Path(__file__).with_name("catalog.yaml")

#: Load types of ``ModelBin::load(w, type)``: 0 tagged, 1 raw fp32, 3/4/6/8 raw bytes padded to 4.
LOAD_TYPES = {"tagged": 0, "raw": 1, "int8": 3}
VALID_LOAD_TYPES = frozenset({0, 1, 3, 4, 6, 8})


class ValueType(StrEnum):
    """The five ParamDict value types a .param literal can carry."""

    INT = "int"
    FLOAT = "float"
    INT_ARRAY = "int_array"
    FLOAT_ARRAY = "float_array"
    STRING = "string"

    @property
    def is_array(self) -> bool:
        return self in (ValueType.INT_ARRAY, ValueType.FLOAT_ARRAY)


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One param id of one layer type."""

    id: int
    name: str
    type: ValueType
    default: Any
    default_expr: str | None = None
    doc: str = ""


@dataclass(frozen=True, slots=True)
class WeightSpec:
    """One ``mb.load`` call in a layer's ``load_model``, in read order."""

    name: str
    load: str | int
    count: str | int | None = None
    shape: tuple[str | int, ...] | None = None
    view: tuple[str | int, ...] | None = None
    when: str | int | None = None
    init: str | None = None  # a hint for synthesized weights: "positive" (variances, scales)
    doc: str = ""

    def expressions(self) -> list[str | int]:
        exprs: list[str | int] = [self.load]
        if self.count is not None:
            exprs.append(self.count)
        for dims in (self.shape, self.view):
            exprs.extend(dims or ())
        if self.when is not None:
            exprs.append(self.when)
        return exprs


@dataclass(frozen=True, slots=True)
class ActiveWeight:
    """A weight slot resolved for concrete params: what the loader reads and how."""

    name: str
    load_type: int
    shape: tuple[int, ...]
    view: tuple[int, ...] | None

    @property
    def count(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class WeightQuantizeSpec:
    """Where a layer type can hold one weight block-quantized (``weight_quantize`` in the catalog): the
    float slot ``weight`` (a ``[rows, cols]`` matrix) becomes packed codes, ``scales`` the slot its per-block
    scales then occupy, ``term`` the param that selects the format (ncnn's ``bits * 100 + block code``),
    ``when`` the params under which the layer accepts it; ``input_scales`` the slot of the per-input scales
    a term with format 1 adds."""

    weight: str
    scales: str
    term: str
    rows: str | int
    cols: str | int
    when: str | int = 1
    doc: str = ""
    input_scales: str | None = None  # the per-input scales slot a term with format 1 adds, if any
    input: str | None = None  # the input role whose rows (of ``cols`` values) the weight multiplies

    def input_position(self, spec: LayerSpec) -> int | None:
        """The bottom index of ``input`` under ``when`` (the role's place among the type's input roles, as
        ``rewire`` counts them), or None when the entry names no input."""
        roles = [r.rstrip("?*") for r in spec.inputs or ()]
        return roles.index(self.input) if self.input in roles else None


@dataclass(frozen=True)
class LayerSpec:
    """Everything the catalog knows about one layer type."""

    type: str
    index: int
    source: str
    params: Mapping[int, ParamSpec]
    weights: tuple[WeightSpec, ...]
    derived: Mapping[str, str | int] = field(default_factory=dict)
    inputs: tuple[str, ...] | None = None
    outputs: tuple[str, ...] | None = None
    inplace: bool = False
    doc: str = ""
    opaque_outputs: tuple[str, ...] = ()  # output roles whose Mat holds ncnn's own layout, not values
    weight_quantize: WeightQuantizeSpec | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {p.name: p for p in self.params.values()})

    def param(self, name: str) -> ParamSpec:
        """The spec of param ``name``; CatalogError names the layer type when there is none."""
        try:
            return self._by_name[name]  # type: ignore[attr-defined]
        except KeyError:
            known = ", ".join(sorted(self._by_name))  # type: ignore[attr-defined]
            raise CatalogError(f"{self.type} has no param named {name!r} (known: {known})") from None

    def has_param(self, name: str) -> bool:
        return name in self._by_name  # type: ignore[attr-defined]

    def output_role(self, index: int) -> str | None:
        """The role of top ``index`` (``?`` and ``*`` marks dropped; a variadic role covers every later
        top), or None when the catalog lists no roles or fewer than ``index + 1``."""
        if self.outputs is None or index < 0:
            return None
        for i, role in enumerate(self.outputs):
            if role.endswith("*"):
                return role[:-1]
            if i == index:
                return role.rstrip("?")
        return None

    def is_opaque_output(self, index: int) -> bool:
        """True when top ``index`` is one ncnn keeps in a storage layout of its own (``opaque_outputs``):
        its elements, read as an array, are not the activation's values."""
        return self.output_role(index) in self.opaque_outputs

    def env(self, explicit: Mapping[int, Any]) -> dict[str, Any]:
        """Effective value of every param by name, plus ``derived`` values.

        ``explicit`` maps param id to the value ncnn would see for the literal that is present (callers apply
        ``ncnn_view`` first). Absent params take ``default_expr`` (which may read other params) or
        ``default``.
        """
        env: dict[str, Any] = {}
        pending: list[ParamSpec] = []
        for pid, spec in self.params.items():
            if pid in explicit:
                env[spec.name] = explicit[pid]
            elif spec.default_expr is None:
                env[spec.name] = spec.default
            else:
                pending.append(spec)
        for _ in range(len(pending) + 1):
            if not pending:
                break
            still: list[ParamSpec] = []
            for spec in pending:
                needed = names_in(spec.default_expr or "")
                if needed <= env.keys():
                    try:
                        env[spec.name] = evaluate(spec.default_expr or "0", env)
                    except CatalogError as exc:  # e.g. a default that divides by a zero param
                        env[spec.name] = Unresolved(str(exc))
                else:
                    still.append(spec)
            pending = still
        if pending:
            raise CatalogError(f"{self.type}: circular default_expr among {[p.name for p in pending]}")
        for name, expr in self.derived.items():
            try:
                env[name] = evaluate(expr, env)
            except CatalogError as exc:
                env[name] = Unresolved(str(exc))
        return env

    def active_weights(self, env: Mapping[str, Any]) -> list[ActiveWeight]:
        """The loads ``load_model`` makes for these params, in order."""
        out: list[ActiveWeight] = []
        for w in self.weights:
            if w.when is not None and not evaluate(w.when, env):
                continue
            load = LOAD_TYPES.get(w.load, w.load) if isinstance(w.load, str) else w.load
            load_type = evaluate_size(load, env)
            if load_type not in VALID_LOAD_TYPES:
                raise CatalogError(f"{self.type}.{w.name}: load type {load_type} is not one ncnn implements")
            if w.shape is not None:
                shape = tuple(evaluate_size(d, env) for d in w.shape)
            else:
                shape = (evaluate_size(w.count if w.count is not None else 0, env),)
            view = None
            if w.view is not None:
                try:
                    view = tuple(evaluate_size(d, env) for d in w.view)
                except (CatalogError, ZeroDivisionError):
                    view = None
                if view is not None and (math.prod(view) != math.prod(shape) or min(view, default=1) < 0):
                    view = None
            out.append(ActiveWeight(w.name, load_type, shape, view))
        return out


@dataclass(frozen=True)
class Catalog:
    """All layer specs, by type name and by ncnn type index."""

    layers: Mapping[str, LayerSpec]
    reserved: Mapping[int, ParamSpec]

    def get(self, layer_type: str) -> LayerSpec | None:
        return self.layers.get(layer_type)

    def by_index(self, index: int) -> LayerSpec | None:
        for spec in self.layers.values():
            if spec.index == index:
                return spec
        return None

    def __contains__(self, layer_type: object) -> bool:
        return layer_type in self.layers


def _tuple_or_none(value: Any) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


def _build_layer(type_name: str, raw: Mapping[str, Any]) -> LayerSpec:
    where = f"catalog {type_name}"
    params: dict[int, ParamSpec] = {}
    for pid, p in (raw.get("params") or {}).items():
        try:
            vtype = ValueType(p["type"])
        except (KeyError, ValueError):
            raise CatalogError(f"{where}: param {pid} has no valid type") from None
        default = p.get("default", [] if vtype.is_array else "" if vtype is ValueType.STRING else 0)
        params[int(pid)] = ParamSpec(
            int(pid), p["name"], vtype, default, p.get("default_expr"), p.get("doc", "")
        )
    weights = tuple(
        WeightSpec(
            name=w["name"],
            load=w["load"],
            count=w.get("count"),
            shape=_tuple_or_none(w.get("shape")),
            view=_tuple_or_none(w.get("view")),
            when=w.get("when"),
            init=w.get("init"),
            doc=w.get("doc", ""),
        )
        for w in raw.get("weights") or ()
    )
    spec = LayerSpec(
        type=type_name,
        index=int(raw["index"]),
        source=raw.get("source", ""),
        params=params,
        weights=weights,
        derived=dict(raw.get("derived") or {}),
        inputs=_tuple_or_none(raw.get("inputs")),
        outputs=_tuple_or_none(raw.get("outputs")),
        inplace=bool(raw.get("inplace", False)),
        doc=raw.get("doc", ""),
        opaque_outputs=tuple(raw.get("opaque_outputs") or ()),
        weight_quantize=_weight_quantize(type_name, raw.get("weight_quantize")),
    )
    _check_layer(spec)
    return spec


def _weight_quantize(type_name: str, raw: Mapping[str, Any] | None) -> WeightQuantizeSpec | None:
    if raw is None:
        return None
    try:
        return WeightQuantizeSpec(
            weight=raw["weight"],
            scales=raw["scales"],
            term=raw["term"],
            rows=raw["rows"],
            cols=raw["cols"],
            when=raw.get("when", 1),
            doc=raw.get("doc", ""),
            input_scales=raw.get("input_scales"),
            input=raw.get("input"),
        )
    except KeyError as exc:
        raise CatalogError(f"catalog {type_name}: weight_quantize has no {exc.args[0]}") from None


def _check_layer(spec: LayerSpec) -> None:
    """Every name an expression reads must be a param or derived value of the same layer."""
    known = {p.name for p in spec.params.values()} | set(spec.derived) | set(FUNCTIONS)
    exprs: list[str | int] = [e for w in spec.weights for e in w.expressions()]
    exprs += list(spec.derived.values())
    exprs += [p.default_expr for p in spec.params.values() if p.default_expr]
    wq = spec.weight_quantize
    if wq is not None:
        exprs += [wq.rows, wq.cols, wq.when]
        slots = {w.name for w in spec.weights}
        params = {p.name for p in spec.params.values()}
        named = [wq.weight, wq.scales] + ([wq.input_scales] if wq.input_scales else [])
        if any(slot not in slots for slot in named) or wq.term not in params:
            raise CatalogError(f"catalog {spec.type}: weight_quantize names a slot or param the layer lacks")
        if wq.input is not None and wq.input_position(spec) is None:
            raise CatalogError(f"catalog {spec.type}: weight_quantize input {wq.input!r} is no input role")
    for expr in exprs:
        if isinstance(expr, str) and expr in LOAD_TYPES:
            continue
        missing = names_in(expr) - known
        if missing:
            raise CatalogError(f"catalog {spec.type}: expression {expr!r} reads unknown {sorted(missing)}")
    roles = {r.rstrip("?*") for r in spec.outputs or ()}
    stray = sorted(set(spec.opaque_outputs) - roles)
    if stray:
        raise CatalogError(f"catalog {spec.type}: opaque_outputs {stray} are not output roles")
    if len({p.name for p in spec.params.values()}) != len(spec.params):
        raise CatalogError(f"catalog {spec.type}: duplicate param names")
    if any(pid in (30, 31) or not 0 <= pid < 32 for pid in spec.params):
        raise CatalogError(f"catalog {spec.type}: param ids must be 0..29")


@lru_cache(maxsize=4)
def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    """Read and validate the catalog file (cached per path)."""
    with open(path, encoding="utf-8") as fh:
        raw = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    reserved_raw = raw.pop("reserved", {}) or {}
    reserved = {
        int(pid): ParamSpec(
            int(pid), p["name"], ValueType(p["type"]), p.get("default", 0), None, p.get("doc", "")
        )
        for pid, p in reserved_raw.items()
    }
    layers = {name: _build_layer(name, body) for name, body in raw.items()}
    indices = [spec.index for spec in layers.values()]
    if len(set(indices)) != len(indices):
        raise CatalogError(f"catalog {path}: duplicate layer indices")
    return Catalog(layers, reserved)
