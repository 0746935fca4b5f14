"""Bad inputs to minicpm_v2_run (check_minicpm_v2.py bad-input): each must end with exit code 2, stderr one
line ``minicpm_v2_run: error: ...`` naming the culprit (the file, model.json key, marker or flag), and nothing
on stdout. Broken model folders are copies of the converted one, damaged.

The images the official slicing processes, however extreme (1x4000, 4000x1, 1x1, 10000x10000), are not bad
input: check_minicpm_v2.py greedy runs them against the reference. An image past twice Pillow's
decompression-bomb limit (89,478,485 pixels) is: Pillow's ``open`` refuses it, and so the Python processor
(``models.common.images.open_image``, checked here as the oracle on the same file).
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner_bad_inputs import BadCase, _drop, _remove, _set
from runner_harness import CheckFailed, Runner

from graphsurgeon.formats.model_json import read_model_json

#: A side whose image is past twice Pillow's MAX_IMAGE_PIXELS (13400^2 = 179,560,000 > 178,956,970).
BOMB_SIDE = 13400


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def write_bomb_png(path: Path, side: int) -> None:
    """A PNG whose header claims ``side`` x ``side`` RGB pixels, with one row of data: both readers must
    refuse it from the header, before decoding anything."""
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    row = zlib.compress(b"\0" + b"\x80" * (3 * side))
    png = (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", row)
        + _png_chunk(b"IEND", b"")
    )
    path.write_bytes(png)


def _images(tmp: Path) -> None:
    from PIL import Image

    from graphsurgeon.models.common.images import ImageError, open_image

    write_bomb_png(tmp / "bomb.png", BOMB_SIDE)
    try:
        open_image(tmp / "bomb.png")
    except ImageError as err:
        if "too large to open" not in str(err):
            raise CheckFailed(f"the Python processor refuses {tmp / 'bomb.png'} otherwise: {err}") from None
    else:
        raise CheckFailed(f"the Python processor opens {tmp / 'bomb.png'}: it is no oracle for the refusal")
    (tmp / "garbled.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    whole = tmp / "whole.png"
    Image.new("RGB", (300, 200), (200, 100, 50)).save(whole)
    (tmp / "cut.png").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    (tmp / "words.png").write_text("not an image\n")
    Image.new("RGB", (800, 600), (20, 120, 220)).save(tmp / "sliced.png")


def _tokenizer_without(marker: str) -> Any:
    """The model's tokenizer.json with ``marker`` gone from the added tokens and the vocabulary."""

    def apply(folder: Path) -> None:
        path = folder / "tokenizer.json"
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["added_tokens"] = [t for t in doc["added_tokens"] if t["content"] != marker]
        vocab = doc["model"]["vocab"]
        vocab[marker + "_gone"] = vocab.pop(marker)
        path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")

    return apply


def cases(doc: dict[str, Any]) -> list[BadCase]:
    start, end, query = int(doc["tokens"]["image_start"]), int(doc["tokens"]["image_end"]), doc["resampler"]
    q = int(query["query_num"])
    unk = int(doc["tokens"]["placeholder"])
    text = ["--prompt", "What is in the image?", "--gen", "2"]
    ids = ["--ids", "1,100,200,300", "--gen", "2"]
    image = [*text, "--image", "{tmp}/whole.png"]
    span = ",".join([str(start), *[str(unk)] * (q + 1), str(end)])
    return [
        BadCase(
            f"an image past twice Pillow's limit ({BOMB_SIDE}x{BOMB_SIDE})",
            [*text, "--image", "{tmp}/bomb.png"],
            "{tmp}/bomb.png",
        ),
        BadCase("a missing image file", [*text, "--image", "{tmp}/nope.png"], "{tmp}/nope.png"),
        BadCase("a garbled PNG", [*text, "--image", "{tmp}/garbled.png"], "{tmp}/garbled.png"),
        BadCase("a PNG cut in half", [*text, "--image", "{tmp}/cut.png"], "{tmp}/cut.png"),
        BadCase("a text file as image", [*text, "--image", "{tmp}/words.png"], "{tmp}/words.png"),
        BadCase(
            "model.json of an unknown family", text, '"family" is "minicpm_v3"', _set("minicpm_v3", "family")
        ),
        BadCase(
            "model.json of penguin_vl's family (its version 2)",
            text,
            '"version" is 1, not 2',
            _set("penguin_vl", "family"),
        ),
        BadCase("model.json version 2", text, '"version" is 2, not 1', _set(2, "version")),
        BadCase(
            "model.json without resampler.query_num",
            text,
            "resampler.query_num",
            _drop("resampler", "query_num"),
        ),
        BadCase(
            "model.json without tokens.image_start",
            text,
            "tokens.image_start",
            _drop("tokens", "image_start"),
        ),
        BadCase(
            "model.json without vision.position_embedding.grid_side",
            text,
            "vision.position_embedding.grid_side",
            _drop("vision", "position_embedding", "grid_side"),
        ),
        BadCase(
            "a table resampled without antialias",
            text,
            "vision.position_embedding.antialias",
            _set(False, "vision", "position_embedding", "antialias"),
        ),
        BadCase(
            "another slice order",
            text,
            "image_processor.slice_order",
            _set("diagonal", "image_processor", "slice_order"),
        ),
        BadCase(
            "resampler.query_num the net does not have",
            image,
            '"resampler.query_num" is 9',
            _set(9, "resampler", "query_num"),
        ),
        BadCase(
            "the resampler net's .bin missing", image, "resampler.ncnn.bin", _remove("resampler.ncnn.bin")
        ),
        BadCase(
            "a tokenizer.json without the <image> marker",
            text,
            'tokenizer.json: no token "<image>"',
            _tokenizer_without("<image>"),
        ),
        BadCase(
            "the <image> marker in the prompt text", ["--prompt", "Look: <image>", "--gen", "2"], '"<image>"'
        ),
        BadCase(
            "an <image> without </image> (--ids)", ["--ids", f"1,{start},{unk},5", "--gen", "2"], "has no"
        ),
        BadCase(
            f"an image span of {q + 1} tokens (--ids)",
            ["--ids", f"1,{span},5", "--gen", "2", "--image", "{tmp}/whole.png"],
            f"not resampler.query_num {q}",
        ),
        BadCase("an image and no image span (--ids)", [*ids, "--image", "{tmp}/whole.png"], "0 image spans"),
        BadCase(
            "a prompt past max_positions",
            [*text, "--image", "{tmp}/sliced.png"],
            "the model's context is 30 positions",
            _set(30, "max_positions"),
        ),
    ]


def run(runner: Runner, bad: Sequence[BadCase], tmp: Path) -> tuple[list[str], int]:
    """Each case on its own damaged copy when it damages one; (the labels that did not hold, how many
    did). A case needing --prompt or --image the build lacks is skipped, saying so."""
    failures: list[str] = []
    passed = 0
    for i, case in enumerate(bad):
        if ("--prompt" in case.args and not runner.tokenizer) or (
            "--image" in case.args and not runner.preprocess
        ):
            print(f"skip {case.label}: needs --prompt / --image, which this build lacks")
            continue
        model = runner.model
        if case.damage is not None:
            model = tmp / f"model{i}"
            shutil.copytree(runner.model, model)
            case.damage(model)
        args = [a.replace("{tmp}", str(tmp)) for a in case.args]
        expect = case.expect.replace("{tmp}", str(tmp))
        try:
            try:
                result = runner.run(args, model=model, timeout=120)
            except subprocess.TimeoutExpired:
                raise CheckFailed("still running after 120 s") from None
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            prefix = f"{Path(runner.program).stem}: error: "
            if result.code != 2:
                raise CheckFailed(f"exit code {result.code}, expected 2; stderr: {result.stderr.strip()!r}")
            if len(lines) != 1 or not lines[0].startswith(prefix) or expect not in lines[0]:
                raise CheckFailed(f"stderr {result.stderr.strip()!r} is not one error line naming {expect!r}")
            if result.stdout:
                raise CheckFailed(f"it wrote {result.stdout[:200]!r} to stdout")
            print(f"ok   {case.label}: {lines[0]}", flush=True)
            passed += 1
        except CheckFailed as err:
            print(f"FAIL {case.label}: {err}", flush=True)
            failures.append(case.label)
    return failures, passed


def bad_input(runner: Runner, tmp: Path) -> tuple[list[str], int]:
    _images(tmp)
    return run(runner, cases(read_model_json(runner.model, ("minicpm_v2",))), tmp)
