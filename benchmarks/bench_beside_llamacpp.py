#!/usr/bin/env python3
"""Penguin-VL-2B's LLM half at its real dimensions (random weights) run by ``penguin_vl_run`` on gsurg's
conversions at fp32, fp16, int8 and int4 storage (and the int4 one with ``--int4-activations int8``,
case ``gsurg-int4a8``: the runner's w4a8 kernel), and by llama.cpp (``llama-cpp-python``) on GGUF files
of the same weights at F16, Q8_0 and Q4_0, in one script run (``--family qwen3_vl``: Qwen3-VL-2B's LLM half
through ``qwen3_vl_run`` on ``bench_qwen3_vl_run.py``'s checkpoint and conversions; ``--family minicpm_v2``:
MiniCPM-V-2's LLM half, MiniCPM-2.4B with its muP scales, through ``minicpm_v2_run`` on
``bench_minicpm_v2_run.py``'s):

* the same prompt for every run: 228 token ids (a fixed English text through the checkpoint's tokenizer),
  then 32 greedy new tokens (EOS ignored), 2 threads, text only (the runner loads no vision net);
* each run in its own child process, the cases interleaved round by round, medians over ``--repeat``
  rounds: load time, prefill tok/s, decode tok/s, the child's peak RSS (``ru_maxrss``);
* the page cache warm before every run (the model's files read once), or with ``--cold`` dropped
  (``POSIX_FADV_DONTNEED``) so the load reads from the disk.

The GGUF files come from llama.cpp's own converter, ``convert_hf_to_gguf.py`` from the llama-cpp-python
sdist (``pip download``: the copy of llama.cpp the installed bindings were built from), run on an HF
``Qwen3ForCausalLM`` folder holding the checkpoint's LLM tensors unchanged (the Penguin-VL-2B LLM is a
Qwen3; tied embeddings). Its tokenizer check, which refuses a tokenizer whose pre-tokenizer hash it does not
know, is answered with ``qwen2``: tokenization plays no part here, both sides get token ids. MiniCPM-V-2's
LLM goes to the converter as an HF ``MiniCPMForCausalLM`` folder (``bench_minicpm_v2_run.write_llm_half``:
the ``llm.*`` tensors, untied head, ``scale_emb``/``scale_depth``/``dim_model_base``), which llama.cpp runs
as its MiniCPM architecture (embedding, residual and logit scales as GGUF keys; SentencePiece vocabulary).
F16 and Q8_0 are the converter's outputs; Q4_0 is ``llama_model_quantize`` on the F16 file with llama.cpp's
defaults.

    python benchmarks/bench_beside_llamacpp.py [--family penguin_vl|qwen3_vl|minicpm_v2] [--work DIR]
        [--runner PATH] [--repeat 3] [--cold]
        [--cases gsurg-fp32,gsurg-fp16,gsurg-int8,gsurg-int4,gsurg-int4a8,llama-F16,llama-Q8_0,llama-Q4_0]

``--work`` is shared with ``bench_penguin_vl_run.py`` (checkpoint ``DIR/penguin-vl-2b-random``,
conversions ``DIR/out`` and ``DIR/out-{fp16,int8,int4}``, made when missing). Needs ``pip install -e
'.[bench]'`` (llama-cpp-python, gguf, sentencepiece, which llama.cpp's converter imports; pip builds llama.cpp
from source: ~15 min on 2 cores), ~40 GB of disk.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for extra in (REPO, REPO / "benchmarks"):
    if str(extra) not in sys.path:  # run as a script: this checkout and the sibling benchmarks
        sys.path.insert(0, str(extra))

import bench_minicpm_v2_run as minicpm_v2  # noqa: E402
import bench_penguin_vl_run as penguin  # noqa: E402
import bench_qwen3_vl_run as qwen3_vl  # noqa: E402
from bench_penguin_vl_run import run_child  # noqa: E402
from llamacpp_gguf import LlamaModel, default_cache, ensure_gguf, llama_cpp_source  # noqa: E402

PROMPT_TOKENS = 228
TEXT = (
    "The harbour town wakes before the sun. Fishing boats slide out past the breakwater while the bakery "
    "on the corner lights its ovens, and the smell of bread drifts down to the quay where gulls wait on "
    "the bollards. By seven the market stalls are up: crates of mackerel and crab, baskets of apples from "
    "the farms inland, cheese wrapped in paper, knives sharpened while you wait. Children cut through the "
    "square on their way to school, and the old men take their usual bench by the fountain to argue about "
    "the weather, the football and the price of diesel. "
)
STORAGES = ("fp32", "fp16", "int8", "int4")
GGUF_TYPES = ("F16", "Q8_0", "Q4_0")
#: Runs of a conversion with runner flags: the case's storage and the flags.
VARIANTS = {"int4a8": ("int4", ("--int4-activations", "int8"))}

ALL_CASES = (
    tuple(f"gsurg-{s}" for s in STORAGES)
    + tuple(f"gsurg-{v}" for v in VARIANTS)
    + tuple(f"llama-{t}" for t in GGUF_TYPES)
)
SDIST = "llama_cpp_python"


def gsurg_case(kind: str) -> tuple[str, tuple[str, ...]]:
    """The storage a ``gsurg-KIND`` case runs and the runner flags it adds."""
    return VARIANTS.get(kind, (kind, ()))


@dataclass
class Run:
    """One measured run: load seconds, prefill and decode seconds, peak RSS bytes, the new tokens."""

    case: str
    load: float
    prefill: float
    decode: float
    peak_rss: int
    tokens: list[int] = field(default_factory=list)

    def prefill_rate(self) -> float:
        return PROMPT_TOKENS / self.prefill

    def decode_rate(self) -> float:
        return (len(self.tokens) - 1) / self.decode  # the first new token comes from the prefill


# --- inputs ----------------------------------------------------------------------------------------------


def prompt_ids(checkpoint: Path) -> list[int]:
    """PROMPT_TOKENS ids of TEXT (repeated as needed) through the checkpoint's tokenizer.json."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    ids: list[int] = []
    while len(ids) < PROMPT_TOKENS:
        ids += tok.encode(TEXT, add_special_tokens=False).ids
    return ids[:PROMPT_TOKENS]


#: Where each family's checkpoint keeps its LLM tensors (renamed to ``model.`` for Qwen3ForCausalLM).
LLM_PREFIX = {"penguin_vl": "model.", "qwen3_vl": "model.language_model."}
#: Each family's run benchmark (its folder, checkpoint, conversions, runner) and the files' name stem.
FAMILIES = {
    "penguin_vl": (penguin, "penguin"),
    "qwen3_vl": (qwen3_vl, "qwen3-vl"),
    "minicpm_v2": (minicpm_v2, "minicpm-v2"),
}


def write_llm_half(checkpoint: Path, folder: Path, family: str = "penguin_vl") -> Path:
    """An HF Qwen3ForCausalLM folder: the checkpoint's LLM tensors (bf16, as stored), its text config, its
    tokenizer files. Written once; the converter reads it. Qwen3-VL's LLM is a Qwen3 whose interleaved MRoPE
    gives a text-only prompt the plain 1-D rotation (its three position components are equal), so the same
    folder serves it: ``text_config`` and ``model.language_model.*`` renamed."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import save_file

    if (folder / "model.safetensors").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    top = json.loads((checkpoint / "config.json").read_text())
    cfg = dict(top.get("text_config") or top)
    if "rope_theta" not in cfg and isinstance(cfg.get("rope_parameters"), dict):
        cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    for key in ("bos_token_id", "eos_token_id"):
        cfg.setdefault(key, top.get(key))
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "rope_theta",
        "vocab_size",
        "max_position_embeddings",
        "hidden_act",
        "attention_bias",
        "attention_dropout",
    )
    qwen3 = {k: cfg[k] for k in keys if k in cfg} | {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": cfg.get("bos_token_id"),
        "eos_token_id": cfg.get("eos_token_id"),
    }
    (folder / "config.json").write_text(json.dumps(qwen3, indent=2) + "\n")
    tensors = {}
    prefix = LLM_PREFIX[family]
    with safe_open(str(checkpoint / "model.safetensors"), "pt") as fh:
        for name in fh.keys():  # noqa: SIM118 (safe_open has keys(), not iteration)
            if name.startswith(tuple(prefix + part for part in ("layers.", "embed_tokens.", "norm."))):
                tensors["model." + name[len(prefix) :]] = fh.get_tensor(name)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
        "merges.txt",
        "special_tokens_map.json",
    ):
        if (checkpoint / name).exists():
            shutil.copyfile(checkpoint / name, folder / name)
    return folder


# --- the runs --------------------------------------------------------------------------------------------


def llama_child(gguf: Path, ids: list[int], gen: int, threads: int) -> int:
    """Load, prefill, greedy decode through llama.cpp's C API; print one JSON line."""
    t0 = time.perf_counter()
    model = LlamaModel(gguf, n_ctx=512, threads=threads)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = [int(model.logits(ids).argmax())]
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    while len(out) < gen:
        out.append(int(model.logits([out[-1]]).argmax()))
    decode = time.perf_counter() - t0
    print(json.dumps({"load": load, "prefill": prefill, "decode": decode, "tokens": out}))
    return 0


def prepare_page_cache(files: list[Path], cold: bool) -> None:
    """Warm: read every file once; cold: drop them from the page cache."""
    from page_cache import drop_from_page_cache

    for path in files:
        if cold:
            drop_from_page_cache(path)
        else:
            with open(path, "rb") as fh:
                while fh.read(1 << 24):
                    pass


_STAGE = re.compile(r"^(load|prefill|decode):.*?([0-9.]+) s\b", re.M)


def measure(case: str, target: Path, runner: Path, ids: list[int], gen: int, threads: int, cold: bool) -> Run:
    if case.startswith("gsurg-"):
        prepare_page_cache([p for p in target.iterdir() if p.suffix == ".bin"], cold)
        argv = [str(runner), "--model", str(target), "--ids", ",".join(map(str, ids)), "--gen", str(gen)]
        argv += ["--threads", str(threads), "--ignore-eos", "--print-ids", "--verbose"]
        argv += gsurg_case(case.removeprefix("gsurg-"))[1]
        _, rss, stdout, stderr = run_child(argv)
        stages = {m.group(1): float(m.group(2)) for m in _STAGE.finditer(stderr)}
        tokens = json.loads(stdout.strip().splitlines()[-1])["tokens"]
        return Run(case, stages["load"], stages["prefill"], stages["decode"], rss, tokens)
    prepare_page_cache([target], cold)
    argv = [
        sys.executable,
        __file__,
        "--llama-child",
        str(target),
        ",".join(map(str, ids)),
        str(gen),
        str(threads),
    ]
    _, rss, stdout, _ = run_child(argv)
    data = json.loads(stdout.strip().splitlines()[-1])
    return Run(case, data["load"], data["prefill"], data["decode"], rss, data["tokens"])


def median_run(runs: list[Run]) -> Run:
    def mid(values: list[float]) -> float:
        return float(statistics.median(values))

    first = runs[0]
    return Run(
        first.case,
        mid([r.load for r in runs]),
        mid([r.prefill for r in runs]),
        mid([r.decode for r in runs]),
        int(mid([r.peak_rss for r in runs])),
        first.tokens,
    )


def report(runs: dict[str, list[Run]], args: argparse.Namespace) -> None:
    meds = {case: median_run(rs) for case, rs in runs.items()}
    base = meds.get("gsurg-fp32") or next(iter(meds.values()))
    print(
        f"\n{PROMPT_TOKENS}-token prompt + {args.gen} new tokens, {args.threads} threads, "
        f"{'cold' if args.cold else 'warm'} page cache, median of {args.repeat}; (×r) against {base.case}: "
        "its time or memory / this row's, or this row's tok/s / its\n"
    )
    print("| run | load | prefill | decode | peak RSS |\n|---|---|---|---|---|")
    for m in meds.values():
        cells = [
            f"{m.load:.2f} s (×{base.load / m.load:.2f})",
            f"{m.prefill_rate():.1f} tok/s (×{m.prefill_rate() / base.prefill_rate():.2f})",
            f"{m.decode_rate():.2f} tok/s (×{m.decode_rate() / base.decode_rate():.2f})",
            f"{m.peak_rss / 1e9:.2f} GB (×{base.peak_rss / m.peak_rss:.2f})",
        ]
        print(f"| {m.case} | " + " | ".join(cells) + " |")
    print()
    for case, rs in runs.items():
        singles = ", ".join(f"{r.load:.2f}/{r.prefill_rate():.1f}/{r.decode_rate():.2f}" for r in rs)
        same = all(r.tokens == rs[0].tokens for r in rs)
        agree = sum(a == b for a, b in zip(rs[0].tokens, base.tokens, strict=False))
        print(
            f"{case}: rounds (load s / prefill tok/s / decode tok/s) {singles}; tokens repeat across rounds: "
            f"{same}; {agree}/{len(base.tokens)} equal {base.case}'s at the same position"
        )
    for ours, theirs in (
        ("gsurg-int8", "llama-Q8_0"),
        ("gsurg-int4", "llama-Q4_0"),
        ("gsurg-int4a8", "llama-Q4_0"),
    ):
        if ours in meds and theirs in meds:
            g, q = meds[ours], meds[theirs]
            print(f"{ours} decode / {theirs} decode = {g.decode_rate() / q.decode_rate():.2f}")


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--llama-child":
        ids = [int(x) for x in sys.argv[3].split(",")]
        return llama_child(Path(sys.argv[2]), ids, int(sys.argv[4]), int(sys.argv[5]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="penguin_vl")
    ap.add_argument("--work", type=Path, help="default: the family's run benchmark's folder in the temp dir")
    ap.add_argument(
        "--runner", type=Path, help="the family's built runner (default: build one into <repo>/build)"
    )
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="drop the model files from the page cache first")
    ap.add_argument("--cases", default=",".join(ALL_CASES))
    args = ap.parse_args()
    cases = args.cases.split(",")
    if unknown := sorted(set(cases) - set(ALL_CASES)):
        ap.error(f"unknown cases {unknown}; known: {', '.join(ALL_CASES)}")
    side, name = FAMILIES[args.family]
    args.work = args.work or side.DEFAULT_WORK
    args.work.mkdir(parents=True, exist_ok=True)
    runner = side.ensure_runner(args.runner)
    ckpt = side.ensure_checkpoint(args.work)
    ids = prompt_ids(ckpt)
    targets: dict[str, Path] = {}
    for case in cases:
        kind = case.split("-", 1)[1]
        if case.startswith("gsurg-"):
            kind = gsurg_case(kind)[0]
            folder = args.work / ("out" if kind == "fp32" else f"out-{kind}")
            targets[case] = side.ensure_model(ckpt, folder, kind)
        else:
            cache = default_cache()
            hf_folder = args.work / f"{name}-llm-hf"
            if args.family == "minicpm_v2":
                hf = minicpm_v2.write_llm_half(ckpt, hf_folder)
            else:
                hf = write_llm_half(ckpt, hf_folder, args.family)
            targets[case] = ensure_gguf(hf, args.work, kind, llama_cpp_source(cache), name)
    runs: dict[str, list[Run]] = {}
    for _ in range(args.repeat):  # interleaved: a slow spell of the machine hits every case
        for case in cases:
            run = measure(case, targets[case], runner, ids, args.gen, args.threads, args.cold)
            print(
                f"{case}: load {run.load:.2f} s, prefill {run.prefill_rate():.1f} tok/s, decode "
                f"{run.decode_rate():.2f} tok/s, peak RSS {run.peak_rss / 1e9:.2f} GB",
                file=sys.stderr,
            )
            runs.setdefault(case, []).append(run)
    report(runs, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
