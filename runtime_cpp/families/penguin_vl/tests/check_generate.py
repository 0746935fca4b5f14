"""ctest checks of penguin_vl_run against the fp32 PyTorch reference of ``graphsurgeon/models/penguin_vl``:

    check_generate.py convert --out DIR
    check_generate.py greedy|sampling|bad-input --runner EXE --model DIR [--wrapper CMD]
                      [--with-tokenizer] [--with-preprocess]
    check_generate.py dump-pixels IMAGE OUT        (a --pixel-values file for manual runs)

``convert`` converts the embedded tiny checkpoint with the repository's own gsurg (``apply
rules/penguin_vl.yaml``) into DIR, reusing DIR when its ``model.json`` is newer than every rule, template,
example source and checkpoint file the conversion reads.

``greedy``: for 3 prompts (one non-ASCII) x every non-square corpus image (>= 2), and each prompt
text-only, the program's greedy tokens (``--gen 40 --ignore-eos``: exactly 40 tokens on both sides, since the
tiny model may emit its EOS early) must equal the reference's; the prompt length must equal the reference's
prompt ids, and the streamed text the HF tokenizer's decoding of the tokens. Plus: one case without
``--ignore-eos`` (must equal the reference cut after its first EOS), one through the debug inputs
(``--ids`` + ``--pixel-values``), and one with ``--repetition-penalty`` (reference: transformers'
``RepetitionPenaltyLogitsProcessor`` before the argmax). The prompt is passed as text (``--prompt``) when the
build has the tokenizer, else as ids; images as files (``--image``) when it has the preprocessing, else as
the Python processor's patches (``--pixel-values``). Mismatches print both token lists.

With ``--untied-model`` (``convert --untied-out``: ``make_tiny --untied`` converted) two more cases run on
a model whose embeddings come from the ``embed`` net; one case reads the tied rows with ``--no-mmap``.

``sampling``: the same seed gives the same tokens, different seeds differ, ``--top-k 1`` equals greedy, and
every sampled token lies in the set transformers' repetition-penalty / temperature / top-k / top-p warpers
keep from the reference's logits for the same prefix.

``bad-input``: see ``runner_bad_inputs.py``; ``fuzz``: see ``runner_fuzz.py`` (``--cases``, ``--seed``,
``--only``). Exit status 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from runner_harness import (
    REPO,
    CheckFailed,
    Reference,
    Runner,
    TestImage,
    first_difference,
    gsurg_apply,
    image_paths,
    newest_input,
    run_python,
    write_pixel_values,
)

PROMPTS = (
    "Describe the image.",
    "What month is printed at the top?",
    "这是什么？Réponds en une phrase 🙂",
)
NEW_TOKENS = 40
CONVERSION_INPUTS = (
    "rules/penguin_vl.yaml",
    "rules/llm-kv-cache.yaml",
    "graphsurgeon/models/penguin_vl",
    "graphsurgeon/models/qwen3_llm",
    "graphsurgeon/models/common",
)


# --- conversion -----------------------------------------------------------------------------------------


def convert(out: Path, *, untied: bool = False) -> None:
    """The tiny checkpoint (embedded, or ``make_tiny --untied`` written beside ``out``) converted into
    ``out``, unless ``out`` is newer than every conversion input."""
    marker = out / "model.json"
    if marker.is_file() and marker.stat().st_mtime >= newest_input(CONVERSION_INPUTS):
        print(f"reusing {out} (newer than the rule and checkpoint files)")
        return
    settings: list[str] = []
    if untied:
        checkpoint = out.with_name(out.name + ".checkpoint")
        shutil.rmtree(checkpoint, ignore_errors=True)
        run_python(
            ["-m", "graphsurgeon.models.penguin_vl.make_tiny", str(checkpoint), "--untied"],
            "make_tiny --untied",
        )
        settings = ["--set", f"checkpoint={checkpoint}"]
    gsurg_apply(REPO / "rules" / "penguin_vl.yaml", out, CONVERSION_INPUTS, settings)


# --- greedy parity --------------------------------------------------------------------------------------


def runner_inputs(
    runner: Runner, ref: Reference, prompt: str, images: Sequence[TestImage], *, debug: bool = False
) -> list[str]:
    """The prompt and image flags of one case: the real inputs when the build has them, else the debug
    ones."""
    args: list[str] = []
    if runner.tokenizer and not debug:
        args += ["--prompt", prompt]
    else:
        args += ["--ids", ",".join(str(i) for i in ref.prompt_ids(prompt, images))]
    for img in images:
        if runner.preprocess and not debug:
            args += ["--image", str(img.path)]
        else:
            args += ["--pixel-values", str(img.dump)]
    return args


def compare(label: str, got: Sequence[int], expected: Sequence[int]) -> None:
    if list(got) != list(expected):
        i = first_difference(got, expected)
        raise CheckFailed(
            f"{label}: tokens differ at index {i}\n"
            f"  penguin_vl_run: {list(got)}\n"
            f"  reference:      {list(expected)}"
        )


def greedy_case(
    runner: Runner,
    ref: Reference,
    label: str,
    prompt: str,
    images: Sequence[TestImage],
    *,
    ignore_eos: bool = True,
    debug: bool = False,
    penalty: float = 1.0,
    extra: Sequence[str] = (),
) -> None:
    ids = ref.prompt_ids(prompt, images)
    expected = ref.greedy(ids, images, NEW_TOKENS, penalty=penalty)
    if not ignore_eos:
        expected = ref.stop_at_eos(expected)
    args = [*runner_inputs(runner, ref, prompt, images, debug=debug), "--gen", str(NEW_TOKENS), "--print-ids"]
    args += ["--threads", "1"] + (["--ignore-eos"] if ignore_eos else [])
    if penalty != 1.0:
        args += ["--repetition-penalty", str(penalty)]
    result = runner.run([*args, *extra])
    doc = result.ids()
    if doc["prompt_tokens"] != len(ids):
        raise CheckFailed(f"{label}: the prompt has {doc['prompt_tokens']} tokens, the reference {len(ids)}")
    compare(label, doc["tokens"], expected)
    if runner.tokenizer:  # the streamed text: every token but a final EOS that stopped generation
        shown = expected[:-1] if not ignore_eos and expected and expected[-1] in ref.eos else expected
        want = ref.decode(shown).encode("utf-8")
        if result.text() != want:
            raise CheckFailed(f"{label}: streamed text {result.text()!r}\n  HF tokenizers decode {want!r}")
    print(f"ok   {label}: {len(expected)} tokens equal ({expected[:8]}...)", flush=True)


def no_eos_case(runner: Runner, ref: Reference, matrix: Sequence[tuple[int, list[TestImage]]]) -> None:
    """A checkpoint that names no EOS converts to ``tokens.eos: []``: without --ignore-eos, the run goes on
    to --gen through the tokens that are EOS ids for the real model. Checked on the case whose reference
    meets an EOS soonest, so the run would stop early if the runner still stopped there."""
    stops = []
    for p, case_images in matrix:
        tokens = ref.greedy(ref.prompt_ids(PROMPTS[p], case_images), case_images, NEW_TOKENS)
        if ref.eos & set(tokens):
            stops.append((len(ref.stop_at_eos(tokens)), p, case_images))
    if not stops:
        raise CheckFailed(f"no EOS in model.json: no case reaches an EOS within {NEW_TOKENS} tokens")
    _, p, case_images = min(stops, key=lambda item: item[0])
    with tempfile.TemporaryDirectory(prefix="pvl-no-eos-") as tmp:
        model = Path(tmp) / "model"
        shutil.copytree(runner.model, model)
        doc = json.loads((model / "model.json").read_text(encoding="utf-8"))
        doc["tokens"]["eos"] = []
        (model / "model.json").write_text(json.dumps(doc), encoding="utf-8")
        ids = ref.prompt_ids(PROMPTS[p], case_images)
        args = [*runner_inputs(runner, ref, PROMPTS[p], case_images), "--gen", str(NEW_TOKENS), "--print-ids"]
        result = runner.run([*args, "--threads", "1"], model=model)
        compare("no EOS in model.json", result.ids()["tokens"], ref.greedy(ids, case_images, NEW_TOKENS))
    print(f"ok   no EOS in model.json: prompt {p} ran to --gen {NEW_TOKENS} past the EOS", flush=True)


def greedy(
    runner: Runner, ref: Reference, images: Sequence[TestImage], untied: Path | None = None
) -> list[str]:
    failures: list[str] = []

    def attempt(
        label: str, *args: object, on: tuple[Runner, Reference] = (runner, ref), **kwargs: object
    ) -> None:
        try:
            greedy_case(*on, label, *args, **kwargs)  # type: ignore[arg-type]
        except CheckFailed as err:
            print(f"FAIL {err}", flush=True)
            failures.append(label)

    matrix = [(p, [img]) for p in range(len(PROMPTS)) for img in images] + [
        (p, []) for p in range(len(PROMPTS))
    ]
    for p, case_images in matrix:
        where = f"+ {case_images[0].label}" if case_images else "text-only"
        attempt(f"prompt {p} {where}", PROMPTS[p], case_images)
    # The stop at EOS, on the first case whose reference emits one within the budget.
    for p, case_images in matrix:
        if ref.eos & set(ref.greedy(ref.prompt_ids(PROMPTS[p], case_images), case_images, NEW_TOKENS)):
            where = f"+ {case_images[0].label}" if case_images else "text-only"
            attempt(f"prompt {p} {where}, stopping at EOS", PROMPTS[p], case_images, ignore_eos=False)
            break
    else:
        print(f"note: no case reaches an EOS within {NEW_TOKENS} tokens; stopping at EOS is not exercised")
        attempt("prompt 0 text-only, without --ignore-eos", PROMPTS[0], [], ignore_eos=False)
    attempt(f"prompt 1 + {images[1].label}, debug inputs", PROMPTS[1], [images[1]], debug=True)
    try:
        no_eos_case(runner, ref, matrix)
    except CheckFailed as err:
        print(f"FAIL {err}", flush=True)
        failures.append("no EOS in model.json")
    attempt(
        f"prompt 0 + {images[1].label}, repetition penalty 1.3, --huge-pages",
        PROMPTS[0],
        [images[1]],
        penalty=1.3,
        extra=["--huge-pages"],
    )
    attempt("prompt 2 text-only, repetition penalty 1.3", PROMPTS[2], [], penalty=1.3)
    attempt(f"prompt 1 + {images[0].label}, --no-mmap", PROMPTS[1], [images[0]], extra=["--no-mmap"])
    if untied is not None:  # embeddings from the embed net, logits from a separate lm_head matrix
        other = (dataclasses.replace(runner, model=untied), Reference(untied))
        attempt(f"untied: prompt 0 + {images[0].label}", PROMPTS[0], [images[0]], on=other)
        attempt("untied: prompt 2 text-only", PROMPTS[2], [], on=other)
    return failures


# --- sampling -------------------------------------------------------------------------------------------

SAMPLE = {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "repetition_penalty": 1.1}
NARROW = {"temperature": 1.5, "top_k": 6, "top_p": 0.7, "repetition_penalty": 1.2}


def sample_flags(settings: dict[str, float]) -> list[str]:
    return [f"--{key.replace('_', '-')}={value}" for key, value in settings.items()]


def check_filtered(
    ref: Reference, ids: list[int], images: Sequence[TestImage], tokens: list[int], settings: dict[str, float]
) -> None:
    """Every sampled token must survive transformers' repetition penalty, temperature, top-k and top-p
    warpers applied to the reference's logits for the same prefix (a token within 1e-4 of the cut-off
    logit counts as a tie: ncnn and torch logits differ in the last bits)."""
    import torch
    from transformers import (
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    scale = [
        RepetitionPenaltyLogitsProcessor(settings["repetition_penalty"]),
        TemperatureLogitsWarper(settings["temperature"]),
    ]
    cut = [TopKLogitsWarper(int(settings["top_k"])), TopPLogitsWarper(settings["top_p"])]
    for i, logits in enumerate(ref.forced_logits(ids, images, tokens)):
        history = torch.tensor([ids + tokens[:i]])
        scores = logits[None].clone()
        for proc in scale:
            scores = proc(history, scores)
        kept = scores.clone()
        for proc in cut:
            kept = proc(history, kept)
        finite = torch.isfinite(kept[0])
        token = tokens[i]
        floor = float(scores[0][finite].min())
        if not bool(finite[token]) and float(scores[0][token]) < floor - 1e-4:
            allowed = sorted(int(x) for x in torch.nonzero(finite).flatten())
            raise CheckFailed(f"step {i}: sampled token {token} is outside the filtered set {allowed}")


def sampling(runner: Runner, ref: Reference, images: Sequence[TestImage]) -> list[str]:
    failures: list[str] = []
    for label, case_images in ((images[0].label, [images[0]]), ("text-only", [])):
        base = [*runner_inputs(runner, ref, PROMPTS[0], case_images), "--gen", "32", "--ignore-eos"]
        base += ["--print-ids", "--threads", "1"]
        sample = sample_flags(SAMPLE)

        def tokens(extra: list[str], base: list[str] = base) -> list[int]:
            return list(runner.run([*base, *extra]).ids()["tokens"])

        try:
            a1, a2 = tokens([*sample, "--seed", "7"]), tokens([*sample, "--seed", "7"])
            b = tokens([*sample, "--seed", "8"])
            if a1 != a2:
                raise CheckFailed(f"{label}: seed 7 twice gave different tokens\n  {a1}\n  {a2}")
            if a1 == b:
                raise CheckFailed(f"{label}: seeds 7 and 8 gave the same tokens {a1}")
            greedy_tokens = tokens([])
            top1 = tokens(["--temperature", "1.0", "--top-k", "1", "--seed", "3"])
            compare(f"{label}: --top-k 1 against greedy", top1, greedy_tokens)
            ids = ref.prompt_ids(PROMPTS[0], case_images)
            compare(f"{label}: greedy against the reference", greedy_tokens, ref.greedy(ids, case_images, 32))
            for seed in (1, 2, 3):
                check_filtered(
                    ref, ids, case_images, tokens([*sample_flags(NARROW), f"--seed={seed}"]), NARROW
                )
            check_filtered(ref, ids, case_images, a1, SAMPLE)
            print(
                f"ok   {label}: seeds repeat and differ, top-k 1 = greedy, tokens within top-k/top-p",
                flush=True,
            )
        except CheckFailed as err:
            print(f"FAIL {err}", flush=True)
            failures.append(label)
    return failures


# --- entry ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("convert", "greedy", "sampling", "bad-input", "fuzz", "dump-pixels"))
    parser.add_argument("paths", nargs="*", type=Path, help="dump-pixels: IMAGE OUT")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--untied-out", type=Path, help="convert: also an untied tiny checkpoint, here")
    parser.add_argument("--untied-model", type=Path, help="greedy: also check this untied conversion")
    parser.add_argument("--runner")
    parser.add_argument("--model", type=Path)
    parser.add_argument("--wrapper", default="", help="a command the program runs under, e.g. wine")
    parser.add_argument("--with-tokenizer", action="store_true")
    parser.add_argument("--with-preprocess", action="store_true")
    parser.add_argument("--cases", type=int, default=200, help="fuzz: the number of mutated runs")
    parser.add_argument("--seed", type=int, default=14, help="fuzz: the mutation seed")
    parser.add_argument("--only", type=int, help="fuzz: replay this case only")
    args = parser.parse_args(argv)
    if args.mode == "convert":
        if args.out is None:
            parser.error("convert needs --out DIR")
        try:
            convert(args.out)
            if args.untied_out is not None:
                convert(args.untied_out, untied=True)
        except CheckFailed as err:
            print(err, file=sys.stderr)
            return 1
        return 0
    if args.mode == "dump-pixels":
        if len(args.paths) != 2:
            parser.error("dump-pixels needs IMAGE OUT")
        from graphsurgeon.models.penguin_vl.config import load_files
        from graphsurgeon.models.penguin_vl.make_tiny import SHIPPED
        from graphsurgeon.models.penguin_vl.processor import load_and_preprocess

        write_pixel_values(load_and_preprocess(args.paths[0], load_files(SHIPPED).processor), args.paths[1])
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
    prompt_via = "--prompt" if runner.tokenizer else "--ids (no tokenizer in this build)"
    image_via = "--image" if runner.preprocess else "--pixel-values (no preprocessing in this build)"
    print(f"penguin_vl_run inputs: {prompt_via}, {image_via}")
    if args.mode == "bad-input":
        from runner_bad_inputs import bad_inputs

        failures = bad_inputs(runner)
    elif args.mode == "fuzz":
        from runner_fuzz import fuzz

        failures = fuzz(runner, cases=args.cases, seed=args.seed, only=args.only)
    else:
        ref = Reference(runner.model)
        with tempfile.TemporaryDirectory(prefix="pvl-run-") as tmp:
            work = Path(tmp)
            images = [ref.image(label, path, work) for label, path in image_paths(work)]
            if args.mode == "greedy":
                untied = args.untied_model.resolve() if args.untied_model else None
                failures = greedy(runner, ref, images, untied)
            else:
                failures = sampling(runner, ref, images)
    if failures:
        print(f"{len(failures)} failed: {failures}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
