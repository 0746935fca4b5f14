"""Run a converted decoder-only LLM (the ``model.json`` + ``embed``/``decoder``/``lm_head`` nets that
``rules/llm-kv-cache.yaml`` writes) in the ``ncnn`` wheel with exact fp32 options: token ids -> ``embed``
-> ``decoder`` with its KV cache -> ``lm_head`` -> logits, and greedy decoding, as a runtime would.

``model.json`` names the nets and their interface blobs, and the decoder's RoPE (theta, head_dim); the
decoder's blob roles are found from its graph (``kv_signature``). ``LlmChain`` reads it through
``formats.model_json``: a model.json of one of the families its caller names (the family that wrote it),
checked against that family's schema, so a missing or mistyped entry is an error naming the key."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from types import TracebackType
from typing import Any

import ncnn
import numpy as np

from graphsurgeon.formats.model_json import read_model_json as read_family_model_json
from graphsurgeon.input_files import read_json_input
from graphsurgeon.verify.embedding_matrix import runtime_embeddings
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.kv_session import KVDecoder, KVSession
from graphsurgeon.verify.ncnn_fp32 import Precision, load_net
from graphsurgeon.verify.rope import rope_inv_freq


def read_model_json(folder: Path) -> dict[str, Any]:
    """``folder/model.json`` as a JSON object with ``nets`` and ``decoder`` (a regular file of at most
    TEXT_LIMIT bytes); VerifyError, one line naming it, for anything else. Whatever its family:
    ``gsurg verify`` reads the verifier entry from it, and the verifier checks the family's schema."""
    path = folder / "model.json"
    doc = read_json_input(path, what="a model.json", error=VerifyError)
    if not isinstance(doc, dict):
        raise VerifyError(f"{path}: not a JSON object")
    for key in ("nets", "decoder"):
        if key not in doc:
            raise VerifyError(f"{path}: no {key!r} entry")
    return doc


class LlmChain:
    """The three nets of a converted LLM, loaded once; ``session()`` starts a sequence."""

    def __init__(
        self,
        folder: Path | str,
        *,
        families: Collection[str],
        num_threads: int = 1,
        precision: Precision = "fp32",
    ) -> None:
        self.folder = Path(folder)
        self.doc = read_family_model_json(self.folder, families, error=VerifyError)
        nets = self.doc["nets"]

        def files(name: str) -> tuple[Path, Path]:
            if name not in nets:
                raise VerifyError(f"{self.folder / 'model.json'}: no net {name!r}")
            return self.folder / nets[name]["param"], self.folder / nets[name]["bin"]

        rope = self.doc["decoder"]["rope"]
        self.matrix = runtime_embeddings(self.folder, self.doc)  # the runtime's rows, when it reads them
        self.embed_net: ncnn.Net | None = None
        if self.matrix is None:
            self.embed_net = load_net(*files("embed"), num_threads=num_threads, precision=precision)
        self.lm_head_net = load_net(*files("lm_head"), num_threads=num_threads, precision=precision)
        self.decoder = KVDecoder(
            *files("decoder"),
            num_threads=num_threads,
            inv_freq=rope_inv_freq(int(rope["head_dim"]), float(rope["theta"])),
            head_dim=int(rope["head_dim"]),
            output=self.doc["decoder"]["output"],
            precision=precision,
        )

    def _run(self, net: ncnn.Net, mat: ncnn.Mat, what: str) -> np.ndarray:
        name = self.doc["nets"][what]
        with net.create_extractor() as ex:
            if ex.input(name["inputs"][0], mat) != 0:
                raise VerifyError(f"{what}: no input blob {name['inputs'][0]!r}")
            ret, out = ex.extract(name["outputs"][0])
            if ret != 0:
                raise VerifyError(f"{what}: extract {name['outputs'][0]!r} returned {ret}")
            return np.array(out, dtype=np.float32)

    def embed(self, ids: list[int] | np.ndarray) -> np.ndarray:
        """Hidden rows ``[T, H]`` for token ids (int32 in a 1-D Mat, as ncnn's Embed reads them); from the
        tied matrix in lm_head's .bin instead when it is block-quantized or there is no embed net, as a
        runtime reads them."""
        arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int32).reshape(-1))
        if self.matrix is not None:
            return self.matrix.rows(arr)
        assert self.embed_net is not None
        return self._run(self.embed_net, ncnn.Mat(arr).clone(), "embed").reshape(len(arr), -1)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """Logits ``[T, V]`` for hidden rows ``[T, H]``."""
        rows = np.ascontiguousarray(np.asarray(hidden, dtype=np.float32).reshape(-1, hidden.shape[-1]))
        return self._run(self.lm_head_net, ncnn.Mat(rows).clone(), "lm_head").reshape(rows.shape[0], -1)

    def session(self) -> KVSession:
        return self.decoder.session()

    def greedy(self, prompt: list[int], new_tokens: int, eos: int | None = None) -> list[int]:
        """Greedy decoding: prefill the whole prompt, then one token per step through the cache; stops
        after ``new_tokens`` or at ``eos``."""
        out: list[int] = []
        with self.session() as session:
            step = session.prefill(self.embed(prompt))
            while len(out) < new_tokens:
                token = int(np.argmax(self.logits(step.hidden[-1:])[-1]))
                out.append(token)
                if token == eos:
                    break
                step = session.decode_step(self.embed([token]))
        return out

    def forced_logits(self, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
        """Teacher forcing: the logits ``[V]`` predicting each of ``tokens`` after ``prompt``, the model fed
        ``tokens`` themselves (not its own argmax): a prefill of the prompt, then one step per token but
        the last."""
        out: list[np.ndarray] = []
        with self.session() as session:
            step = session.prefill(self.embed(prompt))
            for k in range(len(tokens)):
                out.append(self.logits(step.hidden[-1:])[-1])
                if k + 1 < len(tokens):
                    step = session.decode_step(self.embed([tokens[k]]))
        return out

    def close(self) -> None:
        self.decoder.close()
        if self.embed_net is not None:
            self.embed_net.clear()
        self.lm_head_net.clear()

    def __enter__(self) -> LlmChain:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
