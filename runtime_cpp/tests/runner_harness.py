"""What the penguin_vl_run checks share: running the program (natively or under a wrapper such as wine) and
reading its ``--print-ids`` line, the fp32 PyTorch reference of ``graphsurgeon/models/penguin_vl`` (the
independent source of every expected token), the test images, and the ``--pixel-values`` dump format.

The reference is the checkpoint the model folder was converted from (``model.json`` ``verifier.checkpoint``):
``PenguinVL.fuse`` / ``decode`` / ``logits`` with greedy argmax as ``PenguinVL.generate`` does, except that
it can run past an EOS (``ignore_eos``: the tiny model may emit one early, and both sides then generate
exactly the budget) and can apply transformers' ``RepetitionPenaltyLogitsProcessor`` before the argmax.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from graphsurgeon.formats.model_json import read_model_json  # noqa: E402
from graphsurgeon.models.penguin_vl.config import load_files  # noqa: E402
from graphsurgeon.models.penguin_vl.processor import (  # noqa: E402
    PenguinTokenizer,
    ProcessedImage,
    load_and_preprocess,
    prompt_ids,
)

CORPUS_IMAGES = REPO.parent / "shared" / "corpus" / "images"
PIXEL_MAGIC = b"PVLPIX01"


class CheckFailed(Exception):
    """A check that did not hold; the message says what differed."""


def newest_input(inputs: Sequence[str]) -> float:
    """The newest modification time of the files (or files below the folders) ``inputs`` name, relative
    to the repository."""
    newest = 0.0
    for rel in inputs:
        path = REPO / rel
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        newest = max([newest, *(p.stat().st_mtime for p in files if "__pycache__" not in p.parts)])
    return newest


def run_python(args: Sequence[str], what: str) -> None:
    """This interpreter on ``args``, from the repository root with it on the path; CheckFailed on failure."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, *args]
    print("$", shlex.join(command), flush=True)
    if subprocess.run(command, cwd=REPO, env=env, check=False).returncode != 0:
        raise CheckFailed(f"{what} failed")


def gsurg_apply(rules: Path, out: Path, inputs: Sequence[str], settings: Sequence[str] = ()) -> None:
    """``gsurg apply RULES [SETTINGS] --out OUT`` with this checkout's gsurg, into a staging folder renamed
    to ``out`` when it succeeds; skipped while ``out/model.json`` is newer than every one of ``inputs``."""
    marker = out / "model.json"
    if marker.is_file() and marker.stat().st_mtime >= newest_input(inputs):
        print(f"reusing {out} (newer than the rule and checkpoint files)")
        return
    staging = out.with_name(out.name + ".converting")
    shutil.rmtree(staging, ignore_errors=True)
    gsurg = ["-c", "import sys; from graphsurgeon.cli import main; sys.exit(main())"]
    run_python([*gsurg, "apply", str(rules), *settings, "--out", str(staging)], f"gsurg apply {rules.name}")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)


def write_pixel_values(image: ProcessedImage, out: Path) -> None:
    """The ``--pixel-values`` dump: ``PVLPIX01``, int32 grid_h, grid_w, patch_dim (little-endian), then the
    float32 patches ``[grid_h*grid_w, patch_dim]`` in raster order."""
    pixels = np.ascontiguousarray(image.pixel_values, dtype="<f4")
    gh, gw = image.grid
    header = PIXEL_MAGIC + struct.pack("<3i", gh, gw, pixels.shape[1])
    out.write_bytes(header + pixels.tobytes())


@dataclass(frozen=True)
class RunResult:
    code: int
    stdout: bytes
    stderr: str
    command: list[str]

    def ids(self) -> dict[str, Any]:
        """The ``--print-ids`` JSON (the last stdout line)."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if self.code != 0 or not lines:
            raise CheckFailed(f"{shlex.join(self.command)} exited {self.code}: {self.stderr.strip()}")
        try:
            doc: dict[str, Any] = json.loads(lines[-1])
        except ValueError:
            raise CheckFailed(f"no --print-ids line at the end of the output: {lines[-1]!r}") from None
        return doc

    def text(self) -> bytes:
        """The streamed text: everything before the ``--print-ids`` line."""
        body = self.stdout.rstrip(b"\n")
        cut = body.rfind(b"\n")
        return body[:cut] if cut >= 0 else b""


@dataclass(frozen=True)
class Runner:
    """penguin_vl_run, and what the build gave it (``--with-tokenizer`` / ``--with-preprocess``)."""

    program: str
    model: Path
    wrapper: Sequence[str] = ()
    tokenizer: bool = False
    preprocess: bool = False

    def run(self, args: Sequence[str], *, model: Path | None = None, timeout: float = 300) -> RunResult:
        command = [*self.wrapper, self.program, "--model", str(model or self.model), *args]
        proc = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
        if self.wrapper and proc.returncode == 1 and not proc.stdout and not proc.stderr:
            # wine now and then fails to start a process (exit 1, not a byte written; seen once in ~200
            # runs of one ctest); the program never exits 1 without an error line, so that is the wrapper's
            # failure: run once more, and say so
            print(f"note: {shlex.join(command)} exited 1 with no output under the wrapper; running it again")
            proc = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
        return RunResult(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"), command)


@dataclass(frozen=True)
class TestImage:
    label: str
    path: Path  # the image file (--image)
    processed: ProcessedImage  # the Python processor's patches
    dump: Path  # the same patches as a --pixel-values file


class Reference:
    """The fp32 PyTorch reference and its tokenizer, for the checkpoint a model folder came from."""

    def __init__(self, model_dir: Path) -> None:
        import torch

        from graphsurgeon.models.penguin_vl.model import load_model

        doc = read_model_json(model_dir, {"penguin_vl"})  # the schema's checks, errors naming the key
        self.checkpoint = Path(doc["verifier"]["checkpoint"])
        self.files = load_files(self.checkpoint)
        self.model = load_model(self.checkpoint, self.files)
        self.tokenizer = PenguinTokenizer(self.files)
        self.eos = set(self.files.config.eos_token_ids)
        self.torch = torch

    def image(self, label: str, path: Path, workdir: Path) -> TestImage:
        processed = load_and_preprocess(path, self.files.processor)
        dump = workdir / f"{path.stem}.pvlpix"
        write_pixel_values(processed, dump)
        return TestImage(label, path, processed, dump)

    def prompt_ids(self, text: str, images: Sequence[TestImage]) -> list[int]:
        return prompt_ids(self.tokenizer, text, [img.processed for img in images])

    def greedy(
        self, ids: Sequence[int], images: Sequence[TestImage], new_tokens: int, *, penalty: float = 1.0
    ) -> list[int]:
        """Greedy tokens, never stopping at EOS (``stop_at_eos`` truncates afterwards)."""
        torch = self.torch
        from transformers import RepetitionPenaltyLogitsProcessor

        processor = RepetitionPenaltyLogitsProcessor(penalty) if penalty != 1.0 else None
        history = list(ids)
        out: list[int] = []
        with torch.no_grad():
            features = [
                self.model.encode_image(
                    torch.from_numpy(img.processed.pixel_values), img.processed.grid
                ).projector
                for img in images
            ]
            hidden, cache = self.model.decode(self.model.fuse(ids, features), _empty_cache())
            logits = self.model.logits(hidden[-1])
            while len(out) < new_tokens:
                if processor is not None:
                    scores = processor(torch.tensor([history]), logits[None].clone())
                    logits = scores[0]
                token = int(logits.argmax())
                out.append(token)
                history.append(token)
                if len(out) == new_tokens:
                    break
                step, cache = self.model.decode(self.model.model.embed_tokens(torch.tensor([token])), cache)
                logits = self.model.logits(step[-1])
        return out

    def forced_logits(
        self, ids: Sequence[int], images: Sequence[TestImage], tokens: Sequence[int]
    ) -> list[Any]:
        """The reference's logits before each of ``tokens`` when the prompt is followed by them (teacher
        forcing): entry i is what the model predicts for position ``len(ids) + i``."""
        torch = self.torch
        out = []
        with torch.no_grad():
            features = [
                self.model.encode_image(
                    torch.from_numpy(img.processed.pixel_values), img.processed.grid
                ).projector
                for img in images
            ]
            hidden, cache = self.model.decode(self.model.fuse(ids, features), _empty_cache())
            out.append(self.model.logits(hidden[-1]))
            for token in tokens[:-1]:
                step, cache = self.model.decode(self.model.model.embed_tokens(torch.tensor([token])), cache)
                out.append(self.model.logits(step[-1]))
        return out

    def stop_at_eos(self, tokens: Sequence[int]) -> list[int]:
        """What ``PenguinVL.generate`` returns for the same budget: up to and including the first EOS."""
        for i, token in enumerate(tokens):
            if token in self.eos:
                return list(tokens[: i + 1])
        return list(tokens)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(tokens)


def _empty_cache() -> Any:
    from graphsurgeon.models.penguin_vl.model import KVCache

    return KVCache()


def image_paths(workdir: Path) -> list[tuple[str, Path]]:
    """The non-square corpus images (all of them, by name), else two generated non-square PNGs."""
    from PIL import Image

    if CORPUS_IMAGES.is_dir():
        found = []
        for path in sorted(p for p in CORPUS_IMAGES.iterdir() if p.is_file()):
            with Image.open(path) as img:
                if img.width != img.height:
                    found.append((path.name, path))
        if len(found) >= 2:
            return found
    out = []
    for k, (width, height) in enumerate(((300, 200), (190, 260))):  # non-square, different sizes
        y, x = np.mgrid[0:height, 0:width].astype(np.float64)
        noise = np.random.default_rng(k).integers(0, 64, size=(height, width, 3))
        base = np.stack(
            [255 * x / width, 255 * y / height, 127.5 * (1 + np.sin((x + 2 * y) / 17.0))], axis=-1
        )
        path = workdir / f"generated_{width}x{height}.png"
        Image.fromarray(np.clip(base * 0.75 + noise, 0, 255).astype(np.uint8), "RGB").save(path)
        out.append((path.name, path))
    return out


def first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
