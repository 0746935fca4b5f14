"""Parity check of the C++ MiniCPM-V-2 numerics (gsurg_minicpm_v2_preprocess, through
``minicpm_v2_preprocess_dump``) against goldens computed here at test time, never by the code under test:

- images: for the corpus images, the procedural images of the processor's goldens
  (tests/goldens/minicpm_v2/images.py: tiny, thin strips such as 1x4000, 4000x1 and 14x2000, sizes just below
  and above 448^2, the ensure_divide ties, medium, large up to 5000x700, grey/RGBA/palette; the 10000x10000
  one only as a plan, its pixels would take half a minute on each side), the decoding cases
  of preprocess_images.py (PNG modes, 16-bit, tRNS, interlaced, JPEG subsamplings, grey and CMYK JPEG) and a
  few more here (every slice count from 2 to 9, 3000x2000, 3x5, JPEGs that get sliced): the slice plan and
  every patch grid, every uint8 overview and slice, every float32 [3, H, W] pixel array, bit for bit against
  the Python processor graphsurgeon/models/minicpm_v2 (itself bit-exact with the official code under the
  official Pillow 10.1.0: tests/test_minicpm_v2_processor.py);
- resize_h_then_v at forced sizes, including ones Pillow 13 would run vertical first, against the Python
  processor's (two single-pass Pillow resizes);
- the slice plan of thousands of image sizes (random, log-uniform, every area boundary k * 448^2 +- 1, the
  ensure_divide ties, the squares whose grid tie is decided by one ulp of a logarithm, extreme aspects)
  under the real settings and an odd one, against slicing.plan_slices; a plan past the resize limit refused;
- the position table resampled to patch grids (upsampling 27 -> 40, downsampling 27 -> 5, 1xN and Nx1, the
  real grids, random ones; 16 channels, and the real 1152 for some; the tiny model's 4x4 table), against
  vision.resample_pos_table, i.e. torch's F.interpolate(bicubic, antialias=True) on the reference's
  channels-last view;
- the 2-D sin-cos table (the real dim 2304 and the tiny 128, grids from 1x1 to 2024x1) against
  resampler.sincos_2d (numpy), and numpy's float32 sin and cos over 1.5 million angles (the real model's,
  octant boundaries, the large-argument fallback) against np.sin / np.cos;
- patch_rows against the Python patch_rows (checked against torch's conv2d in the pytest suite);
- fma_f32, the exact fused multiply-add both tables are built on, against a * b + c rounded once with exact
  fractions, on triples whose sums lie a hair off float32 midpoints and on subnormal results;
- refusals, each naming its cause: bad settings, a wrong table size, a sin-cos dim not a multiple of 4, pixels
  not in whole patches.

Bit-exactness of the position table holds for the torch build the C++ side reproduces (x86-64, CPU capability
AVX2: its compiler's fused multiply-adds); on another build (no AVX2, ARM) torch rounds differently and the
check allows 1e-5 absolute on these unit-variance tables instead, saying so. Likewise numpy's float32 sin/cos
is reproduced as numpy >= 2 computes it with FMA3; with numpy 1.x or without FMA3 the check allows 1 ulp.
The table's one power (``10000 ** e``, float32) is the C library's ``powf`` on both sides where numpy's
AVX2 build runs; on an AVX-512 CPU numpy dispatches it to Intel SVML, up to 1 ulp off ``powf`` for about a
fifth of the frequencies (and pos * omega carries that ulp into the angle), so there the goldens take the C
library's ``powf`` for that one step and numpy's multiply, sin and cos for the rest, and the run says so.
Past numpy's SIMD range (|x| > 117435.992 for sin, 71476.0625 for cos) both sides call the C library's sinf
/ cosf: the same function on Linux, but a Windows build under a wrapper has its own, so those angles may
then be 1 ulp off (only patch grids over 71476 patches long reach them). Everything else must be bit-exact.
Image jobs run in batches (their outputs are checked and deleted between batches), plans and forced resizes
in one process, the array jobs in one ``--numerics`` process. Usage:
    check_preprocess_minicpmv2.py --dump BUILD/families/minicpm_v2/minicpm_v2_preprocess_dump [--wrapper wine]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import importlib
import json
import math
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from check_preprocess import Check, Jobs, equals, expect_ok, refused, same
from PIL import Image
from preprocess_images import _smooth, good_images

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from graphsurgeon.models.minicpm_v2.processor import (  # noqa: E402
    load_and_preprocess,
    open_image,
    patch_rows,
    resize_h_then_v,
)
from graphsurgeon.models.minicpm_v2.resampler import sincos_2d  # noqa: E402
from graphsurgeon.models.minicpm_v2.slicing import SliceConfig, SlicePlan, plan_slices  # noqa: E402
from graphsurgeon.models.minicpm_v2.vision import resample_pos_table  # noqa: E402
from tests.goldens.minicpm_v2.images import make_image, specs  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus" / "images"
REAL = SliceConfig()  # config.json's scale_resolution 448, max_slice_nums 9, patch_size 14
ODD = SliceConfig(scale_resolution=224, max_slice_nums=4, patch_size=16)
BATCH = 16  # image jobs per dump process: their outputs are checked and deleted before the next batch
RESIZE_LIMIT = 1 << 24  # the C++ resize's limit on a side


def settings(cfg: SliceConfig) -> dict[str, int]:
    return {
        "scale_resolution": cfg.scale_resolution,
        "max_slice_nums": cfg.max_slice_nums,
        "patch_size": cfg.patch_size,
    }


def plan_text(plan: SlicePlan) -> str:
    """What the dump prints for a plan (sizes width first, the grid columns x rows)."""
    text = f"plan overview {plan.overview[0]}x{plan.overview[1]} grid "
    if plan.grid is None or plan.refine is None:
        return text + "none"
    return text + f"{plan.grid[0]}x{plan.grid[1]} refine {plan.refine[0]}x{plan.refine[1]}"


class Runner:
    """Runs the dump program (under the wrapper) on a job file and checks each job's status line."""

    def __init__(self, dump: str, wrapper: list[str]) -> None:
        self.dump, self.wrapper = dump, wrapper

    def run(self, jobs: Jobs, flag: str, name: str) -> list[str]:
        job_file = jobs.folder / f"{name}.txt"
        job_file.write_text("\n".join(jobs.lines) + "\n", encoding="utf-8")
        try:
            run = subprocess.run(
                [*self.wrapper, self.dump, flag, jobs.arg(job_file)],
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
            )
        except OSError as err:
            return [f"cannot run {self.dump}: {err} (a Windows build needs --wrapper)"]
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
        return failures


# --- images -----------------------------------------------------------------------------------------------


def extra_images(folder: Path) -> list[Path]:
    """Images for what the other sets leave out: one of every slice count 2..9 (the aspect of the grid, the
    area of that many cells), 3000x2000, 3x5, sliced JPEGs (colour and grey), a sliced LA PNG."""
    rng = np.random.default_rng(2026)
    made = []

    def save(name: str, im: Image.Image, **params: Any) -> None:
        if name.endswith(".png"):
            params.setdefault("compress_level", 0)  # stored: noise does not compress (the corpus's PNGs do)
        im.save(folder / name, **params)
        made.append(folder / name)

    for w, h in [(2240, 448), (448, 2240), (3136, 448), (448, 3136), (1792, 896), (1344, 896), (600, 1900)]:
        save(f"grid_{w}x{h}.png", Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
    save("large_3000x2000.png", Image.fromarray(rng.integers(0, 256, (2000, 3000, 3), dtype=np.uint8)))
    save("tiny_3x5.png", Image.fromarray(rng.integers(0, 256, (5, 3, 3), dtype=np.uint8)))
    photo = _smooth(rng, 720, 1280)
    save("jpeg_1280x720.jpg", Image.fromarray(photo), quality=90)
    save("jpeg_grey_700x900.jpg", Image.fromarray(_smooth(rng, 900, 700)).convert("L"), quality=85)
    la = np.dstack([_smooth(rng, 500, 600)[:, :, 0], rng.integers(0, 256, (500, 600), dtype=np.uint8)])
    save("la_600x500.png", Image.fromarray(la, mode="LA"))
    return made


def procedural_images(folder: Path) -> tuple[list[Path], list[tuple[int, int]]]:
    """The processor goldens' procedural images (tests/goldens/minicpm_v2/images.py), saved as PNG in the
    mode they are made in (stored uncompressed, for speed), and the (width, height) of those left to the plan
    jobs: the 10000x10000 one (100 million pixels: about 30 s to write, decode and process on both sides)."""
    made, plan_only = [], []
    for spec in specs():
        if spec["width"] * spec["height"] > 50_000_000:
            plan_only.append((spec["width"], spec["height"]))
            continue
        path = folder / f"{spec['name']}.png"
        make_image(spec).save(path, compress_level=0)
        made.append(path)
    return made, plan_only


def image_check(path: Path, px_out: Path, u8_out: Path, cfg: SliceConfig) -> Check:
    """The job's plan, image count and patch grids, then every uint8 image and every float32 array."""

    def check(status: str) -> str | None:
        if not status.startswith("ok "):
            return f"the C++ side failed: {status}"
        ref = load_and_preprocess(path, cfg)
        tgt = " ".join(f"{h}x{w}" for h, w in ref.tgt_sizes)
        want = f"ok {plan_text(ref.plan)} images {len(ref.pixel_values)} tgt {tgt}"
        if status != want:
            return f"got {status!r}, want {want!r}"
        problem = same("resized (all images, flat)", u8_out, np.concatenate([u.ravel() for u in ref.resized]))
        problem = problem or same(
            "pixels (all images, flat)", px_out, np.concatenate([x.ravel() for x in ref.pixel_values])
        )
        if problem:  # which image
            got = np.load(px_out)
            start = 0
            for i, x in enumerate(ref.pixel_values):
                if not np.array_equal(got[start : start + x.size], x.ravel()):
                    problem += f" (first in image {i}, {x.shape[2]}x{x.shape[1]})"
                    break
                start += x.size
        px_out.unlink(missing_ok=True)
        u8_out.unlink(missing_ok=True)
        return problem

    return check


def add_image_job(jobs: Jobs, path: Path, cfg_path: Path, cfg: SliceConfig) -> None:
    px_out, u8_out = jobs.out("px"), jobs.out("u8")
    jobs.add(
        f"{path.name}: plan, uint8 images and pixels",
        [
            "--minicpmv2",
            jobs.arg(cfg_path),
            "--image",
            jobs.arg(path),
            "--out",
            jobs.arg(px_out),
            "--resized",
            jobs.arg(u8_out),
        ],
        image_check(path, px_out, u8_out, cfg),
    )


def add_forced_resize_jobs(jobs: Jobs, path: Path, cfg_path: Path, sizes: Iterable[tuple[int, int]]) -> None:
    """resize_h_then_v to (width, height) sizes against the Python processor's."""
    rgb = open_image(path).convert("RGB")
    base = ["--minicpmv2", jobs.arg(cfg_path), "--image", jobs.arg(path)]
    for w, h in sizes:
        out = jobs.out("forced")
        want = np.asarray(resize_h_then_v(rgb, (w, h)))
        jobs.add(
            f"{path.name}: resize_h_then_v to {w}x{h}",
            [*base, "--size", f"{h}x{w}", "--resized", jobs.arg(out)],
            expect_ok(partial(same, "resized", out, want)),
        )


# --- plans ------------------------------------------------------------------------------------------------


def meets_a_tie(w: int, h: int, cfg: SliceConfig) -> bool:
    """Whether a round() of the plan of a w x h image gets an exact half (Python rounds it to even): a side
    over its grid count, or a truncated overview or cell side over the patch size."""
    p, s = cfg.patch_size, cfg.scale_resolution
    plan = plan_slices(w, h, cfg)
    cells = [(float(w), float(h))]
    if plan.grid is not None:
        cols, rows = plan.grid
        if any((2 * side) % n == 0 and (2 * side // n) % 2 == 1 for side, n in ((w, cols), (h, rows))):
            return True
        rw, rh = round(w / cols) * cols, round(h / rows) * rows
        cells.append((max(rw, cols) / cols, max(rh, rows) / rows))
    for cw, ch in cells:
        ratio = cw / ch
        side_h = int(s / math.sqrt(ratio))
        side_w = int(side_h * ratio)
        if p % 2 == 0 and (side_h % p == p // 2 or side_w % p == p // 2):
            return True
    return False


def plan_sizes(rng: np.random.Generator, cfg: SliceConfig) -> list[tuple[int, int]]:
    """(width, height) sizes for plan_slices: random and log-uniform ones, the area boundaries k * S^2 +- 1
    for k = 1..10 at several aspects, sizes whose plan meets a round() tie (up to 300 of a sweep), the squares
    1000..1200 (6 and 7 slices: grid ties decided by one ulp of a logarithm), extreme aspects, huge images
    and one whose overview would pass the resize limit."""
    s2 = cfg.scale_resolution * cfg.scale_resolution
    out = [(int(a), int(b)) for a, b in rng.integers(1, 6000, (600, 2))]
    out += [(int(a), int(b)) for a, b in np.exp(rng.uniform(0, math.log(40000), (400, 2)))]
    for k in range(1, 11):
        for aspect in (1.0, 1.5, 2.0, 3.0, 0.25, 7.0, 0.1):
            h = max(1, round(math.sqrt(k * s2 / aspect)))
            w = k * s2 // h
            out += [(w - 1, h), (w, h), (w + 1, h), (h, w), (h, w + 1)]
    out += [(n, n) for n in range(1000, 1201, 3)] + [(n, n + 1) for n in range(440, 1400, 37)]
    out += [(1, 1), (1, 4000), (4000, 1), (14, 2000), (2000, 14), (1, 100000), (100000, 1), (3, 5)]
    out += [(10000, 10000), (20000, 15000), (65000, 3), (3, 65000), (1, 2**24), (2**20, 2**20)]
    out += [(1, 2_000_000_000)]
    ties = [(w, h) for w in range(100, 3000, 23) for h in range(100, 3000, 29) if meets_a_tie(w, h, cfg)]
    out += [ties[int(i)] for i in rng.choice(len(ties), min(300, len(ties)), replace=False)]
    return out


def add_plan_jobs(
    jobs: Jobs, cfg_path: Path, cfg: SliceConfig, name: str, sizes: list[tuple[int, int]]
) -> int:
    """The plan of each (width, height) against slicing.plan_slices; a plan with a side past the C++ resize
    limit must be refused naming it. Returns the number of plans."""
    for w, h in sizes:
        plan = plan_slices(w, h, cfg)
        biggest = max(*plan.overview, *(plan.refine or (0, 0)))
        check = (
            refused("error: an image of", "above the resize limit of 2^24")
            if biggest > RESIZE_LIMIT
            else equals(f"ok {plan_text(plan)}")
        )
        jobs.add(
            f"plan of {w}x{h} ({name})", ["--minicpmv2", jobs.arg(cfg_path), "--target-of", f"{h}x{w}"], check
        )
    return len(sizes)


# --- arrays: position tables, sin-cos, patch rows ---------------------------------------------------------


def torch_is_reproduced() -> bool:
    """Whether torch runs the build of the antialiased bicubic kernel the C++ side reproduces: x86-64 at CPU
    capability AVX2 (torch 2.13 builds that kernel for the default and the AVX2 capability only, so an
    AVX-512 CPU runs the AVX2 one too)."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return x86 and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def numpy_is_reproduced() -> bool:
    """Whether numpy's float32 sin/cos is the kernel the C++ side reproduces: numpy >= 2 with FMA3."""
    try:
        features = importlib.import_module("numpy._core._multiarray_umath").__cpu_features__
    except ImportError:  # numpy 1.x
        return False
    return int(np.__version__.split(".")[0]) >= 2 and bool(features.get("FMA3"))


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distance in float32 units of the last place (0 for equal bits, 1 for neighbours)."""

    def ordered(x: np.ndarray) -> np.ndarray:
        i = x.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    return np.abs(ordered(a) - ordered(b))


@dataclass
class Bound:
    """How close the C++ values must be: bit-equal, or within an absolute bound / a number of ulps."""

    exact: bool
    atol: float = 0.0
    max_ulps: int = 0


def array_check(
    name: str,
    out: Path,
    golden: Callable[[], np.ndarray],
    bound: Bound,
    worst: dict[str, float],
    loose: np.ndarray | None = None,
) -> Check:
    """The .npy the job wrote against the golden: equal float32 bits when exact, else within the bound; the
    values where ``loose`` is set may be 1 ulp off in any case. The largest differences go to ``worst``."""

    def check(status: str) -> str | None:
        if status != "ok":
            return f"the C++ side failed: {status}"
        got, want = np.load(out), np.ascontiguousarray(golden(), dtype=np.float32)
        out.unlink(missing_ok=True)
        if got.shape != want.shape or got.dtype != np.float32:
            return f"{name}: {got.dtype} {got.shape} != float32 {want.shape}"
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        distance = ulps(got, want)
        worst["abs"] = max(worst.get("abs", 0.0), float(diff.max(initial=0.0)))
        worst["ulps"] = max(worst.get("ulps", 0.0), float(distance.max(initial=0)))
        worst["unequal"] = worst.get("unequal", 0.0) + float((distance > 0).sum())
        worst["values"] = worst.get("values", 0.0) + float(want.size)
        if bound.exact:
            bad = got.view(np.uint32) != want.view(np.uint32)
        else:
            bad = (diff > bound.atol) & (distance > bound.max_ulps)
        if loose is not None:
            bad &= ~(loose & (distance <= 1))
        if bad.any():
            where = f"max_abs {diff[bad].max():.3g}, {distance[bad].max()} ulp"
            kind = "bit-exact" if bound.exact else f"within {bound}"
            return f"{name}: {int(bad.sum())} of {want.size} values not {kind}, {where}"
        return None

    return check


def round_to_float32(q: Fraction) -> np.float32:
    """The float32 nearest the rational q, ties to even (q within the float32 range)."""
    guess = np.float32(
        float(q)
    )  # float() rounds once, the float32 conversion a second time: maybe off by one
    inf = np.float32(np.inf)
    candidates = [np.nextafter(guess, -inf), guess, np.nextafter(guess, inf)]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - q), int(c.view(np.uint32)) & 1))


def fma_triples(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Float32 triples (a, b, c) for fma_f32 and a * b + c rounded once, computed exactly with fractions:
    random ones, and ones whose exact sum lies a hair off a float32 midpoint (where rounding to double and
    then to float32 goes wrong), and tiny ones with subnormal results."""
    a = rng.uniform(-4, 4, (2500, 2)).astype(np.float32)
    triples = [np.column_stack([a, rng.uniform(-4, 4, 2500).astype(np.float32)])]
    products = a[:, 0].astype(np.float64) * a[:, 1]
    base = products.astype(np.float32)
    midpoint = (base.astype(np.float64) + np.nextafter(base, np.float32(np.inf))) / 2
    c = (midpoint - products).astype(np.float32)
    for step in (-1, 0, 1):
        shifted = c if step == 0 else np.nextafter(c, np.float32(np.inf) * step)
        triples.append(np.column_stack([a, shifted]))
    tiny = np.ldexp(rng.uniform(-4, 4, (1000, 3)), [-70, -70, -140]).astype(np.float32)
    abc = np.concatenate([*triples, tiny]).astype(np.float32)
    exact = [Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)) for x, y, z in abc]
    return abc, np.array([round_to_float32(q) for q in exact], dtype=np.float32)


def libm_powf() -> Callable[[float, float], float] | None:
    """The C library's ``powf``, the one the C++ side's ``std::pow(float, float)`` calls (None where no C
    math library can be loaded)."""
    name = ctypes.util.find_library("m") or ctypes.util.find_library("c")
    if name is None:
        return None
    function = ctypes.CDLL(name).powf
    function.restype, function.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
    powf: Callable[[float, float], float] = function
    return powf


def sincos_exponents(axis_dim: int) -> np.ndarray:
    """The float32 exponents ``k / (axis_dim / 2)`` whose ``10000 ** e`` gives the frequencies of one axis's
    ``axis_dim`` channels (half a table's), as the official ``get_1d_sincos_pos_embed_from_grid`` computes
    them."""
    exponents = np.arange(axis_dim // 2, dtype=np.float32)
    exponents /= np.float32(axis_dim / 2.0)
    return exponents


def power_differs(dims: Iterable[int]) -> tuple[int, int]:
    """How many of the tables' frequencies numpy's float32 ``power`` gives otherwise than the C library's
    ``powf``, of how many (numpy dispatches ``power`` to Intel SVML on AVX-512 CPUs: up to 1 ulp off the
    C library, which numpy's AVX2 build and the C++ side call)."""
    powf = libm_powf()
    if powf is None:
        return 0, 0
    exponents = np.concatenate([sincos_exponents(d) for d in dims])
    numpy_power = np.float32(10000) ** exponents
    c_power = np.array([powf(10000.0, float(e)) for e in exponents], dtype=np.float32)
    return int((numpy_power.view(np.int32) != c_power.view(np.int32)).sum()), exponents.size


#: How many of the sin-cos tables' frequencies numpy's power gave otherwise than the C library's, of how many
#: (set by add_array_jobs, reported by main).
POWER = {"differs": 0, "of": 0}


def numpy_table(dim: int, h: int, w: int, c_power: bool = False) -> np.ndarray:
    """The reference's table (``resampler.sincos_2d``, numpy float32). With ``c_power``, the same formula
    with the C library's ``powf`` for its one power, the rest numpy's (the multiply, sin, cos, layout):
    what the C++ side must equal on a CPU where numpy's power is SVML's."""
    if not c_power:
        return sincos_2d(dim, (h, w)).numpy()
    powf = libm_powf()
    assert powf is not None
    exponents = sincos_exponents(dim // 2)
    return table_from_powers(np.array([powf(10000.0, float(e)) for e in exponents], dtype=np.float32), h, w)


def table_from_powers(powers: np.ndarray, h: int, w: int) -> np.ndarray:
    """``sincos_2d``'s table from its frequencies' powers ``10000 ** e``: omega = 1 / power, each axis's
    angles position * omega, ``[sin | cos]`` per axis, the column's block then the row's, patches row-major
    (``check_table_layout`` holds this to ``sincos_2d`` itself)."""
    omega = np.float32(1.0) / powers

    def axis(n: int) -> np.ndarray:
        angles = np.einsum("m,d->md", np.arange(n, dtype=np.float32), omega)
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)

    cols, rows = axis(w), axis(h)
    return np.concatenate([np.tile(cols, (h, 1)), np.repeat(rows, w, axis=0)], axis=1)


def check_table_layout() -> str:
    """ "" when ``table_from_powers`` with numpy's own powers gives ``sincos_2d``'s bits (so substituting the
    C library's powers changes nothing else), else what differs."""
    for dim, h, w in ((128, 3, 5), (2304, 4, 2), (8, 5, 7)):
        powers = np.float32(10000) ** sincos_exponents(dim // 2)
        ours, theirs = table_from_powers(powers, h, w), sincos_2d(dim, (h, w)).numpy()
        if ours.shape != theirs.shape or not np.array_equal(ours.view(np.int32), theirs.view(np.int32)):
            return f"table_from_powers({dim}, {h}x{w}) is not sincos_2d's table"
    return ""


def pos_grids(rng: np.random.Generator) -> list[tuple[int, int]]:
    """Patch grids (h, w) for the 27x27 table: the identity, upsampling 27 -> 40, downsampling 27 -> 5, 1xN
    and Nx1 (the overview of a 1x4000 image is 2024x1), the real overviews and slices, random ones."""
    grids = [(27, 27), (40, 40), (5, 5), (27, 40), (40, 27), (27, 5), (5, 27), (1, 1), (1, 50), (50, 1)]
    grids += [(1, 2024), (2024, 1), (1, 27), (27, 1), (2, 2), (3, 3), (4, 4), (9, 9), (13, 13), (26, 26)]
    grids += [(28, 28), (32, 32), (28, 37), (37, 28), (23, 45), (45, 23), (24, 43), (29, 35), (34, 30)]
    grids += [(26, 39), (39, 26), (32, 37), (382, 3), (3, 382), (55, 18), (18, 55), (100, 7), (1000, 1)]
    grids += [(int(a), int(b)) for a, b in rng.integers(1, 120, (60, 2))]
    return grids


def add_array_jobs(
    jobs: Jobs, folder: Path, worst: dict[str, dict[str, float]], other_libc: bool
) -> dict[str, Bound]:
    """pos, sincos, trig, rows and fma jobs, and their refusals. Returns the bounds used. ``other_libc``: the
    program runs on another C library than numpy's (a Windows build under wine), so the angles past numpy's
    SIMD range, where numpy calls the C library's sinf / cosf and so does the program, may be 1 ulp off."""
    rng = np.random.default_rng(27)
    pos_bound = Bound(True) if torch_is_reproduced() else Bound(False, atol=1e-5)
    trig_bound = Bound(True) if numpy_is_reproduced() else Bound(False, max_ulps=1)
    worst.update(pos={}, sincos={}, trig={}, rows={}, fma={})

    def table_file(side: int, channels: int) -> tuple[Path, np.ndarray]:
        table = rng.standard_normal((side * side, channels)).astype(np.float32)
        path = folder / f"table_{side}x{side}x{channels}.f32"
        table.tofile(path)
        return path, table

    def add_pos(path: Path, table: np.ndarray, side: int, h: int, w: int) -> None:
        out = jobs.out("pos")
        channels = table.shape[1]

        def golden(table: np.ndarray = table, h: int = h, w: int = w) -> np.ndarray:
            return resample_pos_table(torch.from_numpy(table[None]), (h, w))[0].numpy()

        jobs.add(
            f"position table {side}x{side}x{channels} -> {h}x{w}",
            ["pos", jobs.arg(path), str(side), str(channels), str(h), str(w), jobs.arg(out)],
            array_check("resampled table", out, golden, pos_bound, worst["pos"]),
        )

    small_path, small = table_file(27, 16)
    for h, w in pos_grids(rng):
        add_pos(small_path, small, 27, h, w)
    real_path, real = table_file(27, 1152)
    for h, w in [(27, 27), (40, 40), (5, 5), (28, 37), (32, 32), (1, 2024), (2024, 1), (23, 45)]:
        add_pos(real_path, real, 27, h, w)
    tiny_path, tiny = table_file(4, 32)  # the tiny checkpoint: a 4x4 table of width 32
    for h, w in [(4, 4), (32, 32), (28, 37), (1, 2024), (2024, 1), (2, 3), (1, 1)]:
        add_pos(tiny_path, tiny, 4, h, w)

    tables = [
        (2304, [(8, 8), (32, 32), (28, 37), (23, 45), (1, 1), (1, 2024), (2024, 1), (45, 23)]),
        (128, [(2, 2), (32, 32), (28, 37), (1, 2024), (382, 3)]),
        (8, [(5, 7)]),
    ]
    differ, frequencies = power_differs(dim // 2 for dim, _ in tables)
    POWER["differs"], POWER["of"] = differ, frequencies
    for dim, grids in tables:
        for h, w in grids:
            out = jobs.out("sincos")
            jobs.add(
                f"sincos_2d({dim}, {h}x{w})",
                ["sincos", str(dim), str(h), str(w), jobs.arg(out)],
                array_check(
                    "sin-cos table",
                    out,
                    partial(numpy_table, dim, h, w, c_power=differ > 0),
                    trig_bound,
                    worst["sincos"],
                ),
            )

    # angles: the real model's (positions 0..2099 at dim 2304), octant boundaries k * pi/4 +- a few ulps,
    # uniform ones up to 2e5 (past both large-argument limits), negative ones, the limits themselves
    omega = np.float32(1) / np.float32(10000) ** (np.arange(576, dtype=np.float32) / np.float32(576.0))
    angles = [(np.arange(2100, dtype=np.float32)[:, None] * omega).ravel()]
    octants = (np.arange(1, 40000, dtype=np.float64) * (math.pi / 4)).astype(np.float32)
    angles += [np.nextafter(octants, np.float32(np.inf) * s) for s in (1, -1)] + [octants]
    angles += [
        rng.uniform(0, 2e5, 100_000).astype(np.float32),
        -rng.uniform(0, 1e4, 20_000).astype(np.float32),
    ]
    limits = np.array([71476.0625, 117435.992, 0.0, 1e-30, 3.0e-8], dtype=np.float32)
    angles += [limits, np.nextafter(limits, np.float32(np.inf)), np.nextafter(limits, np.float32(-np.inf))]
    x = np.concatenate(angles).astype(np.float32)
    x_path = folder / "angles.f32"
    x.tofile(x_path)
    out = jobs.out("trig")
    jobs.add(
        f"numpy_sinf / numpy_cosf of {x.size} angles",
        ["trig", jobs.arg(x_path), jobs.arg(out)],
        array_check(
            "sin and cos",
            out,
            lambda: np.stack([np.sin(x), np.cos(x)]),
            trig_bound,
            worst["trig"],
            np.stack([np.abs(x) > 117435.992, np.abs(x) > 71476.0625]) if other_libc else None,
        ),
    )

    for h, w, p in [(14, 14, 14), (28, 42, 14), (392, 518, 14), (448, 448, 14), (14, 2044, 14), (8, 12, 4)]:
        pixels = rng.standard_normal((3, h, w)).astype(np.float32)
        path = folder / f"pixels_{h}x{w}.f32"
        pixels.tofile(path)
        out = jobs.out("rows")
        jobs.add(
            f"patch_rows of {h}x{w} (patch {p})",
            ["rows", jobs.arg(path), str(h), str(w), str(p), jobs.arg(out)],
            array_check("patch rows", out, partial(patch_rows, pixels, p), Bound(True), worst["rows"]),
        )

    abc, want_fma = fma_triples(rng)
    abc_path = folder / "fma.f32"
    abc.tofile(abc_path)
    out = jobs.out("fma")
    jobs.add(
        f"fma_f32 of {len(abc)} triples",
        ["fma", jobs.arg(abc_path), jobs.arg(out)],
        array_check("fused multiply-add", out, lambda: want_fma, Bound(True), worst["fma"]),
    )

    refusals = [
        (["pos", jobs.arg(small_path), "27", "15", "5", "5"], "error: resample_pos_table: "),
        (["pos", jobs.arg(small_path), "27", "16", "0", "5"], "error: resample_pos_table: "),
        (["sincos", "6", "4", "4"], "error: sincos_2d: a table of dim 6"),
        (["sincos", "128", "0", "4"], "error: sincos_2d: "),
        (["rows", jobs.arg(folder / "pixels_14x14.f32"), "15", "14", "14"], "error: patch_rows: "),
        (["rows", jobs.arg(folder / "pixels_28x42.f32"), "28", "42", "5"], "error: patch_rows: "),
    ]
    for fields, want in refusals:
        jobs.add(
            f"refused: {' '.join(fields[:1] + fields[2:])}",
            [*fields, jobs.arg(jobs.out("refused"))],
            refused(want),
        )
    return {"pos": pos_bound, "trig": trig_bound}


def add_bad_settings_jobs(jobs: Jobs, folder: Path) -> int:
    good = settings(REAL)
    bad: dict[str, tuple[object, str]] = {
        "no_patch": ({k: v for k, v in good.items() if k != "patch_size"}, "patch_size"),
        "zero_slices": ({**good, "max_slice_nums": 0}, "max_slice_nums"),
        "float_scale": ({**good, "scale_resolution": 448.0}, "scale_resolution"),
        "bool_patch": ({**good, "patch_size": True}, "patch_size"),
        "string_scale": ({**good, "scale_resolution": "448"}, "scale_resolution"),
        "huge_patch": ({**good, "patch_size": 5000}, "patch_size"),
        "negative_slices": ({**good, "max_slice_nums": -1}, "max_slice_nums"),
        "not_object": ([448, 9, 14], "must be a JSON object"),
    }
    for name, (raw, key) in bad.items():
        path = folder / f"bad_{name}.json"
        path.write_text(json.dumps(raw))
        jobs.add(
            f"bad settings {name}",
            ["--minicpmv2", jobs.arg(path), "--target-of", "100x100"],
            refused("error: image_processor: ", key),
        )
    return len(bad)


# --- main -------------------------------------------------------------------------------------------------


def slice_counts(paths: list[Path]) -> set[int]:
    """The numbers of slices the real plan gives these images (0: not sliced)."""
    counts = set()
    for path in paths:
        with Image.open(path) as im:
            grid = plan_slices(im.width, im.height, REAL).grid
        counts.add(grid[0] * grid[1] if grid else 0)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True, help="the minicpm_v2_preprocess_dump program")
    ap.add_argument("--wrapper", default="", help="runs the program, e.g. wine for a Windows build")
    ap.add_argument(
        "--path-prefix", default=None, help="prefix for paths handed to the program (Z: under wine)"
    )
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message="Palette images with Transparency")
    wrapper = shlex.split(args.wrapper)
    prefix = args.path_prefix if args.path_prefix is not None else ("Z:" if wrapper else "")
    corpus = sorted(args.corpus.glob("*")) if args.corpus.is_dir() else []
    if not corpus:
        print(f"FAIL: no corpus images at {args.corpus}")
        return 1
    runner = Runner(args.dump, wrapper)
    failures: list[str] = [layout] if (layout := check_table_layout()) else []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcpm_pre_") as tmp:
        folder = Path(tmp)
        real_path, odd_path = folder / "real.json", folder / "odd.json"
        real_path.write_text(json.dumps(settings(REAL)))
        odd_path.write_text(json.dumps(settings(ODD)))
        procedural, plan_only = procedural_images(folder)
        decoding = good_images(folder)
        extra = extra_images(folder)
        images = [*corpus, *procedural, *decoding, *extra]
        made = time.monotonic()
        counts = slice_counts(images)
        if not set(range(2, 10)) | {0} <= counts:
            failures.append(f"the images give the slice counts {sorted(counts)}, not every one of 0, 2..9")
        cases = [(p, real_path, REAL) for p in images] + [(p, odd_path, ODD) for p in [*corpus, extra[0]]]
        for start in range(0, len(cases), BATCH):
            jobs = Jobs(folder, prefix)
            for path, cfg_path, cfg in cases[start : start + BATCH]:
                add_image_job(jobs, path, cfg_path, cfg)
            failures += runner.run(jobs, "--jobs", f"images{start}")

        jobs = Jobs(folder, prefix)
        rng = np.random.default_rng(448)
        n_plans = add_plan_jobs(jobs, real_path, REAL, "real", [*plan_only, *plan_sizes(rng, REAL)])
        n_plans += add_plan_jobs(jobs, odd_path, ODD, "odd", plan_sizes(rng, ODD)[:1500])
        by_name = {p.name: p for p in images}
        add_forced_resize_jobs(
            jobs, by_name["small_447x449.png"], real_path, [(448, 448), (448, 100), (3, 449)]
        )
        add_forced_resize_jobs(
            jobs, corpus[0], real_path, [(200, 40), (700, 30), (13, 900), (1, 1), (517, 389)]
        )
        n_bad = add_bad_settings_jobs(jobs, folder)
        n_plan_jobs = len(jobs.checks)
        failures += runner.run(jobs, "--jobs", "plans")

        jobs = Jobs(folder, prefix)
        worst: dict[str, dict[str, float]] = {}
        bounds = add_array_jobs(jobs, folder, worst, other_libc=bool(wrapper))
        n_array_jobs = len(jobs.checks)
        failures += runner.run(jobs, "--numerics", "arrays")

        single_px, single_u8 = folder / "single_px.npy", folder / "single_u8.npy"
        single = ["--minicpmv2", real_path, "--image", corpus[0], "--out", single_px, "--resized", single_u8]
        single_args = [f"{prefix}{a}" if isinstance(a, Path) else a for a in single]
        one = subprocess.run(
            [*wrapper, args.dump, *single_args],
            capture_output=True,
            text=True,
        )
        said = "ok " + one.stdout.strip() if one.returncode == 0 else f"exit {one.returncode}: {one.stderr}"
        problem = image_check(corpus[0], single_px, single_u8, REAL)(said)
        if problem:
            failures.append(f"single-job command line: {problem}")
    for f in failures:
        print("FAIL", f)
    total = len(cases) + n_plan_jobs + n_array_jobs + 2
    mode = {k: "bit-exact" if b.exact else f"within {b}" for k, b in bounds.items()}
    print(
        f"minicpmv2 preprocess parity: {len(images)} images ({len(corpus)} corpus, {len(procedural)}"
        f" procedural, {len(decoding)} decoding cases, {len(extra)} more; slice counts {sorted(counts)}),"
        f" {len(cases)} image jobs, {n_plans} plans, {n_bad} bad settings, {n_array_jobs} array jobs;"
        f" position tables {mode['pos']} (torch {torch.__version__},"
        f" {torch.backends.cpu.get_cpu_capability()}), sin/cos {mode['trig']} (numpy {np.__version__})"
    )
    if POWER["differs"]:
        print(
            f"  numpy's float32 power (SVML on this CPU) gave {POWER['differs']} of the {POWER['of']} table"
            " frequencies 1 ulp off the C library's powf, which the C++ side calls: the sin-cos goldens take"
            " the C library's powf for that one step, numpy's for the rest"
        )
    for name, w in worst.items():
        print(
            f"  {name}: {int(w.get('unequal', 0))} of {int(w.get('values', 0))} values unequal, max_abs"
            f" {w.get('abs', 0.0):.3g}, max {int(w.get('ulps', 0))} ulps"
        )
    print(f"  images made in {made - started:.1f} s, {time.monotonic() - started:.1f} s in all")
    print(f"{total - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
