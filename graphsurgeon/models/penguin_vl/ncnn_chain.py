"""The converted Penguin-VL run in the ``ncnn`` wheel as a runtime runs it, with exact fp32 options: the six
nets ``model.json`` names, and everything a runtime computes between them from ``model.json``'s settings
alone (numpy, never the reference's code):

* the vision 2-D RoPE tables for a grid (``vision_rope_tables``: row angle on the first half of each row,
  column angle on the second, the same ``head_dim/2`` frequencies of the vision ``theta`` for both);
* the fused prompt embeddings: the ``embed`` net's rows for the token ids, with the rows of the ``<image>``
  tokens (the id ``model.json`` gives) overwritten, in order, by the projector's output;
* the decoder's cos/sin and causal mask, and its KV cache between steps (``graphsurgeon.verify.llm_chain``,
  which reads the decoder's RoPE settings from ``model.json``), and greedy decoding to an EOS id of
  ``model.json`` or a token budget.

``model.json`` is checked against its family's schema (``schemas/model_json/penguin_vl.v2.schema.json``,
through ``graphsurgeon.formats.model_json``) before anything is read from it: a file of another family, or
one with a missing or mistyped entry, is a ``VerifyError`` naming the key.

Each encoder layer's output is read from the ``vision_encoder`` graph itself: the residual stream is
followed from the hidden input through the ``BinaryOp`` adds that read it (two per pre-norm layer: after
attention, after the MLP), so the second add of layer ``i`` is that layer's output
(``common.ncnn_stages.residual_stream``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
from graphsurgeon.verify.rope import cos_sin, rope_inv_freq

VISION_NETS = ("vision_embed_patch", "vision_encoder", "vision_projector")
#: The model.json families this chain runs.
FAMILIES = ("penguin_vl",)


def vision_rope_tables(grid: tuple[int, int], theta: float, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin ``[grid_h*grid_w, head_dim]`` (float32) for patches in raster order (``p = r*grid_w + c``):
    ``[r*f_0 .. r*f_{D/2-1}, c*f_0 .. c*f_{D/2-1}]`` with ``f_i = theta^(-2i/D)``."""
    gh, gw = grid
    inv = rope_inv_freq(head_dim, theta).reshape(1, -1)
    rows = np.repeat(np.arange(gh, dtype=np.float32), gw).reshape(-1, 1)
    cols = np.tile(np.arange(gw, dtype=np.float32), gh).reshape(-1, 1)
    angles = np.concatenate([rows * inv, cols * inv], axis=1).astype(np.float32)
    return cos_sin(angles)


def encoder_layer_outputs(param: Path, hidden: str, layers: int) -> list[str]:
    """The blob holding each encoder layer's output: the second residual add of every layer."""
    graph = read_param_text(param)
    stream = residual_stream(graph, hidden)
    if len(stream) != 2 * layers:
        raise VerifyError(
            f"{param}: the residual stream from {hidden!r} has {len(stream)} adds, but {layers} pre-norm "
            f"layers have {2 * layers} (model.json vision.layers)"
        )
    return stream[1::2]


def vision_stage_names(layers: int) -> list[str]:
    """The vision stages of one image, in the order they are computed."""
    return ["patch embed", *(f"encoder layer {i}" for i in range(layers)), "encoder output", "projector"]


@dataclass
class VisionResult:
    """One image through the converted vision nets: each stage's value ``[N, width]`` in the order of
    ``vision_stage_names``, up to the first one ncnn could not compute (``error`` says why)."""

    values: list[np.ndarray]
    error: str = ""

    @property
    def projector(self) -> np.ndarray | None:
        return self.values[-1] if not self.error else None


def _extract_all(
    net: ncnn.Net, feeds: dict[str, np.ndarray], names: Sequence[str], what: str
) -> tuple[list[np.ndarray], str]:
    """Copies of ``names`` in order from one extractor, up to the first one ncnn fails to compute, and the
    error ("" when every blob was computed). An input the net does not have is a ``VerifyError``."""
    out: list[np.ndarray] = []
    with net.create_extractor() as ex:
        for name, arr in feeds.items():
            if ex.input(name, ncnn.Mat(np.ascontiguousarray(arr, dtype=np.float32)).clone()) != 0:
                raise VerifyError(f"{what}: no input blob {name!r} (model.json names it)")
        for name in names:
            ret, mat = ex.extract(name)
            if ret != 0:
                return out, f"{what}: ncnn returned {ret} computing blob {name!r}"
            out.append(np.array(mat, dtype=np.float32))
    return out, ""


class PenguinNcnn:
    """The six converted nets of a folder, loaded once with fp32 options."""

    def __init__(
        self, folder: Path, doc: dict[str, Any], *, num_threads: int = 1, precision: Precision = "fp32"
    ) -> None:
        self.folder = folder
        self.doc = check_model_json(doc, str(folder / "model.json"), FAMILIES, error=VerifyError)
        vision = doc["vision"]
        self.nets_doc = {name: doc["nets"][name] for name in VISION_NETS}
        self.layers = int(vision["layers"])
        self.rope_theta = float(vision["rope"]["theta"])
        self.rope_dim = int(vision["rope"]["head_dim"])
        self.hidden, self.cos, self.sin = vision["hidden"], vision["cos"], vision["sin"]
        self.output = vision["output"]
        self.image_id = int(doc["tokens"]["image"])
        eos = doc["tokens"]["eos"]
        self.eos_ids = {int(e) for e in (eos if isinstance(eos, list) else [eos])}
        encoder = folder / self.nets_doc["vision_encoder"]["param"]
        self.layer_blobs = encoder_layer_outputs(encoder, self.hidden, self.layers)
        self.nets: dict[str, ncnn.Net] = {}
        self.llm = LlmChain(folder, families=FAMILIES, num_threads=num_threads, precision=precision)
        try:
            for name, entry in self.nets_doc.items():
                param, model = folder / entry["param"], folder / entry["bin"]
                self.nets[name] = load_net(param, model, num_threads=num_threads, precision=precision)
        except BaseException:
            self.close()
            raise

    def encode_image(self, pixel_values: np.ndarray, grid: tuple[int, int]) -> VisionResult:
        """Patches ``[N, patch_dim]`` in raster order -> every vision stage, each net fed what the net
        before it computed."""
        cos, sin = vision_rope_tables(grid, self.rope_theta, self.rope_dim)
        patch_in, patch_out = self._io("vision_embed_patch")
        proj_in, proj_out = self._io("vision_projector")
        plan: list[tuple[str, Callable[[np.ndarray], dict[str, np.ndarray]], list[str]]] = [
            ("vision_embed_patch", lambda x: {patch_in: x}, [patch_out]),
            (
                "vision_encoder",
                lambda x: {self.hidden: x, self.cos: cos, self.sin: sin},
                [*self.layer_blobs, self.output],
            ),
            ("vision_projector", lambda x: {proj_in: x}, [proj_out]),
        ]
        result = VisionResult([])
        x = np.ascontiguousarray(pixel_values, dtype=np.float32)
        for name, feeds, blobs in plan:
            got, result.error = _extract_all(self.nets[name], feeds(x), blobs, name)
            result.values.extend(got)
            if result.error:
                break
            x = got[-1]
        return result

    def _io(self, name: str) -> tuple[str, str]:
        entry = self.nets_doc[name]
        return entry["inputs"][0], entry["outputs"][0]

    def fuse(self, input_ids: Sequence[int], features: Sequence[np.ndarray]) -> np.ndarray:
        """Text embeddings ``[L, C]`` from the ``embed`` net with the ``<image>`` rows overwritten, in order,
        by the image features."""
        ids = np.asarray(list(input_ids), dtype=np.int64)
        is_image = ids == self.image_id
        rows = sum(int(f.shape[0]) for f in features)
        if rows != int(is_image.sum()):
            raise VerifyError(
                f"the prompt has {int(is_image.sum())} image tokens (id {self.image_id}) but the images give "
                f"{rows} feature rows"
            )
        embeds = self.llm.embed(ids.tolist()).copy()
        if rows:
            embeds[is_image] = np.concatenate([f.reshape(f.shape[0], -1) for f in features], axis=0)
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

    def __enter__(self) -> PenguinNcnn:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
