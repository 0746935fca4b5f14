"""Synthetic test images for check_preprocess.py, made at test time: Pillow writes what it can (RGBA with
varying alpha, L, LA, P with and without transparency, "1", 16-bit grey, RGB with a tRNS colour, APNG,
JPEG with each chroma subsampling, progressive, grey and CMYK JPEG, odd tiny sizes), and a small PNG writer
here makes what Pillow cannot write (grey at 2 and 4 bits, 16-bit RGB/RGBA/LA, a palette shorter than its
indices, grey tRNS, Adam7-interlaced files), plus broken files that must be refused.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

# Adam7 passes: (x0, y0, dx, dy)
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def _pack_row(row: np.ndarray, bit_depth: int) -> bytes:
    """One scanline's samples (``[W, C]``) as PNG bytes: big-endian 16-bit, or sub-byte samples packed MSB
    first with the last byte zero-padded."""
    flat = row.reshape(-1)
    if bit_depth == 16:
        return flat.astype(">u2").tobytes()
    if bit_depth == 8:
        return flat.astype(np.uint8).tobytes()
    per_byte = 8 // bit_depth
    padded = np.zeros(-(-flat.size // per_byte) * per_byte, dtype=np.uint32)
    padded[: flat.size] = flat
    groups = padded.reshape(-1, per_byte)
    shifts = np.array([8 - bit_depth * (i + 1) for i in range(per_byte)], dtype=np.uint32)
    return (groups << shifts).sum(axis=1).astype(np.uint8).tobytes()


def write_png(
    path: Path,
    samples: np.ndarray,
    bit_depth: int,
    color_type: int,
    palette: bytes | None = None,
    trns: bytes | None = None,
    interlace: bool = False,
) -> Path:
    """A PNG of ``samples`` (``[H, W, C]``, values within ``bit_depth``), filter 0 on every row."""
    h, w = samples.shape[:2]
    raw = bytearray()
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    for x0, y0, dx, dy in passes:
        sub = samples[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        for row in sub:
            raw += b"\x00" + _pack_row(row, bit_depth)
    data = b"\x89PNG\r\n\x1a\n" + _chunk(
        b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, int(interlace))
    )
    if palette is not None:
        data += _chunk(b"PLTE", palette)
    if trns is not None:
        data += _chunk(b"tRNS", trns)
    data += _chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + _chunk(b"IEND", b"")
    path.write_bytes(data)
    return path


def _smooth(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """An RGB picture with gradients, edges and noise (so chroma subsampling and resizing both matter)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([x / max(w - 1, 1), y / max(h - 1, 1), ((x + y) % 17) / 16], axis=-1) * 200
    base[(x // 7 + y // 5) % 2 == 1] += 40
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def good_images(folder: Path) -> list[Path]:
    """Images both sides must decode identically."""
    rng = np.random.default_rng(20261020)
    made: list[Path] = []

    def save(name: str, im: Image.Image, **params: Any) -> None:
        im.save(folder / name, **params)
        made.append(folder / name)

    def hand(name: str, samples: np.ndarray, bit_depth: int, color_type: int, **kw: Any) -> None:
        made.append(write_png(folder / name, samples, bit_depth, color_type, **kw))

    rgb = _smooth(rng, 61, 97)
    alpha = (np.arange(97)[None, :] * 255 // 96 * np.ones((61, 1), dtype=np.int64)).astype(np.uint8)
    alpha[:10, :10] = 0
    save("rgba_alpha.png", Image.fromarray(np.dstack([rgb, alpha])))
    save("rgb.png", Image.fromarray(rgb))
    save("rgb_trns.png", Image.fromarray(rgb), transparency=tuple(int(v) for v in rgb[3, 4]))
    grey = rng.integers(0, 256, (45, 64), dtype=np.uint8)
    save("grey_L.png", Image.fromarray(grey))
    save("grey_LA.png", Image.fromarray(np.dstack([grey, grey[::-1]])))
    save("bilevel_1.png", Image.fromarray(grey > 127))
    wide16 = rng.integers(0, 65536, (33, 29)).astype(np.uint16)
    wide16[::2] %= 300  # half the rows near 255, so clipping and pass-through both occur
    save("grey16.png", Image.fromarray(wide16))
    palette = rng.integers(0, 256, 768, dtype=np.uint8).tobytes()
    indices = rng.integers(0, 256, (40, 53), dtype=np.uint8)
    pim = Image.fromarray(indices)
    pim.putpalette(palette)
    save("palette.png", pim)
    save("palette_trns_index.png", pim, transparency=5)
    save("palette_trns_bytes.png", pim, transparency=bytes(rng.integers(0, 256, 256, dtype=np.uint8)))
    p16 = Image.fromarray((indices % 16).astype(np.uint8))
    p16.putpalette(palette[:48])
    save("palette_4bit.png", p16, bits=4)
    for w, h in ((1, 1), (3, 500), (500, 3), (2, 3)):
        save(f"tiny_{w}x{h}.png", Image.fromarray(_smooth(rng, h, w)))
    frames = [Image.fromarray(_smooth(rng, 30, 40)) for _ in range(3)]
    save("apng.png", frames[0], save_all=True, append_images=frames[1:], duration=100)  # frame 0 is read
    made.append(folder / "ünïcödé_图像.png")
    made[-1].write_bytes((folder / "rgb.png").read_bytes())

    g4 = rng.integers(0, 16, (23, 31, 1))
    hand("grey2_hand.png", rng.integers(0, 4, (23, 31, 1)), 2, 0)
    hand("grey4_hand.png", g4, 4, 0)
    hand("grey_trns_hand.png", rng.integers(0, 256, (20, 21, 1)), 8, 0, trns=b"\x00\x10")
    hand("grey4_trns_hand.png", g4, 4, 0, trns=b"\x00\x03")
    hand("rgb16_hand.png", rng.integers(0, 65536, (19, 27, 3)), 16, 2)
    hand("la16_hand.png", rng.integers(0, 65536, (19, 27, 2)), 16, 4)
    hand("rgba16_hand.png", rng.integers(0, 65536, (19, 27, 4)), 16, 6)
    hand("grey16_trns_hand.png", rng.integers(0, 600, (19, 27, 1)), 16, 0, trns=b"\x00\x20")
    short = bytes(rng.integers(0, 256, 15, dtype=np.uint8))  # 5 entries; indices go up to 255
    hand("palette_short_hand.png", rng.integers(0, 256, (17, 18, 1)), 8, 3, palette=short)
    hand("palette_2bit_hand.png", rng.integers(0, 4, (17, 18, 1)), 2, 3, palette=short[:12])
    hand("rgb_adam7_hand.png", _smooth(rng, 29, 37), 8, 2, interlace=True)
    hand("grey4_adam7_hand.png", g4, 4, 0, interlace=True)
    hand("palette_adam7_hand.png", rng.integers(0, 5, (13, 11, 1)), 8, 3, palette=short, interlace=True)
    hand("rgba16_adam7_hand.png", rng.integers(0, 65536, (9, 10, 4)), 16, 6, interlace=True)
    hand("grey_adam7_3x2_hand.png", rng.integers(0, 256, (2, 3, 1)), 8, 0, interlace=True)

    photo = Image.fromarray(_smooth(rng, 67, 101))
    save("jpeg_420.jpg", photo, quality=90)
    save("jpeg_422.jpg", photo, quality=90, subsampling=1)
    save("jpeg_444.jpg", photo, quality=95, subsampling=0)
    save("jpeg_progressive.jpg", photo, quality=85, progressive=True)
    save("jpeg_optimized.jpg", photo, quality=75, optimize=True)
    save("jpeg_grey.jpg", photo.convert("L"), quality=90)
    save("jpeg_cmyk.jpg", photo.convert("CMYK"), quality=90)
    save("jpeg_odd_17x9.jpg", Image.fromarray(_smooth(rng, 9, 17)), quality=80)
    save("jpeg_1x1.jpg", Image.fromarray(_smooth(rng, 1, 1)))
    save("jpeg_3x500.jpg", Image.fromarray(_smooth(rng, 500, 3)))
    return made


def bad_images(folder: Path, good: list[Path]) -> list[Path]:
    """Files the C++ loader must refuse with an error naming the path (a BMP named .png, truncated PNG and
    JPEG, an empty file, a missing file)."""
    by_name = {p.name: p for p in good}
    Image.open(by_name["rgb.png"]).save(folder / "bmp_named.png", format="BMP")
    png = by_name["rgb.png"].read_bytes()
    (folder / "truncated.png").write_bytes(png[: len(png) // 2])
    jpg = by_name["jpeg_420.jpg"].read_bytes()
    (folder / "truncated.jpg").write_bytes(jpg[: len(jpg) * 3 // 5])
    (folder / "empty.png").write_bytes(b"")
    names = ("bmp_named.png", "truncated.png", "truncated.jpg", "empty.png", "missing.png")
    return [folder / n for n in names]
