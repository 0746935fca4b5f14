"""The test images of the MiniCPM-V-2 processor goldens, made procedurally from a seed (numpy's PCG64 and
Pillow only, no graphsurgeon: ``make_goldens.py`` imports this module in the scratch venv of the official
environment, and tests/test_minicpm_v2_processor.py in the project's).

Each spec names a size and a pattern; the goldens hold the sha256 of the pixels made, so a numpy or Pillow
that made other pixels from the same spec fails the test at the input, not at the output.

Patterns: ``noise`` (every byte random: full-scale steps that make the bicubic overshoot and clip),
``blocks`` (a coarse random grid stretched by nearest index: flat areas and hard edges), ``separable``
(``row + column`` modulo 256 from two random vectors: cheap enough for 10000x10000). ``mode`` is the mode
the image is made in before the processor's ``convert("RGB")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

#: width x height, grouped by what they exercise.
SIZES: dict[str, str] = {
    # below one patch, a few pixels, and thin strips (upscaled to about 448^2 area, one side 14)
    "tiny": "1x1 2x3 7x7 13x5 31x17 1x4000 4000x1 14x2000 2000x14 3x1000",
    # area <= 448^2: no slices, the overview only
    "small": "100x100 224x224 378x378 448x448 447x449 640x313 300x200 200x300 50x400 400x50 321x97",
    # just past 448^2 (2 or 3 slices), and the square tie-break between [1, 2] and [2, 1]
    "boundary": "448x449 449x448 455x455 500x500 896x448 897x448",
    # ensure_divide ties (x.5, Python rounds to even): refine side / grid and overview side / 14
    "ties": "321x1001 300x1001 300x721 503x480 641x480 643x480",
    "medium": "640x480 480x640 800x600 600x800 1024x768 1280x720 720x1280 1000x3000 3000x1000 1920x1080"
    " 1080x1920 1344x1344 1345x1343 997x661 333x1777 1777x333 2001x999 1050x1050 1150x1150 1500x1000",
    "large": "4000x3000 3000x4000 5000x700 700x5000 2500x2500",
}
#: (name, width, height, mode): images made in another mode first
MODES = [("grey", 640, 480, "L"), ("rgba", 500, 375, "RGBA"), ("palette", 800, 200, "P")]
HUGE = (10000, 10000)
CORPUS_FILES = ["desert.jpg", "newspaper.png", "photo_20180413_3.jpg"]


def specs() -> list[dict[str, Any]]:
    """Every procedural image: name, width, height, pattern, seed, mode."""
    out: list[dict[str, Any]] = []
    for group, sizes in SIZES.items():
        for size in sizes.split():
            w, h = (int(v) for v in size.split("x"))
            seed = len(out) + 1
            out.append(
                {
                    "name": f"{group}_{w}x{h}",
                    "width": w,
                    "height": h,
                    "pattern": ("noise", "blocks")[seed % 2],
                }
            )
    for name, w, h, mode in MODES:
        out.append(
            {"name": f"mode_{name}_{w}x{h}", "width": w, "height": h, "pattern": "noise", "mode": mode}
        )
    out.append(
        {"name": f"huge_{HUGE[0]}x{HUGE[1]}", "width": HUGE[0], "height": HUGE[1], "pattern": "separable"}
    )
    for i, spec in enumerate(out):
        spec["seed"] = 1000 + i
        spec.setdefault("mode", "RGB")
    return out


def _pixels(rng: np.random.Generator, width: int, height: int, channels: int, pattern: str) -> np.ndarray:
    if pattern == "noise":
        return rng.integers(0, 256, size=(height, width, channels), dtype=np.uint8)
    if pattern == "blocks":
        gh, gw = max(1, height // 37), max(1, width // 29)
        coarse = rng.integers(0, 256, size=(gh, gw, channels), dtype=np.uint8)
        rows = np.arange(height) * gh // height
        cols = np.arange(width) * gw // width
        return np.ascontiguousarray(coarse[rows][:, cols])
    if pattern == "separable":
        row = rng.integers(0, 256, size=(height, 1, channels), dtype=np.uint8)
        col = rng.integers(0, 256, size=(1, width, channels), dtype=np.uint8)
        return row + col  # uint8 arithmetic wraps: (row + col) mod 256
    raise ValueError(f"unknown pattern {pattern!r}")


def make_image(spec: dict[str, Any]) -> Image.Image:
    """The image ``spec`` describes, in its ``mode`` (``frombytes``: the same call in Pillow 10 and 13)."""
    rng = np.random.default_rng(spec["seed"])
    w, h, mode = spec["width"], spec["height"], spec["mode"]
    channels = {"RGB": 3, "RGBA": 4, "L": 1, "P": 1}.get(mode)
    if channels is None:
        raise ValueError(f"unknown mode {mode!r}")
    img = Image.frombytes(mode, (w, h), _pixels(rng, w, h, channels, spec["pattern"]).tobytes())
    if mode == "P":
        img.putpalette(rng.integers(0, 256, size=768, dtype=np.uint8).tobytes())
    return img


def open_corpus(folder: Path, name: str) -> Image.Image:
    """A corpus image as the official README opens it (``Image.open``; the caller converts to RGB)."""
    with Image.open(folder / name) as img:
        img.load()
        return img.copy()
