"""llama.cpp for the benchmarks that put gsurg beside it: GGUF files made by llama.cpp's own tools from an HF
checkpoint folder, what each file holds, and a model loaded through the llama-cpp-python bindings.

* ``llama_cpp_source``: the llama.cpp tree of the installed llama-cpp-python's sdist (``pip download`` once
  into a cache): the converter the installed bindings were built with.
* ``ensure_gguf``: ``convert_hf_to_gguf.py`` for the float types (and Q8_0 when the caller lets the converter
  make it), ``llama_model_quantize`` on the F16 file for the quantized ones. The converter's tokenizer check,
  which refuses a tokenizer whose pre-tokenizer hash it does not know, is answered with ``qwen2``.
* ``tensor_inventory``: the type, bytes and values of every tensor in a GGUF file (the ``gguf`` reader), since
  llama.cpp's quantizer falls back to other types for tensors whose rows do not fit a type's block.
* ``LlamaModel``: a model and context through llama.cpp's C API; ``logits`` runs tokens at the next
  positions and returns the last one's logits, ``reset`` empties the KV cache for a new sequence.

Used by ``bench_beside_llamacpp.py`` (speed) and ``accuracy_beside_llamacpp.py`` (accuracy); both run the
bindings in child processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The quantized types ``ensure_gguf`` makes with ``llama_model_quantize``, by the name of llama.cpp's ftype.
QUANTIZER_FTYPES = {
    "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
    "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
}


def default_cache() -> Path:
    """Where downloads are kept: ``$GSURG_CACHE/downloads`` (default ``~/.cache/gsurg/downloads``)."""
    return Path(os.environ.get("GSURG_CACHE", Path.home() / ".cache" / "gsurg")) / "downloads"


def llama_cpp_source(cache: Path) -> Path:
    """The llama.cpp tree of the installed llama-cpp-python's sdist (downloaded once into ``cache``)."""
    from importlib.metadata import version

    ver = version("llama_cpp_python")
    tree = cache / f"llama_cpp_python-{ver}" / "vendor" / "llama.cpp"
    if not (tree / "convert_hf_to_gguf.py").exists():
        cache.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"llama-cpp-python=={ver}",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(cache),
        ]
        subprocess.run(argv, check=True)
        with tarfile.open(cache / f"llama_cpp_python-{ver}.tar.gz") as tar:
            tar.extractall(cache, filter="data")
    return tree


CONVERT_CHILD = """
import sys
sys.path[:0] = [{tree!r}, {gguf_py!r}]
sys.argv = ["convert_hf_to_gguf.py", *{argv!r}]
import conversion.base as base
import convert_hf_to_gguf as c
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
c.main()
"""


def ensure_gguf(
    hf: Path,
    work: Path,
    kind: str,
    tree: Path,
    name: str = "penguin",
    converter_kinds: tuple[str, ...] = ("F16", "Q8_0"),
    quiet: bool = False,
) -> Path:
    """``work/{name}-llm-{kind}.gguf`` of the HF folder ``hf``, made when missing: by the converter for the
    kinds in ``converter_kinds``, else by ``llama_model_quantize`` on the F16 file with llama.cpp's defaults
    (``QUANTIZER_FTYPES``). ``quiet`` keeps the tools' logs off the terminal (shown when they fail)."""
    out = work / f"{name}-llm-{kind}.gguf"
    if out.exists():
        return out
    partial = out.with_suffix(".partial")
    if kind in converter_kinds:
        argv = [str(hf), "--outfile", str(partial), "--outtype", kind.lower()]
        code = CONVERT_CHILD.format(tree=str(tree), gguf_py=str(tree / "gguf-py"), argv=argv)
        done = subprocess.run([sys.executable, "-c", code], capture_output=quiet, text=True)
        if done.returncode != 0:
            raise SystemExit(f"convert_hf_to_gguf.py failed writing {partial}:\n{done.stderr or ''}")
    else:
        if kind not in QUANTIZER_FTYPES:
            raise SystemExit(f"no way to make a {kind} GGUF (known: {', '.join(QUANTIZER_FTYPES)})")
        source = ensure_gguf(hf, work, "F16", tree, name, converter_kinds, quiet)
        code = (
            "import llama_cpp as L, sys\n"
            "p = L.llama_model_quantize_default_params()\n"
            f"p.ftype = L.{QUANTIZER_FTYPES[kind]}\n"
            f"p.nthread = {os.cpu_count() or 1}\n"
            f"sys.exit(L.llama_model_quantize({str(source).encode()!r}, {str(partial).encode()!r}, p))\n"
        )
        # a child: the quantizer logs every tensor through llama.cpp's logger, which only a process's
        # stderr can hold back
        done = subprocess.run([sys.executable, "-c", code], capture_output=quiet, text=True)
        if done.returncode != 0:
            raise SystemExit(f"llama_model_quantize failed writing {partial}:\n{done.stderr or ''}")
    partial.replace(out)
    return out


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: str  # GGML type name: F32, F16, Q8_0, Q4_0, Q5_0, Q4_K, ...
    shape: tuple[int, ...]  # GGUF order: row length first
    values: int
    nbytes: int


def tensor_inventory(path: Path) -> list[TensorInfo]:
    """Every tensor of a GGUF file, as its header describes it."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    return [
        TensorInfo(
            t.name,
            t.tensor_type.name,
            tuple(int(d) for d in t.shape),
            int(t.n_elements),
            int(t.n_bytes),
        )
        for t in reader.tensors
    ]


class LlamaModel:
    """A GGUF model and one context through llama.cpp's C API (llama-cpp-python's low-level bindings), on
    CPU with ``threads`` threads. Tokens go in as ids: llama.cpp's tokenizer and its BOS are not involved."""

    def __init__(self, gguf: Path, *, n_ctx: int = 512, threads: int = 1) -> None:
        import llama_cpp as L

        self._L = L
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(str(gguf).encode(), L.llama_model_default_params())
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {gguf}")
        cparams = L.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = n_ctx
        cparams.n_threads = cparams.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise SystemExit(f"llama.cpp could not make a context for {gguf}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = int(L.llama_vocab_n_tokens(self.vocab))

    def logits(self, tokens: list[int]) -> np.ndarray:
        """Decode ``tokens`` at the sequence's next positions; a copy of the last one's logits ``[V]``."""
        L = self._L
        arr = (L.llama_token * len(tokens))(*tokens)
        if L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(tokens))) != 0:
            raise SystemExit("llama_decode failed")
        return np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,)).copy()

    def reset(self) -> None:
        """Empty the KV cache: the next ``logits`` starts a sequence at position 0."""
        self._L.llama_memory_clear(self._L.llama_get_memory(self.ctx), True)

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        """llama.cpp's own tokenization of ``text`` (special tokens in it not parsed)."""
        L = self._L
        raw = text.encode()
        buf = (L.llama_token * (len(raw) + 8))()
        n = L.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), add_special, False)
        if n < 0:
            raise SystemExit(f"llama_tokenize needs {-n} tokens for {text!r}")
        return [int(buf[i]) for i in range(n)]

    def add_bos(self) -> bool:
        """Whether llama.cpp would put a BOS in front when asked to add special tokens (the GGUF's flag)."""
        return bool(self._L.llama_vocab_get_add_bos(self.vocab))

    def close(self) -> None:
        self._L.llama_free(self.ctx)
        self._L.llama_model_free(self.model)

    def __enter__(self) -> LlamaModel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
