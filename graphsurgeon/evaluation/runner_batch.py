"""``gsurg eval --runner``: a conversion answers an evaluation set through the C++ runtime (``gsurg_run``'s
batch mode, ``runtime_cpp/runner/README.md``) instead of the ncnn wheel.

The family's ``batch_request`` (its manifest names it: ``evaluate.py:batch_request``) turns each item into
one request, ``batch_request(item, workdir) -> dict`` with the batch mode's keys ``prompt`` or ``ids``,
``images`` (file names, which it may write into ``workdir``: a relative name is read from there) and
``gen``; the engine adds the ``id``. One run of the program answers the whole set with the model loaded
once; each result line becomes an ``Answer`` with the runner's text and tokens. The runner gives no logits,
so its answers carry none: agreement and KL are not measured for them (``run.evaluate`` says so).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphsurgeon.evaluation.answers import Answer, Question
from graphsurgeon.evaluation.errors import EvalError
from graphsurgeon.plugins import load_callable
from graphsurgeon.registry import find_family

Progress = Callable[[str], None]
#: The request keys a family's batch_request may give (the batch mode's, without the id the engine sets).
REQUEST_KEYS = frozenset({"prompt", "ids", "images", "gen"})
INT4_ACTIVATIONS = ("fp32", "int8")


@dataclass(frozen=True)
class RunnerOptions:
    """The C++ runner a row is answered by, and how it runs the 4-bit Gemms."""

    program: Path
    int4_activations: str = "fp32"  # int8: the runner's w4a8 kernel (--int4-activations int8)

    @property
    def label(self) -> str:
        """The backend as a report names it: the program, and the flag that changes its arithmetic."""
        extra = " --int4-activations int8" if self.int4_activations == "int8" else ""
        return f"{self.program.name}{extra}"

    def check(self) -> None:
        """EvalError unless ``program`` is an executable file and the activations are known."""
        if not self.program.is_file() or not os.access(self.program, os.X_OK):
            raise EvalError(f"{self.program}: not an executable file (the C++ runner, gsurg_run)")
        if self.int4_activations not in INT4_ACTIVATIONS:
            raise EvalError(
                f"int4 activations {self.int4_activations!r}: expected one of {', '.join(INT4_ACTIVATIONS)}"
            )


def image_request(item: Question, workdir: Path) -> dict[str, Any]:
    """A batch request for a family whose runner takes the question as its prompt and the image as a
    file: the item's image written losslessly (PNG) into ``workdir``, named by its pixels' digest (equal
    images, such as the blank ones of one size, share a file); a text question has no image."""
    image = getattr(item, "image", None)
    if image is None:
        return {"prompt": item.question}
    digest = hashlib.sha256(f"{image.mode} {image.size}".encode() + image.tobytes()).hexdigest()[:20]
    name = f"image-{digest}.png"
    if not (workdir / name).exists():
        image.save(workdir / name, format="PNG")
    return {"prompt": item.question, "images": [name]}


def _requester(family_name: str, folder: Path) -> Callable[[Question, Path], dict[str, Any]]:
    family = find_family(family_name)
    if family.batch_request is None:
        raise EvalError(
            f"{folder / 'model.json'}: family {family.name!r} names no batch_request (its family.yaml): "
            "gsurg eval --runner cannot ask its conversions"
        )
    function: Callable[[Question, Path], dict[str, Any]] = load_callable(
        family.batch_request, family.folder, what="batch_request", error=EvalError
    )
    return function


def _requests(
    items: Sequence[Question], make: Callable[[Question, Path], dict[str, Any]], workdir: Path
) -> list[str]:
    lines = []
    for k, item in enumerate(items):
        request = make(item, workdir)
        unknown = sorted(set(request) - REQUEST_KEYS) if isinstance(request, dict) else []
        if not isinstance(request, dict) or unknown:
            raise EvalError(
                f"batch_request gave {unknown[0]!r} for item {k + 1}, not a batch request key"
                if unknown
                else f"batch_request gave a {type(request).__name__} for item {k + 1}, not a dict"
            )
        lines.append(json.dumps({"id": k, **request}, ensure_ascii=False))
    return lines


def _answer(result: dict[str, Any]) -> Answer:
    text = result.get("text")
    return Answer(
        text if isinstance(text, str) else "",
        [int(t) for t in result.get("tokens", [])],
        [],
        str(result.get("error", "")),
    )


def runner_answers(
    folder: Path,
    family: str,
    items: Sequence[Question],
    *,
    runner: RunnerOptions,
    precision: str,
    threads: int,
    max_tokens: int,
    progress: Progress | None = None,
) -> list[Answer]:
    """Every item answered by ``runner`` on the conversion in ``folder`` (model.json ``family``), in item
    order: greedy, at most ``max_tokens`` new tokens, EOS kept in the tokens and cut from the text. A request
    the runner could not answer is an Answer with its error; a run that could not start (exit 2) or lost
    results is an EvalError naming the program and its error line."""
    make = _requester(family, folder)
    with tempfile.TemporaryDirectory(prefix="gsurg-eval-") as tmp:
        workdir = Path(tmp)
        batch = workdir / "requests.jsonl"
        batch.write_text("".join(line + "\n" for line in _requests(items, make, workdir)), encoding="utf-8")
        command = [
            str(runner.program),
            "--model",
            str(folder),
            "--batch",
            str(batch),
            "--gen",
            str(max_tokens),
            "--threads",
            str(threads),
            "--precision",
            precision,
            "--int4-activations",
            runner.int4_activations,
        ]
        results: dict[int, dict[str, Any]] = {}
        with (
            (workdir / "stderr.txt").open("w+b") as err,
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL) as proc,
        ):
            assert proc.stdout is not None
            for raw in proc.stdout:
                try:
                    result = json.loads(raw)
                except ValueError:
                    what = f"{runner.program}: a result line that is not JSON: {raw[:200]!r}"
                    raise EvalError(what) from None
                results[int(result["id"])] = result
                if progress is not None and len(results) % 50 == 0:
                    progress(f"{folder} ({runner.label}): item {len(results)} of {len(items)}")
            code = proc.wait()
            err.seek(0)
            lines = err.read().decode("utf-8", "replace").splitlines()
    if code not in (0, 1):  # 1: some requests got an error result, which their answers carry
        last = next((line for line in reversed(lines) if line.strip()), "no error line")
        raise EvalError(f"{runner.program} --model {folder} --batch exited {code}: {last}")
    missing = [k for k in range(len(items)) if k not in results]
    if missing:
        first = missing[0] + 1
        raise EvalError(f"{runner.program}: no result for item {first} of {len(items)} (exit {code})")
    return [_answer(results[k]) for k in range(len(items))]
