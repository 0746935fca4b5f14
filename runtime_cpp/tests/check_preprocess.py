"""Parity check of the C++ image preprocessing (through penguin_vl_preprocess_dump) against goldens
computed here at test time, never by the code under test:

- decoding: the RGB pixels of Pillow's ``Image.open(path).convert("RGB")``, for the corpus images and for
  synthetic ones made now (preprocess_images.py: RGBA, L, LA, P with and without transparency, "1", 16-bit,
  interlaced, JPEG subsamplings, progressive, grey and CMYK JPEG, 1x1 and 3x500 sizes, a non-ASCII name);
- pixel_values at the automatic size: the Python processor (graphsurgeon/models/penguin_vl/processor.py);
- pixel_values at forced sizes (upscale, downscale, one side unchanged, extreme aspect): Pillow's BICUBIC
  resize followed by the normalise and patchify written here independently;
- resizes to arbitrary sizes (not multiples of the patch, down to 1x1): Pillow's BICUBIC;
- target sizes for thousands of image sizes under three configs (with near-ties of Python's round): the
  processor's resize_target; bad preprocessor configs: refused by both sides;
- broken or unsupported files: refused by the C++ loader with an error naming the path.

Everything must be bit-exact; a difference prints the case and its max_abs and the exit status is 1. All
jobs go to one penguin_vl_preprocess_dump process (``--jobs``), so a Windows build under wine starts once
(plus one single-job run of the plain command line). Usage:
    check_preprocess.py --dump BUILD/families/penguin_vl/penguin_vl_preprocess_dump [--wrapper wine]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from PIL import Image
from preprocess_images import bad_images, good_images

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from graphsurgeon.errors import GsurgError  # noqa: E402
from graphsurgeon.models.penguin_vl.config import processor_from_dict  # noqa: E402
from graphsurgeon.models.penguin_vl.processor import (  # noqa: E402
    ImageError,
    load_and_preprocess,
    open_image,
    resize_target,
)

TINY_CONFIG = REPO / "graphsurgeon" / "models" / "penguin_vl" / "tiny" / "preprocessor_config.json"
CORPUS = REPO.parent / "shared" / "corpus" / "images"

Check = Callable[[str], str | None]  # job output line -> failure text or None


class Jobs:
    """Job lines for penguin_vl_preprocess_dump and, per job, the check of its result."""

    def __init__(self, folder: Path, path_prefix: str) -> None:
        self.folder, self.prefix = folder, path_prefix
        self.lines: list[str] = []
        self.checks: list[tuple[str, Check]] = []

    def arg(self, path: Path) -> str:
        return self.prefix + str(path)

    def add(self, label: str, options: list[str], check: Check) -> None:
        self.lines.append("\t".join(options))
        self.checks.append((label, check))

    def out(self, name: str) -> Path:
        return self.folder / f"out_{len(self.lines)}_{name}.npy"


def expect_ok(compare: Callable[[], str | None]) -> Check:
    def check(status: str) -> str | None:
        return compare() if status.startswith("ok") else f"the C++ side failed: {status}"

    return check


def equals(want: str) -> Check:
    return lambda status: None if status == want else f"got {status!r}, want {want!r}"


def refused(prefix: str, naming: str = "") -> Check:
    """An error whose message starts with ``prefix`` and contains ``naming``."""
    return lambda status: (
        None if status.startswith(prefix) and naming in status else f"not refused as expected: {status!r}"
    )


def same(name: str, got_path: Path, want: np.ndarray) -> str | None:
    got = np.load(got_path)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != {want.shape}"
    if not np.array_equal(got, want):
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        return f"{name}: {int((diff > 0).sum())} values differ, max_abs {diff.max():.9g}"
    return None


def independent_pixel_values(rgb: np.ndarray, cfg_raw: dict[str, object]) -> np.ndarray:
    """Rescale, normalise and patchify written afresh: a per-channel table of float32(v * rescale) (in
    float64) minus the float32 mean, over the float32 std; patch r*gw+c holds the R, G, B blocks."""
    p = int(cfg_raw["patch_size"])  # type: ignore[call-overload]
    rescale = float(cfg_raw["rescale_factor"])  # type: ignore[arg-type]
    means = [np.float32(m) for m in cfg_raw["image_mean"]]  # type: ignore[attr-defined]
    stds = [np.float32(s) for s in cfg_raw["image_std"]]  # type: ignore[attr-defined]
    levels = (np.arange(256, dtype=np.float64) * rescale).astype(np.float32)
    tables = [(levels - means[ch]) / stds[ch] for ch in range(3)]
    gh, gw = rgb.shape[0] // p, rgb.shape[1] // p
    out = np.empty((gh, gw, 3 * p * p), dtype=np.float32)
    for r in range(gh):
        for c in range(gw):
            tile = rgb[r * p : (r + 1) * p, c * p : (c + 1) * p]
            out[r, c] = np.concatenate([tables[ch][tile[:, :, ch]].reshape(-1) for ch in range(3)])
    return out


def add_auto_job(jobs: Jobs, path: Path, cfg_path: Path, cfg_raw: dict[str, object]) -> None:
    """pixel_values at the automatic size, against the Python processor."""
    ref = load_and_preprocess(path, processor_from_dict(cfg_raw))
    want = ref.pixel_values.reshape(ref.grid[0], ref.grid[1], -1)
    out = jobs.out("auto")
    jobs.add(
        f"{path.name}: pixel_values at the processor's size {ref.size} ({cfg_path.name})",
        ["--image", jobs.arg(path), "--config", jobs.arg(cfg_path), "--out", jobs.arg(out)],
        expect_ok(partial(same, "pixel_values", out, want)),
    )


def add_image_jobs(jobs: Jobs, path: Path, cfg_path: Path, cfg_raw: dict[str, object], corpus: bool) -> None:
    """Decoding, the automatic size against the processor, forced sizes and arbitrary resizes of one image."""
    cfg = processor_from_dict(cfg_raw)
    rgb_im = open_image(path).convert("RGB")
    rgb = np.asarray(rgb_im)
    h, w = rgb.shape[:2]
    base = ["--image", jobs.arg(path), "--config", jobs.arg(cfg_path)]
    dec = jobs.out("decoded")
    jobs.add(
        f"{path.name}: decode",
        [*base, "--decoded", jobs.arg(dec)],
        expect_ok(lambda: same("decoded", dec, rgb)),
    )

    add_auto_job(jobs, path, cfg_path, cfg_raw)
    p = cfg.patch_size

    def mult(v: float) -> int:
        return max(p, round(v / p) * p)

    forced = [
        (mult(h * 1.6), mult(w * 1.4)),
        (mult(h * 0.3), mult(w * 0.45)),
        (p, p),
        (p, mult(w * 2)),
        (mult(h * 2.5), p),
    ]
    forced.append((mult(h), w) if w % p == 0 else (h, mult(w)) if h % p == 0 else (mult(h), mult(w)))
    if not corpus:
        forced = forced[:3]
    for th, tw in forced:
        pv = jobs.out(f"pv{th}x{tw}")
        want = independent_pixel_values(
            np.asarray(rgb_im.resize((tw, th), Image.Resampling.BICUBIC)), cfg_raw
        )
        jobs.add(
            f"{path.name}: pixel_values at {th}x{tw}",
            [*base, "--size", f"{th}x{tw}", "--out", jobs.arg(pv)],
            expect_ok(partial(same, "pixel_values", pv, want)),
        )

    sizes = [(1, 1), (h, max(1, w // 3)), (max(1, h // 2), w), (h + 1, w + 2), (7, 3 * w + 1)]
    if corpus:
        d = w // 4  # Pillow 13 goes vertical first when h loses more than twice the pixels w loses
        sizes += [(h * 3 + 5, max(1, w // 9)), (max(1, h - 1), max(1, w - 1)), (1000, 3)]
        sizes += [(h - 2 * d, w - d), (h - 2 * d - 1, w - d), (h - 2, w - 1), (h - 3, w - 1)]
    for th, tw in sizes:
        rs = jobs.out(f"rs{th}x{tw}")
        want_rs = np.asarray(rgb_im.resize((tw, th), Image.Resampling.BICUBIC))
        jobs.add(
            f"{path.name}: resize to {th}x{tw}",
            [*base, "--size", f"{th}x{tw}", "--resized", jobs.arg(rs)],
            expect_ok(partial(same, "resized", rs, want_rs)),
        )


def add_resize_sweep(jobs: Jobs, folder: Path, cfg_path: Path) -> None:
    """One small noise image resized to 150 random sizes: every pass order and skip, up and down."""
    rng = np.random.default_rng(11)
    path = folder / "sweep_noise.png"
    im = Image.fromarray(rng.integers(0, 256, (37, 23, 3), dtype=np.uint8))
    im.save(path)
    for th, tw in [(37, 23), (37, 5), (9, 23), *((int(a), int(b)) for a, b in rng.integers(1, 80, (147, 2)))]:
        out = jobs.out(f"sweep{th}x{tw}")
        want = np.asarray(im.resize((tw, th), Image.Resampling.BICUBIC))
        jobs.add(
            f"noise 37x23: resize to {th}x{tw}",
            [
                "--image",
                jobs.arg(path),
                "--config",
                jobs.arg(cfg_path),
                "--size",
                f"{th}x{tw}",
                "--resized",
                jobs.arg(out),
            ],
            expect_ok(partial(same, "resized", out, want)),
        )


def target_sizes(rng: np.random.Generator, factor: int) -> list[tuple[int, int]]:
    """Random sizes, extreme aspects, sizes of 7 mod 14 (exact halves before the sqrt), and the sizes whose
    h'/factor or w'/factor lands within 1e-7 of a half (where one ulp decides Python's round)."""
    out = [(int(a), int(b)) for a, b in rng.integers(1, 5000, (400, 2))]
    out += [(1, 1), (1, 20000), (20000, 1), (3, 500), (500, 3), (9000, 7000), (14, 14), (7, 7), (21, 35)]
    out += [(factor * a + factor // 2, factor * b + factor // 2) for a, b in rng.integers(0, 40, (100, 2))]
    hh, ww = np.meshgrid(
        np.arange(1, 700, dtype=np.float64), np.arange(1, 700, dtype=np.float64), indexing="ij"
    )
    aspect = hh / ww
    w_new = np.sqrt(hh * ww / aspect)
    h_new = w_new * aspect
    for q in (h_new / factor, w_new / factor):
        near = np.abs(q - np.floor(q) - 0.5) < 1e-7
        out += [(int(a), int(b)) for a, b in zip(hh[near][:150], ww[near][:150], strict=True)]
    return out


def config_variants(folder: Path, tiny_raw: dict[str, object]) -> dict[str, tuple[Path, dict[str, object]]]:
    """The tiny checkpoint's config, the real model's budget (max_tokens 16384), and an odd one (patch 16,
    a narrow token range that often takes the minimum-area path), each written to a file."""
    variants: dict[str, dict[str, object]] = {
        "tiny": tiny_raw,
        "real": {**tiny_raw, "max_tokens": 16384},
        "odd": {**tiny_raw, "min_tokens": 100, "max_tokens": 120, "patch_size": 16},
    }
    out = {}
    for name, raw in variants.items():
        path = folder / f"config_{name}.json"
        path.write_text(json.dumps(raw))
        out[name] = (path, raw)
    return out


def add_config_jobs(jobs: Jobs, variants: dict[str, tuple[Path, dict[str, object]]]) -> None:
    """target_size under each config, and bad configs refused by both sides."""
    rng = np.random.default_rng(7)
    folder = jobs.folder
    tiny_raw = variants["tiny"][1]
    for name, (cfg_path, raw) in variants.items():
        cfg = processor_from_dict(raw)
        for h, w in target_sizes(rng, cfg.factor):
            want = "ok target {}x{}".format(*resize_target(h, w, cfg.factor, cfg.min_tokens, cfg.max_tokens))
            jobs.add(
                f"target_size {h}x{w} ({name})",
                ["--config", jobs.arg(cfg_path), "--target-of", f"{h}x{w}"],
                equals(want),
            )
    bad = {
        "resample2": {**tiny_raw, "resample": 2},
        "merge2": {**tiny_raw, "merge_size": 2},
        "no_mean": {k: v for k, v in tiny_raw.items() if k != "image_mean"},
        "min_over_max": {**tiny_raw, "min_tokens": 300},
        "bool_patch": {**tiny_raw, "patch_size": True},
        "float_patch": {**tiny_raw, "patch_size": 14.0},
        "zero_std": {**tiny_raw, "image_std": [0.5, 0, 0.5]},
        "no_normalize": {**tiny_raw, "do_normalize": False},
        "neg_rescale": {**tiny_raw, "rescale_factor": -1},
    }
    for name, raw in bad.items():
        try:
            processor_from_dict(raw)
            raise SystemExit(f"the Python reference accepts the bad config {name}: fix the test")
        except GsurgError:
            pass
        cfg_path = folder / f"bad_{name}.json"
        cfg_path.write_text(json.dumps(raw))
        jobs.add(
            f"bad config {name}",
            ["--config", jobs.arg(cfg_path), "--target-of", "100x100"],
            refused("error: image_processor: "),
        )


def add_bad_file_jobs(jobs: Jobs, bad: list[Path], cfg_path: Path) -> None:
    for path in bad:
        if path.name != "bmp_named.png":  # Pillow reads BMP; the C++ loader refuses it by design
            try:
                open_image(path)
                raise SystemExit(f"the Python reference accepts {path.name}: fix the test")
            except ImageError:
                pass
        want = jobs.arg(path)
        jobs.add(
            f"{path.name}: refused",
            ["--image", want, "--config", jobs.arg(cfg_path), "--decoded", jobs.arg(jobs.out("bad"))],
            refused("error: ", want),
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True, help="the penguin_vl_preprocess_dump program")
    ap.add_argument("--wrapper", default="", help="runs the program, e.g. wine for a Windows build")
    ap.add_argument(
        "--path-prefix", default=None, help="prefix for paths handed to the program (Z: under wine)"
    )
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    args = ap.parse_args()
    # Pillow warns when a palette image with per-entry transparency is converted to RGB: expected here.
    warnings.filterwarnings("ignore", message="Palette images with Transparency")
    wrapper = shlex.split(args.wrapper)
    prefix = args.path_prefix if args.path_prefix is not None else ("Z:" if wrapper else "")
    corpus = sorted(args.corpus.glob("*")) if args.corpus.is_dir() else []
    if not corpus:
        print(f"FAIL: no corpus images at {args.corpus}")
        return 1
    tiny_raw = json.loads(TINY_CONFIG.read_text())
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pvl_pre_") as tmp:
        folder = Path(tmp)
        jobs = Jobs(folder, prefix)
        good = good_images(folder)
        for path in corpus:
            add_image_jobs(jobs, path, TINY_CONFIG, tiny_raw, corpus=True)
        for path in good:
            add_image_jobs(jobs, path, TINY_CONFIG, tiny_raw, corpus=False)
        add_resize_sweep(jobs, folder, TINY_CONFIG)
        variants = config_variants(folder, tiny_raw)
        add_config_jobs(jobs, variants)
        for path in corpus:
            for name in ("real", "odd"):
                add_auto_job(jobs, path, *variants[name])
        add_bad_file_jobs(jobs, bad_images(folder, good), TINY_CONFIG)
        job_file = folder / "jobs.txt"
        job_file.write_text("\n".join(jobs.lines) + "\n", encoding="utf-8")
        try:
            run = subprocess.run(
                [*wrapper, args.dump, "--jobs", jobs.arg(job_file)],
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
            )
        except OSError as err:
            print(f"FAIL: cannot run {args.dump}: {err} (a Windows build needs --wrapper)")
            print("0 passed, 1 failed")
            return 1
        statuses = {}
        for line in run.stdout.splitlines():
            head, sep, rest = line.partition(": ")
            if sep and head.startswith("job "):
                statuses[int(head[4:])] = rest
        failures = []
        for i, (label, check) in enumerate(jobs.checks):
            status = statuses.get(i)
            problem = (
                f"no result (exit {run.returncode}, stderr {run.stderr[-500:]!r})"
                if status is None
                else check(status)
            )
            if problem:
                failures.append(f"{label}: {problem}")
        single = folder / "single.npy"
        one = subprocess.run(
            [
                *wrapper,
                args.dump,
                "--image",
                jobs.arg(corpus[0]),
                "--config",
                jobs.arg(TINY_CONFIG),
                "--out",
                jobs.arg(single),
            ],
            capture_output=True,
            text=True,
        )
        ref = load_and_preprocess(corpus[0], processor_from_dict(tiny_raw))
        problem = (
            f"exit {one.returncode}: {one.stderr.strip()}"
            if one.returncode != 0
            else same("pixel_values", single, ref.pixel_values.reshape(ref.grid[0], ref.grid[1], -1))
        )
        if problem:
            failures.append(f"single-job command line: {problem}")
    total = len(jobs.checks) + 1
    for f in failures:
        print("FAIL", f)
    elapsed = time.monotonic() - started
    print(f"preprocess parity: {len(good)} synthetic + {len(corpus)} corpus images, {elapsed:.1f} s")
    print(f"{total - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
