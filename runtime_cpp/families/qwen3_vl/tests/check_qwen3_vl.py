"""ctest checks of qwen3_vl_run against HF transformers' own Qwen3-VL (``Qwen3VLForConditionalGeneration``
and ``Qwen3VLProcessor``, fp32, CPU; the checkpoint model.json's ``verifier.checkpoint`` names):

    check_qwen3_vl.py convert --out DIR
    check_qwen3_vl.py greedy|bad-input --runner EXE --model DIR [--wrapper CMD] [--with-tokenizer]
                      [--with-preprocess]

``convert`` converts the embedded tiny checkpoint with the repository's gsurg (``apply rules/qwen3_vl.yaml``)
into DIR, reusing DIR when its ``model.json`` is newer than every rule, template, schema and example source
the conversion reads.

``greedy``: 3 prompts (one non-ASCII) x 2 images of different non-square sizes (a portrait crop and a
landscape corpus image, so the position table is interpolated to two grids), one prompt with both images
and one text-only prompt: the program's ``--gen 32 --ignore-eos`` tokens must equal HF ``generate``'s
(``min_new_tokens`` = ``max_new_tokens`` = 32, greedy), its prompt length HF's ``input_ids``, and its
streamed text the HF tokenizer's decoding. Plus one case without ``--ignore-eos`` (HF's, cut after its first
EOS), one through the debug inputs (``--ids`` from HF's processor, ``--pixel-values`` written from HF's
``pixel_values``), and the sampling flags: one seed twice gives the same tokens and ``--top-k 1`` the
greedy ones. Without the tokenizer or the preprocessing in the build, the debug inputs stand in.

``bad-input``: a video token in the prompt, an image above the aspect-ratio limit, an image smaller than a
patch, more ``<|image_pad|>`` runs than images, a model.json whose ``mrope_section`` does not sum to
head_dim/2, one whose DeepStack merger net file is missing and one naming a tap that is not a vision output:
each exit code 2 with one ``qwen3_vl_run: error:`` line naming the culprit. Exit status 0 when every check
holds, 1 otherwise.
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
from typing import Any

import numpy as np
from runner_bad_inputs import BadCase, _remove, _set, run_cases
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

PROMPTS = (
    "Describe the image.",
    "What is in the top left corner?",
    "这是什么？Réponds en une phrase 🙂",
)
NEW_TOKENS = 32
RULES = REPO / "rules" / "qwen3_vl.yaml"
CONVERSION_INPUTS = (
    "rules/qwen3_vl.yaml",
    "rules/llm-kv-cache.yaml",
    "rules/common-rules.yaml",
    "graphsurgeon/models/qwen3_vl",
    "graphsurgeon/models/qwen3_llm",
    "graphsurgeon/models/common",
)


# --- conversion -----------------------------------------------------------------------------------------


def convert(out: Path) -> None:
    """The embedded tiny checkpoint converted into ``out``, unless ``out`` is newer than every input."""
    gsurg_apply(RULES, out, CONVERSION_INPUTS, ["-q"])


# --- the HF reference -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    ids: list[int]  # the prompt, HF's input_ids
    tokens: list[int]  # HF generate's new tokens
    pixels: list[tuple[int, int, np.ndarray]]  # per image: grid_h, grid_w, pixel_values rows


class Reference:
    """HF's Qwen3-VL and processor for the checkpoint the model folder was converted from."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        import transformers

        from graphsurgeon.models.qwen3_vl.processor import load_processor

        doc = read_model_json(model_dir, ("qwen3_vl",))
        checkpoint = Path(doc["verifier"]["checkpoint"])
        self.processor = load_processor(checkpoint)
        self.model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(
            str(checkpoint), dtype=torch.float32
        ).eval()
        self.eos = {int(e) for e in doc["tokens"]["eos"]}
        self.merge = int(doc["vision"]["merge_size"])

    def answer(self, prompt: str, images: Sequence[Path], *, ignore_eos: bool = True) -> Answer:
        import torch

        from graphsurgeon.models.qwen3_vl.processor import chat_inputs

        inputs = chat_inputs(self.processor, list(images), prompt)
        self.model.model.rope_deltas = None
        at_least = NEW_TOKENS if ignore_eos else 0
        with torch.no_grad():
            out = self.model.generate(
                **inputs, max_new_tokens=NEW_TOKENS, min_new_tokens=at_least, do_sample=False
            )
        ids = [int(t) for t in inputs["input_ids"][0]]
        tokens = [int(t) for t in out[0, len(ids) :]]
        pixels = []
        if images:
            rows = inputs["pixel_values"].numpy().astype(np.float32)
            start = 0
            for _, gh, gw in inputs["image_grid_thw"].tolist():
                pixels.append((gh, gw, rows[start : start + gh * gw]))
                start += gh * gw
        return Answer(ids, tokens, pixels)

    def decode(self, tokens: Sequence[int]) -> bytes:
        text: str = self.processor.tokenizer.decode(list(tokens))
        return text.encode("utf-8")


def write_pixels(grid_h: int, grid_w: int, rows: np.ndarray, out: Path) -> None:
    """A ``--pixel-values`` file: the magic, int32 grid_h, grid_w, patch_dim, then the float32 rows (here
    HF's pixel_values in merge-block order)."""
    data = np.ascontiguousarray(rows, dtype="<f4")
    out.write_bytes(PIXEL_MAGIC + struct.pack("<3i", grid_h, grid_w, data.shape[1]) + data.tobytes())


# --- greedy parity --------------------------------------------------------------------------------------


def test_images(work: Path) -> list[tuple[str, Path]]:
    """A portrait crop and a landscape image of different sizes: from the corpus when it is there, else
    generated."""
    from PIL import Image

    files = sorted(p for p in CORPUS_IMAGES.iterdir() if p.is_file()) if CORPUS_IMAGES.is_dir() else []
    if files:
        with Image.open(files[0]) as img:
            rgb = img.convert("RGB")
        w, h = rgb.size
        side = min(w, h)
        portrait = rgb.crop(
            ((w - side * 2 // 3) // 2, (h - side) // 2, (w + side * 2 // 3) // 2, (h + side) // 2)
        )
        landscape = files[1] if len(files) > 1 else files[0]
    else:
        y, x = np.mgrid[0:300, 0:200].astype(np.float64)
        portrait = Image.fromarray(np.stack([x, y, (x + y) / 2], axis=-1).astype(np.uint8), "RGB")
        y, x = np.mgrid[0:180, 0:320].astype(np.float64)
        Image.fromarray(np.stack([y, x / 2, 255 - y], axis=-1).astype(np.uint8), "RGB").save(
            work / "land.png"
        )
        landscape = work / "land.png"
    portrait.save(work / "portrait.png")
    return [("portrait crop", work / "portrait.png"), (landscape.name, landscape)]


def _inputs(
    runner: Runner, prompt: str, images: Sequence[Path], answer: Answer, work: Path, *, debug: bool = False
) -> list[str]:
    args: list[str] = []
    if runner.tokenizer and not debug:
        args += ["--prompt", prompt]
    else:
        args += ["--ids", ",".join(str(i) for i in answer.ids)]
    for k, (path, (gh, gw, rows)) in enumerate(zip(images, answer.pixels, strict=True)):
        if runner.preprocess and not debug:
            args += ["--image", str(path)]
        else:
            dump = work / f"pixels{k}_{gh}x{gw}.bin"
            write_pixels(gh, gw, rows, dump)
            args += ["--pixel-values", str(dump)]
    return args


def compare(label: str, got: Sequence[int], want: Sequence[int]) -> None:
    if list(got) != list(want):
        at = first_difference(got, want)
        raise CheckFailed(f"{label}: tokens differ at {at}:\n  program {list(got)}\n  HF      {list(want)}")


def greedy(runner: Runner, ref: Reference, work: Path) -> list[str]:
    images = test_images(work)
    cases: list[tuple[str, str, list[Path]]] = []
    for prompt in PROMPTS:
        for name, path in images:
            cases.append((f"{prompt!r} + {name}", prompt, [path]))
    cases.append((f"{PROMPTS[0]!r} + both images", PROMPTS[0], [p for _, p in images]))
    cases.append((f"{PROMPTS[1]!r} text only", PROMPTS[1], []))
    failures: list[str] = []

    def run_case(
        label: str,
        prompt: str,
        paths: list[Path],
        extra: Sequence[str] = (),
        *,
        ignore_eos: bool = True,
        debug: bool = False,
    ) -> None:
        want = ref.answer(prompt, paths, ignore_eos=ignore_eos)
        flags = ["--gen", str(NEW_TOKENS), "--print-ids", *extra] + (["--ignore-eos"] if ignore_eos else [])
        result = runner.run([*_inputs(runner, prompt, paths, want, work, debug=debug), *flags])
        got = result.ids()
        try:
            if got["prompt_tokens"] != len(want.ids):
                raise CheckFailed(
                    f"{label}: prompt of {got['prompt_tokens']} tokens, HF's has {len(want.ids)}"
                )
            expected = want.tokens
            if not ignore_eos:  # HF keeps the EOS it stops at; so does --print-ids
                cut = next((i for i, t in enumerate(expected) if t in ref.eos), len(expected) - 1)
                expected = expected[: cut + 1]
            compare(label, got["tokens"], expected)
            if runner.tokenizer and ignore_eos and result.text() != ref.decode(want.tokens):
                raise CheckFailed(f"{label}: streamed text {result.text()!r} is not HF's decoding")
            print(f"ok   {label}: {len(got['tokens'])} tokens equal HF's", flush=True)
        except CheckFailed as err:
            print(f"FAIL {err}", flush=True)
            failures.append(label)

    for label, prompt, paths in cases:
        run_case(label, prompt, paths)
    first = cases[0]
    run_case(first[0] + " (stops at EOS)", first[1], first[2], ignore_eos=False)
    run_case(first[0] + " (--ids + --pixel-values)", first[1], first[2], debug=True)
    # sampling: one seed twice is one answer; --top-k 1 keeps only the argmax
    sampled = ["--temperature", "0.8", "--top-p", "0.9", "--seed", "7"]
    want = ref.answer(first[1], first[2])
    args = [
        *_inputs(runner, first[1], first[2], want, work),
        "--gen",
        str(NEW_TOKENS),
        "--print-ids",
        "--ignore-eos",
    ]
    try:
        a, b = (runner.run([*args, *sampled]).ids()["tokens"] for _ in range(2))
        if a != b:
            raise CheckFailed(f"sampling: seed 7 gave two answers:\n  {a}\n  {b}")
        compare(
            "--top-k 1",
            runner.run([*args, "--top-k", "1", "--temperature", "0.8"]).ids()["tokens"],
            want.tokens,
        )
        print("ok   sampling: one seed, one answer; --top-k 1 is greedy", flush=True)
    except CheckFailed as err:
        print(f"FAIL {err}", flush=True)
        failures.append("sampling")
    return failures


# --- bad inputs -----------------------------------------------------------------------------------------


def _bad_images(tmp: Path) -> None:
    from PIL import Image

    Image.new("RGB", (3300, 16), (120, 30, 200)).save(tmp / "aspect.png")  # 206:1
    Image.new("RGB", (12, 40), (10, 200, 30)).save(tmp / "small.png")  # 12 px < one 16-px patch


def _bad_cases(doc: dict[str, Any]) -> list[BadCase]:
    pad = int(doc["tokens"]["image_pad"])
    sec = list(doc["decoder"]["rope"]["mrope_section"])
    taps = doc["vision"]["deepstack"]
    text = ["--prompt", "Describe the image.", "--gen", "2"]
    wrong_tap = [dict(t) for t in taps]
    wrong_tap[1]["tap"] = "no_such_blob"
    return [
        BadCase(
            "a video token in the prompt", ["--prompt", "Look: <|video_pad|>", "--gen", "2"], "<|video_pad|>"
        ),
        BadCase(
            "an image token in the prompt", ["--prompt", "Look: <|image_pad|>", "--gen", "2"], "<|image_pad|>"
        ),
        BadCase(
            "aspect ratio above 200",
            [*text, "--image", "{tmp}/aspect.png"],
            "{tmp}/aspect.png: an image of 3300x16 pixels has aspect ratio",
        ),
        BadCase(
            "an image smaller than a patch",
            [*text, "--image", "{tmp}/small.png"],
            "{tmp}/small.png: an image of 12x40 pixels is smaller than one patch",
        ),
        BadCase(
            "more <|image_pad|> runs than images",
            ["--ids", f"1,{pad},{pad},{pad},{pad},2", "--gen", "2"],
            "more <|image_pad|> runs",
        ),
        BadCase(
            "mrope_section not summing to head_dim/2",
            text,
            "decoder.rope.mrope_section",
            _set([sec[0] + 1, sec[1], sec[2]], "decoder", "rope", "mrope_section"),
        ),
        BadCase(
            "a DeepStack merger net file missing",
            text,
            f"{taps[1]['merger']}.ncnn.bin: no such file",
            _remove(f"{taps[1]['merger']}.ncnn.bin"),
        ),
        BadCase(
            "a DeepStack tap that is not a vision output",
            text,
            "vision.deepstack[1].tap",
            _set(wrong_tap, "vision", "deepstack"),
        ),
    ]


def bad_input(runner: Runner) -> list[str]:
    failures: list[str] = []
    doc = read_model_json(runner.model, ("qwen3_vl",))
    with tempfile.TemporaryDirectory(prefix="q3vl-bad-") as tmp_name:
        tmp = Path(tmp_name)
        _bad_images(tmp)
        failures += run_cases(runner, _bad_cases(doc), tmp)
    return failures


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
    try:
        if args.mode == "convert":
            if args.out is None:
                parser.error("convert needs --out DIR")
            convert(args.out)
            return 0
        if args.runner is None or args.model is None:
            parser.error(f"{args.mode} needs --runner EXE and --model DIR")
        runner = Runner(
            args.runner,
            args.model.resolve(),
            shlex.split(args.wrapper),
            args.with_tokenizer,
            args.with_preprocess,
        )
        if args.mode == "bad-input":
            failures = bad_input(runner)
        else:
            with tempfile.TemporaryDirectory(prefix="q3vl-run-") as tmp:
                failures = greedy(runner, Reference(runner.model), Path(tmp))
    except CheckFailed as err:
        print(err, file=sys.stderr)
        return 1
    if failures:
        print(f"{len(failures)} failed: {failures}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
