"""The rule file's sections around the rules: where models come from (``source``, ``inputs``,
``checkpoints``), what each graph promises and writes (``interface``, ``output``, ``storage``), the side
files rendered beside the models, and the output folder. Paths are relative to the file that writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from graphsurgeon.formats.outpaths import check_output_name
from graphsurgeon.rewrite.rule_values import PolicyStorageName, StorageName
from graphsurgeon.rewrite.select import Selector
from graphsurgeon.rewrite.strict import StrictModel

#: A path inside the output folder: relative, without ``..`` (``pipeline.output_guard``).
OutputName = Annotated[str, AfterValidator(check_output_name)]


class PathVar(StrictModel):
    """A variable that holds a file-system path: relative to the declaring file (``--set``: to the current
    directory), or with ``package`` to that installed package's folder; made absolute when the file
    loads."""

    path: str
    package: str | None = Field(
        default=None,
        description="a dotted package name: PATH is relative to its folder wherever it is installed (found "
        "without running its code), so a shipped rule file can name data a package ships",
    )


class Source(StrictModel):
    """A PyTorch export source: ``export`` names a callable ``build(variables, checkpoint)`` returning
    ``graphsurgeon.export.ExportSpec``s — ``file.py:build`` (relative to the rule file) or
    ``package.module:build``. pnnx exports each one; ``inputs`` entries name them with ``export:``."""

    export: str = Field(description="file.py:callable (relative to the rule file) or package.module:callable")
    checkpoint: str | None = Field(
        default=None, description="checkpoint folder (config.json + safetensors) given to the callable"
    )
    config: str | None = Field(
        default=None,
        description="file.py:callable or package.module:callable reading the checkpoint folder into the "
        "mapping ${config.*} reads (default: the folder's config.json as it is)",
    )


class RepeatSpec(StrictModel):
    """Grow a short stack of pre-norm layers to its full depth when the input is read
    (``pipeline.repeat_layers``): ``times`` copies of the last layer, each reading its own layer's
    checkpoint tensors."""

    stream: str = Field(description="the blob the residual stream starts at (e.g. in0, the hidden input)")
    adds: int = Field(default=2, ge=1, description="residual adds per layer (2 for a pre-norm transformer)")
    times: int = Field(ge=0, description="copies of the last layer appended after it")
    index: str = Field(
        description="a regex with one group: where a tensor name holds its layer number (the rule file's "
        "model names it, e.g. 'model\\.layers\\.(\\d+)\\.')",
    )
    checkpoint: str | None = Field(
        default=None,
        description="entry of `checkpoints` the copies' weights come from (default: the only one)",
    )


class ModelInput(StrictModel):
    """A model the rules read: a .param (and its .bin when weights are rewritten or written), or a
    sub-model the export source makes; with ``repeat``, a short stack grown to full depth as it is read."""

    param: str | None = None
    bin: str | None = None
    export: str | None = Field(default=None, description="the name of a sub-model the export source returns")
    repeat: RepeatSpec | None = None

    @model_validator(mode="after")
    def _one_origin(self) -> ModelInput:
        if (self.param is None) == (self.export is None):
            raise ValueError("give param (and bin), or export")
        if self.export is not None and self.bin is not None:
            raise ValueError("an exported model brings its own .bin; bin goes with param")
        return self


class CheckpointInput(StrictModel):
    """A safetensors checkpoint (single file or sharded ``*.safetensors.index.json``) weights come from, or a
    checkpoint folder holding one (``formats.safetensors.checkpoint_path``), as a model's source names it."""

    path: str


class GraphOutput(StrictModel):
    """Where a graph's result goes, inside the output folder. A ``.param.bin`` name is written binary."""

    param: OutputName
    bin: OutputName | None = Field(default=None, description="the weights (required when the model has any)")


class Interface(StrictModel):
    """The blob names a graph's result must expose (a runtime reaches them by these names). Each entry is a
    name or a glob (``cache_k*``). Checked on the result: every entry names at least one blob, every graph
    input (Input top) and every output (a blob nothing reads) is listed, and nothing else is."""

    inputs: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)


class StorageRule(StrictModel):
    """Store the tagged weights of the layers ``match`` selects (only ``slots``, when given) as
    ``storage``."""

    match: Selector
    slots: list[str] | None = None
    storage: PolicyStorageName


#: The bits of each block-quantized storage a policy may name.
QUANT_STORAGE_BITS = {"int8": 8, "int6": 6, "int4": 4}
#: fp16's largest finite value: a larger magnitude becomes inf in fp16 storage or arithmetic.
FP16_MAX = 65504.0
#: ncnn's featmask bits (param 31, ``get_masked_option`` in src/net.cpp): 1 no fp16 arithmetic, 2 no fp16
#: storage (nor fp16 packed), 4 no bf16 storage/packed.
FEATMASK_NO_FP16 = 3


class Calibrate(StrictModel):
    """Find the layers fp16 cannot run: the graph (after its rules, weights as they are) runs in the ncnn
    wheel with exact fp32 options on the export source's calibration samples, every blob is extracted, and
    a watched layer any of whose input or output blobs reaches ``|x| > limit`` (or holds inf/NaN) keeps
    fp32 weights and gets ``featmask`` OR-ed into its param 31, so ncnn never runs it in fp16."""

    when: bool = Field(default=True, description="calibrate only when this holds, e.g. ${storage == 'fp16'}")
    limit: float = Field(
        default=FP16_MAX, gt=0, allow_inf_nan=False, description="the largest |activation| fp16 may carry"
    )
    featmask: int = Field(
        default=FEATMASK_NO_FP16,
        ge=1,
        le=255,
        description="bits OR-ed into param 31 of a layer above the limit (ncnn: 1 no fp16 arithmetic, "
        "2 no fp16 storage, 4 no bf16)",
    )
    match: Selector | None = Field(
        default=None,
        description="the layers watched (default: every layer but Input, which computes nothing)",
    )


class Gptq(StrictModel):
    """GPTQ-style error compensation of the block-quantized weights: each matrix's columns are quantized in
    order and the ones not yet quantized absorb the output error, measured on the calibration samples'
    inputs to the layer (their Hessian). The records keep ncnn's standard block format."""

    when: bool = Field(default=True, description="compensate only when this holds, e.g. ${quant_gptq}")
    damp: float = Field(
        default=0.01,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="added to the Hessian's diagonal, as a fraction of its mean (GPTQ's percdamp)",
    )
    match: Selector | None = Field(
        default=None, description="the layers compensated (default: every block-quantized weight)"
    )


class Awq(StrictModel):
    """AWQ-style activation-aware scaling: per input channel a scale ``s = mean|x|^alpha`` (alpha searched
    for the least output error on the calibration samples), the weight's columns stored times ``s`` and
    the input multiplied by ``1/s`` in the layer itself (ncnn's block format with per-input scales,
    quantize_term format digit 1). With ``gptq`` too, GPTQ quantizes the scaled matrix."""

    when: bool = Field(default=True, description="scale only when this holds, e.g. ${quant_awq}")
    grid: int = Field(default=20, ge=1, le=100, description="alpha steps between 0 and 1 (grid + 1 tried)")
    match: Selector | None = Field(
        default=None, description="the layers scaled (default: every block-quantized weight)"
    )


class Mixed(StrictModel):
    """Mixed precision: among the weights block-quantized at the policy's ``default``, raise the most
    sensitive ones to ``storage`` while the average stays within ``budget`` bits per weight (codes and
    scales counted, over those weights). Sensitivity is measured: the output error on the calibration
    samples the higher storage removes, relative to the layer's output, per extra bit stored."""

    when: bool = Field(default=True, description="mix only when this holds, e.g. ${quant_budget > 0}")
    storage: Literal["int8", "int6"] = Field(default="int8", description="the storage a raised weight gets")
    budget: float = Field(
        ge=0,
        allow_inf_nan=False,
        description="the largest average bits per weight, scales included (int4 block 64 alone is 4.5, "
        "int8 block 64 8.5)",
    )

    @model_validator(mode="after")
    def _budget(self) -> Mixed:
        if self.when and self.budget <= 0:
            raise ValueError("budget: give the average bits per weight allowed (> 0)")
        return self


class StoragePolicy(StrictModel):
    """How a graph's tagged weights are stored: ``default`` for all, then ``rules`` in order (the last
    matching one wins), then ``calibrate``: the layers it finds above the limit keep fp32. A weight a rule
    action gave an explicit ``storage`` keeps it (it is pinned). Block-quantized weights may be quantized
    from the calibration samples (``gptq``, ``awq``, ``mixed``), which then need ``calibrate``."""

    default: PolicyStorageName = "fp32"
    rules: list[StorageRule] = Field(default_factory=list)
    calibrate: Calibrate | None = None
    block: Literal[32, 64, 128] = Field(
        default=64, description="int8/int6/int4: values per block scale (ncnn: 32, 64 or 128)"
    )
    method: Literal["auto", "minmax", "clip"] = Field(
        default="auto",
        description="int8/int6/int4: how a block's scale is chosen: minmax (no value clipped), clip (the "
        "clipping of the min-max range with the least squared error; minmax is one of its candidates), or "
        "auto (clip at 4 and 6 bits, minmax at 8, where clipping never paid in the measurements)",
    )
    unquantized: StorageName = Field(
        default="fp32",
        description="int8/int6/int4: the float storage of the weights block quantization cannot hold "
        "(norms, biases, convolutions, embeddings)",
    )
    gptq: Gptq | None = None
    awq: Awq | None = None
    mixed: Mixed | None = None

    @model_validator(mode="after")
    def _calibrated(self) -> StoragePolicy:
        for key in ("gptq", "awq", "mixed"):
            if getattr(self, key) is not None and self.calibrate is None:
                raise ValueError(
                    f"{key} quantizes from the calibration samples: give calibrate too (calibrate: {{}} "
                    "runs them with the defaults)"
                )
        low = QUANT_STORAGE_BITS.get(self.default)
        mixed = self.mixed
        if mixed is not None and mixed.when and low is not None and QUANT_STORAGE_BITS[mixed.storage] <= low:
            raise ValueError(f"mixed.storage {mixed.storage} has no more bits than default {self.default}")
        return self

    def calibrated(self, key: str) -> bool:
        """Whether ``gptq``, ``awq`` or ``mixed`` is given and its ``when`` holds."""
        section = getattr(self, key)
        return section is not None and bool(section.when)


class SideFile(StrictModel):
    """A file written beside the models, in the same atomic output group: a jinja2 ``template`` (a path
    relative to the rule file: a model's template lives with its model, not in the package) rendered with
    the run's variables, the graphs' interfaces and weight records and ``data``, and checked against its
    JSON ``schema`` when it names one (``formats.json_schema``; a model.json's is its family's,
    ``schemas/model_json/``); a file ``copy``'d as it is; or, per graph with weights, a ``weight_map`` for
    ``gsurg diff-bin``: each stored weight paired with the checkpoint tensor (a safetensors file, a
    ``*.safetensors.index.json``, or a folder holding one) whose values it holds, written to ``output``
    with ``{graph}`` replaced by the graph's name."""

    output: OutputName = Field(
        description="path inside the output folder ({graph}: the graph, for weight_map)"
    )
    template: str | None = None
    schema_: str | None = Field(
        default=None,
        alias="schema",
        description="template: a JSON Schema (path relative to the rule file) the rendered file must hold "
        "to; checked before anything is written",
    )
    copy_: str | None = Field(default=None, alias="copy")
    weight_map: str | None = Field(
        default=None, description="the checkpoint the graphs' weights come from (file, index or folder)"
    )
    graphs: list[str] | None = Field(default=None, description="weight_map: these graphs (default: all)")
    data: dict[str, Any] = Field(default_factory=dict)
    when: bool = True

    @model_validator(mode="after")
    def _one_kind(self) -> SideFile:
        if sum(x is not None for x in (self.template, self.copy_, self.weight_map)) != 1:
            raise ValueError("give one of template, copy and weight_map")
        if self.weight_map is not None and "{graph}" not in self.output:
            raise ValueError("a weight_map output names one file per graph: put {graph} in it")
        if self.weight_map is None and self.graphs is not None:
            raise ValueError("graphs goes with weight_map")
        if self.schema_ is not None and self.template is None:
            raise ValueError("schema goes with template")
        return self

    def outputs_for(self, graph_names: list[str]) -> list[str]:
        """The paths this entry may write: ``output``, or one per graph for a weight map."""
        if self.weight_map is None:
            return [self.output]
        names = graph_names if self.graphs is None else self.graphs
        return [self.output.replace("{graph}", name) for name in names]


class Outputs(StrictModel):
    dir: str | None = Field(default=None, description="output folder (the command's --out wins)")


@dataclass
class HeaderSections:
    """The sections ``open_rule_file`` evaluates, each validated as soon as it is merged: what ``apply``
    reads before any export, as the typed objects ``RuleFile`` then holds (never read again as dicts)."""

    source: Source | None = None
    inputs: dict[str, ModelInput] = field(default_factory=dict)
    checkpoints: dict[str, CheckpointInput] = field(default_factory=dict)
    outputs: Outputs | None = None
