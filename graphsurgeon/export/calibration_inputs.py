"""An export's calibration samples as the arrays ncnn is fed: ``ExportSpec.calibration`` (or the example
inputs when it is None), each sample checked against the example inputs and converted without its batch
dim.

A sample is a tuple of torch tensors, one per example input, each with the leading batch dim 1, the same
rank and the same kind (float32, or int32/int64 ids) as that example input; sizes may differ (another
sequence length, another image grid). Float tensors become float32 arrays, ids int32 arrays (ncnn reads
ids as int32 bits, as pnnx converts them), both ``x[0]``: pnnx drops the batch dim of every graph input,
so a ``[1, T, H]`` input is the 2-D blob ``[T, H]``. Anything else is an ``ExportError`` naming the
sub-model, the sample and the input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from graphsurgeon.export.errors import ExportError, one_line

if TYPE_CHECKING:
    import torch

Sample = tuple[np.ndarray, ...]
_INT_DTYPES = ("torch.int32", "torch.int64")


def _kind(x: torch.Tensor) -> str | None:
    if str(x.dtype) == "torch.float32":
        return "float32"
    return "ids" if str(x.dtype) in _INT_DTYPES else None


def calibration_arrays(
    name: str, inputs: Sequence[torch.Tensor], calibration: Sequence[Sequence[torch.Tensor]] | None
) -> list[Sample]:
    """The samples of sub-model ``name`` as numpy arrays without the batch dim (see the module docstring).
    Reading ``calibration`` may run the source's own code (a lazy sequence): its failures are named too."""
    import torch

    try:
        samples = list(calibration) if calibration is not None else [tuple(inputs)]
    except Exception as err:
        raise ExportError(
            f"sub-model {name}: computing its calibration samples failed: {one_line(err)}"
        ) from err
    if not samples:
        raise ExportError(
            f"sub-model {name}: calibration is an empty sequence (None means the example inputs)"
        )
    out = []
    for k, sample in enumerate(samples):
        where = f"sub-model {name}: calibration sample {k}"
        if not isinstance(sample, tuple | list) or len(sample) != len(inputs):
            count = len(sample) if isinstance(sample, tuple | list) else type(sample).__name__
            raise ExportError(f"{where} has {count} tensor(s); the example has {len(inputs)} inputs")
        arrays = []
        for i, (x, example) in enumerate(zip(sample, inputs, strict=True)):
            if not isinstance(x, torch.Tensor):
                raise ExportError(f"{where}, input {i}: a {type(x).__name__}, not a torch.Tensor")
            if x.dim() != example.dim() or x.shape[0] != 1:
                raise ExportError(
                    f"{where}, input {i}: shape {list(x.shape)}; the example's is {list(example.shape)} "
                    "(same rank, leading batch dim 1)"
                )
            if _kind(x) is None or _kind(x) != _kind(example):
                raise ExportError(f"{where}, input {i}: {x.dtype}, but the example input is {example.dtype}")
            dtype = np.float32 if _kind(x) == "float32" else np.int32
            arrays.append(np.ascontiguousarray(x[0].detach().cpu().numpy().astype(dtype)))
        out.append(tuple(arrays))
    return out
