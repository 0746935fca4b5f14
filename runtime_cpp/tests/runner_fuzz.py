"""A bounded mutation test of penguin_vl_run's input readers, meant for the ASan/UBSan build.

Seeded (``--seed``, default 14) and of a fixed size (``--cases``, default 200): each case damages one input
of a working run and runs the program on it, with an image (the vision half) or text-only (the LLM half):

* ``model.json``: every integer equal to one value changed alike (as in a file written for another model
  size), one integer changed, a leaf replaced by a hostile value, a key dropped, or its bytes damaged;
* an image (PNG or JPEG): bytes flipped, cut or spliced, or the PNG header's sizes overwritten;
* ``tokenizer.json``: the same JSON mutations in its small parts, or its bytes damaged.

Every run must end cleanly: exit code 0, or exit code 2 with a last stderr line ``<program>: error:
...`` and nothing else on stderr; never a crash, an ``internal error`` (exit 1), a sanitizer report or a
timeout. A failing case prints its seed and mutation, so it can be replayed with ``--only N``. (The runner
before issue 14's fixes fails it: case 69, patch_size 14 -> 28 in both places, corrupts the heap.)
"""

from __future__ import annotations

import io
import json
import random
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner_harness import CheckFailed, Runner

HOSTILE: list[Any] = [
    0,
    -1,
    1,
    3,
    2**31,
    -(2**31) - 1,
    2**62,
    2**64 - 1,
    1e308,
    -1e308,
    0.5,
    "",
    "x",
    "a\u0000b",
    "é" * 300,
    None,
    True,
    [],
    [0],
    [2**62, 64],
    {},
    {"type": "Sequence"},
]
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")
TOKENIZER_PARTS = ("added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "model")


@dataclass(frozen=True)
class Case:
    index: int
    target: str  # "model.json", "image", "tokenizer.json"
    what: str  # the mutation, for the report
    with_image: bool


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every value in a JSON document (containers included), the root excepted."""
    out: list[tuple[Any, ...]] = [path] if path else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node[:8]):  # long lists (vocabularies): their head is enough
            out += _leaves(value, (*path, i))
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _other_int(rng: random.Random, old: int) -> int:
    return rng.choice([old + 1, old - 1, old * 2, old // 2, old + 1 if old < 2 else old * old, 4096, -old])


def _mutate_json(rng: random.Random, doc: Any, skip: Callable[[tuple[Any, ...]], bool]) -> tuple[Any, str]:
    """One of: every integer equal to some value changed alike (a file written for another model size: the
    claims stay consistent with each other, not with the nets), one integer changed, one value replaced
    by a hostile one, one key dropped."""
    paths = [p for p in _leaves(doc) if not skip(p)]

    def slot(path: tuple[Any, ...]) -> tuple[Any, Any]:
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        return parent, path[-1]

    ints = [p for p in paths if _is_int(slot(p)[0][slot(p)[1]])]
    kind = rng.random()
    if ints and kind < 0.4:
        parent, last = slot(rng.choice(ints))
        old = parent[last]
        new = _other_int(rng, old)
        same = [p for p in ints if slot(p)[0][slot(p)[1]] == old]
        for p in same:
            parent, last = slot(p)
            parent[last] = new
        return doc, f"{old} -> {new} at {', '.join('.'.join(map(str, p)) for p in same)}"[:200]
    path = rng.choice(ints if ints and kind < 0.65 else paths)
    parent, last = slot(path)
    label = ".".join(str(k) for k in path)
    if isinstance(parent, dict) and kind > 0.9:
        del parent[last]
        return doc, f"drop {label}"
    old = parent[last]
    value = _other_int(rng, old) if _is_int(old) and kind < 0.65 else rng.choice(HOSTILE)
    parent[last] = value
    return doc, f"{label} = {json.dumps(value)[:60]}"


def _mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    kind = rng.choice(["cut", "flip", "splice"])
    if kind == "cut" or len(data) < 16:
        n = rng.randrange(0, max(1, len(data)))
        return data[:n], f"cut to {n} bytes"
    buf = bytearray(data)
    if kind == "flip":
        spots = [rng.randrange(len(buf)) for _ in range(rng.randint(1, 8))]
        for i in spots:
            buf[i] ^= 1 << rng.randrange(8)
        return bytes(buf), f"bits flipped at {spots}"
    at = rng.randrange(len(buf))
    chunk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return bytes(buf[:at] + chunk + buf[at:]), f"{len(chunk)} random bytes inserted at {at}"


def _png_sizes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """The IHDR width and height overwritten (the CRC left stale, as a careless writer would)."""
    w, h = rng.choice([(0, 1), (1, 0), (2**31 - 1, 2**31 - 1), (1, 2**30), (65535, 65535), (3, 5)])
    return data[:16] + struct.pack(">II", w, h) + data[24:], f"PNG IHDR {w}x{h}"


def seed_images(folder: Path) -> list[Path]:
    """A small PNG (RGBA) and JPEG written here, deterministic, so the test needs no corpus."""
    from PIL import Image

    img = Image.new("RGBA", (61, 43))
    for y in range(43):
        for x in range(61):
            img.putpixel((x, y), ((x * 7) % 256, (y * 11) % 256, (x * y) % 256, 200 + x % 56))
    png = folder / "seed.png"
    img.save(png)
    jpeg = folder / "seed.jpg"
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="JPEG", quality=80)
    jpeg.write_bytes(buf.getvalue())
    return [png, jpeg]


def make_case(
    rng: random.Random, index: int, model: Path, images: list[Path], work: Path
) -> tuple[Case, Path, Path]:
    """The damaged model folder (a copy, or the original when only the image is damaged) and the image."""
    target = rng.choice(["model.json", "model.json", "image", "tokenizer.json"])
    image = rng.choice(images)
    folder = model
    if target == "image":
        data = image.read_bytes()
        if image.suffix == ".png" and rng.random() < 0.3:
            data, what = _png_sizes(rng, data)
        else:
            data, what = _mutate_bytes(rng, data)
        damaged = work / f"case{index}{image.suffix}"
        damaged.write_bytes(data)
        return Case(index, target, f"{image.name}: {what}", True), folder, damaged
    folder = work / f"model{index}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for item in model.iterdir():  # the nets are linked, not copied: only the JSON files are damaged
        if item.suffix in (".param", ".bin"):
            (folder / item.name).symlink_to(item)
        elif item.is_file():
            shutil.copy2(item, folder / item.name)
    path = folder / target
    if rng.random() < 0.75:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if target == "model.json":
            doc, what = _mutate_json(rng, doc, lambda p: p[0] == "verifier")
        else:
            doc, what = _mutate_json(rng, doc, lambda p: p[0] not in TOKENIZER_PARTS or p == ("model",))
        path.write_text(json.dumps(doc, ensure_ascii=rng.random() < 0.5), encoding="utf-8")
    else:
        data, what = _mutate_bytes(rng, path.read_bytes())
        path.write_bytes(data)
    return Case(index, target, what, rng.random() < 0.5), folder, image


def check_run(runner: Runner, case: Case, folder: Path, image: Path, timeout: float) -> int:
    """The run's exit code, when it ended cleanly (else CheckFailed)."""
    args = ["--prompt", "Describe the image.", "--gen", "2"]
    if case.with_image:
        args += ["--image", str(image)]
    try:
        result = runner.run(args, model=folder, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"no answer within {timeout:.0f} s") from None
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if any(mark in result.stderr for mark in SANITIZER_MARKS):
        raise CheckFailed("sanitizer report:\n" + result.stderr[-3000:])
    if result.code == 0:
        return 0
    if result.code != 2:
        raise CheckFailed(f"exit code {result.code}; stderr: {result.stderr[-2000:]!r}")
    if len(lines) != 1 or not lines[0].startswith(f"{Path(runner.program).stem}: error: "):
        raise CheckFailed(f"not one error line: {result.stderr[-2000:]!r}")
    return 2


def fuzz(runner: Runner, *, cases: int, seed: int, only: int | None = None, timeout: float = 60) -> list[str]:
    if not (runner.tokenizer and runner.preprocess):
        print("skip: the fuzz test needs a build with the tokenizer and the image preprocessing")
        return []
    failures: list[str] = []
    outcomes: dict[str, int] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pvl-fuzz-") as tmp:
        work = Path(tmp)
        images = seed_images(work)
        rng = random.Random(seed)
        for index in range(cases):
            case, folder, image = make_case(rng, index, runner.model, images, work)
            if only is not None and index != only:
                continue
            label = f"case {index} (seed {seed}) {case.target} {case.what}" + (
                " + image" if case.with_image else ""
            )
            try:
                code = check_run(runner, case, folder, image, timeout)
                key = f"{case.target} exit {code}"
                outcomes[key] = outcomes.get(key, 0) + 1
            except CheckFailed as err:
                print(f"FAIL {label}: {err}", flush=True)
                failures.append(label)
            if folder != runner.model:
                shutil.rmtree(folder, ignore_errors=True)
    print(
        f"fuzz: {cases} cases in {time.perf_counter() - start:.1f} s; "
        f"clean runs: {dict(sorted(outcomes.items()))}"
    )
    return failures
