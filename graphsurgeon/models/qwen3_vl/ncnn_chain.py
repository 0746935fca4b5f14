"""The converted Qwen3-VL run in the ``ncnn`` wheel as a runtime runs it, with exact fp32 options: the nets
``model.json`` names, and everything a runtime computes between them from ``model.json``'s settings alone
(never the reference's code):

* per image (one vision call each, so attention stays inside the image): the ``patch_embed`` net on the
  processor's ``pixel_values`` rows; the four bilinear taps of every patch on the learned position table
  (``vision.position_embedding``: grid side, ``align_corners``), looked up with the ``pos_embed`` net and
  weighted here; the ViT's 2-D RoPE tables (``vision.rope``, ``vision_tables.vision_rope_angles``, cos and
  sin computed as the runtime computes them: ``verify.rope.cos_sin``); the
  ``vision`` net, whose every block output is read from its residual stream; the main merger and one
  DeepStack merger per tap (``vision.deepstack``) on the 2x2 rows side by side;
* per prompt: the ``embed`` net's rows with the ``<|image_pad|>`` rows (``tokens.image_pad``) overwritten,
  in order, by the images' merger rows; each DeepStack feature on the same rows (zeros elsewhere) as the
  decoder input ``decoder.deepstack[k]``; the MRoPE positions from the position counter over every image
  (``graphsurgeon.verify.mrope``, ``vision.merge_size``) and cos/sin in ``decoder.rope.layout`` with
  ``decoder.rope.mrope_section``; the causal mask; the KV caches between steps (extracted with type 1 and
  fed back as they are, all from one kv-cache allocator) and greedy decoding to an EOS id of
  ``tokens.eos`` or a token budget. Decode steps feed zeros ``[1, hidden]`` to the DeepStack inputs.

The decoder is run here rather than through ``graphsurgeon.verify.kv_session``: its signature inspection
takes every Input read by an ordinary layer as *the* hidden input, and the DeepStack inputs are such
inputs; the blob roles are in ``model.json`` anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import ncnn
import numpy as np

from graphsurgeon.formats.model_json import check_model_json
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.models.common.ncnn_stages import residual_stream
from graphsurgeon.verify import mrope
from graphsurgeon.verify.embedding_matrix import runtime_embeddings
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.mrope import RopeSettings, Segment, layout_table
from graphsurgeon.verify.mrope import cos_sin as mrope_cos_sin
from graphsurgeon.verify.ncnn_fp32 import Precision, load_net
from graphsurgeon.verify.rope import cos_sin, rope_inv_freq

from .vision_tables import vision_rope_angles

#: The model.json families this chain runs.
FAMILIES = ("qwen3_vl",)


def _mat(values: np.ndarray, dtype: type[np.generic] = np.float32) -> ncnn.Mat:
    """A Mat owning a copy of ``values`` (``ncnn.Mat(array)`` wraps the array's memory without keeping it
    alive, so the array is held until the clone is made)."""
    held: np.ndarray = np.ascontiguousarray(values, dtype=dtype)
    return ncnn.Mat(held).clone()


def axis_taps(size: int, side: int, align_corners: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear taps along one axis of ``size`` target positions onto ``side`` table entries: lower and
    upper index and the upper tap's weight (float32, as HF computes them). ``align_corners``: source
    ``i*(side-1)/(size-1)``; else ``(i+0.5)*side/size - 0.5`` clamped at 0 (PyTorch's convention)."""
    i = np.arange(size, dtype=np.float32)
    if align_corners:
        src = i * np.float32(side - 1) / np.float32(max(size - 1, 1))
    else:
        src = np.maximum((i + np.float32(0.5)) * np.float32(side) / np.float32(size) - np.float32(0.5), 0)
    low = np.floor(src)
    lower = low.astype(np.int64)
    return lower, np.minimum(lower + 1, side - 1), (src - low).astype(np.float32)


def merge_block_order(gh: int, gw: int, merge: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of every patch in merge-block order (``vision.patch_order``)."""
    rows = np.repeat(np.arange(gh), gw).reshape(gh, gw)
    cols = np.tile(np.arange(gw), gh).reshape(gh, gw)

    def blocks(grid: np.ndarray) -> np.ndarray:
        return grid.reshape(gh // merge, merge, gw // merge, merge).transpose(0, 2, 1, 3).reshape(-1)

    return blocks(rows), blocks(cols)


def position_taps(
    gh: int, gw: int, side: int, merge: int, align_corners: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Table ids ``[4, N]`` and weights ``[4, N]`` of every patch's four bilinear taps, in patch order."""
    rows, cols = merge_block_order(gh, gw, merge)
    y0, y1, fy = axis_taps(gh, side, align_corners)
    x0, x1, fx = axis_taps(gw, side, align_corners)
    y0, y1, fy, x0, x1, fx = y0[rows], y1[rows], fy[rows], x0[cols], x1[cols], fx[cols]
    gy, gx = np.float32(1) - fy, np.float32(1) - fx
    ids = np.stack([y0 * side + x0, y0 * side + x1, y1 * side + x0, y1 * side + x1])
    weights = np.stack([gy * gx, gy * fx, fy * gx, fy * fx]).astype(np.float32)
    return ids, weights


def vision_stage_names(depth: int, taps: Sequence[dict[str, Any]]) -> list[str]:
    """The vision stages of one image, in the order ``VisionResult.values`` holds them."""
    tapped = {int(d["block"]): f" (DeepStack tap {k})" for k, d in enumerate(taps)}
    return [
        "patch embed",
        "patch embed + position embedding",
        *(f"ViT block {i}" + tapped.get(i, "") for i in range(depth)),
        "merger",
        *(f"DeepStack merger {k} (block {d['block']})" for k, d in enumerate(taps)),
    ]


@dataclass
class VisionResult:
    """One image through the converted vision nets: each stage's value in the order of
    ``vision_stage_names``, up to the first one ncnn could not compute (``error`` says why)."""

    values: list[np.ndarray]
    error: str = ""
    merger: np.ndarray | None = None
    deepstack: list[np.ndarray] = field(default_factory=list)


@dataclass
class Generation:
    """Greedy decoding: the fused embeddings, the logits at every step, up to the first step ncnn could
    not compute (``error``)."""

    prefill_logits: np.ndarray | None = None
    decode_logits: list[np.ndarray] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    error: str = ""


class Qwen3VLNcnn:
    """The converted nets of a folder, loaded once with fp32 options."""

    def __init__(
        self, folder: Path, doc: dict[str, Any], *, num_threads: int = 1, precision: Precision = "fp32"
    ) -> None:
        self.folder = folder
        self.doc = check_model_json(doc, str(folder / "model.json"), FAMILIES, error=VerifyError)
        self.vision = doc["vision"]
        self.decoder_doc = doc["decoder"]
        self.merge = int(self.vision["merge_size"])
        self.depth = int(self.vision["depth"])
        self.taps = list(self.vision["deepstack"])
        self.hidden = int(doc["hidden_size"])
        self.image_pad = int(doc["tokens"]["image_pad"])
        eos = doc["tokens"]["eos"]
        self.eos_ids = {int(e) for e in (eos if isinstance(eos, list) else [eos])}
        rope = self.decoder_doc["rope"]
        t_sec, h_sec, w_sec = (int(s) for s in rope["mrope_section"])  # the schema says three
        self.rope = RopeSettings(
            theta=float(rope["theta"]),
            head_dim=int(rope["head_dim"]),
            mrope_section=(t_sec, h_sec, w_sec),
            merge=self.merge,
            layout=str(rope["layout"]),
        ).validate()
        self.inv_freq = rope_inv_freq(self.rope.head_dim, self.rope.theta)
        encoder = self.vision["encoder"]
        vit = folder / doc["nets"][encoder["net"]]["param"]
        stream = residual_stream(read_param_text(vit), encoder["hidden"])
        if len(stream) != 1 + 2 * self.depth:
            raise VerifyError(
                f"{vit}: the residual stream from {encoder['hidden']!r} has {len(stream)} adds; the position "
                f"add and {self.depth} blocks (model.json vision.depth) have {1 + 2 * self.depth}"
            )
        self.stream = [stream[0], *stream[2::2]]  # patch + position, then each block's output
        self.matrix = runtime_embeddings(folder, doc)  # the runtime's rows, when it reads them
        self.nets: dict[str, ncnn.Net] = {}
        try:
            for name, entry in doc["nets"].items():
                self.nets[name] = load_net(
                    folder / entry["param"],
                    folder / entry["bin"],
                    num_threads=num_threads,
                    precision=precision,
                )
        except BaseException:
            self.close()
            raise

    # ---- running one net -------------------------------------------------------------------------------

    def _run(self, net: str, feeds: dict[str, ncnn.Mat], outs: Sequence[str]) -> list[np.ndarray]:
        out = []
        with self.nets[net].create_extractor() as ex:
            for blob, mat in feeds.items():
                if ex.input(blob, mat) != 0:
                    raise VerifyError(f"{net}: no input blob {blob!r} (model.json names it)")
            for blob in outs:
                ret, mat = ex.extract(blob)
                if ret != 0:
                    raise VerifyError(f"{net}: ncnn returned {ret} computing blob {blob!r}")
                out.append(np.array(mat, dtype=np.float32))
        return out

    def _io(self, entry: dict[str, Any], x: np.ndarray) -> np.ndarray:
        return self._run(entry["net"], {entry["input"]: _mat(x)}, [entry["output"]])[0]

    # ---- vision ----------------------------------------------------------------------------------------

    def encode_image(self, pixel_values: np.ndarray, grid: tuple[int, int]) -> VisionResult:
        """One image's patches ``[N, patch_dim]`` (merge-block order) and patch grid -> every vision stage."""
        gh, gw = grid
        result = VisionResult([])
        try:
            patch = self._io(self.vision["patch_embed"], pixel_values)
            result.values.append(patch)
            table = self.vision["position_embedding"]
            ids, weights = position_taps(
                gh, gw, int(table["grid_side"]), self.merge, bool(table["align_corners"])
            )
            rows = self._run(
                table["net"], {table["input"]: _mat(ids.reshape(-1), np.int32)}, [table["output"]]
            )
            pos = (rows[0].reshape(4, gh * gw, -1) * weights[..., None]).sum(0, dtype=np.float32)
            rope = self.vision["rope"]
            angles = vision_rope_angles(gh, gw, int(rope["head_dim"]), float(rope["theta"]), self.merge)
            cos, sin = cos_sin(angles.numpy())
            enc = self.vision["encoder"]
            feeds = {
                enc["hidden"]: _mat(patch),
                enc["pos"]: _mat(pos),
                enc["cos"]: _mat(cos),
                enc["sin"]: _mat(sin),
            }
            taps = [d["tap"] for d in self.taps]
            got = self._run(enc["net"], feeds, [*self.stream, enc["output"], *taps])
            blocks, last, tapped = got[: len(self.stream)], got[len(self.stream)], got[len(self.stream) + 1 :]
            result.values.extend(blocks)
            if not np.array_equal(last, blocks[-1]):
                raise VerifyError(f"vision: {enc['output']!r} is not the last block's output")
            for d, value in zip(self.taps, tapped, strict=True):
                if not np.array_equal(value, blocks[1 + int(d["block"])]):
                    raise VerifyError(f"vision: tap {d['tap']!r} is not block {d['block']}'s output")
            width = int(self.vision["merged_width"])
            result.merger = self._io(self.vision["merger"], last.reshape(-1, width))
            result.values.append(result.merger)
            for d, value in zip(self.taps, tapped, strict=True):
                net = d["merger"]
                entry = self.doc["nets"][net]
                feature = self._run(
                    net, {entry["inputs"][0]: _mat(value.reshape(-1, width))}, entry["outputs"]
                )
                result.deepstack.append(feature[0])
                result.values.append(feature[0])
        except VerifyError as err:
            result.error = str(err)
            result.merger = None
        return result

    # ---- the prompt ------------------------------------------------------------------------------------

    def _net_io(self, name: str) -> tuple[str, str]:
        entry = self.doc["nets"][name]
        return entry["inputs"][0], entry["outputs"][0]

    def embed(self, ids: Sequence[int]) -> np.ndarray:
        """Rows for token ids: the embed net's, or the tied matrix's in lm_head's .bin (what a runtime
        reads) when it is block-quantized or the conversion has no embed net."""
        arr = np.asarray(list(ids), dtype=np.int32)
        if self.matrix is not None:
            return self.matrix.rows(arr)
        blob_in, blob_out = self._net_io("embed")
        return self._run("embed", {blob_in: _mat(arr, np.int32)}, [blob_out])[0].reshape(len(arr), -1)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        blob_in, blob_out = self._net_io("lm_head")
        return self._run("lm_head", {blob_in: _mat(hidden)}, [blob_out])[0].reshape(hidden.shape[0], -1)

    def segments(self, ids: Sequence[int], grids: Sequence[tuple[int, int]]) -> list[Segment]:
        """The prompt as text runs and images: each run of ``<|image_pad|>`` is the next image, which must
        have ``gh*gw/merge²`` rows."""
        out: list[Segment] = []
        image = 0
        k = 0
        while k < len(ids):
            if ids[k] != self.image_pad:
                if out and out[-1].grid is None:
                    out[-1] = Segment("text", out[-1].count + 1)
                else:
                    out.append(Segment("text", 1))
                k += 1
                continue
            if image >= len(grids):
                raise VerifyError(f"the prompt has more <|image_pad|> runs (id {self.image_pad}) than images")
            gh, gw = grids[image]
            count = (gh // self.merge) * (gw // self.merge)
            if ids[k : k + count] != [self.image_pad] * count:
                raise VerifyError(f"image {image} ({gh}x{gw} patches) needs {count} <|image_pad|> tokens")
            out.append(Segment("image", count, (1, gh, gw)))
            image += 1
            k += count
        if image != len(grids):
            raise VerifyError(f"the prompt has {image} <|image_pad|> runs but {len(grids)} images")
        return out

    def fuse(self, ids: Sequence[int], images: Sequence[VisionResult]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Fused embeddings ``[L, hidden]`` and each DeepStack input ``[L, hidden]`` (zeros off the image
        rows)."""
        ids = list(ids)
        is_image = np.asarray(ids) == self.image_pad
        embeds = self.embed(ids).copy()
        deepstack = [np.zeros_like(embeds) for _ in self.taps]
        if images:
            merged = [im.merger for im in images]
            if any(m is None for m in merged):
                raise VerifyError("not computed (an image's vision stages failed)")
            rows = np.concatenate([m for m in merged if m is not None], axis=0)
            if rows.shape[0] != int(is_image.sum()):
                raise VerifyError(
                    f"the prompt has {int(is_image.sum())} image tokens but the images give "
                    f"{rows.shape[0]} rows"
                )
            embeds[is_image] = rows
            for k, feature in enumerate(deepstack):
                feature[is_image] = np.concatenate([im.deepstack[k] for im in images], axis=0)
        return embeds, deepstack

    def prompt_rope(self, segments: Sequence[Segment]) -> tuple[np.ndarray, np.ndarray, int]:
        """cos/sin ``[L, head_dim]`` of the prompt in the decoder's layout, and the first decode position."""
        prompt = mrope.positions(segments, self.merge)  # the counter gsurg rope prints
        assert self.rope.layout is not None
        cos, sin = mrope_cos_sin(layout_table(self.rope.layout, self.rope, prompt))
        return cos, sin, prompt.next_position

    def _text_rope(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        angles = np.float32(position) * self.inv_freq.reshape(1, -1)
        full = np.concatenate([angles, angles], axis=1)
        return cos_sin(full)

    # ---- the decoder -----------------------------------------------------------------------------------

    def generate(
        self,
        embeds: np.ndarray,
        deepstack: Sequence[np.ndarray],
        segments: Sequence[Segment],
        max_new_tokens: int,
        forced: Sequence[int] | None = None,
    ) -> Generation:
        """Prefill the prompt, then one token per step through the KV cache; stops after an EOS id (kept)
        or ``max_new_tokens`` tokens, or at the first step ncnn fails (``Generation.error``). With
        ``forced`` (teacher forcing) each step is fed ``forced[i]`` instead of the argmax, for
        ``len(forced)`` steps; ``tokens`` still holds the argmax at every step."""
        dec = self.decoder_doc
        result = Generation()
        allocator = ncnn.UnlockedPoolAllocator()
        caches: dict[str, ncnn.Mat] = {}
        new: dict[str, ncnn.Mat] = {}
        try:
            cos, sin, position = self.prompt_rope(segments)
            length = embeds.shape[0]
            hidden, ds = embeds, list(deepstack)
            start = 0
            while True:
                t = hidden.shape[0]
                q = np.arange(start, start + t).reshape(-1, 1)
                k = np.arange(start + t).reshape(1, -1)
                mask = np.where(k <= q, np.float32(0), np.float32(dec["mask_value"])).astype(np.float32)
                feeds = {dec["hidden"]: hidden, dec["mask"]: mask, dec["cos"]: cos, dec["sin"]: sin}
                feeds.update(zip(dec["deepstack"], ds, strict=True))
                mats = {name: _mat(value) for name, value in feeds.items()}
                new = {}
                with self.nets["decoder"].create_extractor() as ex:
                    ex.set_kvcache_allocator(allocator)
                    for name, mat in mats.items():
                        if ex.input(name, mat) != 0:
                            raise VerifyError(f"decoder: no input blob {name!r} (model.json names it)")
                    for name in dec["cache_inputs"]:
                        if ex.input(name, caches.get(name, ncnn.Mat())) != 0:
                            raise VerifyError(f"decoder: no cache input {name!r}")
                    ret, out = ex.extract(dec["output"])
                    if ret != 0:
                        raise VerifyError(f"decoder: ncnn returned {ret} computing {dec['output']!r}")
                    out_rows = np.array(out, dtype=np.float32).reshape(t, -1)
                    for cin, cout in zip(dec["cache_inputs"], dec["cache_outputs"], strict=True):
                        got = ex.extract(cout, 1)  # type 1 keeps ncnn's opaque cache layout
                        if got[0] != 0:
                            raise VerifyError(f"decoder: ncnn returned {got[0]} computing {cout!r}")
                        new[cin] = got[1]
                        del got  # only the dicts hold cache Mats (cleared before the allocator)
                caches = new
                logits = self.logits(out_rows[-1:])[-1]
                if start == 0:
                    result.prefill_logits = logits
                else:
                    result.decode_logits.append(logits)
                token = int(np.argmax(logits))
                result.tokens.append(token)
                if forced is not None:
                    if len(result.tokens) >= len(forced):
                        break
                    token = int(forced[len(result.tokens) - 1])
                elif token in self.eos_ids or len(result.tokens) >= max_new_tokens:
                    break
                start += t
                hidden = self.embed([token])
                ds = [np.zeros((1, self.hidden), np.float32) for _ in dec["deepstack"]]
                cos, sin = self._text_rope(position + start - length)
        except VerifyError as err:
            result.error = str(err)
        finally:  # the cache Mats go before the allocator they came from
            new.clear()
            caches.clear()
            allocator.clear()
        return result

    def close(self) -> None:
        for net in self.nets.values():
            net.clear()
        self.nets.clear()

    def __enter__(self) -> Qwen3VLNcnn:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
