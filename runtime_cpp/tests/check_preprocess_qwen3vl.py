"""Parity check of the C++ Qwen3-VL image processor (the family's qwen3vl_*, through
``qwen3_vl_preprocess_dump --qwen3vl``) against HF transformers' Qwen2VLImageProcessorPil, run here at
test time (never the code under test):

- pixel_values and grid of the corpus images and of synthetic ones (preprocess_images.py's, plus a portrait
  40x1200, an exact multiple 96x64 and a large non-multiple 517x389) under several pixel budgets: the tiny
  checkpoint's (graphsurgeon/models/qwen3_vl/tiny/preprocessor_config.json), a small max_pixels forcing a
  downscale, a large min_pixels forcing an upscale, one whose floor path ends at max(factor, ...), the real
  model's;
- pixel_values at a few forced sizes, against HF's own resize, rescale, normalize and patchify steps;
- smart_resize for thousands of (height, width, budget) triples against HF's smart_resize, with exact and
  near ties of round() and sizes whose floor/ceil operand lands within 1e-9 of an integer;
- refusals by the C++ side, each with a message naming its cause: aspect ratio above 200 (HF refuses those
  too), an image smaller than one patch (HF would upscale it; the runtime refuses it), bad config keys;
- transparency: images with an alpha band or a tRNS chunk (preprocess_images.py's and transparent_images()'
  here: alpha gradients, fully transparent, LA, 16-bit grey+alpha, palettes with tRNS bytes, a single
  transparent index, a tRNS Pillow's regex reads as one index, entries past a short PLTE, grey/RGB/16-bit
  colour keys that match, a 1-bit key, a 4-bit key Pillow compares unscaled) go through HF as opened, so HF
  composites them onto white (image_transforms.convert_to_rgb: convert("RGBA"), alpha_composite over white,
  convert("RGB")) and the C++ side must too; every image's decoded alpha plane is compared with Pillow's
  convert("RGBA") alpha (none exactly when HF would not composite) and its white compositing with HF's
  convert_to_rgb, small ones included; one RGB + tRNS image goes through do_convert_rgb false (no
  compositing on either side).

The processor config handed to the C++ side is model.json's "image_processor" object with the keys
graphsurgeon/models/qwen3_vl/model.json.j2 writes. Everything must be bit-exact (np.array_equal) and the grids
identical; a difference prints the case and the exit status is 1. All jobs go to one qwen3_vl_preprocess_dump
process (``--jobs``), plus one run of the plain command line. Usage:
    check_preprocess_qwen3vl.py --dump BUILD/families/qwen3_vl/qwen3_vl_preprocess_dump [--wrapper wine]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from check_preprocess import Check, Jobs, equals, expect_ok, refused, same
from PIL import Image
from preprocess_images import _smooth, good_images, write_png
from transformers.image_processing_backends import PilBackend
from transformers.image_transforms import convert_to_rgb
from transformers.image_utils import SizeDict
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil, smart_resize

REPO = Path(__file__).resolve().parents[2]
TINY_CONFIG = REPO / "graphsurgeon" / "models" / "qwen3_vl" / "tiny" / "preprocessor_config.json"
TEMPLATE = REPO / "graphsurgeon" / "models" / "qwen3_vl" / "model.json.j2"
CORPUS = REPO.parent / "shared" / "corpus" / "images"
HF_ASPECT = 200  # smart_resize's fixed limit; model.json.j2 writes max_aspect_ratio 200

Budget = tuple[int, int]  # (min_pixels, max_pixels)


def budgets(factor: int, tiny: Budget) -> dict[str, Budget]:
    ff = factor * factor
    return {
        "tiny": tiny,
        "down": (4 * ff, 128 * ff),  # a corpus image shrinks to about 128 merged tokens
        "up": (1024 * ff, 16384 * ff),  # every image here grows to about 1024 merged tokens
        "floor": (ff, 8 * ff),  # the thin side of a 40x1200 image floors to 0, so max(factor, ...) wins
        "real": (65536, 16777216),  # Qwen3-VL's released preprocessor_config.json
    }


def template_keys() -> list[str]:
    """The keys model.json.j2 writes in "image_processor" (so this check follows the template)."""
    text = TEMPLATE.read_text()
    block = text[text.index('"image_processor": {') :]
    block = block[: block.index("\n  }")]
    return re.findall(r'^\s+"(\w+)":', block, flags=re.M)


def processor_json(raw: dict[str, Any], budget: Budget) -> dict[str, Any]:
    """model.json's "image_processor" object for the tiny config with a pixel budget."""
    p, m = int(raw["patch_size"]), int(raw["merge_size"])
    return {
        "patch_size": p,
        "temporal_patch_size": raw["temporal_patch_size"],
        "merge_size": m,
        "factor": p * m,
        "min_pixels": budget[0],
        "max_pixels": budget[1],
        "max_aspect_ratio": HF_ASPECT,
        "image_mean": raw["image_mean"],
        "image_std": raw["image_std"],
        "rescale_factor": raw["rescale_factor"],
        "resample": "bicubic",
        "do_convert_rgb": raw["do_convert_rgb"],
    }


def hf_processor(raw: dict[str, Any], budget: Budget) -> Qwen2VLImageProcessorPil:
    kwargs = {k: v for k, v in raw.items() if k not in ("image_processor_type", "size")}
    return Qwen2VLImageProcessorPil(**kwargs, size={"shortest_edge": budget[0], "longest_edge": budget[1]})


def hf_rgb(im: Image.Image) -> np.ndarray:
    """HF's conversion to RGB (transparency composited onto white), as an [H, W, 3] array."""
    out = convert_to_rgb(im, return_numpy=True)
    assert isinstance(out, np.ndarray)
    return out


def hf_input(path: Path) -> Image.Image:
    """The image HF is fed: the file as Pillow opens it (its mode, alpha band and info["transparency"])."""
    im = Image.open(path)
    im.load()
    return im


def hf_composites(im: Image.Image) -> bool:
    """Whether HF's convert_to_rgb composites this image onto white (its own test, image_transforms.py)."""
    return "A" in im.getbands() or im.info.get("transparency") is not None


class Case:
    """Lazily computed HF goldens (computed during the check, so few large arrays are alive at once)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.processors: dict[Budget, Qwen2VLImageProcessorPil] = {}

    def processor(self, budget: Budget) -> Qwen2VLImageProcessorPil:
        if budget not in self.processors:
            self.processors[budget] = hf_processor(self.raw, budget)
        return self.processors[budget]

    def auto(self, im: Image.Image, budget: Budget) -> tuple[np.ndarray, tuple[int, int]]:
        out = self.processor(budget)(images=im, return_tensors="np")
        _, gh, gw = (int(v) for v in out["image_grid_thw"][0])
        return np.asarray(out["pixel_values"]), (gh, gw)

    def forced(self, im: Image.Image, height: int, width: int) -> np.ndarray:
        """HF's own steps at a given size: PilBackend's resize (what Qwen2VL's resize calls after
        smart_resize), rescale, normalize, patchify."""
        proc = self.processor((1, 1 << 40))
        chw = np.moveaxis(hf_rgb(im), -1, 0)
        resized = PilBackend.resize(
            proc, chw, size=SizeDict(height=height, width=width), resample=proc.resample
        )
        scaled = proc.normalize(proc.rescale(resized, proc.rescale_factor), proc.image_mean, proc.image_std)
        patches, _, _ = proc.patchify(scaled, proc.patch_size, proc.merge_size, proc.temporal_patch_size)
        return np.asarray(patches)


def pixel_check(out: Path, golden: Callable[[], tuple[np.ndarray, tuple[int, int]]], patch: int) -> Check:
    """The job's "ok target HxW grid GHxGW" line against HF's image_grid_thw, then its pixel_values."""

    def check(status: str) -> str | None:
        if not status.startswith("ok"):
            return f"the C++ side failed: {status}"
        want, (gh, gw) = golden()
        said = f"ok target {gh * patch}x{gw * patch} grid {gh}x{gw}"
        if status != said:
            return f"got {status!r}, want {said!r} (HF's image_grid_thw [1, {gh}, {gw}])"
        problem = same("pixel_values", out, want)
        out.unlink(missing_ok=True)
        return problem

    return check


def write_config(folder: Path, name: str, obj: object) -> Path:
    path = folder / f"q3_{name}.json"
    path.write_text(json.dumps(obj))
    return path


def add_image_jobs(
    jobs: Jobs, case: Case, path: Path, configs: dict[str, tuple[Path, Budget]], names: list[str]
) -> bool:
    """pixel_values and grid of one image under the named budgets; returns whether HF composites it (an
    image with transparency)."""
    im = hf_input(path)
    patch = int(case.raw["patch_size"])
    for name in names:
        cfg_path, budget = configs[name]
        out = jobs.out(f"q3_{name}")
        jobs.add(
            f"{path.name}: pixel_values under {name} {budget}",
            ["--qwen3vl", jobs.arg(cfg_path), "--image", jobs.arg(path), "--out", jobs.arg(out)],
            pixel_check(out, partial(case.auto, im, budget), patch),
        )
    return hf_composites(im)


def add_forced_jobs(jobs: Jobs, case: Case, path: Path, cfg_path: Path) -> None:
    """pixel_values at forced sizes (multiples of the factor, one extreme), and a size that is not one."""
    im = hf_input(path)
    patch, factor = int(case.raw["patch_size"]), int(case.raw["patch_size"]) * int(case.raw["merge_size"])
    h, w = im.height, im.width
    near = (max(1, round(h / factor)) * factor, max(1, round(w / factor)) * factor)
    base = ["--qwen3vl", jobs.arg(cfg_path), "--image", jobs.arg(path)]
    for th, tw in [(factor, factor), (factor * 2, factor * 40), (factor * 7, factor * 3), near]:
        out = jobs.out(f"q3_forced{th}x{tw}")

        def golden(th: int = th, tw: int = tw) -> tuple[np.ndarray, tuple[int, int]]:
            return case.forced(im, th, tw), (th // patch, tw // patch)

        jobs.add(
            f"{path.name}: pixel_values at {th}x{tw}",
            [*base, "--size", f"{th}x{tw}", "--out", jobs.arg(out)],
            pixel_check(out, golden, patch),
        )
    odd_size = f"{factor + patch}x{factor}"
    jobs.add(
        f"{path.name}: forced size {odd_size} refused",
        [*base, "--size", odd_size, "--out", jobs.arg(jobs.out("q3_bad_size"))],
        refused("error: the resize target", "not a positive multiple of patch_size * merge_size"),
    )


def add_refused_image(jobs: Jobs, path: Path, cfg_path: Path, patch: int, factor: int, budget: Budget) -> str:
    """An image the runtime refuses: aspect above 200 (HF refuses it too) or a side below one patch (HF
    would upscale it). Returns which."""
    with Image.open(path) as im:
        h, w = im.height, im.width
    try:
        smart_resize(h, w, factor=factor, min_pixels=budget[0], max_pixels=budget[1])
        hf_refuses = False
    except ValueError:
        hf_refuses = True
    if hf_refuses:
        cause, check = "aspect", refused("error: an image of", "above max_aspect_ratio 200")
    elif min(h, w) < patch:
        cause, check = "small", refused("error: an image of", "smaller than one patch")
    else:
        raise SystemExit(f"{path.name} ({w}x{h}) is not a bad input: fix the test")
    out = jobs.out("q3_refused")
    jobs.add(
        f"{path.name} ({w}x{h}): refused ({cause})",
        ["--qwen3vl", jobs.arg(cfg_path), "--image", jobs.arg(path), "--out", jobs.arg(out)],
        check,
    )
    return cause


def sizes_for(rng: np.random.Generator, factor: int, budget: Budget) -> list[tuple[int, int]]:
    """Image sizes for smart_resize: random and log-uniform ones, fixed edge cases (aspect 200 and just
    above it, sides below a patch, huge), exact ties of round(side / factor) and their neighbours, and
    sizes whose floor (over budget) or ceil (under budget) operand is within 1e-9 of an integer."""
    out = [(int(a), int(b)) for a, b in rng.integers(1, 5000, (300, 2))]
    out += [(int(a), int(b)) for a, b in np.exp(rng.uniform(math.log(16), math.log(20000), (100, 2)))]
    out += [(1, 1), (15, 15), (16, 16), (15, 40), (40, 15), (20, 4000), (4000, 20), (20, 4001), (4001, 20)]
    out += [(16, 3200), (16, 3201), (32, 6400), (17, 3500), (9000, 7000), (20000, 20000), (40, 1200)]
    half = factor // 2
    for a, b in rng.integers(0, 80, (40, 2)):
        for d in (-1, 0, 1):
            out.append((int(factor * a + half + d) or 1, int(factor * b + half - d) or 1))
    hh, ww = np.meshgrid(np.arange(16, 1300.0), np.arange(16, 1300.0), indexing="ij")
    product = np.round(hh / factor) * factor * (np.round(ww / factor) * factor)  # np.round: ties to even
    beta_over = np.sqrt(hh * ww / budget[1])
    beta_under = np.sqrt(budget[0] / (hh * ww))
    for branch, quotients in (
        (product > budget[1], (hh / beta_over / factor, ww / beta_over / factor)),
        (product < budget[0], (hh * beta_under / factor, ww * beta_under / factor)),
    ):
        for q in quotients:
            near = branch & (np.abs(q - np.rint(q)) < 1e-9 * np.maximum(q, 1))
            out += [(int(a), int(b)) for a, b in zip(hh[near][:60], ww[near][:60], strict=True)]
    return out


def add_smart_resize_jobs(
    jobs: Jobs, configs: dict[str, tuple[Path, Budget]], patch_of: dict[str, int]
) -> int:
    """smart_resize of every size of sizes_for() under each config, against HF's; returns the count."""
    rng = np.random.default_rng(3)
    count = 0
    for name, (cfg_path, budget) in configs.items():
        patch = patch_of[name]
        factor = patch * 2
        for h, w in sizes_for(rng, factor, budget):
            try:
                th, tw = smart_resize(h, w, factor=factor, min_pixels=budget[0], max_pixels=budget[1])
                check = (
                    refused("error: an image of", "smaller than one patch")
                    if min(h, w) < patch
                    else equals(f"ok target {th}x{tw}")
                )
            except ValueError:
                check = refused("error: an image of", "above max_aspect_ratio 200")
            jobs.add(
                f"smart_resize {h}x{w} ({name} {budget})",
                ["--qwen3vl", jobs.arg(cfg_path), "--target-of", f"{h}x{w}"],
                check,
            )
            count += 1
    return count


def add_bad_config_jobs(jobs: Jobs, good: dict[str, Any]) -> int:
    """Configs the C++ reader must refuse, each naming its key."""
    bad: dict[str, tuple[object, str]] = {
        "factor_mismatch": ({**good, "factor": 28}, "factor"),
        "no_factor": ({k: v for k, v in good.items() if k != "factor"}, "factor"),
        "min_over_max": ({**good, "min_pixels": good["max_pixels"] + 1}, "min_pixels"),
        "zero_min": ({**good, "min_pixels": 0}, "min_pixels"),
        "huge_max": ({**good, "max_pixels": 1 << 60}, "max_pixels"),
        "zero_std": ({**good, "image_std": [0.5, 0, 0.5]}, "image_std"),
        "two_means": ({**good, "image_mean": [0.5, 0.5]}, "image_mean"),
        "no_mean": ({k: v for k, v in good.items() if k != "image_mean"}, "image_mean"),
        "neg_rescale": ({**good, "rescale_factor": -1}, "rescale_factor"),
        "resample_bilinear": ({**good, "resample": "bilinear"}, "resample"),
        "resample_int": ({**good, "resample": 3}, "resample"),
        "bool_patch": ({**good, "patch_size": True}, "patch_size"),
        "float_patch": ({**good, "patch_size": 16.0}, "patch_size"),
        "zero_temporal": ({**good, "temporal_patch_size": 0}, "temporal_patch_size"),
        "no_merge": ({k: v for k, v in good.items() if k != "merge_size"}, "merge_size"),
        "aspect_below_one": ({**good, "max_aspect_ratio": 0.5}, "max_aspect_ratio"),
        "rgb_string": ({**good, "do_convert_rgb": "yes"}, "do_convert_rgb"),
        "not_object": ([good], "must be a JSON object"),
    }
    for name, (obj, key) in bad.items():
        cfg_path = write_config(jobs.folder, f"bad_{name}", obj)
        jobs.add(
            f"bad config {name}",
            ["--qwen3vl", jobs.arg(cfg_path), "--target-of", "100x100"],
            refused(f"error: image_processor: {key}"),
        )
    broken = jobs.folder / "q3_broken.json"
    broken.write_text('{"patch_size": 16,')
    jobs.add(
        "config not JSON",
        ["--qwen3vl", jobs.arg(broken), "--target-of", "100x100"],
        refused("error: ", jobs.arg(broken)),
    )
    return len(bad) + 1


def extra_images(folder: Path) -> tuple[list[Path], list[Path]]:
    """Synthetic images beside preprocess_images.py's: (good ones, ones above the aspect limit)."""
    rng = np.random.default_rng(5)
    made = []
    for name, h, w in (("portrait_40x1200.png", 1200, 40), ("multiple_64x96.png", 96, 64)):
        Image.fromarray(_smooth(rng, h, w)).save(folder / name)
        made.append(folder / name)
    Image.fromarray(_smooth(rng, 389, 517)).save(folder / "large_517x389.jpg", quality=90)
    made.append(folder / "large_517x389.jpg")
    Image.fromarray(_smooth(rng, 17, 3500)).save(folder / "aspect_3500x17.png")
    return made, [folder / "aspect_3500x17.png"]


def transparent_images(folder: Path) -> list[Path]:
    """Images with transparency beside preprocess_images.py's, each at least a patch on a side: the alpha
    values, tRNS forms and Pillow quirks HF's compositing onto white meets (the file names say which)."""
    rng = np.random.default_rng(7)
    made: list[Path] = []

    def save(name: str, im: Image.Image, **params: Any) -> None:
        im.save(folder / name, **params)
        made.append(folder / name)

    def hand(name: str, samples: np.ndarray, bit_depth: int, color_type: int, **kw: Any) -> None:
        made.append(write_png(folder / name, samples, bit_depth, color_type, **kw))

    h, w = 48, 80
    rgb = _smooth(rng, h, w)
    y, x = np.mgrid[0:h, 0:w]
    alpha = (x * 255 // (w - 1) + y * 255 // (h - 1)) // 2  # a diagonal gradient from 0 to 255
    alpha[h // 2 :] = rng.integers(0, 256, (h - h // 2, w))  # and every alpha over varied colours
    a8 = alpha.astype(np.uint8)
    save("t_rgba_gradient.png", Image.fromarray(np.dstack([rgb, a8])))
    save("t_rgba_clear.png", Image.fromarray(np.dstack([rgb, np.zeros_like(a8)])))  # fully transparent
    save("t_la_gradient.png", Image.fromarray(np.dstack([rng.integers(0, 256, (h, w), np.uint8), a8[::-1]])))
    a16 = alpha * 256 + rng.integers(0, 256, (h, w))  # the high byte is the alpha Pillow keeps
    hand("t_la16_hand.png", np.dstack([rng.integers(0, 65536, (h, w)), a16]), 16, 4)
    rgba16 = np.dstack([rng.integers(0, 65536, (h, w, 3)), a16])
    hand("t_rgba16_adam7_hand.png", rgba16, 16, 6, interlace=True)
    short = bytes(rng.integers(0, 256, 15, dtype=np.uint8))  # 5 PLTE entries, indices up to 7
    past = rng.integers(0, 8, (h, w, 1))
    hand("t_palette_short_trns_hand.png", past, 8, 3, palette=short, trns=b"\0\x80\xc8")
    pal8 = bytes(rng.integers(0, 256, 24, dtype=np.uint8))
    indices = rng.integers(0, 8, (h, w, 1))
    # Pillow's _simple_palette regex takes b"\xff\0\xff\n" for one transparent index ($ before a final \n)
    hand("t_palette_trns_newline_hand.png", indices, 8, 3, palette=pal8, trns=b"\xff\0\xff\n")
    hand("t_palette_trns_two_zeros_hand.png", indices, 8, 3, palette=pal8, trns=b"\0\xff\0")
    bits = rng.integers(0, 2, (h, w, 1))
    hand("t_bilevel_trns0_hand.png", bits, 1, 0, trns=b"\0\0")  # black is transparent
    hand("t_bilevel_trns1_hand.png", bits, 1, 0, trns=b"\0\1")  # Pillow's key 255: white is
    hand("t_grey_trns_hit_hand.png", rng.integers(0, 8, (h, w, 1)) * 32, 8, 0, trns=b"\0\x40")
    # a 4-bit key of 17 (out of range): Pillow compares it with the x17 expansion, so value 1 is transparent
    hand("t_grey4_trns17_hand.png", rng.integers(0, 4, (h, w, 1)), 4, 0, trns=b"\0\x11")
    # a 16-bit key 0x0120: Pillow masks it to 0x20 and compares with min(v, 255)
    g16 = rng.choice(np.array([0x20, 0x120, 0x1FF, 7, 300]), (h, w, 1))
    hand("t_grey16_trns_hand.png", g16, 16, 0, trns=b"\x01\x20")
    keyed = rgb.copy()
    keyed[5:20, 10:40] = (12, 200, 77)
    save("t_rgb_trns_hit.png", Image.fromarray(keyed), transparency=(12, 200, 77))
    rgb16 = rng.integers(0, 65536, (h, w, 3))
    rgb16[4:16, 4:30] = (0x34AB, 0x7801, 0xBCFF)  # high bytes = the key's low bytes: transparent
    rgb16[20:30, 4:30] = (0x1234, 0x5678, 0x9ABC)  # the key itself: opaque (its high bytes are compared)
    hand("t_rgb16_trns_hand.png", rgb16, 16, 2, trns=struct.pack(">HHH", 0x1234, 0x5678, 0x9ABC))
    return made


def add_alpha_jobs(jobs: Jobs, path: Path) -> None:
    """The decoded alpha plane against Pillow's convert("RGBA") alpha (none exactly when HF would not
    composite), the decoded RGB against its RGB bands, composite_on_white() against HF's convert_to_rgb."""
    alpha, decoded, composited = (jobs.out(f"q3_{name}") for name in ("alpha", "decoded", "composited"))

    def compare() -> str | None:
        im = hf_input(path)
        if hf_composites(im):
            rgba = np.asarray(im.convert("RGBA"))
            want_alpha, want_rgb = rgba[..., 3], rgba[..., :3]
        else:
            want_alpha, want_rgb = np.zeros(0, np.uint8), np.asarray(im.convert("RGB"))
        problems = [
            same("alpha", alpha, want_alpha),
            same("decoded RGB", decoded, want_rgb),
            same("composited onto white", composited, hf_rgb(im)),
        ]
        for f in (alpha, decoded, composited):
            f.unlink(missing_ok=True)
        return "; ".join(p for p in problems if p) or None

    jobs.add(
        f"{path.name}: alpha plane and white compositing",
        [
            *("--image", jobs.arg(path), "--alpha", jobs.arg(alpha)),
            *("--decoded", jobs.arg(decoded), "--composited", jobs.arg(composited)),
        ],
        expect_ok(compare),
    )


def add_no_convert_jobs(jobs: Jobs, raw: dict[str, Any], budget: Budget, keyed: Path, rgba: Path) -> None:
    """do_convert_rgb false: an RGB image with a tRNS colour is used as it is on both sides (HF takes
    np.array() of it), an RGBA one is refused by the C++ side."""
    plain = {**raw, "do_convert_rgb": False}
    cfg_path = write_config(jobs.folder, "no_convert", processor_json(plain, budget))
    out = jobs.out("q3_no_convert")
    jobs.add(
        f"{keyed.name}: pixel_values with do_convert_rgb false",
        ["--qwen3vl", jobs.arg(cfg_path), "--image", jobs.arg(keyed), "--out", jobs.arg(out)],
        pixel_check(out, partial(Case(plain).auto, hf_input(keyed), budget), int(raw["patch_size"])),
    )
    jobs.add(
        f"{rgba.name}: refused with do_convert_rgb false",
        ["--qwen3vl", jobs.arg(cfg_path), "--image", jobs.arg(rgba), "--out", jobs.arg(jobs.out("q3_nc"))],
        refused("error: an image in mode RGBA needs do_convert_rgb"),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True, help="the qwen3_vl_preprocess_dump program")
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
    raw = json.loads(TINY_CONFIG.read_text())
    patch, factor = int(raw["patch_size"]), int(raw["patch_size"]) * int(raw["merge_size"])
    tiny_budget = (int(raw["size"]["shortest_edge"]), int(raw["size"]["longest_edge"]))
    case = Case(raw)
    failures = []
    if template_keys() != list(processor_json(raw, tiny_budget)):
        failures.append(f"model.json.j2 writes the keys {template_keys()}, this check writes others")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pvl_q3pre_") as tmp:
        folder = Path(tmp)
        jobs = Jobs(folder, prefix)
        configs = {
            name: (write_config(folder, name, processor_json(raw, budget)), budget)
            for name, budget in budgets(factor, tiny_budget).items()
        }
        every = list(configs)
        tiny_path = configs["tiny"][0]
        synthetic, too_wide = extra_images(folder)
        small, transparent = [], 0
        with_alpha = transparent_images(folder)
        decoded_only = [*good_images(folder), *with_alpha]
        for path in [*corpus, *decoded_only]:
            add_alpha_jobs(jobs, path)
        for path in decoded_only:
            with Image.open(path) as im:
                if min(im.size) < patch:
                    small.append(path)
                else:
                    synthetic.append(path)
        for path in corpus:
            transparent += add_image_jobs(jobs, case, path, configs, every)
            add_forced_jobs(jobs, case, path, tiny_path)
        for path in synthetic:
            big = path.name.startswith(("portrait", "large", "rgb.png"))
            names = every if big else [n for n in every if n != "up"]
            transparent += add_image_jobs(jobs, case, path, configs, names)
        add_forced_jobs(jobs, case, synthetic[0], tiny_path)
        add_forced_jobs(jobs, case, with_alpha[0], tiny_path)
        add_no_convert_jobs(jobs, raw, tiny_budget, folder / "t_rgb_trns_hit.png", with_alpha[0])
        causes = [add_refused_image(jobs, p, tiny_path, patch, factor, tiny_budget) for p in small + too_wide]
        odd_budget = (3136, 1003520)  # Qwen2-VL's patch 14 (factor 28) and its default budget
        odd_path = write_config(folder, "odd", processor_json({**raw, "patch_size": 14}, odd_budget))
        patch_of = {**dict.fromkeys(configs, patch), "odd": 14}
        n_sizes = add_smart_resize_jobs(jobs, {**configs, "odd": (odd_path, odd_budget)}, patch_of)
        n_bad = add_bad_config_jobs(jobs, processor_json(raw, tiny_budget))
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
        plain_args = [
            "--qwen3vl",
            jobs.arg(tiny_path),
            "--image",
            jobs.arg(corpus[0]),
            "--out",
            jobs.arg(single),
        ]
        one = subprocess.run([*wrapper, args.dump, *plain_args], capture_output=True, text=True)
        said = "ok " + one.stdout.strip() if one.returncode == 0 else f"exit {one.returncode}: {one.stderr}"
        first = hf_input(corpus[0])
        problem = pixel_check(single, partial(case.auto, first, tiny_budget), patch)(said.strip())
        if problem:
            failures.append(f"single-job command line: {problem}")
    total = len(jobs.checks) + 2
    for f in failures:
        print("FAIL", f)
    elapsed = time.monotonic() - started
    print(
        f"qwen3vl preprocess parity: {len(corpus)} corpus + {len(synthetic)} synthetic images under "
        f"{len(configs)} budgets, {n_sizes} smart_resize sizes, {causes.count('small')} images below a patch "
        f"and {causes.count('aspect')} above the aspect limit refused, {n_bad} bad configs, {transparent} "
        f"transparent images composited onto white, {len(decoded_only) + len(corpus)} alpha planes, "
        f"{elapsed:.1f} s"
    )
    print(f"{total - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
