#!/usr/bin/env python3
"""``minicpm_v2_run`` (the C++ runtime) against the OFFICIAL MiniCPM-V-2 code in fp32 at the real
dimensions (random weights, ``bench_minicpm_v2.py``'s checkpoint), in one script run:

* one corpus photo as it is (720×520: an overview and 2×1 slices, 3 × 64 image rows) and one prompt, 32
  new tokens, 2 threads on both sides;
* for each side: load time (weights read from a warm page cache), vision time, prefill time, decode
  tokens/s, the whole run's wall time (the official child's includes importing torch, transformers and
  timm) and its peak RSS (``ru_maxrss`` of the child process; each side runs in its own child so neither
  counts the other), and the 32 greedy tokens, compared;
* ``minicpm_v2_run`` on the conversions at each ``--storages`` (default fp32, int8, int4: ``--set
  storage=...``), run at ``--precision fp32``, their int Gemms through the runtime's kernels.

The official side is the model's own remote code (``configuration_minicpm.py``, ``modeling_minicpm.py``,
``modeling_minicpmv.py``, ``resampler.py`` of github:HwwwwwwwH/MiniCPM-V-2 at ``COMMIT``, read from a git
mirror with ``git show``, unchanged) in a scratch venv of its era (``--official-python``; the venv and its
versions: graphsurgeon/models/minicpm_v2/README.md, "Checked against the official code"), loaded as
transformers loads any remote-code model: ``AutoModel.from_pretrained(DIR, trust_remote_code=True,
torch_dtype=float32)`` (the default attention, SDPA) from a folder of links to the checkpoint's files beside
the four official files. It runs the official ``chat(image, msgs, None, tokenizer, sampling=False,
num_beams=1, repetition_penalty=1.0, max_new_tokens=32)`` (plain greedy). The child never imports
graphsurgeon. How each official stage is timed: load = ``from_pretrained``; preprocess = from ``chat``'s
call to the start of ``get_vllm_embedding`` (slicing, ``transform``, tokenizing); vision =
``get_vllm_embedding`` (the ViT on the overview and each slice, the resampler, the embedding lookup and
the rows scattered in); prefill = the first forward of ``model.llm``; decode = from the end of that forward
to the end of the last (31 calls and ``generate``'s own work between them, as the runtime's decode loop
includes its sampler). ``chat`` cannot pass ``min_new_tokens`` (it forwards only the keys of its own
generation config), so the child wraps ``model.llm.generate`` to add ``min_new_tokens=32``: EOS is masked
for 32 tokens, as ``--ignore-eos`` lets the runtime run on. The random model's ids reach 122,752 while the
tiny ``tokenizer.model`` beside the checkpoint has fewer pieces, so ``chat``'s final ``_decode_text`` is
replaced by one that returns empty text (it runs after every timed stage).

    python benchmarks/bench_minicpm_v2_run.py [--work DIR] [--runner PATH] [--gen 32] [--threads 2]
        [--repeat 3] [--storages fp32,int8,int4] [--official-python PY] [--official GITDIR]

``--work`` is reused: the checkpoint (``DIR/minicpm-v-2-random``, as ``bench_minicpm_v2.py --keep DIR``
writes it), the fp32 conversion (``DIR/out``) and the others (``DIR/out-STORAGE``) are made only when
missing. Without ``--runner``: the runtime is built with ``runtime_cpp/scripts/build_and_test.sh
--linux-only --no-test`` into ``<repo>/build``. Needs ~35 GB of free disk (checkpoint 6.9 GB, fp32
conversion 13.7 GB, int8 and int4 ones) and most of 24 GiB of memory (the official model in fp32 holds
~13.7 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The folder the checkpoint and conversions live in unless --work says otherwise.
DEFAULT_WORK = Path(tempfile.gettempdir()) / "gsurg-bench-minicpm-v2-run"
DEFAULT_OFFICIAL_PYTHON = Path("/work/scratch-mcpm-model-venv/bin/python")
DEFAULT_OFFICIAL_GIT = Path("/work/.mirror/HwwwwwwwH+MiniCPM-V-2/repo")
COMMIT = "187851962daa9b63072d40ec802f597b71bff532"
OFFICIAL_FILES = ["configuration_minicpm.py", "modeling_minicpm.py", "modeling_minicpmv.py", "resampler.py"]
CHECKPOINT_NAME = "minicpm-v-2-random"  # bench_minicpm_v2.CHECKPOINT_NAME (that module needs numpy to import)
IMAGE = REPO.parent / "shared" / "corpus" / "images" / "photo_20180413_3.jpg"
PROMPT = "Describe the picture in detail."
SLICES = 3  # the overview and 2x1 slices of the 720x520 photo
if str(REPO) not in sys.path:  # run as a script: this checkout's package first
    sys.path.insert(0, str(REPO))
if str(REPO / "benchmarks") not in sys.path:
    sys.path.insert(0, str(REPO / "benchmarks"))


# --- the official side (runs in a child under the scratch venv: --official-child FOLDER IMAGE GEN THREADS) --


def official_child(folder: Path, image_path: Path, gen: int, threads: int) -> int:
    """Time the official code stage by stage (see the module docstring); print one JSON line."""
    import torch
    from PIL import Image
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model, info = AutoModel.from_pretrained(
        str(folder), trust_remote_code=True, torch_dtype=torch.float32, output_loading_info=True
    )
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit(f"the official loader reports {problems}")
    model = model.eval()
    stages = {"load": time.perf_counter() - t0}
    tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)
    image = Image.open(image_path).convert("RGB")
    marks: dict[str, Any] = {"calls": []}
    embed, generate = model.get_vllm_embedding, model.llm.generate

    def timed_embed(data: dict[str, Any]) -> Any:
        marks["vision_start"] = time.perf_counter()
        marks["input_ids"] = data["input_ids"][0].tolist()
        marks["images"] = sum(len(p) for p in data["pixel_values"])
        result = embed(data)
        marks["vision_end"] = time.perf_counter()
        return result

    def at_least(*args: Any, **kwargs: Any) -> Any:
        result = generate(*args, min_new_tokens=gen, **kwargs)
        marks["tokens"] = result[0].tolist()
        return result

    model.llm.register_forward_pre_hook(lambda *_: marks["calls"].append([time.perf_counter(), 0.0]))
    model.llm.register_forward_hook(lambda *_: marks["calls"][-1].__setitem__(1, time.perf_counter()))
    model.get_vllm_embedding, model.llm.generate = timed_embed, at_least
    # The random model's ids run to 122,752; the tiny tokenizer.model beside them has fewer pieces, so
    # SentencePiece cannot decode the answer: the ids are what is compared, the text is left empty.
    model._decode_text = lambda result_ids, _tok: [""] * len(result_ids)
    msgs = [{"role": "user", "content": PROMPT}]
    t0 = time.perf_counter()
    model.chat(
        image, msgs, None, tok, sampling=False, num_beams=1, repetition_penalty=1.0, max_new_tokens=gen
    )
    calls = marks["calls"]
    stages["preprocess"] = marks["vision_start"] - t0
    stages["vision"] = marks["vision_end"] - marks["vision_start"]
    stages["prefill"] = calls[0][1] - calls[0][0]
    stages["decode"] = calls[-1][1] - calls[0][1]
    tokens = marks["tokens"][-gen:]  # the new tokens (generate returns them alone for inputs_embeds)
    report = {"images": marks["images"], "prompt_tokens": len(marks["input_ids"]), "tokens": tokens}
    print(json.dumps(report | {"stages": stages, "forwards": len(calls)}))
    return 0


def official_folder(work: Path, ckpt: Path, git_dir: Path) -> Path:
    """``work/official``: links to every file of the checkpoint, the four official files beside them."""
    folder = work / "official"
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted(ckpt.iterdir()):
        link = folder / path.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path.resolve())
    for name in OFFICIAL_FILES:
        show = ["git", "-C", str(git_dir), "show", f"{COMMIT}:{name}"]
        text = subprocess.run(show, check=True, capture_output=True, text=True).stdout
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def measure_official(python: Path, folder: Path, ckpt: Path, gen: int, threads: int) -> Any:
    from bench_penguin_vl_run import Side, run_child, warm_page_cache

    warm_page_cache(ckpt)
    argv = [str(python), __file__, "--official-child", str(folder), str(IMAGE), str(gen), str(threads)]
    wall, rss, stdout, _ = run_child(argv)
    data = json.loads(stdout.strip().splitlines()[-1])
    if data["images"] != SLICES:
        raise SystemExit(f"the official code made {data['images']} images of the photo, not {SLICES}")
    if len(data["tokens"]) != gen:
        raise SystemExit(f"the official code gave {len(data['tokens'])} new tokens, not {gen}")
    return Side("official code fp32", wall, rss, data["stages"], data["prompt_tokens"], data["tokens"])


# --- the C++ side and the conversions ----------------------------------------------------------------------


def measure_runner(runner: Path, model: Path, gen: int, threads: int, storage: str) -> Any:
    """``minicpm_v2_run`` measured as ``bench_penguin_vl_run`` measures its runner (the same flags and
    ``--verbose`` stage lines: every family shares the runner's main)."""
    from bench_penguin_vl_run import measure_runner as measure_shared_runner

    name = f"minicpm_v2_run, {storage} storage"
    return measure_shared_runner(runner, model, IMAGE, gen, threads, name)


def ensure_model(ckpt: Path, out: Path, storage: str) -> Path:
    from bench_penguin_vl_run import convert_once

    return convert_once("minicpm_v2.yaml", ckpt, out, storage)


def ensure_checkpoint(work: Path) -> Path:
    ckpt = work / CHECKPOINT_NAME
    if not (ckpt / "model.safetensors.index.json").exists():
        from bench_minicpm_v2 import write_checkpoint

        print(f"writing the random-weight checkpoint into {ckpt}", file=sys.stderr)
        write_checkpoint(ckpt)
    return ckpt


def ensure_runner(runner: Path | None) -> Path:
    if runner is not None:
        return runner
    build = REPO / "build"
    script = REPO / "runtime_cpp" / "scripts" / "build_and_test.sh"
    env = os.environ | {"GSURG_BUILD_DIR": str(build)}
    subprocess.run([str(script), "--linux-only", "--no-test"], check=True, env=env)
    return build / "linux" / "runner" / "minicpm_v2_run"


# --- the LLM half for llama.cpp (bench_beside_llamacpp.py --family minicpm_v2) ----------------------------

#: config.json keys of the LLM that llama.cpp's MiniCPM converter reads (the muP constants among them).
LLM_CONFIG_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "vocab_size",
    "max_position_embeddings",
    "hidden_act",
    "scale_emb",
    "scale_depth",
    "dim_model_base",
    "bos_token_id",
    "eos_token_id",
)


def write_llm_half(checkpoint: Path, folder: Path) -> Path:
    """An HF ``MiniCPMForCausalLM`` folder (the architecture llama.cpp's converter knows as MiniCPM): the
    checkpoint's ``llm.*`` tensors unchanged (bf16, as stored; ``llm.`` dropped, so ``llm.lm_head.weight``
    becomes ``lm_head.weight``: the head is not tied), the LLM's config keys with the muP constants, the
    SentencePiece ``tokenizer.model`` the converter reads. Written once."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import save_file

    if (folder / "model.safetensors").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    top = json.loads((checkpoint / "config.json").read_text())
    cfg = {k: top[k] for k in LLM_CONFIG_KEYS if k in top}
    cfg |= {
        "architectures": ["MiniCPMForCausalLM"],
        "model_type": "minicpm",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    index = json.loads((checkpoint / "model.safetensors.index.json").read_text())["weight_map"]
    tensors = {}
    for shard in sorted(set(index.values())):
        with safe_open(str(checkpoint / shard), "pt") as fh:
            for name in fh.keys():  # noqa: SIM118 (safe_open has keys(), not iteration)
                if name.startswith("llm."):
                    tensors[name.removeprefix("llm.")] = fh.get_tensor(name)
    partial = folder / "model.safetensors.partial"
    save_file(tensors, str(partial), metadata={"format": "pt"})
    for name in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        if (checkpoint / name).exists():
            shutil.copyfile(checkpoint / name, folder / name)
    partial.replace(folder / "model.safetensors")
    return folder


# --- report ------------------------------------------------------------------------------------------------


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--official-child":
        return official_child(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    from bench_penguin_vl_run import Side, median_side, print_rounds, report

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument(
        "--runner", type=Path, help="a built minicpm_v2_run (default: build one into <repo>/build)"
    )
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="runs per side; the table shows medians")
    ap.add_argument("--storages", default="fp32,int8,int4", help="the conversions to run (out, out-STORAGE)")
    ap.add_argument("--official-python", type=Path, default=DEFAULT_OFFICIAL_PYTHON)
    ap.add_argument("--official", type=Path, default=DEFAULT_OFFICIAL_GIT, help="a git mirror of the code")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    runner = ensure_runner(args.runner)
    ckpt = ensure_checkpoint(args.work)
    folder = official_folder(args.work, ckpt, args.official)
    storages = args.storages.split(",")
    models = {s: ensure_model(ckpt, args.work / ("out" if s == "fp32" else f"out-{s}"), s) for s in storages}
    runs: dict[str, list[Side]] = {"official": []}
    for k in range(args.repeat):  # the sides interleaved, so a slow spell of the machine hits all of them
        t0 = time.perf_counter()
        runs["official"].append(measure_official(args.official_python, folder, ckpt, args.gen, args.threads))
        for storage, model in models.items():
            runs.setdefault(storage, []).append(
                measure_runner(runner, model, args.gen, args.threads, storage)
            )
        print(f"round {k + 1}/{args.repeat}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    sides = [median_side(r) for r in runs.values()]
    image = f"{IMAGE.name}, 720x520: an overview and 2x1 slices, {SLICES * 64} image rows"
    report(sides, args.threads, args.repeat, ref="the official code", grid=image)
    print_rounds(runs, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
