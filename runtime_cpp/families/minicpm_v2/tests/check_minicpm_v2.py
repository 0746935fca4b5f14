"""ctest checks of minicpm_v2_run against the family's fp32 Python reference
(``graphsurgeon.models.minicpm_v2.model.load_model(checkpoint).generate``, itself checked against the official
remote code: graphsurgeon/models/minicpm_v2/README.md), for the checkpoint model.json's
``verifier.checkpoint`` names:

    check_minicpm_v2.py convert --out DIR
    check_minicpm_v2.py greedy|bad-input --runner EXE --model DIR [--wrapper CMD] [--with-tokenizer]
                        [--with-preprocess]

``convert`` converts the embedded tiny checkpoint with the repository's gsurg (``apply
rules/minicpm_v2.yaml``) into DIR, reusing DIR while its ``model.json`` is newer than every rule, template,
schema and family source the conversion reads.

``greedy``: 3 prompts (one Chinese) x 3 images (corpus images resized to 300x200, not sliced; 800x600, 2x2
slices; 1400x1300, 3x3 slices), one prompt with two images, a text-only prompt, and the sizes the official
slicing takes however extreme (1x4000, 4000x1, 1x1, and 10000x10000, past Pillow's decompression-bomb
warning but below its refusal at twice that): the program's ``--gen 32`` must give the reference's
``generate(ids, pixel_values, 32)`` tokens (both stop at an EOS, the program's ``--print-ids`` keeping it as
the reference does), its prompt ids (``--print-ids``) the reference's (``tokenizers`` on the checkpoint's
tokenizer.json over ``prompt.chat_prompt``'s text, as verify.py's ``prompt_ids``), and its streamed text the
``tokenizers`` decoding of the tokens. Plus the debug inputs (``--ids`` and ``--pixel-values`` from the
Python processor, an unsliced image) and sampling: one seed twice gives the same tokens and ``--top-k 1``
the greedy ones. Without the tokenizer or the preprocessing in the build, the debug inputs stand in where
they can (an image with slices has no ``--pixel-values`` form: those cases are skipped, saying so).

``bad-input`` (minicpm_v2_bad_inputs.py): exit code 2, one ``minicpm_v2_run: error:`` line naming the
culprit, nothing on stdout. Exit status 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import shlex
import struct
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from runner_harness import (
    CORPUS_IMAGES,
    PIXEL_MAGIC,
    REPO,
    CheckFailed,
    Runner,
    first_difference,
    gsurg_apply,
)

from graphsurgeon.formats.model_json import read_model_json

PROMPTS = ("What is in the image?", "Describe the colours in one sentence.", "这是什么颜色？")
SIZES = ((300, 200), (800, 600), (1400, 1300))  # no slices, 2x2, 3x3
EXTREME_SIZES = ((1, 4000), (4000, 1), (1, 1), (10000, 10000))
NEW_TOKENS = 32
RULES = REPO / "rules" / "minicpm_v2.yaml"
CONVERSION_INPUTS = (
    "rules/minicpm_v2.yaml",
    "rules/llm-kv-cache.yaml",
    "rules/common-rules.yaml",
    "graphsurgeon/models/minicpm_v2",
    "graphsurgeon/models/common",
)


def convert(out: Path) -> None:
    """The embedded tiny checkpoint converted into ``out``, unless ``out`` is newer than every input."""
    gsurg_apply(RULES, out, CONVERSION_INPUTS, ["-q"])


# --- the reference --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    ids: list[int]  # the prompt
    tokens: list[int]  # generate's new tokens, up to and with an EOS
    pixels: list[list[np.ndarray]]  # per image: the [3, H, W] float32 images, the overview first


class Reference:
    """The fp32 reference, its processor and the checkpoint's tokenizer.json."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        from graphsurgeon.models.minicpm_v2.config import load_config
        from graphsurgeon.models.minicpm_v2.model import load_model

        doc = read_model_json(model_dir, ("minicpm_v2",))
        checkpoint = Path(doc["verifier"]["checkpoint"])
        self.config = load_config(checkpoint)
        self.model = load_model(checkpoint)
        self.tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
        self.eos = {int(e) for e in doc["tokens"]["eos"]}

    def answer(self, prompt: str, images: Sequence[Path]) -> Answer:
        import warnings

        from PIL import Image

        from graphsurgeon.models.minicpm_v2.processor import load_and_preprocess
        from graphsurgeon.models.minicpm_v2.prompt import chat_prompt

        with warnings.catch_warnings():  # 10000x10000: Pillow warns, and opens it
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            processed = [
                load_and_preprocess(p, self.config.slicing, self.config.resampler.query_num) for p in images
            ]
        placeholder = "".join(p.placeholder for p in processed) if processed else None
        ids = [int(t) for t in self.tokenizer.encode(chat_prompt([("user", prompt)], placeholder)).ids]
        pixels = [list(p.pixel_values) for p in processed]
        flat = [x for per_image in pixels for x in per_image]
        tokens = list(self.model.generate(ids, flat, NEW_TOKENS).tokens)
        return Answer(ids, tokens, pixels)

    def decode(self, tokens: Sequence[int]) -> bytes:
        shown = [t for t in tokens if t not in self.eos]  # the program streams every token but an EOS
        text: str = self.tokenizer.decode(shown, skip_special_tokens=False)
        return text.encode("utf-8")


def write_pixels(pixels: np.ndarray, patch: int, out: Path) -> None:
    """A ``--pixel-values`` file of one unsliced image: the magic, int32 grid_h, grid_w, patch_dim, then the
    float32 patch rows (``processor.patch_rows``)."""
    from graphsurgeon.models.minicpm_v2.processor import patch_rows

    rows = np.ascontiguousarray(patch_rows(pixels, patch), dtype="<f4")
    header = struct.pack("<3i", pixels.shape[1] // patch, pixels.shape[2] // patch, rows.shape[1])
    out.write_bytes(PIXEL_MAGIC + header + rows.tobytes())


# --- images ---------------------------------------------------------------------------------------------


def test_images(work: Path) -> list[tuple[str, Path]]:
    """The corpus images resized (Pillow's BICUBIC) to SIZES, else generated images of those sizes."""
    from PIL import Image

    files = sorted(p for p in CORPUS_IMAGES.iterdir() if p.is_file()) if CORPUS_IMAGES.is_dir() else []
    out = []
    for k, (w, h) in enumerate(SIZES):
        path = work / f"image_{w}x{h}.png"
        if files:
            with Image.open(files[k % len(files)]) as img:
                img.convert("RGB").resize((w, h), Image.Resampling.BICUBIC).save(path)
            name = f"{files[k % len(files)].name} at {w}x{h}"
        else:
            y, x = np.mgrid[0:h, 0:w].astype(np.float64)
            rgb = np.stack([255 * x / w, 255 * y / h, 127.5 * (1 + np.sin((x + 2 * y) / 17.0))], axis=-1)
            Image.fromarray(rgb.astype(np.uint8), "RGB").save(path)
            name = f"generated {w}x{h}"
        out.append((name, path))
    return out


def extreme_images(work: Path) -> list[tuple[str, Path]]:
    """Images of EXTREME_SIZES: stripes and blocks of colour (the 10000x10000 one compresses well)."""
    from PIL import Image, ImageDraw

    out = []
    for w, h in EXTREME_SIZES:
        img = Image.new("RGB", (w, h), (40, 90, 160))
        draw = ImageDraw.Draw(img)
        for k in range(8):
            box = (k * w // 8, k * h // 8, (k + 1) * w // 8, (k + 1) * h // 8)
            draw.rectangle(box, fill=(30 * k, 255 - 30 * k, 60 + 20 * k))
        path = work / f"extreme_{w}x{h}.png"
        img.save(path, compress_level=1)
        out.append((f"{w}x{h}", path))
    return out


# --- greedy parity --------------------------------------------------------------------------------------


def _inputs(
    runner: Runner, prompt: str, images: Sequence[Path], want: Answer, work: Path, debug: bool
) -> list[str]:
    args = ["--prompt", prompt] if runner.tokenizer and not debug else ["--ids", ",".join(map(str, want.ids))]
    for k, (path, pixels) in enumerate(zip(images, want.pixels, strict=True)):
        if runner.preprocess and not debug:
            args += ["--image", str(path)]
        else:
            dump = work / f"pixels{k}.bin"
            write_pixels(pixels[0], 14, dump)
            args += ["--pixel-values", str(dump)]
    return args


def greedy(runner: Runner, ref: Reference, work: Path) -> tuple[list[str], int]:
    images = test_images(work)
    cases: list[tuple[str, str, list[Path], bool]] = []
    for prompt in PROMPTS:
        cases += [(f"{prompt!r} + {name}", prompt, [path], False) for name, path in images]
    cases.append((f"{PROMPTS[0]!r} + two images", PROMPTS[0], [images[0][1], images[1][1]], False))
    cases.append((f"{PROMPTS[2]!r} text only", PROMPTS[2], [], False))
    cases += [(f"{PROMPTS[0]!r} + {name}", PROMPTS[0], [path], False) for name, path in extreme_images(work)]
    cases.append(
        (f"{PROMPTS[1]!r} + {images[0][0]} (--ids + --pixel-values)", PROMPTS[1], [images[0][1]], True)
    )
    failures: list[str] = []
    passed = 0
    for label, prompt, paths, debug in cases:
        want = ref.answer(prompt, paths)
        sliced = any(len(p) > 1 for p in want.pixels)
        if sliced and (debug or not runner.preprocess):
            print(f"skip {label}: an image with slices needs --image (no preprocessing in this build)")
            continue
        args = [*_inputs(runner, prompt, paths, want, work, debug), "--gen", str(NEW_TOKENS), "--print-ids"]
        try:
            result = runner.run(args)
            got = result.ids()
            if got["prompt_ids"] != want.ids:
                at = first_difference(got["prompt_ids"], want.ids)
                raise CheckFailed(
                    f"{label}: prompt ids differ at {at}:\n  program {got['prompt_ids']}\n  Python {want.ids}"
                )
            if got["tokens"] != want.tokens:
                at = first_difference(got["tokens"], want.tokens)
                raise CheckFailed(
                    f"{label}: tokens differ at {at}:\n  program {got['tokens']}\n  Python  {want.tokens}"
                )
            if runner.tokenizer and result.text() != ref.decode(want.tokens):
                raise CheckFailed(f"{label}: streamed text {result.text()!r} is not the tokenizer's decoding")
            grids = "+".join(str(len(p)) for p in want.pixels) or "0"
            print(
                f"ok   {label}: {len(want.ids)} prompt ids ({grids} grids), {len(want.tokens)} tokens equal"
            )
            passed += 1
        except CheckFailed as err:
            print(f"FAIL {err}", flush=True)
            failures.append(label)
    sampled = sampling(runner, ref, images[0][1], work)
    return failures + sampled, passed + (0 if sampled else 1)


def sampling(runner: Runner, ref: Reference, image: Path, work: Path) -> list[str]:
    """One seed twice is one answer; --top-k 1 keeps only the argmax."""
    want = ref.answer(PROMPTS[0], [image])
    args = [*_inputs(runner, PROMPTS[0], [image], want, work, False), "--gen", str(NEW_TOKENS), "--print-ids"]
    try:
        sampled = ["--temperature", "0.8", "--top-p", "0.9", "--seed", "7"]
        a, b = (runner.run([*args, *sampled]).ids()["tokens"] for _ in range(2))
        if a != b:
            raise CheckFailed(f"sampling: seed 7 gave two answers:\n  {a}\n  {b}")
        top1 = runner.run([*args, "--top-k", "1", "--temperature", "0.8"]).ids()["tokens"]
        if top1 != want.tokens:
            raise CheckFailed(f"--top-k 1 gave {top1}, greedy is {want.tokens}")
        print("ok   sampling: one seed, one answer; --top-k 1 is greedy", flush=True)
        return []
    except CheckFailed as err:
        print(f"FAIL {err}", flush=True)
        return ["sampling"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("convert", "greedy", "bad-input"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--runner")
    parser.add_argument("--model", type=Path)
    parser.add_argument("--wrapper", default="", help="a command the program runs under, e.g. wine")
    parser.add_argument("--with-tokenizer", action="store_true")
    parser.add_argument("--with-preprocess", action="store_true")
    args = parser.parse_args(argv)
    passed = 0
    try:
        if args.mode == "convert":
            if args.out is None:
                parser.error("convert needs --out DIR")
            convert(args.out)
            return 0
        if args.runner is None or args.model is None:
            parser.error(f"{args.mode} needs --runner EXE and --model DIR")
        model = args.model.resolve()
        runner = Runner(
            args.runner, model, shlex.split(args.wrapper), args.with_tokenizer, args.with_preprocess
        )
        with tempfile.TemporaryDirectory(prefix="minicpm-v2-") as tmp:
            if args.mode == "bad-input":
                from minicpm_v2_bad_inputs import bad_input

                failures, passed = bad_input(runner, Path(tmp))
            else:
                failures, passed = greedy(runner, Reference(model), Path(tmp))
    except CheckFailed as err:
        print(err, file=sys.stderr)
        return 1
    print(f"{passed} passed, {len(failures)} failed")
    if failures:
        print(f"failed: {failures}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
