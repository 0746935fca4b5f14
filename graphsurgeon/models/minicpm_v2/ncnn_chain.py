"""The converted MiniCPM-V-2 run in the ``ncnn`` wheel as a runtime runs it, with exact fp32 options: the nets
``model.json`` names, and everything a runtime computes between them from ``model.json``'s settings alone
(numpy and torch's interpolation, never the reference's code):

* per image (the overview and each slice, one at a time): the patch rows of its ``[3, H, W]`` pixels
  (``vision.patch_order``); the learned position table (all its rows, through the ``pos_embed`` net)
  resampled to the image's patch grid as ``vision.position_embedding`` says (torch's bicubic
  interpolation, antialiased or not; unchanged at the table's own grid); the ``vision`` net, whose every
  block output is read from its residual stream; the resampler keys' 2-D sin-cos rows
  (``resampler.key_pos_embedding``, float32 as ``sincos_rows`` computes them) and the query ids ``0..Q-1``;
  the ``resampler`` net;
* the slices ordered by ``image_processor.slice_order`` (the official order is row-major);
* per prompt: the ``embed`` net's rows (the net scales them by ``scale_emb``) with the rows strictly between
  each ``tokens.image_start`` and the next ``tokens.image_end`` overwritten, in order, by the images'
  resampler rows; the decoder's cos/sin, mask and KV cache (``graphsurgeon.verify.llm_chain``); greedy
  decoding to an EOS id of ``tokens.eos`` or a token budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import ncnn
import numpy as np

from graphsurgeon.formats.model_json import check_model_json
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.models.common.llm_greedy import Generation, greedy
from graphsurgeon.models.common.ncnn_stages import residual_stream
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.llm_chain import LlmChain
from graphsurgeon.verify.ncnn_fp32 import Precision, load_net

from .processor import patch_rows

#: The model.json families this chain runs.
FAMILIES = ("minicpm_v2",)
VISION_NETS = ("vision", "pos_embed", "resampler")


def sincos_rows(dim: int, grid: tuple[int, int], base: float = 10000.0) -> np.ndarray:
    """The keys' 2-D sin-cos rows ``[h*w, dim]`` for a ``(rows, cols)`` patch grid, patches row-major:
    channels ``[0, dim/4)`` sin and ``[dim/4, dim/2)`` cos of ``column * w_i``, then the same of
    ``row * w_i``, with ``w_i = 1 / base^(i / (dim/4))``, in float32."""
    h, w = grid
    quarter = dim // 4
    omega = np.arange(quarter, dtype=np.float32) / np.float32(quarter)
    omega = np.float32(1.0) / np.float32(base) ** omega
    cols = np.tile(np.arange(w, dtype=np.float32), h)
    rows = np.repeat(np.arange(h, dtype=np.float32), w)
    parts = []
    for pos in (cols, rows):
        angles = np.outer(pos, omega).astype(np.float32)
        parts += [np.sin(angles), np.cos(angles)]
    return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)


def resample_table(table: np.ndarray, side: int, grid: tuple[int, int], antialias: bool) -> np.ndarray:
    """The ``side*side x C`` table (rows row-major) at a ``(rows, cols)`` grid: bicubic, corners not
    aligned, antialiased when asked; the table itself when the grid is its own."""
    import torch
    import torch.nn.functional as F

    h, w = grid
    if (h, w) == (side, side):
        return table
    square = torch.from_numpy(np.ascontiguousarray(table)).reshape(1, side, side, -1).permute(0, 3, 1, 2)
    out = F.interpolate(square, size=(h, w), mode="bicubic", antialias=antialias, align_corners=False)
    return out.permute(0, 2, 3, 1).reshape(h * w, -1).numpy().astype(np.float32)


def vision_stage_names(layers: int) -> list[str]:
    """The stages of one image, in the order they are computed."""
    return ["patch embed + position", *(f"vit block {i}" for i in range(layers)), "vit output", "resampler"]


@dataclass
class ImageResult:
    """One image through the vision nets: each stage in ``vision_stage_names`` order, up to the first one
    ncnn could not compute (``error``)."""

    values: list[np.ndarray]
    error: str = ""

    @property
    def features(self) -> np.ndarray | None:
        return self.values[-1] if not self.error else None


def _run(
    net: ncnn.Net, feeds: dict[str, np.ndarray], names: Sequence[str], what: str
) -> tuple[list[np.ndarray], str]:
    out: list[np.ndarray] = []
    with net.create_extractor() as ex:
        for name, arr in feeds.items():
            mat = (
                ncnn.Mat(arr).clone()
                if arr.dtype == np.int32
                else ncnn.Mat(np.ascontiguousarray(arr, np.float32)).clone()
            )
            if ex.input(name, mat) != 0:
                raise VerifyError(f"{what}: no input blob {name!r} (model.json names it)")
        for name in names:
            ret, mat = ex.extract(name)
            if ret != 0:
                return out, f"{what}: ncnn returned {ret} computing blob {name!r}"
            out.append(np.array(mat, dtype=np.float32))
    return out, ""


class MiniCPMV2Ncnn:
    """The converted nets of a folder, loaded once with fp32 options."""

    def __init__(
        self, folder: Path, doc: dict[str, Any], *, num_threads: int = 1, precision: Precision = "fp32"
    ) -> None:
        self.doc = check_model_json(doc, str(folder / "model.json"), FAMILIES, error=VerifyError)
        vision, res = doc["vision"], doc["resampler"]
        self.encoder = vision["encoder"]
        self.table = vision["position_embedding"]
        self.resampler = res
        self.patch = int(vision["patch_size"])
        self.layers = int(vision["layers"])
        self.slice_order = doc["image_processor"]["slice_order"]
        tokens = doc["tokens"]
        self.image_start, self.image_end = int(tokens["image_start"]), int(tokens["image_end"])
        self.eos_ids = {int(e) for e in tokens["eos"]}
        self.nets: dict[str, ncnn.Net] = {}
        graph = read_param_text(folder / doc["nets"]["vision"]["param"])
        self.stage_blobs = self._stage_blobs(graph)
        self.llm = LlmChain(folder, families=FAMILIES, num_threads=num_threads, precision=precision)
        try:
            for name in VISION_NETS:
                entry = doc["nets"][name]
                self.nets[name] = load_net(
                    folder / entry["param"],
                    folder / entry["bin"],
                    num_threads=num_threads,
                    precision=precision,
                )
            self.table_rows = self._table()
        except BaseException:
            self.close()
            raise

    def _stage_blobs(self, graph: Any) -> list[str]:
        """The position add's output (block 0's input), then each block's output (the second residual add
        of each pre-norm block)."""
        pos = self.encoder["pos"]
        adds = [x for x in graph.blob(pos).consumers if x.type == "BinaryOp"] if pos in graph.blobs else []
        if len(adds) != 1:
            raise VerifyError(f"vision net: {len(adds)} adds read the position input {pos!r}, not 1")
        start = adds[0].outputs[0].name
        stream = residual_stream(graph, start)
        if len(stream) != 2 * self.layers:
            raise VerifyError(
                f"vision net: the residual stream has {len(stream)} adds, but {self.layers} blocks have "
                f"{2 * self.layers} (model.json vision.layers)"
            )
        return [start, *stream[1::2]]

    def _table(self) -> np.ndarray:
        rows = int(self.table["shape"][0])
        ids = np.arange(rows, dtype=np.int32)
        got, error = _run(
            self.nets["pos_embed"], {self.table["input"]: ids}, [self.table["output"]], "pos_embed"
        )
        if error:
            raise VerifyError(error)
        return got[0].reshape(rows, -1)

    def encode_image(self, pixels: np.ndarray) -> ImageResult:
        """One ``[3, H, W]`` image -> every vision stage, each net fed what the one before computed."""
        grid = (pixels.shape[1] // self.patch, pixels.shape[2] // self.patch)
        pos = resample_table(
            self.table_rows, int(self.table["grid_side"]), grid, bool(self.table["antialias"])
        )
        feeds = {self.encoder["rows"]: patch_rows(pixels, self.patch), self.encoder["pos"]: pos}
        result = ImageResult([])
        got, result.error = _run(
            self.nets["vision"], feeds, [*self.stage_blobs, self.encoder["output"]], "vision"
        )
        result.values.extend(got)
        if result.error:
            return result
        res = self.resampler
        keys = sincos_rows(
            int(res["key_pos_embedding"]["dim"]), grid, float(res["key_pos_embedding"]["base"])
        )
        ids = np.arange(int(res["query_num"]), dtype=np.int32)
        feeds = {res["features"]: got[-1], res["key_pos"]: keys, res["query_ids"]: ids}
        out, result.error = _run(self.nets["resampler"], feeds, [res["output"]], "resampler")
        result.values.extend(out)
        return result

    def ordered(self, images: Sequence[np.ndarray], grid: tuple[int, int] | None) -> list[np.ndarray]:
        """The overview then the slices, as ``image_processor.slice_order`` says (the processor gives them
        row-major; ``grid`` is ``(columns, rows)``)."""
        if grid is None or self.slice_order == "row-major":
            return list(images)
        cols, rows = grid
        slices = images[1:]
        return [images[0], *(slices[r * cols + c] for c in range(cols) for r in range(rows))]

    def fuse(self, input_ids: Sequence[int], features: Sequence[np.ndarray]) -> np.ndarray:
        """The ``embed`` net's rows, each image span's rows overwritten in order by the features."""
        ids = [int(t) for t in input_ids]
        starts = [i + 1 for i, t in enumerate(ids) if t == self.image_start]
        ends = [i for i, t in enumerate(ids) if t == self.image_end]
        if len(starts) != len(ends) or len(starts) != len(features):
            raise VerifyError(
                f"the prompt has {len(starts)} <image> and {len(ends)} </image> tokens for {len(features)} "
                "images"
            )
        embeds = self.llm.embed(ids).copy()
        for begin, end, feat in zip(starts, ends, features, strict=True):
            if end - begin != feat.shape[0]:
                raise VerifyError(f"an image span of {end - begin} tokens for {feat.shape[0]} feature rows")
            embeds[begin:end] = feat
        return embeds

    def generate(
        self, embeds: np.ndarray, max_new_tokens: int, forced: Sequence[int] | None = None
    ) -> Generation:
        """Greedy decoding from ``embeds`` to an EOS id of ``model.json`` (``common.llm_greedy``)."""
        return greedy(self.llm, embeds, max_new_tokens, self.eos_ids, forced)

    def close(self) -> None:
        self.llm.close()
        for net in self.nets.values():
            net.clear()
        self.nets.clear()

    def __enter__(self) -> MiniCPMV2Ncnn:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
