"""The sub-models of Qwen3-VL that are exported to ncnn through pnnx, as plain ``nn.Module``s with batch-1
inputs built from an HF transformers ``Qwen3VLForConditionalGeneration`` (5.24) and sharing its parameters
(no copies). HF's model is the reference; each part re-expresses one of its modules only where pnnx needs
it (a Conv3d, the fused qkv, the untraceable helpers), and ``tests/test_qwen3_vl_parts.py`` checks every
part against the HF module it stands for.

Vision, one image (one frame) of ``gh x gw`` patches, ``N = gh*gw``, rows in HF's merge-block order:

* ``PatchEmbedPart``: ``pixel_values`` rows ``[1, N, 3*2*16*16]`` in HF's layout (columns ``c, t, y, x``)
  -> ``[1, N, C]``. HF's ``Conv3d`` with kernel = stride = ``(2, 16, 16)`` is exactly a Linear over the
  flattened patch: the weight is the kernel viewed as ``[C, 1536]``. The full 1536 columns are kept (not
  the 768 of a still image with the two temporal taps summed): the ncnn weight is then the checkpoint
  tensor itself, bytes for bytes (a summed kernel is a new tensor no weight map can prove, and rounds
  differently), video frames with two different temporal patches work, and the input is HF's processor
  output unchanged; the price is 2x the multiply-adds of this one small layer.
* ``VisionPart``: ``hidden [1, N, C]`` (the patch embedding), ``pos [1, N, C]`` (the interpolated position
  embedding, ``vision_tables.interpolated_pos_embed``), ``cos, sin [1, N, head_dim]``
  (``vision_tables.vision_rope_tables``) -> the last block's output ``[1, N, C]`` followed by the outputs
  of the blocks ``deepstack_visual_indexes`` names (DeepStack taps), in that order. It adds ``pos``, then
  runs every block with HF's own ``norm1``/``norm2`` (LayerNorm eps 1e-6), ``attn.qkv``, ``attn.proj`` and
  ``mlp`` (gelu tanh in Qwen3-VL's config). The fused qkv output is split by columns, ``[0,C)`` q,
  ``[C,2C)`` k, ``[2C,3C)`` v (HF's ``reshape(N, 3, heads, d)``), so its rows are the q/k/v weights;
  ``qkv="split"`` makes them three Linears instead (``QkvForm``). RoPE is ``x*cos + rotate_half(x)*sin``
  and attention is bidirectional SDPA without a mask (one call per image replaces HF's ``cu_seqlens``).
  A tap on the last block repeats the first output.
* ``MergerPart`` / ``DeepStackMergerPart(k)``: ``[1, N/4, 4C]`` -> ``[1, N/4, out_hidden]``. The input is
  the ViT output (or tap) with each 2x2 block's four rows side by side, i.e. HF's ``view(-1, 4C)``, which
  the runtime does on the contiguous ``[N, C]`` buffer for free. (Inside the graph the view cannot be
  traced: gsurg's second trace shape is ``N + 3``, never a multiple of 4.) Main merger:
  ``LayerNorm(C)`` on each patch (the rows viewed as ``[4N/4, C]``), then ``fc1 -> GELU(erf) -> fc2``;
  DeepStack merger (``use_postshuffle_norm``): ``LayerNorm(4C)`` on the grouped rows, then the same MLP.

LLM (``T`` tokens after ``past`` cached ones), the Qwen3 layers every Qwen3 example shares
(``graphsurgeon.models.common.qwen3_layers``) holding HF's text parameters, so the graphs are those of
``rules/llm-kv-cache.yaml`` (it adds the KV cache to the exported decoder):

* ``EmbedPart``, ``LMHeadPart``: ``graphsurgeon.models.common.qwen3_llm_model``'s, on ``text_model(hf)``;
* ``DecoderPart``: ``hidden [1, T, H]``, additive mask ``[1, T, past+T]``, cos/sin ``[1, T, head_dim]``
  (interleaved MRoPE, ``mrope_tables``), then ``ds0 .. ds{n-1} [1, T, H]``, the DeepStack features, one
  per tap: ``ds_k`` is added to the hidden state after LLM layer ``k`` (HF's ``_deepstack_process``), the
  merger output of tap ``k`` on the image rows and zeros elsewhere; zeros on decode steps (adding 0 is
  exact, so one graph serves prefill and decode) -> hidden after the final norm ``[1, T, H]``. ``forward``
  has no cache (the export); ``step`` takes and returns a ``KVCache`` (the tests' decode steps).

``mrope_tables`` computes the text RoPE tables from per-token ``(t, h, w)`` positions. ``part_specs``
gives every part as an ``ExportSpec`` (the names, example inputs and dynamic dims an export source hands
to gsurg).

What pnnx 20261020 makes of them (``fp16=0``, the patch / merged-row / sequence dim dynamic; every input
loses its batch dim, so the ViT's inputs are 2-D ``[N, .]``; ``tests/test_qwen3_vl_parts.py`` checks these):

* patch_embed: ``Split -> Reshape 6="0w,-1" -> Gemm (N=C, K=1536, bias) -> Reshape 6="0w,1h,1c"``, an
  ``out0`` of ``[1, N, C]`` (c=1): the pattern of ``rules/common-rules.yaml``'s ``linear-on-rows``;
* vision: ``BinaryOp`` add of in0 and in1, then per block ``LayerNorm 0=C 1=1e-6``, ``Gemm`` (3C x C),
  ``Slice -23300=3,C,C,-233 1=1`` (q, k, v columns), ``Reshape 6="d,heads,0h"`` + ``Permute 0=2`` each,
  ``RotaryEmbed 0=0`` on q and k reading in2/in3, ``SDPA 5=0`` (three bottoms, no scale param: 1/sqrt(d)
  at runtime, HF's), ``Permute``, ``Reshape``, the proj ``Gemm``, ``BinaryOp`` residual adds, ``Gemm``,
  ``GELU 0=1``, ``Gemm``. No MultiHeadAttention, ExpandDims or Crop. Outputs ``out0`` (last block) and
  ``out1..`` (taps; a tap on the last block leaves the same Split as ``out0``). ``qkv="split"``: three
  ``Gemm`` C x C and no Slice;
* merger: ``Reshape 6="C,*(4,0h)" -> LayerNorm 0=C -> Reshape -> Gemm -> GELU (0=0) -> Gemm``;
  deepstack_merger{k}: ``LayerNorm 0=4C -> Gemm -> GELU (0=0) -> Gemm``;
* embed, lm_head: as ``graphsurgeon/models/common/qwen3_llm_model.py`` says; decoder: the same layers as that
  decoder (in0 hidden, in1 mask, in2 cos, in3 sin; ``SDPA 5=1`` reading in1, ``RotaryEmbed 0=0``, ``RMSNorm``,
  ``Gemm 7=0``), and inputs ``in4..`` each read by one ``BinaryOp 0=0`` after the residual add that ends layer
  k.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from graphsurgeon.export.spec import ExportSpec
from graphsurgeon.models.common.qwen3_config import TextConfig, refuse_unsupported
from graphsurgeon.models.common.qwen3_layers import KVCache, causal_mask, inverse_frequencies, rope_fused
from graphsurgeon.models.common.qwen3_llm_model import EmbedPart, LMHeadPart, Qwen3ForCausalLM

from .vision_tables import vision_rope_tables

if TYPE_CHECKING:
    from transformers import Qwen3VLForConditionalGeneration

QkvForm = Literal["fused", "split"]
"""How the ViT's fused qkv Linear is exported: ``fused``, HF's one Linear whose output is split by columns
(one ncnn Gemm holding the checkpoint tensor itself, then a Slice); ``split``, three Linears over its row
blocks (three Gemms whose weights are slices of the tensor, which no weight map pairs)."""

__all__ = [
    "DecoderPart",
    "DeepStackMergerPart",
    "EmbedPart",
    "LMHeadPart",
    "MergerPart",
    "PatchEmbedPart",
    "QkvForm",
    "VisionPart",
    "mrope_axes",
    "mrope_tables",
    "part_specs",
    "text_config",
    "text_model",
]


def _visual(hf: Qwen3VLForConditionalGeneration) -> Any:
    return hf.model.visual


def _frozen(tensor: torch.Tensor) -> nn.Parameter:
    """A parameter over ``tensor``'s storage (a view of the HF weight, not a copy)."""
    return nn.Parameter(tensor, requires_grad=False)


# ---- vision ----------------------------------------------------------------------------------------------


class PatchEmbedPart(nn.Module):
    """HF's ``patch_embed`` (Conv3d, kernel = stride) as a Linear over the flattened patch rows."""

    def __init__(self, hf: Qwen3VLForConditionalGeneration) -> None:
        super().__init__()
        conv = cast(nn.Conv3d, _visual(hf).patch_embed.proj)
        if tuple(conv.kernel_size) != tuple(conv.stride) or conv.padding != (0, 0, 0):
            raise ValueError("the patch embedding is not a kernel = stride Conv3d without padding")
        if conv.bias is None:
            raise ValueError("the patch embedding has no bias (Qwen3-VL's Conv3d has one)")
        width = conv.weight[0].numel()
        self.proj = nn.Linear(width, conv.out_channels, device="meta")  # parameters set below
        self.proj.weight = _frozen(conv.weight.view(conv.out_channels, width))
        self.proj.bias = cast(nn.Parameter, conv.bias)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.proj(pixel_values)


def _rows(linear: nn.Linear, start: int, stop: int) -> nn.Linear:
    """A Linear computing outputs ``[start, stop)`` of ``linear`` (weight and bias views)."""
    part = nn.Linear(linear.in_features, stop - start, bias=linear.bias is not None, device="meta")
    part.weight = _frozen(linear.weight[start:stop])
    if linear.bias is not None:
        part.bias = _frozen(linear.bias[start:stop])
    return part


class _Block(nn.Module):
    """One HF ``Qwen3VLVisionBlock``; every module is HF's own, except with ``qkv="split"`` three Linears
    over the row blocks of ``attn.qkv``."""

    def __init__(self, block: Any, heads: int, qkv: QkvForm) -> None:
        super().__init__()
        width = int(block.norm1.normalized_shape[0])
        fused = cast(nn.Linear, block.attn.qkv)
        self.width, self.heads, self.head_dim = width, heads, width // heads
        self.norm1, self.norm2 = block.norm1, block.norm2
        self.qkv: nn.Linear | None = fused if qkv == "fused" else None
        self.q: nn.Linear | None = None
        self.k: nn.Linear | None = None
        self.v: nn.Linear | None = None
        if qkv == "split":
            self.q, self.k, self.v = (_rows(fused, i * width, (i + 1) * width) for i in range(3))
        self.proj = block.attn.proj
        self.mlp = block.mlp

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def _project(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.qkv is not None:
            q, k, v = self.qkv(h).split(self.width, dim=-1)
            return q, k, v
        assert self.q is not None and self.k is not None and self.v is not None
        return self.q(h), self.k(h), self.v(h)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``x [1, N, C]``, ``cos/sin [1, N, d]`` (they broadcast over the heads of ``[1, heads, N, d]``)."""
        q, k, v = (self._split(t) for t in self._project(self.norm1(x)))
        q, k = rope_fused(q, cos, sin), rope_fused(k, cos, sin)
        attn = F.scaled_dot_product_attention(q, k, v)
        attn = attn.transpose(1, 2).reshape(x.shape[0], x.shape[1], self.heads * self.head_dim)
        x = x + self.proj(attn)
        return x + self.mlp(self.norm2(x))


class VisionPart(nn.Module):
    """(hidden, pos, cos, sin) -> (last block output, *DeepStack taps)."""

    def __init__(self, hf: Qwen3VLForConditionalGeneration, qkv: QkvForm = "fused") -> None:
        super().__init__()
        if qkv not in ("fused", "split"):
            raise ValueError(f"qkv must be 'fused' or 'split', not {qkv!r}")
        visual = _visual(hf)
        vcfg: Any = hf.config.vision_config
        self.blocks = nn.ModuleList(_Block(b, int(vcfg.num_heads), qkv) for b in visual.blocks)
        self.taps = [int(i) for i in vcfg.deepstack_visual_indexes]
        if any(not 0 <= i < len(self.blocks) for i in self.taps):
            raise ValueError(
                f"deepstack_visual_indexes {self.taps} name blocks outside the ViT's {len(self.blocks)}"
            )

    def forward(
        self, hidden: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        x = hidden + pos
        taps: dict[int, torch.Tensor] = {}
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin)
            if i in self.taps:
                taps[i] = x
        return (x, *(taps[i] for i in self.taps))


class MergerPart(nn.Module):
    """HF's ``merger``: per-patch LayerNorm(C), then the MLP over each 2x2 block's ``4C`` values."""

    def __init__(self, hf: Qwen3VLForConditionalGeneration) -> None:
        super().__init__()
        merger = _visual(hf).merger
        if merger.use_postshuffle_norm:
            raise ValueError("the main merger normalises each patch (use_postshuffle_norm false)")
        self.norm, self.fc1, self.act, self.fc2 = (
            merger.norm,
            merger.linear_fc1,
            merger.act_fn,
            merger.linear_fc2,
        )
        self.width = int(merger.norm.normalized_shape[0])

    def forward(self, grouped: torch.Tensor) -> torch.Tensor:
        """``[1, M, 4C]`` -> ``[1, M, out_hidden]``."""
        x = self.norm(grouped.view(grouped.shape[0], -1, self.width))
        x = x.view(grouped.shape[0], -1, grouped.shape[2])
        return self.fc2(self.act(self.fc1(x)))


class DeepStackMergerPart(nn.Module):
    """HF's ``deepstack_merger_list[k]``: LayerNorm(4C) on the grouped rows, then the MLP."""

    def __init__(self, hf: Qwen3VLForConditionalGeneration, k: int) -> None:
        super().__init__()
        mergers = _visual(hf).deepstack_merger_list
        if not 0 <= k < len(mergers):
            raise ValueError(f"there is no DeepStack merger {k} (the model has {len(mergers)})")
        merger = mergers[k]
        if not merger.use_postshuffle_norm:
            raise ValueError(f"DeepStack merger {k} normalises each patch, not the grouped rows")
        self.norm, self.fc1, self.act, self.fc2 = (
            merger.norm,
            merger.linear_fc1,
            merger.act_fn,
            merger.linear_fc2,
        )

    def forward(self, grouped: torch.Tensor) -> torch.Tensor:
        """``[1, M, 4C]`` -> ``[1, M, out_hidden]``."""
        return self.fc2(self.act(self.fc1(self.norm(grouped))))


# ---- LLM ------------------------------------------------------------------------------------------------


def text_config(hf: Qwen3VLForConditionalGeneration) -> TextConfig:
    """The numbers of HF's text model as the shared Qwen3 layers take them. What those layers do not
    implement (attention bias, an activation other than SiLU, a RoPE type other than default) is refused."""
    t: Any = hf.config.text_config
    where = "text_config"
    refuse_unsupported(t.to_dict(), where)
    rope = dict(t.rope_parameters or {})
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"{where}: rope_type {rope.get('rope_type')!r} is not supported (only default)")
    return TextConfig(
        hidden_size=int(t.hidden_size),
        intermediate_size=int(t.intermediate_size),
        num_hidden_layers=int(t.num_hidden_layers),
        num_attention_heads=int(t.num_attention_heads),
        num_key_value_heads=int(t.num_key_value_heads),
        head_dim=int(t.head_dim),
        rms_norm_eps=float(t.rms_norm_eps),
        rope_theta=float(rope["rope_theta"]),
        vocab_size=int(t.vocab_size),
        tie_word_embeddings=bool(hf.config.tie_word_embeddings),
        max_position_embeddings=int(t.max_position_embeddings),
    )


def text_model(hf: Qwen3VLForConditionalGeneration) -> Qwen3ForCausalLM:
    """A Qwen3 LLM of the shared layers whose parameters are HF's text parameters (shared, not copied)."""
    cfg = text_config(hf)
    llm = Qwen3ForCausalLM(cfg, device="meta")
    theirs = dict(hf.named_parameters())
    wanted = {}
    for name, _ in llm.named_parameters():
        source = name if name == "lm_head.weight" else name.replace("model.", "model.language_model.", 1)
        wanted[name] = theirs[source]
    llm.load_state_dict(wanted, strict=True, assign=True)
    return llm.eval()


class DecoderPart(nn.Module):
    """(hidden, mask, cos, sin, ds0 .. ds{n-1}) -> hidden after the final norm; ``ds_k`` is added after
    layer ``k``."""

    def __init__(self, llm: Qwen3ForCausalLM, deepstack: int) -> None:
        super().__init__()
        layers = len(llm.model.layers)
        if not 0 <= deepstack <= layers:
            raise ValueError(f"{deepstack} DeepStack features cannot follow the first layers of {layers}")
        self.layers = llm.model.layers
        self.norm = llm.model.norm
        self.deepstack = deepstack

    def step(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        deepstack: Sequence[torch.Tensor],
        cache: KVCache,
    ) -> tuple[torch.Tensor, KVCache]:
        """The stack reading and growing ``cache`` (empty: past length 0)."""
        if len(deepstack) != self.deepstack:
            raise ValueError(f"{len(deepstack)} DeepStack features given, the decoder takes {self.deepstack}")
        grown = KVCache()
        for i, layer in enumerate(self.layers):
            hidden, kv = layer(hidden, cos, sin, mask, cache.layers[i] if cache.layers else None)
            grown.layers.append(kv)
            if i < self.deepstack:
                hidden = hidden + deepstack[i]
        return self.norm(hidden), grown

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        *ds: torch.Tensor,
    ) -> torch.Tensor:
        return self.step(hidden, mask, cos, sin, ds, KVCache())[0]


def mrope_axes(head_dim: int, mrope_section: Sequence[int]) -> list[int]:
    """The position axis (0 t, 1 h, 2 w) of each of the ``head_dim/2`` rotary frequencies, interleaved:
    frequency ``i`` uses h when ``i % 3 == 1`` and ``i < 3*section[1]``, w when ``i % 3 == 2`` and
    ``i < 3*section[2]``, else t (``[24, 20, 20]``: t 24, h 20, w 20, the last four t)."""
    half = head_dim // 2
    if len(mrope_section) != 3 or sum(mrope_section) != half or min(mrope_section) < 0:
        raise ValueError(f"mrope_section {list(mrope_section)} must be three sizes summing to {half}")
    axes = []
    for i in range(half):
        if i % 3 == 1 and i < 3 * mrope_section[1]:
            axes.append(1)
        elif i % 3 == 2 and i < 3 * mrope_section[2]:
            axes.append(2)
        else:
            axes.append(0)
    return axes


def mrope_tables(
    positions_thw: torch.Tensor, theta: float, head_dim: int, mrope_section: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[T, head_dim]`` for per-token positions ``[T, 3]`` (t, h, w): frequency ``i`` rotates
    by ``pos[axis(i)] * theta^(-2i/head_dim)`` (``mrope_axes``), both halves of a row alike."""
    if positions_thw.dim() != 2 or positions_thw.shape[1] != 3:
        raise ValueError(f"positions must be [T, 3] (t, h, w), not {list(positions_thw.shape)}")
    axes = torch.tensor(mrope_axes(head_dim, mrope_section), dtype=torch.int64)
    pos = positions_thw.to(torch.int64)[:, axes].to(torch.float32)
    angles = pos * inverse_frequencies(head_dim, theta)[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos(), emb.sin()


# ---- export specs ----------------------------------------------------------------------------------------

EXAMPLE_GRID = (4, 6)
"""The traced grid: not square, so rows and columns cannot be confused; gsurg's second shape has 27
patches (and 9 merged rows for the mergers)."""
EXAMPLE_LENGTH = 8


def part_specs(
    hf: Qwen3VLForConditionalGeneration,
    grid: tuple[int, int] = EXAMPLE_GRID,
    length: int = EXAMPLE_LENGTH,
    qkv: QkvForm = "fused",
) -> list[ExportSpec]:
    """Every part, each with its patch, merged-row or sequence dim dynamic: ``patch_embed``, ``vision``,
    ``merger``, ``deepstack_merger{k}`` (one per tap), ``embed``, ``decoder``, ``lm_head``. The example
    inputs are seeded random values, except the RoPE tables and the mask (those of ``grid`` and of text
    positions ``0..length-1``). No calibration samples (an export source adds them)."""
    vcfg: Any = hf.config.vision_config
    tcfg: Any = hf.config.text_config
    gen = torch.Generator().manual_seed(0)
    gh, gw = grid
    merge = int(vcfg.spatial_merge_size)
    n, m = gh * gw, gh * gw // merge**2
    width, heads = int(vcfg.hidden_size), int(vcfg.num_heads)
    patch_width = int(vcfg.in_channels) * int(vcfg.temporal_patch_size) * int(vcfg.patch_size) ** 2
    cos, sin = vision_rope_tables(gh, gw, width // heads, float(vcfg.rope_parameters["rope_theta"]), merge)
    llm = text_model(hf)
    rope = tcfg.rope_parameters
    positions = torch.arange(length)[:, None].expand(length, 3)
    tcos, tsin = mrope_tables(positions, float(rope["rope_theta"]), int(tcfg.head_dim), rope["mrope_section"])
    taps = len(vcfg.deepstack_visual_indexes)
    hidden = int(tcfg.hidden_size)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(1, *shape, generator=gen)

    vision = (rand(n, width), rand(n, width), cos[None], sin[None])
    text = rand(length, hidden)
    decoder = (
        text,
        causal_mask(0, length),
        tcos[None],
        tsin[None],
        *(rand(length, hidden) for _ in range(taps)),
    )
    seq = [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1), *((4 + k, 1) for k in range(taps))]
    grouped = rand(m, merge**2 * width)
    rows = {"merged": [(0, 1)]}
    ids = torch.randint(0, int(tcfg.vocab_size), (1, length), generator=gen)
    return [
        ExportSpec("patch_embed", PatchEmbedPart(hf).eval(), (rand(n, patch_width),), {"patches": [(0, 1)]}),
        ExportSpec("vision", VisionPart(hf, qkv).eval(), vision, {"patches": [(i, 1) for i in range(4)]}),
        ExportSpec("merger", MergerPart(hf).eval(), (grouped,), rows),
        *(
            ExportSpec(f"deepstack_merger{k}", DeepStackMergerPart(hf, k).eval(), (grouped,), rows)
            for k in range(taps)
        ),
        ExportSpec("embed", EmbedPart(llm).eval(), (ids,), {"seq": [(0, 1)]}),
        ExportSpec("decoder", DecoderPart(llm, taps).eval(), decoder, {"seq": seq}),
        ExportSpec("lm_head", LMHeadPart(llm).eval(), (text,), {"seq": [(0, 1)]}),
    ]
