"""Every exception gsurg defines is a GsurgError, so the CLI reports it as one line with exit 2 (or 1)
instead of a traceback (hardening issue, item 12)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import graphsurgeon
from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.encode import StorageOverflow, record_chunks
from graphsurgeon.ir.weights import Storage, Weight
from graphsurgeon.transforms import TransformError, parse_transform


def _project_exceptions() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(graphsurgeon.__path__, "graphsurgeon."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found.append(obj)
    return found


def test_every_exception_class_the_package_defines_derives_from_gsurg_error() -> None:
    classes = _project_exceptions()
    assert TransformError in classes and StorageOverflow in classes  # the walk sees nested modules
    outside = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, GsurgError))
    assert outside == []


def test_transform_and_overflow_errors_carry_their_fields() -> None:
    with pytest.raises(TransformError, match="unknown transform 'flip'"):
        parse_transform({"flip": 1})
    with pytest.raises(StorageOverflow) as err:
        weight = Weight.from_array(
            np.array([1.0, 7e4, -8e4], dtype=np.float32), load_type=0, storage=Storage.FP16
        )
        list(record_chunks(weight))
    assert (err.value.count, err.value.first_index, err.value.first_value) == (2, 1, 70000.0)
    assert err.value.storage is Storage.FP16
