"""Check an ``ExportSpec`` and derive what pnnx needs: the input type suffixes and a second set of inputs in
which every symbolic dim takes another size.

pnnx learns which dims are dynamic by running the traced module at two shapes (``inputshape`` and
``inputshape2``). The second shape changes all uses of a symbolic dim together, so shapes stay consistent
(a ``[1,T,T]`` mask follows a ``[1,T,H]`` hidden). Its size is the first one from ``example + 3`` up that
no input dim and no other symbol uses, so pnnx cannot mistake one size for another. New int inputs are
zeros (valid ids), new float inputs small random values (``0.1 * N(0,1)``, seeded).

pnnx 20261020 accepts the suffix of every torch dtype it traces (``f32 f16 f64 bf16 i32 i64 i16 i8 u8
bool c64``: the suffix must equal the traced input's, checked with that wheel); ncnn inputs are fp32 Mats
(ids: int32 bits, pnnx turns an int64 input into int32), so specs may use float32, int32 or int64 only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphsurgeon.export.errors import ExportError
from graphsurgeon.export.spec import ExportSpec

if TYPE_CHECKING:
    import torch

SAFE_NAME = re.compile(r"[A-Za-z0-9_]{1,64}\Z")
_SUFFIX = {"torch.float32": "f32", "torch.int32": "i32", "torch.int64": "i64"}


@dataclass(frozen=True)
class TracePlan:
    """A checked spec: pnnx's shape arguments and the inputs of the second trace shape."""

    spec: ExportSpec
    inputshape: str  # e.g. "[1,8,64]f32,[1,8]i64"
    inputshape2: str | None  # None when nothing is dynamic
    second_inputs: tuple[torch.Tensor, ...]
    sizes: dict[str, tuple[int, int]]  # symbol -> (example size, second size)

    def describe_second(self) -> str:
        return ", ".join(f"{sym} {a} -> {b}" for sym, (a, b) in self.sizes.items())


def _fail(name: str, message: str) -> ExportError:
    return ExportError(f"sub-model {name}: {message}")


def _check_module(name: str, module: object) -> None:
    import torch

    if not isinstance(module, torch.nn.Module):
        raise _fail(name, f"module is a {type(module).__name__}, not a torch.nn.Module")
    if module.training:
        raise _fail(name, "the module is in training mode (call .eval() before exporting)")
    for tname, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if tensor.is_floating_point() and tensor.dtype != torch.float32:
            raise _fail(name, f"{tname} is {tensor.dtype}; export works in fp32 (convert with .float())")


def _check_inputs(name: str, inputs: object) -> tuple[torch.Tensor, ...]:
    import torch

    if not isinstance(inputs, tuple | list) or not inputs:
        raise _fail(name, "inputs must be a non-empty tuple of example tensors")
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise _fail(name, f"input {i} is a {type(x).__name__}, not a torch.Tensor")
        if x.dim() < 1 or x.shape[0] != 1:
            raise _fail(name, f"input {i} has shape {list(x.shape)}; every input needs a leading batch dim 1")
        if str(x.dtype) not in _SUFFIX:
            raise _fail(name, f"input {i} is {x.dtype}; ncnn inputs are float32, or int32/int64 ids")
    return tuple(inputs)


def _check_dynamic(name: str, spec: ExportSpec, inputs: Sequence[torch.Tensor]) -> dict[str, int]:
    """symbol -> its example size, after checking every use."""
    sizes: dict[str, int] = {}
    owner: dict[tuple[int, int], str] = {}
    for sym, uses in spec.dynamic.items():
        if not isinstance(sym, str) or not sym or not uses:
            raise _fail(name, f"dynamic dim {sym!r} needs a name and at least one (input, dim) use")
        for use in uses:
            if not (isinstance(use, tuple | list) and len(use) == 2 and all(type(v) is int for v in use)):
                raise _fail(name, f"dynamic dim {sym}: use {use!r} is not an (input index, dim) pair")
            i, d = use
            if not 0 <= i < len(inputs):
                raise _fail(name, f"dynamic dim {sym}: input {i} does not exist ({len(inputs)} inputs)")
            if not 0 <= d < inputs[i].dim():
                raise _fail(
                    name, f"dynamic dim {sym}: input {i} has no dim {d} (shape {list(inputs[i].shape)})"
                )
            if d == 0:
                raise _fail(name, f"dynamic dim {sym}: dim 0 of input {i} is the batch dim, always 1")
            if (i, d) in owner:
                raise _fail(name, f"input {i} dim {d} is a use of both {owner[(i, d)]} and {sym}")
            owner[(i, d)] = sym
            size = int(inputs[i].shape[d])
            if sizes.setdefault(sym, size) != size:
                raise _fail(
                    name,
                    f"dynamic dim {sym}: input {i} dim {d} has size {size} but an earlier use has "
                    f"{sizes[sym]} (one size per symbolic dim)",
                )
    return sizes


def _shape_arg(inputs: Sequence[torch.Tensor]) -> str:
    return ",".join(
        "[" + ",".join(str(int(n)) for n in x.shape) + "]" + _SUFFIX[str(x.dtype)] for x in inputs
    )


def _second_inputs(
    spec: ExportSpec, inputs: Sequence[torch.Tensor], sizes: dict[str, tuple[int, int]]
) -> tuple[torch.Tensor, ...]:
    import torch

    gen = torch.Generator().manual_seed(0)
    out = []
    for i, x in enumerate(inputs):
        shape = list(x.shape)
        for sym, uses in spec.dynamic.items():
            for ui, d in uses:
                if ui == i:
                    shape[d] = sizes[sym][1]
        if shape == list(x.shape):
            out.append(x)
        elif x.is_floating_point():
            out.append(0.1 * torch.randn(shape, generator=gen, dtype=x.dtype))
        else:
            out.append(torch.zeros(shape, dtype=x.dtype))
    return tuple(out)


def plan(spec: ExportSpec) -> TracePlan:
    """Check one spec (name, module, inputs, dynamic uses) and derive pnnx's two shapes."""
    if not isinstance(spec.name, str) or not SAFE_NAME.match(spec.name):
        raise ExportError(
            f"sub-model name {spec.name!r} is not a safe file stem (1-64 letters, digits or underscores)"
        )
    _check_module(spec.name, spec.module)
    inputs = _check_inputs(spec.name, spec.inputs)
    example = _check_dynamic(spec.name, spec, inputs)
    taken = {int(n) for x in inputs for n in x.shape} | set(example.values())
    sizes: dict[str, tuple[int, int]] = {}
    for sym, n in example.items():
        second = n + 3
        while second in taken:
            second += 1
        taken.add(second)
        sizes[sym] = (n, second)
    second_inputs = _second_inputs(spec, inputs, sizes)
    return TracePlan(
        spec=spec,
        inputshape=_shape_arg(inputs),
        inputshape2=_shape_arg(second_inputs) if sizes else None,
        second_inputs=second_inputs,
        sizes=sizes,
    )


def plan_all(specs: Sequence[ExportSpec]) -> list[TracePlan]:
    """Check every spec before any work starts; names must be unique."""
    seen: set[str] = set()
    plans = []
    for spec in specs:
        if not isinstance(spec, ExportSpec):
            raise ExportError(f"expected an ExportSpec, got a {type(spec).__name__}")
        if spec.name in seen:
            raise ExportError(f"sub-model name {spec.name!r} is used twice")
        seen.add(spec.name)
        plans.append(plan(spec))
    return plans
