"""ctest check of the batch mode's images (``gsurg_run --batch``, runner/README.md) on any VLM conversion: a
family registers it on its model (penguin_vl's tests.cmake does).

    check_batch_images.py --runner EXE --model DIR [--wrapper CMD] [--with-tokenizer] [--with-preprocess]

Two test images (runner_harness.image_paths: the non-square corpus images, or generated ones) are copied
into a scratch folder beside the batch file; the requests name them relatively (resolved against the batch
file's folder), by an absolute path, both in one request, and none: every result's prompt ids, tokens and
text equal the single run's (``--image``, ``--print-ids``) of the same prompt and images, the
requests answered in one run whatever came before them (image requests between text ones, the same image
twice). A missing image is that line's error, naming the resolved path, and the next line is still
answered. Skipped (exit 0, saying so) without the tokenizer or the image preprocessing in the build. Exit
status 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from runner_harness import CheckFailed, Runner, image_paths

NEW_TOKENS = 12
PROMPTS = ("Describe the image.", "这是什么？🙂")


def single(runner: Runner, prompt: str, images: list[Path]) -> dict[str, Any]:
    args = ["--prompt", prompt, "--gen", str(NEW_TOKENS), "--ignore-eos", "--print-ids", "--threads", "1"]
    for image in images:
        args += ["--image", str(image)]
    result = runner.run(args)
    doc = result.ids()
    return {"prompt_ids": doc["prompt_ids"], "tokens": doc["tokens"], "text": result.text().decode("utf-8")}


def check(runner: Runner, work: Path) -> None:
    folder = work / "batch"
    folder.mkdir()
    (_, first), (_, second) = image_paths(work)[:2]
    a = folder / f"a{first.suffix}"
    b = folder / "sub" / f"b{second.suffix}"
    b.parent.mkdir()
    shutil.copyfile(first, a)
    shutil.copyfile(second, b)
    cases: list[tuple[str, list[str], list[Path]]] = [  # prompt, the request's names, the files they are
        (PROMPTS[0], [], []),
        (PROMPTS[0], [a.name], [a]),
        (PROMPTS[1], [str(b)], [b]),
        (PROMPTS[0], ["sub/" + b.name, a.name], [b, a]),
        (PROMPTS[1], [], []),
        (PROMPTS[0], [a.name], [a]),
    ]
    lines = [json.dumps({"id": k, "prompt": p, "images": names}) for k, (p, names, _) in enumerate(cases)]
    lines.insert(3, json.dumps({"id": "missing", "prompt": PROMPTS[0], "images": ["nowhere.png"]}))
    batch = folder / "requests.jsonl"
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = [*runner.wrapper, runner.program, "--model", str(runner.model), "--batch", str(batch)]
    command += ["--gen", str(NEW_TOKENS), "--ignore-eos", "--print-ids", "--threads", "1"]
    print("$", shlex.join(command), flush=True)
    proc = subprocess.run(command, capture_output=True, timeout=900, check=False)
    results = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    if proc.returncode != 1 or len(results) != len(lines):
        raise CheckFailed(
            f"exit {proc.returncode} (expected 1) and {len(results)} results for {len(lines)} lines"
        )
    missing = results.pop(3)
    # the resolved path (the batch file's folder joined with the platform's separator)
    if (
        not missing["error"].startswith("line 4: ")
        or "nowhere.png" not in missing["error"]
        or missing["tokens"]
    ):
        raise CheckFailed(f"the missing image's result {missing}: expected line 4's error naming nowhere.png")
    if folder.name not in missing["error"]:
        raise CheckFailed(f"{missing['error']!r} does not name the batch file's folder {folder}")
    print(f"ok   a missing image: {missing['error']}", flush=True)
    for (prompt, names, files), got in zip(cases, results, strict=True):
        want = single(runner, prompt, files)
        label = f"{prompt!r} with {names}"
        for key in ("prompt_ids", "tokens", "text"):
            if got[key] != want[key]:
                raise CheckFailed(f"{label}: {key} {got[key]!r} vs the single run's {want[key]!r}")
        if got["error"]:
            raise CheckFailed(f"{label}: error {got['error']!r}")
        print(f"ok   {label}: prompt ids, tokens and text equal the single run's", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runner", required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--wrapper", default="")
    parser.add_argument("--with-tokenizer", action="store_true")
    parser.add_argument("--with-preprocess", action="store_true")
    args = parser.parse_args(argv)
    if not (args.with_tokenizer and args.with_preprocess):
        print("skip: the batch mode's images need --prompt and --image (tokenizer and preprocessing built)")
        return 0
    runner = Runner(args.runner, args.model, tuple(shlex.split(args.wrapper)), True, True)
    with tempfile.TemporaryDirectory(prefix="batch-images-") as tmp:
        try:
            check(runner, Path(tmp))
        except CheckFailed as err:
            print(f"FAIL {err}", flush=True)
            return 1
    print("PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
