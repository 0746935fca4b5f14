#!/usr/bin/env python3
"""Penguin-VL at its real dimensions: write a random-weight checkpoint with Penguin-VL-2B's exact config
(bf16, one model.safetensors as the official one; the tiny model's tokenizer, whose ids lie inside the
real 151936-row vocabulary), then in one run:

* ``gsurg apply rules/penguin_vl.yaml --set checkpoint=DIR`` in its own process, the memory of its whole
  process tree (private, and with mapped file pages) sampled from /proc every 0.2 s and split at its
  progress lines into the export stage (worker: torch + pnnx) and the surgery stage (rules and writing);
* a plain copy + fsync of the bytes apply wrote (the I/O floor of the writing stage), same run;
* ``gsurg verify`` on one non-square corpus image and one prompt (peak RSS: reference and ncnn run one
  after the other and must fit the machine).

    python benchmarks/bench_penguin_vl.py [--keep DIR] [--tokens 8] [--skip-verify]

Needs about 30 GB of free disk and most of the machine's 24 GiB of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: this checkout's package first
    sys.path.insert(0, str(REPO))

from graphsurgeon.models.penguin_vl.checkpoint import tensor_shapes  # noqa: E402
from graphsurgeon.models.penguin_vl.config import config_from_dict  # noqa: E402
from graphsurgeon.models.penguin_vl.make_tiny import VISION_FOLDER, make_tiny, real_dims_tensor  # noqa: E402

IMAGE = REPO.parent / "shared" / "corpus" / "images" / "photo_20180413_3.jpg"


def stack(hidden: int, intermediate: int, layers: int) -> dict[str, object]:
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "max_position_embeddings": 40960,
        "num_attention_heads": 16,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
    }


def write_checkpoint(folder: Path, seed: int = 0) -> None:
    """Penguin-VL-2B's config (penguin-vl.md §1) over the tiny tokenizer; weights streamed one tensor at a
    time into a single bf16 safetensors file, drawn by ``make_tiny.real_dims_tensor``: the tiny model's
    gains except the q/k norms, centred on 1 rather than 4, since sharp attention over 28 layers makes the
    model chaotic (fp32 rounding alone moved its logits to cosine 0.9985 from an fp64 run, and verify
    failed at cosine 0.575 with a correct conversion)."""
    make_tiny(folder)  # tokenizer and processor files (the tiny weights are replaced below)
    for stale in folder.glob("*.safetensors*"):
        stale.unlink()
    tiny = json.loads((folder / "config.json").read_text())
    vision = stack(1024, 3072, 28) | {
        "model_type": "penguinvl_vision_encoder",
        "num_channels": 3,
        "patch_size": 14,
        "layer_norm_eps": 1e-06,
        "architectures": ["PenguinVLVisionEncoderModel"],
    }
    cfg = (
        tiny
        | stack(2048, 6144, 28)
        | {
            "vocab_size": 151936,
            "vision_encoder_config": vision,
            "vision_hidden_size": 1024,
            "max_window_layers": 28,
            "torch_dtype": "bfloat16",
            "tie_word_embeddings": True,
        }
    )
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (folder / VISION_FOLDER / "config.json").write_text(json.dumps(vision, indent=2) + "\n")
    pre_paths = (folder / "preprocessor_config.json", folder / VISION_FOLDER / "preprocessor_config.json")
    for pre_path in pre_paths:
        pre = json.loads(pre_path.read_text()) | {"max_tokens": 16384}  # the two copies must agree
        pre_path.write_text(json.dumps(pre, indent=2) + "\n")
    shapes = tensor_shapes(config_from_dict(cfg))
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        nbytes = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(len(text).to_bytes(8, "little") + text)
        for i, (name, shape) in enumerate(shapes.items()):
            bits = real_dims_tensor(name, shape, i, seed).view(np.uint32)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")  # round to nearest even
            fh.write(rounded.tobytes())


class RssSampler:
    """Peak memory of a process tree (the process and all its descendants: the export worker and the pnnx
    it runs), sampled from /proc every 0.2 s. Two figures per sample: ``anon`` is private memory (RssAnon +
    RssShmem: what the machine must really hold), ``total`` adds RssFile, the pages of memory-mapped files
    the process has touched (the page cache can drop those; a streamed write over mapped inputs counts
    every page it has read here)."""

    def __init__(self, pid: int) -> None:
        self.pid, self._stop = pid, threading.Event()
        self.samples: list[tuple[float, int, int]] = []  # (perf_counter, anon bytes, total bytes)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _tree(self) -> tuple[int, int]:
        status: dict[int, dict[str, str]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                text = (entry / "status").read_text()
            except OSError:
                continue
            status[int(entry.name)] = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        tree, grew = {self.pid}, True
        while grew:
            more = {p for p, f in status.items() if int(f.get("PPid", "0").strip() or 0) in tree} - tree
            tree |= more
            grew = bool(more)

        def kb(fields: dict[str, str], key: str) -> int:
            return int(fields.get(key, "0 kB").split()[0]) * 1024

        anon = sum(kb(status[p], "RssAnon") + kb(status[p], "RssShmem") for p in tree if p in status)
        total = anon + sum(kb(status[p], "RssFile") for p in tree if p in status)
        return anon, total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), *self._tree()))
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()

    def peak(self, start: float = 0.0, end: float = float("inf"), *, total: bool = False) -> int:
        return max((s[2] if total else s[1] for s in self.samples if start <= s[0] <= end), default=0)

    def gb(self, start: float = 0.0, end: float = float("inf")) -> str:
        """``anon GB (total GB with mapped file pages)`` for the README table."""
        return f"{self.peak(start, end) / 1e9:.2f} GB ({self.peak(start, end, total=True) / 1e9:.2f} GB)"


def run_measured(argv: list[str]) -> tuple[float, RssSampler, dict[str, float]]:
    """Wall time, the RSS samples, and when each progress line appeared (``"end"``: when it exited)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    sampler = RssSampler(proc.pid)
    marks: dict[str, float] = {}
    assert proc.stderr is not None
    for line in proc.stderr:
        sys.stderr.write(line)
        marks.setdefault(line.split(":")[1].strip() if ":" in line else line, time.perf_counter())
    assert proc.stdout is not None
    report = proc.stdout.read()  # verify's table: shown, so a failing stage is visible in the log
    code = proc.wait()
    marks["end"] = time.perf_counter()
    sampler.stop()
    sys.stdout.write(report)
    if code != 0:
        raise SystemExit(f"{argv[3]} exited {code}")
    return time.perf_counter() - start, sampler, marks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--skip-verify", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="K=V", help="passed to apply (repeatable)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="gsurg-bench-penguin-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        ckpt = work / "penguin-vl-2b-random"
        if not (ckpt / "model.safetensors").exists():
            t0 = time.perf_counter()
            write_checkpoint(ckpt)
            print(f"checkpoint written in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        ckpt_bytes = (ckpt / "model.safetensors").stat().st_size
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        gsurg = [sys.executable, "-m", "graphsurgeon.cli"]
        argv = [*gsurg, "apply", str(REPO / "rules" / "penguin_vl.yaml"), "-v", "--out", str(out)]
        extra = [x for setting in args.set for x in ("--set", setting)]
        wall, rss, marks = run_measured([*argv, "--set", f"checkpoint={ckpt}", *extra])
        surgery_start = min((t for k, t in marks.items() if k.startswith("graph ")), default=0.0)
        written = [p for p in out.iterdir() if p.is_file()]
        out_bytes = sum(p.stat().st_size for p in written)
        copy = work / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        copy.mkdir()
        t0 = time.perf_counter()
        for p in written:
            shutil.copyfile(p, copy / p.name)
            fd = os.open(copy / p.name, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        floor = time.perf_counter() - t0
        shutil.rmtree(copy)
        write_start = next((t for k, t in marks.items() if k.startswith("writing ")), surgery_start)
        write_time = marks["end"] - write_start
        print("\n| stage | figure |\n|---|---|")
        print(f"| checkpoint (Penguin-VL-2B config, random bf16, one file) | {ckpt_bytes / 1e9:.2f} GB |")
        print(f"| `gsurg apply rules/penguin_vl.yaml`, wall | {wall:.0f} s |")
        print("| peak memory: private (with mapped file pages) | |")
        print(f"| export stage (worker: torch model + pnnx) | {rss.gb(0, surgery_start)} |")
        print(f"| surgery stage (rules + writing) | {rss.gb(surgery_start)} |")
        print(f"| bytes written | {out_bytes / 1e9:.2f} GB |")
        print(
            f"| writing stage / a plain copy + fsync of the same bytes | {write_time:.0f} s / {floor:.0f} s "
            f"= {write_time / floor:.2f} |"
        )
        if not args.skip_verify:
            vargv = [*gsurg, "verify", str(out), "-v", "--tokens", str(args.tokens), "--threads", "2"]
            vargv += ["--image", str(IMAGE), "--prompt", "Describe the picture."]
            vwall, vrss, _ = run_measured(vargv)
            print(f"| `gsurg verify` (1 image, 1 prompt, {args.tokens} tokens), wall | {vwall:.0f} s |")
            print(f"| peak memory of verify | {vrss.gb()} |")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
