"""Load and run models in the ``ncnn`` wheel with exact fp32 options (fp16/bf16 storage, packing and
arithmetic off): bit-exact fp32 on x86, the reference against which converted models are checked — or at
another ``Precision``, as a runtime would run them:

* ``fp32``: the exact options above (the default);
* ``fp16``: fp16 storage, packed storage and arithmetic and the packing layout on (bf16 off); ncnn then uses
  fp16 where the CPU has it, in every layer but those a conversion's calibration marked with ``31=``;
* ``auto``: ncnn's own defaults for this CPU, untouched.

Block-quantized Gemms (``18=4xx/6xx/8xx``) run their own kernels at every precision.

Failures raise ``VerifyError`` naming the file or blob."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import ncnn
import numpy as np

from graphsurgeon.verify.errors import VerifyError

_CUSTOM_LAYERS: list[ncnn.Layer] = []

Precision = Literal["fp32", "fp16", "auto"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "auto")


def _keep_alive_layer() -> ncnn.Layer:
    """A custom layer that reads no weights. ncnn keeps a raw pointer to it, so Python must keep it alive."""
    layer = ncnn.Layer()
    _CUSTOM_LAYERS.append(layer)
    return layer


def fp32_net(
    param: Path,
    model: Path,
    custom_no_weight_types: tuple[str, ...] = (),
    *,
    binary_param: bool = False,
    num_threads: int = 1,
) -> ncnn.Net:
    """Load a net with fp16/bf16 storage, packing and arithmetic off (bit-exact fp32 on x86). The thread
    count is set before loading: Gemm packs its weights for the load-time count."""
    return load_net(param, model, custom_no_weight_types, binary_param=binary_param, num_threads=num_threads)


def set_precision(opt: ncnn.Option, precision: Precision) -> None:
    """Set ``opt`` for ``precision`` (see the module's docstring)."""
    if precision == "auto":
        return
    fp16 = precision == "fp16"
    if precision not in PRECISIONS:
        raise VerifyError(f"precision must be one of {list(PRECISIONS)}, not {precision!r}")
    opt.use_fp16_storage = fp16
    opt.use_fp16_packed = fp16
    opt.use_fp16_arithmetic = fp16
    opt.use_bf16_storage = False
    opt.use_packing_layout = fp16


def load_net(
    param: Path,
    model: Path,
    custom_no_weight_types: tuple[str, ...] = (),
    *,
    binary_param: bool = False,
    num_threads: int = 1,
    precision: Precision = "fp32",
) -> ncnn.Net:
    """Load a net at ``precision``; the thread count is set before loading (Gemm packs its weights for
    the load-time count)."""
    net = ncnn.Net()
    set_precision(net.opt, precision)
    net.opt.num_threads = num_threads
    for layer_type in custom_no_weight_types:
        net.register_custom_layer(layer_type, _keep_alive_layer, lambda layer: None)
    load_param = net.load_param_bin if binary_param else net.load_param
    if load_param(str(param)) != 0:
        net.clear()
        raise VerifyError(f"ncnn rejected {param}")
    if net.load_model(str(model)) != 0:
        net.clear()
        raise VerifyError(f"ncnn rejected {model}")
    return net


def run(net: ncnn.Net, inputs: Mapping[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    """Feed cloned Mats (never wrapped numpy memory) and extract copies of ``outputs``."""
    results: dict[str, np.ndarray] = {}
    with net.create_extractor() as ex:
        for name, arr in inputs.items():
            if ex.input(name, ncnn.Mat(np.ascontiguousarray(arr, dtype=np.float32)).clone()) != 0:
                raise VerifyError(f"no input blob named {name!r}")
        for name in outputs:
            ret, mat = ex.extract(name)
            if ret != 0:
                raise VerifyError(f"extract {name} failed with {ret}")
            results[name] = np.array(mat)
    return results
