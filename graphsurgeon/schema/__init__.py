"""The layer catalog: every ncnn layer type, its params and its ordered weight slots (see README.md here)."""

from __future__ import annotations

from graphsurgeon.schema.catalog import Catalog, LayerSpec, ParamSpec, ValueType, WeightSpec, load_catalog

__all__ = ["Catalog", "LayerSpec", "ParamSpec", "ValueType", "WeightSpec", "load_catalog"]
