#!/usr/bin/env python3
"""What each weight storage costs in answers on the trained Qwen3 fixture (graphsurgeon/models/qwen3_llm/
trained), for gsurg's conversions, llama.cpp's GGUF quantizations and ncnn's own LLM quantizer
(``ncnnllm2int``), all on the same trained weights and the same 500 held-out questions
(``text_tasks.eval_items()``): issue 38 item 3.

    python benchmarks/accuracy_beside_llamacpp.py [--work DIR] [--ncnn-git DIR | --ncnnllm2int PATH
        --ncnnllm2table PATH] [--rows ROW,...] [--limit N] [--json FILE] [--markdown FILE]

Rows:

* ``gsurg-{fp32,bf16,fp16,int8,int6,int4}``: ``gsurg apply qwen3_llm --trained --set storage=S`` with the
  rule file's defaults (int8: block 128 minmax; int6 and int4: block 64 clip), run in the ncnn wheel by the
  family's evaluator (``graphsurgeon.evaluation``, as ``gsurg eval`` runs it), fp32 arithmetic;
* ``llama-{F16,Q8_0,Q4_0,Q4_K_M}``: the checkpoint folder written as GGUF F16 by llama.cpp's own
  ``convert_hf_to_gguf.py``, then ``llama_model_quantize`` (llama.cpp's defaults) on that file for the other
  three (``llamacpp_gguf.py``), run through llama-cpp-python in a child process, one thread;
* ``ncnnllm2int-{minmax,mseclip,awq,gptq}``: ncnn's ``tools/quantize/ncnnllm2int`` (4 bits, block 64 by
  default) on gsurg's fp32 conversion's ``decoder`` and ``lm_head`` nets (every Gemm it supports; the embed
  net stays the fp32 one, as in gsurg's int storages). ``awq`` and ``gptq`` take a table from
  ``ncnnllm2table``, which runs the net on calibration inputs: ``.npy`` files of one fixed shape per input.
  They are windows of training-split text (``text_tasks.train_items``: question, " answer", EOS, as
  ``train.py`` trained it; never an evaluation question) packed back to back, each sequence with its own
  positions and a block-diagonal causal mask, through a copy of the decoder's .param without the KV cache
  (the tool cannot feed an empty cache); the lm_head's inputs are the fp32 decoder's outputs on the same
  windows. The tool (ncnn's git HEAD) writes each quantized Gemm's codes with an int8 tag that ncnn
  1.0.20261020, the wheel and runtime here, does not read (it reads them raw): gsurg's walk refuses the
  files as written, and the script evaluates them with those 4 bytes per Gemm removed, nothing else
  changed (the notes say so, with the walk's message).

Every row answers every question greedily (at most ``--tokens`` tokens, up to EOS): **task accuracy**. The
reference is gsurg's fp32 conversion answering greedily; every row is fed the reference's answer tokens
(teacher forcing, from the question's ids on) and compared step by step: **agreement** (its argmax is the
reference's token) and **mean KL** ``KL(reference || row)`` of the next-token distributions
(``verify.criteria.kl_divergence``), the protocol of ``graphsurgeon/evaluation/run.py``. The same again
against llama.cpp's F16 file answering greedily. A question's prompt is the ids the checkpoint's
``tokenizer.json`` gives (no chat template, no BOS: what the model was trained on), fed as ids to every
runtime; the script also tokenizes every question with llama.cpp's own tokenizer and reports whether the ids
agree, and what BOS llama.cpp would add.

**bits/weight** is the bytes of the weight files a runtime loads (gsurg, ncnnllm2int: every net's .bin;
llama.cpp: the GGUF's tensor data) × 8 over the checkpoint's parameter count (the tied embedding once).
llama.cpp's quantizer falls back to other types for tensors whose rows do not fit a type's block (Q4_K
needs rows of 256 values; this model's are 128 and 384), so the table says what each file holds.

Needs the ``bench`` extra (llama-cpp-python, gguf), the export toolchain, and for the ncnnllm2int rows a
Tencent/ncnn git repository (``--ncnn-git``, built by ``ncnnllm2int_build.sh``), else those rows are left
out with the reason. About 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for extra in (REPO, REPO / "benchmarks"):
    if str(extra) not in sys.path:  # run as a script: this checkout and the sibling benchmarks
        sys.path.insert(0, str(extra))

from graphsurgeon.evaluation.answers import Answer, is_correct  # noqa: E402
from graphsurgeon.verify.criteria import kl_divergence  # noqa: E402

TRAINED = REPO / "graphsurgeon" / "models" / "qwen3_llm" / "trained"
BUILD_SCRIPT = REPO / "benchmarks" / "ncnnllm2int_build.sh"
GSURG_STORAGES = ("fp32", "bf16", "fp16", "int8", "int6", "int4")
GGUF_TYPES = ("F16", "Q8_0", "Q4_0", "Q4_K_M")
NCNN_METHODS = ("minmax", "mseclip", "awq", "gptq")
ALL_ROWS = (
    tuple(f"gsurg-{s}" for s in GSURG_STORAGES)
    + tuple(f"llama-{t}" for t in GGUF_TYPES)
    + tuple(f"ncnnllm2int-{m}" for m in NCNN_METHODS)
)
REF, REF_LLAMA = "gsurg-fp32", "llama-F16"
NETS = ("decoder", "lm_head")  # the nets ncnnllm2int quantizes (the embed net has no Gemm)


def log(message: str) -> None:
    print(f"[accuracy_beside_llamacpp] {message}", file=sys.stderr, flush=True)


# --- what a row answered, and its figures ----------------------------------------------------------------


@dataclass
class Outputs:
    """One row over the items: its greedy answers, and for each reference the logits it gave when fed that
    reference's answer tokens (``forced[ref][i]``: one ``[V]`` row per step of item ``i``)."""

    answers: list[Answer]
    forced: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)


@dataclass
class Score:
    correct: int
    items: int
    by_kind: dict[str, tuple[int, int]]
    steps: int = 0
    agreeing: int = 0
    kl_sum: float = 0.0
    same_answers: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.items if self.items else 0.0

    @property
    def agreement(self) -> float | None:
        return self.agreeing / self.steps if self.steps else None

    @property
    def mean_kl(self) -> float | None:
        return self.kl_sum / self.steps if self.steps else None


def accuracy(items: Sequence[Any], answers: Sequence[Answer]) -> Score:
    """Task accuracy of ``answers`` on ``items``, overall and by kind (``is_correct``)."""
    by_kind: dict[str, tuple[int, int]] = {}
    correct = 0
    for item, answer in zip(items, answers, strict=True):
        hit = is_correct(answer, item)
        correct += hit
        done, total = by_kind.get(item.kind, (0, 0))
        by_kind[item.kind] = (done + hit, total + 1)
    return Score(correct, len(items), by_kind)


def against(
    score: Score,
    reference: Sequence[Answer],
    answers: Sequence[Answer],
    forced: Sequence[Sequence[np.ndarray]],
) -> Score:
    """``score`` with agreement and KL against ``reference``: at every step of every item, whether the row's
    argmax fed the reference's tokens is the reference's token, and ``KL(reference || row)``; as
    ``evaluation.run._score`` counts them (a row that stopped early is compared over the steps it made)."""
    out = dataclasses.replace(score, steps=0, agreeing=0, kl_sum=0.0, same_answers=0)
    for want, mine, logits in zip(reference, answers, forced, strict=True):
        out.same_answers += mine.text.strip() == want.text.strip()
        for token, theirs, ours in zip(want.tokens, want.logits, logits, strict=False):
            out.steps += 1
            out.agreeing += int(np.argmax(ours)) == token
            out.kl_sum += kl_divergence(theirs, ours)
    return out


# --- gsurg's conversions ---------------------------------------------------------------------------------


def gsurg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphsurgeon.cli", *args], cwd=REPO, capture_output=True, text=True
    )


def ensure_conversion(storage: str, work: Path) -> Path:
    folder = work / f"gsurg-{storage}"
    if not (folder / "model.json").exists():
        log(f"gsurg apply qwen3_llm --trained --set storage={storage}")
        done = gsurg(
            "apply", "qwen3_llm", "--trained", "--set", f"storage={storage}", "--out", str(folder), "-q"
        )
        if done.returncode != 0:
            raise SystemExit(f"gsurg apply storage={storage} failed:\n{done.stderr}")
    return folder


def run_ncnn(
    folder: Path,
    items: Sequence[Any],
    max_tokens: int,
    refs: dict[str, list[Answer]],
    threads: int,
    known: Sequence[Answer] | None = None,
) -> Outputs:
    """A conversion folder through its family's evaluator (the ncnn wheel at fp32): greedy answers (or
    ``known``, the ones it gave already), then fed each reference's answer tokens."""
    from graphsurgeon.evaluation.run import open_answerer

    answerer = open_answerer(folder, "fp32", threads)
    try:
        answers = list(known) if known is not None else [answerer.answer(item, max_tokens) for item in items]
        forced = {
            name: [
                answerer.answer(item, max_tokens, forced=want.tokens).logits
                for item, want in zip(items, ref, strict=True)
            ]
            for name, ref in refs.items()
        }
    finally:
        answerer.close()
    return Outputs(answers, forced)


def conversion_bytes(folder: Path) -> int:
    """The bytes of every net's .bin a conversion's model.json lists."""
    doc = json.loads((folder / "model.json").read_text())
    return sum((folder / net["bin"]).stat().st_size for net in doc["nets"].values() if net.get("bin"))


def conversion_holds(folder: Path) -> str:
    """How a conversion stores its matrices (Gemm and Embed weights), from gsurg's walk of its .bin files."""
    from graphsurgeon.formats.model_bin import walk_bin
    from graphsurgeon.formats.param_any import read_param

    doc = json.loads((folder / "model.json").read_text())
    kinds: Counter[str] = Counter()
    for entry in doc["nets"].values():
        graph = read_param(folder / entry["param"])
        layers = {layer.name: layer for layer in graph.layers}
        for rec in walk_bin(graph, folder / entry["bin"]):
            if (rec.layer_type, rec.slot) not in (("Gemm", "B"), ("Embed", "weight")):
                continue
            label = rec.storage_name
            if label.startswith("int"):
                block = 32 << int(layers[rec.layer].get("quantize_term")) % 10
                label += f"/{block}"
            kinds[f"{label} {'embed' if rec.layer_type == 'Embed' else 'gemm'}"] += 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))


# --- llama.cpp -------------------------------------------------------------------------------------------


def llama_child(job_path: Path, out_path: Path) -> int:
    """Run one GGUF over a job's prompts: greedy answers, then the logits fed each reference's tokens, and
    llama.cpp's own tokenization of each question; all into an .npz (one process per file: a crash of the
    bindings costs the row, not the run)."""
    from llamacpp_gguf import LlamaModel

    job = json.loads(job_path.read_text())
    eos = set(job["eos"])
    max_tokens = int(job["max_tokens"])
    arrays: dict[str, np.ndarray] = {}
    with LlamaModel(Path(job["gguf"]), n_ctx=256, threads=int(job["threads"])) as model:

        def run(prompt: list[int], forced: list[int] | None) -> tuple[list[int], list[np.ndarray]]:
            """``graphsurgeon.models.common.llm_greedy.greedy``'s loop: prefill, then one token per step."""
            model.reset()
            logits = model.logits(prompt)
            tokens: list[int] = []
            rows = [logits]
            limit = max_tokens if forced is None else len(forced)
            while len(tokens) < limit:
                token = int(np.argmax(logits))
                tokens.append(token)
                fed = token if forced is None else int(forced[len(tokens) - 1])
                if len(tokens) == limit or (forced is None and token in eos):
                    break
                logits = model.logits([fed])
                rows.append(logits)
            return tokens, rows

        greedy = [run(p, None) for p in job["prompts"]]
        arrays["greedy_tokens"] = np.array([t for ts, _ in greedy for t in ts], np.int32)
        arrays["greedy_counts"] = np.array([len(ts) for ts, _ in greedy], np.int32)
        arrays["greedy_logits"] = np.stack([r for _, rows in greedy for r in rows]).astype(np.float32)
        for k, refs in enumerate(job["forced"]):
            rows = [r for p, want in zip(job["prompts"], refs, strict=True) for r in run(p, want)[1]]
            arrays[f"forced{k}_logits"] = np.stack(rows).astype(np.float32)
        own = [model.tokenize(q) for q in job["questions"]]
        arrays["llama_ids"] = np.array([t for ids in own for t in ids], np.int32)
        arrays["llama_counts"] = np.array([len(ids) for ids in own], np.int32)
        arrays["add_bos"] = np.array(model.add_bos())
        arrays["n_vocab"] = np.array(model.n_vocab)
    np.savez(out_path, **arrays)  # type: ignore[arg-type]
    return 0


@dataclass
class LlamaRun:
    outputs: Outputs
    own_ids: list[list[int]]  # llama.cpp's tokenization of each question
    add_bos: bool


def split(flat: np.ndarray, counts: Sequence[int]) -> list[np.ndarray]:
    edges = np.cumsum([0, *counts])
    return [flat[a:b] for a, b in itertools.pairwise(edges)]


def run_llama(
    gguf: Path,
    prompts: list[list[int]],
    items: Sequence[Any],
    decode: Callable[[list[int]], str],
    max_tokens: int,
    eos: list[int],
    refs: dict[str, list[Answer]],
    threads: int,
    work: Path,
) -> LlamaRun:
    job = work / f"{gguf.stem}.job.json"
    out = work / f"{gguf.stem}.outputs.npz"
    names = list(refs)
    doc = {
        "gguf": str(gguf),
        "prompts": prompts,
        "questions": [i.question for i in items],
        "max_tokens": max_tokens,
        "eos": eos,
        "threads": threads,
        "forced": [[a.tokens for a in refs[n]] for n in names],
    }
    job.write_text(json.dumps(doc))
    done = subprocess.run(
        [sys.executable, __file__, "--llama-child", str(job), str(out)], capture_output=True, text=True
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"llama.cpp child for {gguf.name} failed (exit {done.returncode}):\n{tail}")
    data = np.load(out)
    answers = []
    logits = split(data["greedy_logits"], [int(c) for c in data["greedy_counts"]])
    for tokens, rows in zip(split(data["greedy_tokens"], data["greedy_counts"]), logits, strict=True):
        toks = [int(t) for t in tokens]
        stop = next((k for k, t in enumerate(toks) if t in eos), len(toks))
        answers.append(Answer(decode(toks[:stop]), toks, list(rows)))
    forced = {}
    for k, name in enumerate(names):
        steps = split(data[f"forced{k}_logits"], [len(a.tokens) for a in refs[name]])
        forced[name] = [list(r) for r in steps]
    own = [[int(t) for t in ids] for ids in split(data["llama_ids"], data["llama_counts"])]
    return LlamaRun(Outputs(answers, forced), own, bool(data["add_bos"]))


def gguf_holds(inventory: Sequence[Any]) -> str:
    """The types of a GGUF's matrices (2-D tensors), most values first; its 1-D tensors (norms) apart."""
    values: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for t in inventory:
        if len([d for d in t.shape if d > 1]) >= 2:
            values[t.type] += t.values
            count[t.type] += 1
    flat = sorted({t.type for t in inventory if len([d for d in t.shape if d > 1]) < 2})
    parts = [f"{count[k]} {k}" for k, _ in values.most_common()]
    return ", ".join(parts) + (f" (norms {'/'.join(flat)})" if flat else "")


# --- ncnnllm2int ---------------------------------------------------------------------------------------


def build_tools(args: argparse.Namespace) -> tuple[Path | None, Path | None, str]:
    """ncnnllm2int and ncnnllm2table: given, or built from ``--ncnn-git``; else None and why not."""
    if args.ncnnllm2int:
        return args.ncnnllm2int, args.ncnnllm2table, f"given: {args.ncnnllm2int}"
    if not args.ncnn_git:
        return None, None, "not built: give --ncnn-git DIR (a Tencent/ncnn repository) or --ncnnllm2int PATH"
    paths = []
    for tool in ("ncnnllm2int", "ncnnllm2table"):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [str(BUILD_SCRIPT), "--ncnn-git", str(args.ncnn_git), "--tool", tool],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            return None, None, f"{tool} did not build (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        paths.append(Path(proc.stdout.strip().splitlines()[-1]))
        log(f"{tool}: {paths[-1]} ({time.perf_counter() - t0:.0f} s)")
    commit = subprocess.run(
        ["git", "-C", str(args.ncnn_git), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return paths[0], paths[1], f"built from Tencent/ncnn {commit[:12]} against ncnn 1.0.20261020"


def without_kv_cache(param: Path, out: Path) -> None:
    """A copy of the decoder's graph whose SDPA layers take no past cache and return none (``kv_cache`` 0,
    the cache Input gone): the same weights in the same order, so the same .bin loads with it."""
    from graphsurgeon.formats.emit_text import write_param_text
    from graphsurgeon.formats.param_text import read_param_text
    from graphsurgeon.ir.graph import Graph

    graph = read_param_text(param)
    caches = {
        b.name
        for layer in graph.layers
        if layer.type == "SDPA" and layer.get("kv_cache")
        for b in (*layer.inputs[-2:], *layer.outputs[1:])
    }
    plain = Graph(graph.catalog)
    for layer in graph.layers:
        ins = [b.name for b in layer.inputs if b.name not in caches]
        outs = [b.name for b in layer.outputs if b.name not in caches]
        if layer.type == "Input" and not outs:
            continue
        made = plain.add_layer(layer.type, layer.name, ins, outs)
        made.params = dict(layer.params)
        if layer.type == "SDPA":
            made.set("kv_cache", 0)
    write_param_text(plain, out)


def pack_windows(sequences: Sequence[Sequence[int]], length: int, count: int) -> list[list[list[int]]]:
    """``count`` windows of exactly ``length`` tokens, each a run of whole sequences; the sequence that
    does not fit ends the window as its prefix (a prefix is text the model reads anyway; its rest is
    dropped). Fewer windows when the sequences run out."""
    windows: list[list[list[int]]] = []
    current: list[list[int]] = []
    used = 0
    for seq in sequences:
        if len(windows) == count:
            break
        room = length - used
        current.append(list(seq[:room]))
        used += min(len(seq), room)
        if used == length:
            windows.append(current)
            current, used = [], 0
    return windows


def window_inputs(
    segments: Sequence[Sequence[int]], table: np.ndarray, inv_freq: np.ndarray
) -> dict[str, np.ndarray]:
    """The no-cache decoder's inputs for one window: embedding rows ``in0``, a block-diagonal causal mask
    ``in1`` (each sequence sees itself only), cos/sin ``in2``/``in3`` for positions restarting at every
    sequence."""
    from graphsurgeon.verify.rope import MASKED, rope_tables

    ids = np.array([t for seg in segments for t in seg], np.int64)
    positions = np.concatenate([np.arange(len(seg)) for seg in segments])
    owner = np.concatenate([np.full(len(seg), k) for k, seg in enumerate(segments)])
    visible = (owner[:, None] == owner[None, :]) & (
        np.arange(len(ids))[None, :] <= np.arange(len(ids))[:, None]
    )
    cos, sin = rope_tables(positions, inv_freq, width="full")
    return {
        "in0": np.ascontiguousarray(table[ids], np.float32),
        "in1": np.where(visible, np.float32(0.0), MASKED).astype(np.float32),
        "in2": cos,
        "in3": sin,
    }


@dataclass
class Calibration:
    folder: Path
    windows: int
    length: int
    sequences: int
    rows: int  # rows (token positions) the table tool keeps per Gemm for AWQ's search and GPTQ's Hessian
    check: str  # the packed windows against the same sequences run one by one
    lists: dict[str, tuple[str, str]] = field(default_factory=dict)  # net -> (list files, shapes)


def make_calibration(fp32: Path, work: Path, windows: int, length: int, rows: int) -> Calibration:
    """``.npy`` inputs of the decoder (without its cache) and of lm_head, for ``ncnnllm2table``."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    from graphsurgeon.evaluation import text_tasks
    from graphsurgeon.models.qwen3_llm import train
    from graphsurgeon.verify.llm_chain import LlmChain
    from graphsurgeon.verify.ncnn_fp32 import load_net, run
    from graphsurgeon.verify.rope import rope_inv_freq

    folder = work / "calibration"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "npy").mkdir(parents=True)
    tok = Tokenizer.from_file(str(TRAINED / "tokenizer.json"))
    items = text_tasks.train_items(windows * length // 8)
    evals = {i.question for i in text_tasks.eval_items()}
    assert not any(i.question in evals for i in items), "a training item is an evaluation question"
    seqs = [train.prompt_ids(tok, i.question) + train.answer_ids(tok, i.answer) for i in items]
    packed = pack_windows(seqs, length, windows)
    if len(packed) < windows:
        raise SystemExit(f"only {len(packed)} calibration windows of {length} tokens from {len(items)} items")
    cfg = json.loads((TRAINED / "config.json").read_text())
    table = load_file(str(TRAINED / "model.safetensors"))["model.embed_tokens.weight"].astype(np.float32)
    inv_freq = rope_inv_freq(int(cfg["head_dim"]), float(cfg["rope_theta"]))
    plain = folder / "decoder.nocache.param"
    without_kv_cache(fp32 / "decoder.ncnn.param", plain)
    net = load_net(plain, fp32 / "decoder.ncnn.bin")
    lists: dict[str, dict[str, list[str]]] = {"decoder": {}, "lm_head": {}}
    worst = 0.0
    try:
        with LlmChain(fp32, families=("qwen3_llm",)) as chain:
            for w, segments in enumerate(packed):
                feeds = window_inputs(segments, table, inv_freq)
                hidden = run(net, feeds, ["out0"])["out0"].reshape(length, -1)
                if w < 2:  # the packing must give what each sequence gives alone
                    start = 0
                    for seg in segments:
                        with chain.session() as session:
                            alone = session.prefill(chain.embed(seg)).hidden
                        worst = max(worst, float(np.abs(alone - hidden[start : start + len(seg)]).max()))
                        start += len(seg)
                for name, arr in (*feeds.items(), ("lm_head.in0", hidden)):
                    path = folder / "npy" / f"w{w:04d}.{name}.npy"
                    np.save(path, np.ascontiguousarray(arr, np.float32))
                    net_name, blob = ("lm_head", "in0") if name.startswith("lm_head") else ("decoder", name)
                    lists[net_name].setdefault(blob, []).append(str(path))
    finally:
        net.clear()
    if worst > 1e-3:
        raise SystemExit(f"packed calibration windows differ from the sequences run alone by {worst:.3g}")
    dims = {
        "in0": int(cfg["hidden_size"]),
        "in1": length,
        "in2": int(cfg["head_dim"]),
        "in3": int(cfg["head_dim"]),
    }
    calib = Calibration(
        folder,
        windows,
        length,
        sum(len(s) for s in packed),
        rows,
        f"the first 2 windows' decoder outputs equal the sequences' own prefills to {worst:.2g} (max |diff|)",
    )
    for net_name, blobs in lists.items():
        files, shapes = [], []
        for blob, paths in blobs.items():
            listing = folder / f"{net_name}.{blob}.list"
            listing.write_text("\n".join(paths) + "\n")
            files.append(str(listing))
            shapes.append(f"[{dims[blob] if net_name == 'decoder' else int(cfg['hidden_size'])},{length}]")
        calib.lists[net_name] = (",".join(files), ",".join(shapes))
    return calib


def tool_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def release_layout(param: Path, tool_bin: Path, out_bin: Path) -> tuple[int, str]:
    """``tool_bin`` as ncnn 1.0.20261020 reads it: the int8 tag (4 bytes) before each block-quantized Gemm's
    codes removed, nothing else touched; the count removed and gsurg's walk of the file as written."""
    from graphsurgeon.errors import BinFormatError
    from graphsurgeon.formats.model_bin import planned_loads, walk_bin, walk_records
    from graphsurgeon.formats.param_text import read_param_text
    from graphsurgeon.ir.weights import TAG_INT8, MappedBin

    graph = read_param_text(param)
    try:
        walk_bin(graph, tool_bin)
        shutil.copyfile(tool_bin, out_bin)
        return 0, "walks as written"
    except BinFormatError as err:
        as_written = str(err)
    loads = list(planned_loads(graph))
    codes = {(layer.name, aw.name) for layer, aw in loads if aw.load_type in (4, 6, 8)}
    tagged = [
        (layer, dataclasses.replace(aw, load_type=0) if (layer.name, aw.name) in codes else aw)
        for layer, aw in loads
    ]
    with MappedBin(tool_bin) as mb:
        records = [r for r in walk_records(graph, mb, tagged) if (r.layer, r.slot) in codes]
    if any(r.tag != TAG_INT8 for r in records):
        raise RuntimeError(f"{tool_bin}: block-quantized codes not tagged int8, nor raw: {as_written}")
    cuts = [r.offset for r in records]
    raw = tool_bin.read_bytes()
    pieces, at = [], 0
    for cut in cuts:
        pieces.append(raw[at:cut])
        at = cut + 4
    pieces.append(raw[at:])
    out_bin.write_bytes(b"".join(pieces))
    walk_bin(graph, out_bin)  # the release's walk must now end exactly at the end of the file
    return len(cuts), as_written


def ncnn_conversion(
    method: str,
    fp32: Path,
    work: Path,
    tools: tuple[Path, Path | None],
    calib: Calibration | None,
    bits: int,
    block: int,
) -> tuple[Path, dict[str, Any]]:
    """gsurg's fp32 conversion with ``decoder`` and ``lm_head`` replaced by ncnnllm2int's output (in the
    release's layout), and what it took."""
    tool, table_tool = tools
    out = work / f"ncnnllm2int-{method}"
    shutil.rmtree(out, ignore_errors=True)
    (out / "tool").mkdir(parents=True)
    for name in ("model.json", "embed.ncnn.param", "embed.ncnn.bin"):
        shutil.copyfile(fp32 / name, out / name)
    info: dict[str, Any] = {"method": method, "bits": bits, "block": block, "nets": {}}
    for net in NETS:
        src_param, src_bin = fp32 / f"{net}.ncnn.param", fp32 / f"{net}.ncnn.bin"
        if method in ("awq", "gptq"):
            if table_tool is None or calib is None:
                raise RuntimeError(f"method={method} needs ncnnllm2table and calibration data")
            table = out / "tool" / f"{net}.llm.table"
            lists, shapes = calib.lists[net]
            param = calib.folder / "decoder.nocache.param" if net == "decoder" else src_param
            cmd = [
                str(table_tool),
                str(param),
                str(src_bin),
                lists,
                str(table),
                f"method={method}",
                f"bits={bits}",
                f"block={block}",
                f"shape={shapes}",
                f"{method}_samples={calib.rows}",
                "thread=1",
            ]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=tool_env())
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
            info["nets"].setdefault(net, {})["table_seconds"] = round(time.perf_counter() - t0, 1)
            extra = [str(table)]
        else:
            extra = [f"method={method}", f"bits={bits}", f"block={block}"]
        tool_param, tool_bin = out / "tool" / f"{net}.ncnn.param", out / "tool" / f"{net}.ncnn.bin"
        cmd = [str(tool), str(src_param), str(src_bin), str(tool_param), str(tool_bin), *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=tool_env())
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        quantized = next(
            (
                line.split()[1]
                for line in proc.stderr.splitlines()
                if line.startswith("quantized ") and "Gemm" in line
            ),
            "?",
        )
        shutil.copyfile(tool_param, out / f"{net}.ncnn.param")
        removed, as_written = release_layout(tool_param, tool_bin, out / f"{net}.ncnn.bin")
        info["nets"].setdefault(net, {}).update(
            {"gemms_quantized": quantized, "tags_removed": removed, "as_written": as_written}
        )
    return out, info


# --- the report ----------------------------------------------------------------------------------------


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def kl(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


HEADER = (
    "row",
    "bits/weight",
    "matrices held as",
    "task accuracy",
    "agreement vs gsurg fp32",
    "mean KL vs gsurg fp32",
    "agreement vs llama.cpp F16",
    "mean KL vs llama.cpp F16",
)


def table_cells(row: dict[str, Any]) -> list[str]:
    if row.get("error"):
        return [
            row["row"],
            f"{row['bits_per_weight']:.2f}" if row.get("bits_per_weight") else "—",
            row.get("holds", "—"),
            f"failed: {row['error'].splitlines()[0]}",
            "—",
            "—",
            "—",
            "—",
        ]
    vs = row["vs"]
    return [
        row["row"],
        f"{row['bits_per_weight']:.2f}",
        row["holds"],
        f"{pct(row['accuracy'])} ({row['correct']}/{row['items']})",
        pct(vs.get(REF, {}).get("agreement")),
        kl(vs.get(REF, {}).get("mean_kl")),
        pct(vs.get(REF_LLAMA, {}).get("agreement")),
        kl(vs.get(REF_LLAMA, {}).get("mean_kl")),
    ]


def render(rows: list[dict[str, Any]]) -> tuple[str, str]:
    """The table as aligned text and as Markdown."""
    cells = [list(HEADER), *(table_cells(r) for r in rows)]
    widths = [max(len(c[k]) for c in cells) for k in range(len(HEADER))]
    text = "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells
    )
    md = ["| " + " | ".join(HEADER) + " |", "|---|" + "---:|" + "---|" + "---:|" * 5]
    md += ["| " + " | ".join(c) + " |" for c in cells[1:]]
    return text, "\n".join(md)


# --- main ----------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One row's files and what it answered (``outputs`` None when it could not run: ``error`` says why)."""

    name: str
    nbytes: int = 0
    holds: str = "—"
    outputs: Outputs | None = None
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # what the JSON keeps beside the figures

    def doc(self, items: Sequence[Any], refs: dict[str, list[Answer]], params: int) -> dict[str, Any]:
        doc: dict[str, Any] = {"row": self.name, "bytes": self.nbytes, "holds": self.holds}
        doc["bits_per_weight"] = 8 * self.nbytes / params if self.nbytes else None
        if self.error:
            doc["error"] = self.error
        if self.outputs is not None:
            score = accuracy(items, self.outputs.answers)
            doc |= {
                "accuracy": score.accuracy,
                "correct": score.correct,
                "items": score.items,
                "by_kind": {k: {"correct": c, "items": n} for k, (c, n) in sorted(score.by_kind.items())},
                "vs": {},
            }
            for ref, forced in self.outputs.forced.items():
                s = against(score, refs[ref], self.outputs.answers, forced)
                doc["vs"][ref] = {
                    "agreement": s.agreement,
                    "mean_kl": s.mean_kl,
                    "steps": s.steps,
                    "same_answers": s.same_answers,
                }
        return doc | self.extra


class Bench:
    """One run of the benchmark: the questions, the references, and the rows as they are made."""

    def __init__(self, args: argparse.Namespace) -> None:
        from safetensors import safe_open
        from tokenizers import Tokenizer

        from graphsurgeon.evaluation import text_tasks

        self.args = args
        self.items = text_tasks.eval_items()[: args.limit]
        self.chance = text_tasks.chance_accuracy(list(self.items))
        self.tok = Tokenizer.from_file(str(TRAINED / "tokenizer.json"))
        self.prompts = [list(self.tok.encode(i.question).ids) for i in self.items]  # as LlmAnswerer encodes
        self.eos = [int(json.loads((TRAINED / "generation_config.json").read_text())["eos_token_id"])]
        with safe_open(str(TRAINED / "model.safetensors"), "np") as fh:
            self.params = sum(int(np.prod(fh.get_slice(k).get_shape())) for k in fh.keys())  # noqa: SIM118
        self.refs: dict[str, list[Answer]] = {}
        self.rows: dict[str, Row] = {}
        self.tokenization: dict[str, Any] = {}
        self.ncnn: dict[str, Any] = {}
        self.fp32 = ensure_conversion("fp32", args.work)

    def decode(self, tokens: list[int]) -> str:
        return str(self.tok.decode(tokens, skip_special_tokens=True))

    def reference(self) -> None:
        """gsurg's fp32 conversion answering greedily: what every row is fed and compared with."""
        log(f"{REF}: {len(self.items)} questions (the reference)")
        self.refs[REF] = run_ncnn(self.fp32, self.items, self.args.tokens, {}, self.args.threads).answers

    def llama(self, names: list[str]) -> None:
        """The GGUF rows, F16 first: its greedy answers are the second reference."""
        from llamacpp_gguf import default_cache, ensure_gguf, llama_cpp_source, tensor_inventory

        if not names:
            return
        folder = self.args.work / "gguf"
        folder.mkdir(exist_ok=True)
        tree = llama_cpp_source(default_cache())
        for name in [REF_LLAMA, *(n for n in names if n != REF_LLAMA)]:
            kind = name.removeprefix("llama-")
            path = ensure_gguf(
                TRAINED, folder, kind, tree, "qwen3-trained", converter_kinds=("F16",), quiet=True
            )
            inventory = tensor_inventory(path)
            row = Row(name, sum(t.nbytes for t in inventory), gguf_holds(inventory))
            row.extra["tensors"] = [dataclasses.asdict(t) for t in inventory]
            self.rows[name] = row
            log(f"{name}: {path.name} holds {row.holds}; {len(self.items)} questions")
            try:
                run = run_llama(
                    path,
                    self.prompts,
                    self.items,
                    self.decode,
                    self.args.tokens,
                    self.eos,
                    {r: a for r, a in self.refs.items()},
                    self.args.threads,
                    folder,
                )
            except RuntimeError as err:
                row.error = str(err)
                continue
            row.outputs = run.outputs
            if name == REF_LLAMA:
                self.refs[REF_LLAMA] = run.outputs.answers
                # fed its own greedy tokens, F16 computes exactly its greedy steps again
                run.outputs.forced[REF_LLAMA] = [a.logits for a in run.outputs.answers]
                self.check_tokenization(run)

    def check_tokenization(self, run: LlamaRun) -> None:
        same = sum(own == hf for own, hf in zip(run.own_ids, self.prompts, strict=True))
        self.tokenization = {"same_ids": same, "questions": len(self.prompts), "llama_add_bos": run.add_bos}
        for item, hf, own in zip(self.items, self.prompts, run.own_ids, strict=True):
            if hf != own:
                self.tokenization["first_difference"] = {"question": item.question, "hf": hf, "llama": own}
                break

    def gsurg(self, names: list[str]) -> None:
        for name in names:
            folder = ensure_conversion(name.removeprefix("gsurg-"), self.args.work)
            log(f"{name}: {len(self.items)} questions")
            known = self.refs[REF] if name == REF else None
            out = run_ncnn(folder, self.items, self.args.tokens, self.refs, self.args.threads, known)
            self.rows[name] = Row(name, conversion_bytes(folder), conversion_holds(folder), out)

    def ncnnllm2int(self, names: list[str]) -> None:
        if not names:
            return
        args = self.args
        tool, table_tool, how = build_tools(args)
        self.ncnn["tool"] = how
        calib: Calibration | None = None
        for name in names:
            method = name.removeprefix("ncnnllm2int-")
            row = self.rows[name] = Row(name)
            if tool is None:
                row.error = f"skipped: ncnnllm2int {how}"
                continue
            try:
                if method in ("awq", "gptq") and calib is None:
                    log(f"calibration: {args.calib_windows} windows of {args.calib_length} training tokens")
                    calib = make_calibration(
                        self.fp32, args.work, args.calib_windows, args.calib_length, args.calib_rows
                    )
                    self.ncnn["calibration"] = {
                        k: str(v) if isinstance(v, Path) else v
                        for k, v in dataclasses.asdict(calib).items()
                        if k != "lists"
                    }
                log(f"{name}: quantizing")
                folder, info = ncnn_conversion(
                    method, self.fp32, args.work, (tool, table_tool), calib, args.ncnn_bits, args.ncnn_block
                )
            except (RuntimeError, SystemExit) as err:
                row.error = str(err)
                continue
            self.ncnn[name] = row.extra["ncnnllm2int"] = info
            row.nbytes, row.holds = conversion_bytes(folder), conversion_holds(folder)
            log(f"{name}: {len(self.items)} questions")
            try:
                row.outputs = run_ncnn(folder, self.items, args.tokens, self.refs, args.threads)
            except Exception as err:  # the evaluator's refusal is this row's finding
                row.error = f"{type(err).__name__}: {err}"

    def notes(self, docs: dict[str, dict[str, Any]]) -> list[str]:
        notes = []
        f16 = docs.get(REF_LLAMA, {}).get("vs", {}).get(REF)
        if f16:
            near = f16["agreement"] >= 0.99 and f16["mean_kl"] < 1e-3
            notes.append(
                f"llama.cpp F16 against gsurg fp32: agreement {pct(f16['agreement'])}, mean KL "
                f"{kl(f16['mean_kl'])}"
                + (" (near: the protocol holds)" if near else " — NOT near: check the prompt ids and BOS")
            )
        if self.tokenization:
            t = self.tokenization
            notes.append(
                f"tokenization: llama.cpp's own tokenizer gives the HF tokenizer's ids for {t['same_ids']}/"
                f"{t['questions']} questions; llama.cpp adds a BOS: {t['llama_add_bos']}; every runtime is "
                "fed the HF ids, no BOS"
            )
        for ours, theirs in (
            ("gsurg-int8", "llama-Q8_0"),
            ("gsurg-int4", "llama-Q4_K_M"),
            ("gsurg-int4", "llama-Q4_0"),
        ):
            a, b = docs.get(ours, {}), docs.get(theirs, {})
            if REF in a.get("vs", {}) and REF in b.get("vs", {}):
                ka, kb = a["vs"][REF]["mean_kl"], b["vs"][REF]["mean_kl"]
                verdict = "no worse" if ka <= kb and a["accuracy"] >= b["accuracy"] else "worse"
                notes.append(
                    f"{ours} against {theirs}: mean KL {kl(ka)} vs {kl(kb)}, task accuracy "
                    f"{pct(a['accuracy'])} vs {pct(b['accuracy'])}, bits/weight "
                    f"{a['bits_per_weight']:.2f} vs {b['bits_per_weight']:.2f}: {verdict}"
                )
        for name in GGUF_TYPES[1:]:
            doc = docs.get(f"llama-{name}")
            if doc and "tensors" in doc:
                asked = {"Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_K_M": "Q4_K"}[name]
                fell = [t["name"] for t in doc["tensors"] if len(t["shape"]) > 1 and t["type"] != asked]
                notes.append(
                    f"llama-{name}: {len(fell)} of its {sum(len(t['shape']) > 1 for t in doc['tensors'])} "
                    f"matrices are not {asked}"
                    + (f" but {self._fallbacks(doc['tensors'], asked)}" if fell else "")
                )
        written = [(n, i) for n, i in self.ncnn.items() if n.startswith("ncnnllm2int-")]
        tagged = {n: sum(d["tags_removed"] for d in i["nets"].values()) for n, i in written}
        if any(tagged.values()):
            first = next(i for n, i in written if tagged[n])["nets"]["decoder"]["as_written"]
            notes.append(
                "ncnnllm2int's files as written do not load in ncnn 1.0.20261020 (the wheel and runtime "
                "here): the tool writes each quantized Gemm's codes after a 4-byte int8 tag (0x000D4B38, "
                "modelwriter.h's fwrite_weight_tag_data), the release's Gemm reads them raw "
                "(mb.load(packed_k_bytes, N, bits)), so every later weight is read 4 bytes early; gsurg's "
                f"walk refuses them ({first.split(': ', 1)[1]}). The rows are the same files with those tags "
                "removed "
                "("
                + ", ".join(f"{n.removeprefix('ncnnllm2int-')} {k}" for n, k in tagged.items())
                + " tags), "
                "no value changed"
            )
        if "calibration" in self.ncnn:
            c = self.ncnn["calibration"]
            notes.append(
                f"awq/gptq calibration: {c['windows']} windows of {c['length']} tokens ({c['sequences']} "
                f"training questions with their answers, text_tasks.train_items), {c['rows']} rows per Gemm "
                f"kept (awq_samples/gptq_samples); {c['check']}"
            )
        notes += [f"{name}: {doc['error']}" for name, doc in docs.items() if doc.get("error")]
        return notes

    @staticmethod
    def _fallbacks(tensors: list[dict[str, Any]], asked: str) -> str:
        """The types a quantizer used instead of ``asked``, with the tensors' names when they are few."""
        by_type: dict[str, list[str]] = {}
        for t in tensors:
            if len(t["shape"]) > 1 and t["type"] != asked:
                by_type.setdefault(t["type"], []).append(t["name"].removesuffix(".weight"))
        parts = []
        for kind, names in sorted(by_type.items(), key=lambda kv: -len(kv[1])):
            parts.append(f"{len(names)} {kind}" + (f" ({', '.join(names)})" if len(names) <= 6 else ""))
        return ", ".join(parts)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for pkg in ("llama_cpp_python", "ncnn", "gguf"):
        try:
            found[pkg] = version(pkg)
        except PackageNotFoundError:
            found[pkg] = "not installed"
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--llama-child":
        return llama_child(Path(argv[1]), Path(argv[2]))
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "gsurg-accuracy-beside-llamacpp"
    )
    ap.add_argument("--rows", default=",".join(ALL_ROWS), help=f"default: all of {', '.join(ALL_ROWS)}")
    ap.add_argument("--limit", type=int, help="the first N held-out questions only (default all 500)")
    ap.add_argument("--tokens", type=int, default=8, help="answer tokens at most (gsurg eval's default 8)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--ncnn-git", type=Path, default=os.environ.get("NCNN_GIT"), help="a Tencent/ncnn repository"
    )
    ap.add_argument("--ncnnllm2int", type=Path, help="a built ncnnllm2int (instead of --ncnn-git)")
    ap.add_argument("--ncnnllm2table", type=Path, help="a built ncnnllm2table (awq, gptq)")
    ap.add_argument("--ncnn-bits", type=int, default=4, choices=(4, 6, 8))
    ap.add_argument("--ncnn-block", type=int, default=64, choices=(32, 64, 128))
    ap.add_argument("--calib-windows", type=int, default=64, help="calibration windows (default 64)")
    ap.add_argument("--calib-length", type=int, default=64, help="tokens per window (default 64)")
    ap.add_argument("--calib-rows", type=int, default=4096, help="rows per Gemm AWQ/GPTQ keep (default 4096)")
    ap.add_argument("--json", type=Path, help="default: WORK/accuracy_beside_llamacpp.json")
    ap.add_argument("--markdown", type=Path, help="default: WORK/accuracy_beside_llamacpp.md")
    args = ap.parse_args(argv)
    rows = args.rows.split(",")
    if unknown := sorted(set(rows) - set(ALL_ROWS)):
        ap.error(f"unknown rows {unknown}; known: {', '.join(ALL_ROWS)}")
    started = datetime.datetime.now(datetime.UTC)
    command = "python benchmarks/accuracy_beside_llamacpp.py " + shlex.join(argv)
    args.work.mkdir(parents=True, exist_ok=True)

    bench = Bench(args)
    bench.reference()
    bench.llama([r for r in rows if r.startswith("llama-")])
    bench.gsurg([r for r in rows if r.startswith("gsurg-")])
    bench.ncnnllm2int([r for r in rows if r.startswith("ncnnllm2int-")])

    docs = {name: row.doc(bench.items, bench.refs, bench.params) for name, row in bench.rows.items()}
    ordered = [docs[r] for r in ALL_ROWS if r in docs]
    notes = bench.notes(docs)
    ref_accuracy = accuracy(bench.items, bench.refs[REF]).accuracy
    found = versions()
    header = [
        f"{started:%Y-%m-%d %H:%M} UTC, {cpu_name()} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}, " + ", ".join(f"{k} {v}" for k, v in found.items()),
        f"command: {command}",
        f"set text-tasks: {len(bench.items)} held-out questions (chance {pct(bench.chance)}), answers of at "
        f"most {args.tokens} tokens; reference {REF} (task accuracy {pct(ref_accuracy)}); "
        f"{bench.params} parameters",
    ]
    if "tool" in bench.ncnn:
        header.append(f"ncnnllm2int: {bench.ncnn['tool']}, bits={args.ncnn_bits} block={args.ncnn_block}")
    text, md = render(ordered)
    bullets = "\n".join(f"- {n}" for n in notes)
    print("\n".join(header) + "\n\n" + text + "\n\n" + bullets + "\n")
    markdown = "\n".join(f"<!-- {h} -->" for h in header) + "\n\n" + md + "\n\n" + bullets + "\n"
    print(markdown)
    (args.markdown or args.work / "accuracy_beside_llamacpp.md").write_text(markdown)
    doc = {
        "header": header,
        "command": command,
        "cpu": cpu_name(),
        "date": started.isoformat(),
        "versions": found,
        "items": len(bench.items),
        "parameters": bench.params,
        "reference_accuracy": ref_accuracy,
        "rows": ordered,
        "notes": notes,
        "tokenization": bench.tokenization,
        "ncnnllm2int": bench.ncnn,
        "seconds": round((datetime.datetime.now(datetime.UTC) - started).total_seconds()),
    }
    (args.json or args.work / "accuracy_beside_llamacpp.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
