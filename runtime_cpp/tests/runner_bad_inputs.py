"""Bad inputs to penguin_vl_run: each must end with exit code 2 and a last stderr line
``penguin_vl_run: error: ...`` (the program's own name) that names the culprit (a file, blob, model.json
key, flag or value), never a crash or a traceback. Broken model folders are made by copying the converted
one and damaging the copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner_harness import CORPUS_IMAGES, REPO, CheckFailed, Runner

Damage = Callable[[Path], None]
MINICPM_TOKENIZER = REPO / "graphsurgeon" / "models" / "minicpm_v2" / "tiny" / "tokenizer.json"


@dataclass(frozen=True)
class BadCase:
    label: str
    args: list[str]  # after --model; "{tmp}" is replaced by the scratch folder
    expect: str  # a substring the error line must contain; "{tmp}" / "{model}" replaced
    damage: Damage | None = None  # applied to a copy of the model folder, which the case then uses


def _edit_json(edit: Callable[[dict[str, Any]], None]) -> Damage:
    def apply(folder: Path) -> None:
        path = folder / "model.json"
        doc = json.loads(path.read_text(encoding="utf-8"))
        edit(doc)
        path.write_text(json.dumps(doc), encoding="utf-8")

    return apply


def _drop(*keys: str) -> Damage:
    def edit(doc: dict[str, Any]) -> None:
        node = doc
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return _edit_json(edit)


def _set(value: Any, *keys: str) -> Damage:
    def edit(doc: dict[str, Any]) -> None:
        node = doc
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return _edit_json(edit)


def _truncate(name: str, nbytes: int) -> Damage:
    def apply(folder: Path) -> None:
        path = folder / name
        data = path.read_bytes()
        path.write_bytes(data[:-nbytes] if nbytes > 0 else data + b"\0" * -nbytes)

    return apply


def _remove(name: str) -> Damage:
    def apply(folder: Path) -> None:
        (folder / name).unlink()

    return apply


def _write(name: str, text: str) -> Damage:
    def apply(folder: Path) -> None:
        (folder / name).write_text(text, encoding="utf-8")

    return apply


def _shift_embedding(nbytes: int) -> Damage:
    """The matrix (tag and values) recorded ``nbytes`` further on in lm_head's .bin."""

    def edit(doc: dict[str, Any]) -> None:
        doc["embedding_matrix"]["offset"] += nbytes
        doc["embedding_matrix"]["tag_offset"] += nbytes

    return _edit_json(edit)


def _unsupported_normalizer(folder: Path) -> None:
    path = folder / "tokenizer.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["normalizer"] = {"type": "NFKC"}
    path.write_text(json.dumps(doc), encoding="utf-8")


def _byte_fallback_without_a_byte_token(folder: Path) -> None:
    """A SentencePiece-style tokenizer.json (the tiny MiniCPM-V-2 one) with byte_fallback but no "<0x41>"."""
    doc = json.loads(MINICPM_TOKENIZER.read_text(encoding="utf-8"))
    del doc["model"]["vocab"]["<0x41>"]
    (folder / "tokenizer.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")


def _fifo(name: str) -> Damage:
    def apply(folder: Path) -> None:
        (folder / name).unlink()
        os.mkfifo(folder / name)

    return apply


def _all(*damages: Damage) -> Damage:
    def apply(folder: Path) -> None:
        for damage in damages:
            damage(folder)

    return apply


def _patch_size(size: int) -> Damage:
    """model.json claims patches of ``size`` on both sides (preprocessing and vision), unlike the net."""
    return _all(_set(size, "image_processor", "patch_size"), _set(size, "vision", "patch_size"))


def _fewer_layers(doc: dict[str, Any]) -> None:
    doc["num_layers"] = 1
    doc["decoder"]["cache_inputs"] = doc["decoder"]["cache_inputs"][:2]
    doc["decoder"]["cache_outputs"] = doc["decoder"]["cache_outputs"][:2]


def _smaller_vocabulary(doc: dict[str, Any]) -> None:
    doc["vocab_size"] = 640
    doc["tokens"]["image"] = doc["tokens"]["eos"] = 600


def _narrower_hidden(doc: dict[str, Any]) -> None:
    doc["hidden_size"] = 32
    doc["embedding_matrix"]["shape"][1] = 32


TEXT = ["--prompt", "Describe the image.", "--gen", "4"]


def precision_case(text: list[str]) -> BadCase:
    """A --precision the runner does not have (issue 17 item 2: fp32, fp16, auto)."""
    return BadCase(
        "--precision fp8", [*text, "--precision", "fp8"], '--precision must be fp32, fp16 or auto, not "fp8"'
    )


def int4_activations_case(text: list[str]) -> BadCase:
    """An --int4-activations the runner does not have (fp32, int8)."""
    return BadCase(
        "--int4-activations int4",
        [*text, "--int4-activations", "int4"],
        '--int4-activations must be fp32 or int8, not "int4"',
    )


def block_quant_cases(doc: dict[str, Any]) -> list[BadCase]:
    """For a conversion with a block-quantized tied matrix (``doc``: its model.json; ``cases`` are for a
    float one): ``embedding_matrix.block_quant`` made to disagree with the shape, the file or the formats
    ncnn has. Each must be refused at load, naming the key (check_precision.py runs them)."""
    entry = doc["embedding_matrix"]
    quant = entry["block_quant"]
    rows, cols = entry["shape"]
    row_bytes, bits = int(quant["row_bytes"]), int(quant["bits"])
    inside = int(entry["offset"]) + row_bytes  # the start of the second row's codes
    text = ["--ids", "100,200,300", "--gen", "4"]
    return [
        BadCase(
            "block_quant.row_bytes one more than the columns take",
            text,
            f'"embedding_matrix.block_quant.row_bytes" is {row_bytes + 1}, but {cols} columns of {bits} bits '
            f"take {row_bytes} bytes",
            _set(row_bytes + 1, "embedding_matrix", "block_quant", "row_bytes"),
        ),
        BadCase(
            "block_quant.scales_offset inside the packed rows",
            text,
            f"embedding_matrix.block_quant.scales_offset {inside} lies inside the packed rows (bytes "
            f"{entry['offset']} to {int(entry['offset']) + rows * row_bytes})",
            _set(inside, "embedding_matrix", "block_quant", "scales_offset"),
        ),
        BadCase(
            "block_quant.bits 5",
            text,
            '"embedding_matrix.block_quant.bits" must be 4, 6 or 8',
            _set(5, "embedding_matrix", "block_quant", "bits"),
        ),
    ]


def cases(runner: Runner) -> list[BadCase]:
    # Without the tokenizer the prompt is given as ids (plain byte-level tokens of any vocabulary); the
    # image id comes from the model's own model.json.
    text = TEXT if runner.tokenizer else ["--ids", "100,200,300", "--gen", "4"]
    image_id = json.loads((runner.model / "model.json").read_text(encoding="utf-8"))["tokens"]["image"]
    image_flag = "--image" if runner.preprocess else "--pixel-values"
    out = [
        BadCase("no model folder", [*text], "{tmp}/absent/model.json"),
        BadCase("model.json not JSON", text, "model.json: not valid JSON", _write("model.json", "{nets: ")),
        BadCase("model.json key missing", text, "decoder.rope.theta", _drop("decoder", "rope", "theta")),
        BadCase("model.json key mistyped", text, "num_layers", _set("two", "num_layers")),
        # the header first (graphsurgeon/models/penguin_vl/penguin_vl.v2.schema.json): another family or
        # version, or a model.json written before families, is refused as such, naming the key
        BadCase(
            "model.json of another family",
            text,
            'entry "family" is "llama", not "',  # then the registered families, in name order
            _set("llama", "family"),
        ),
        BadCase("model.json of another version", text, 'entry "version" is 3, not 2', _set(3, "version")),
        BadCase("model.json without a family", text, 'entry "family" is missing', _drop("family")),
        BadCase(
            "model.json of version 1",
            text,
            "a model.json of version 1, written before families",
            _set("gsurg-penguin-vl", "format"),
        ),
        BadCase("net file missing", text, "decoder.ncnn.bin: no such file", _remove("decoder.ncnn.bin")),
        BadCase("lm_head .bin truncated", text, "lm_head.ncnn.bin", _truncate("lm_head.ncnn.bin", 64)),
        BadCase("decoder .bin too long", text, "does not belong", _truncate("decoder.ncnn.bin", -16)),
        BadCase(
            "decoder net with other blobs",
            text,
            '"in3"',
            _set("vision_encoder.ncnn.param", "nets", "decoder", "param"),
        ),
        BadCase(
            "vision encoder .bin of another net",
            [*text[:-2], image_flag, "{image}", "--gen", "4"],
            "vision_encoder.ncnn.param",
            _set("vision_projector.ncnn.bin", "nets", "vision_encoder", "bin"),
        ),
        BadCase(
            "embedding offset past the end",
            text,
            "lm_head.ncnn.bin",
            _shift_embedding(10**9),
        ),
        BadCase(
            "embedding tag inconsistent", text, "embedding_matrix.tag", _set(1, "embedding_matrix", "tag")
        ),
        BadCase("embedding offset off by 4", text, "weight tag at byte 4", _shift_embedding(4)),
        BadCase("image id outside the vocabulary", text, "tokens.image", _set(10**6, "tokens", "image")),
        BadCase("prompt longer than the context", text, "context", _set(2, "max_positions")),
        BadCase("unreadable image", [*text[:-2], image_flag, "{tmp}/not_an_image.png"], "not_an_image.png"),
        BadCase("missing image", [*text[:-2], image_flag, "{tmp}/absent.png"], "absent.png"),
        BadCase("unknown flag", [*text, "--temprature", "1"], "--temprature"),
        BadCase("malformed number", [*text[:-1], "many"], "--gen"),
        BadCase("bad top-p", [*text, "--temperature", "1", "--top-p", "1.5"], "--top-p"),
        BadCase("no prompt", ["--gen", "4"], "--prompt"),
        BadCase("malformed forced id", [*text, "--force-ids", "5,x"], "--force-ids"),
        BadCase("forced id off the table", [*text, "--force-ids", "5,1000000"], "--force-ids: token id"),
        precision_case(text),
        BadCase("image tokens without images", ["--ids", f"100,{image_id},{image_id},200"], "image tokens"),
        # model.json against the nets' own shapes (issue 14 item 7): exit 2 naming the key, never a crash
        *(
            BadCase(
                f"patch_size {size} unlike the patch net",
                [*text[:-2], image_flag, "{image}", "--gen", "4"],
                f'"vision.patch_size" is {size} (3x{size}x{size} = {3 * size * size} values per patch), '
                "but nets.vision_embed_patch takes 588 per patch",
                _patch_size(size),
            )
            for size in (15, 28, 56, 4096)
        ),
        BadCase(
            "image_processor.patch_size unlike vision.patch_size",
            text,
            '"image_processor.patch_size" is 28, but vision.patch_size is 14',
            _set(28, "image_processor", "patch_size"),
        ),
        BadCase(
            "vision RoPE head_dim unlike the encoder",
            [*text[:-2], image_flag, "{image}", "--gen", "4"],
            '"vision.rope.head_dim" is 16, but nets.vision_encoder rotates heads of 32',
            _set(16, "vision", "rope", "head_dim"),
        ),
        BadCase(
            "vision layers unlike the encoder",
            [*text[:-2], image_flag, "{image}", "--gen", "4"],
            '"vision.layers" is 3, but nets.vision_encoder has 2 attention',
            _set(3, "vision", "layers"),
        ),
        BadCase(
            "decoder RoPE head_dim unlike the decoder",
            text,
            '"decoder.rope.head_dim" is 16, but nets.decoder rotates heads of 32',
            _set(16, "decoder", "rope", "head_dim"),
        ),
        BadCase(
            "hidden_size unlike the decoder",
            text,
            '"hidden_size" is 32, but nets.decoder takes rows of 64',
            _edit_json(_narrower_hidden),
        ),
        BadCase(
            "vocab_size unlike lm_head",
            ["--ids", "100,200,300", "--gen", "4"],
            '"vocab_size" is 640, but nets.lm_head makes rows of 646 logits',
            _edit_json(_smaller_vocabulary),
        ),
        BadCase("num_layers unlike the decoder", text, 'input blob "cache_k1"', _edit_json(_fewer_layers)),
        # issue 14 item 9: the size check must not overflow, a NUL must not cut a file name
        BadCase(
            "embedding shape overflowing 64 bits",
            text,
            "needs 4611686018427387904 rows of 256 bytes",
            _set([2**62, 64], "embedding_matrix", "shape"),
        ),
        BadCase(
            "file name with a NUL",
            text,
            '"nets.decoder.param" contains a NUL character',
            _set("decoder.ncnn.param\u0000.old", "nets", "decoder", "param"),
        ),
    ]
    if runner.tokenizer:
        out += [
            BadCase("empty prompt", ["--prompt", ""], "empty"),
            BadCase("blank prompt", ["--prompt", " \n "], "empty"),
            BadCase("tokenizer.json missing", TEXT, "tokenizer.json", _remove("tokenizer.json")),
            BadCase(
                "tokenizer.json with an unsupported normalizer",
                TEXT,
                'tokenizer.json: normalizer: normalizer "NFKC" is not supported',
                _unsupported_normalizer,
            ),
            BadCase(
                "tokenizer.json with byte fallback but a byte token missing",
                TEXT,
                'tokenizer.json: model.byte_fallback is true, but model.vocab has no "<0x41>"',
                _byte_fallback_without_a_byte_token,
            ),
        ]
    # issue 14 item 8: a FIFO used to block the runner forever (it was opened to find out why it was not a
    # regular file), and a whole-file read had no size bound. FIFOs are a POSIX matter: not under wine.
    if not runner.wrapper:
        out.append(
            BadCase(
                "model.json a FIFO",
                text,
                "model.json: is a FIFO (named pipe), not a regular file",
                _fifo("model.json"),
            )
        )
        if runner.tokenizer:
            fifo = _fifo("tokenizer.json")
            out.append(BadCase("tokenizer.json a FIFO", TEXT, "tokenizer.json: is a FIFO (named pipe)", fifo))
        if runner.preprocess:
            out.append(BadCase("--image a FIFO", [*text, "--image", "{tmp}/pipe.png"], "pipe.png: is a FIFO"))
    if runner.preprocess:
        out.append(
            BadCase(
                "--image of 300 MiB", [*text, "--image", "{tmp}/huge.png"], "huge.png: larger than 256 MiB"
            )
        )
    return out


def bad_inputs(runner: Runner) -> list[str]:
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pvl-bad-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "not_an_image.png").write_bytes(b"this is not an image\n")
        if not runner.wrapper:
            os.mkfifo(tmp / "pipe.png")
        with open(tmp / "huge.png", "wb") as sparse:  # a hole: no disk blocks, 300 MiB by its size
            sparse.truncate(300 << 20)
        image = sorted(CORPUS_IMAGES.iterdir())[0] if CORPUS_IMAGES.is_dir() else None
        failures += run_cases(runner, cases(runner), tmp, image)
    return failures


def run_cases(runner: Runner, bad: Sequence[BadCase], tmp: Path, image: Path | None = None) -> list[str]:
    """Each case on its own copy of the model folder when it damages one (under ``tmp``); the labels of
    those that did not hold. ``{tmp}`` in a case's arguments is ``tmp``, ``{image}`` is ``image``; a case
    needing ``--prompt`` or ``--image`` the build lacks is skipped, saying so."""
    failures: list[str] = []
    for i, case in enumerate(bad):
        needs = [
            (flag, what)
            for flag, what, has in (
                ("--prompt", "tokenizer", runner.tokenizer),
                ("--prompt-file", "tokenizer", runner.tokenizer),
                ("--image", "preprocessing", runner.preprocess),
            )
            if flag in case.args and not has
        ]
        if needs:
            print(f"skip {case.label}: needs {needs[0][0]} (no {needs[0][1]} in this build)")
            continue
        model = runner.model
        if case.damage is not None:
            model = tmp / f"model{i}"
            shutil.copytree(runner.model, model)
            case.damage(model)
        if case.label == "no model folder":
            model = tmp / "absent"
        args = [a.replace("{tmp}", str(tmp)) for a in case.args]
        if "{image}" in args:
            if image is None or not runner.preprocess:
                print(f"skip {case.label}: needs a corpus image and --image")
                continue
            args = [str(image) if a == "{image}" else a for a in args]
        try:
            check(runner, case, model, args, tmp)
        except CheckFailed as err:
            print(f"FAIL {case.label}: {err}", flush=True)
            failures.append(case.label)
    return failures


def check(runner: Runner, case: BadCase, model: Path, args: list[str], tmp: Path) -> None:
    try:
        result = runner.run(args, model=model, timeout=60)
    except subprocess.TimeoutExpired:
        raise CheckFailed("still running after 60 s (waiting on a FIFO?)") from None
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    expect = case.expect.replace("{tmp}", str(tmp))
    if result.code != 2:
        raise CheckFailed(f"exit code {result.code}, expected 2; stderr: {result.stderr.strip()!r}")
    prefix = f"{Path(runner.program).stem}: error: "  # the program's own name (penguin_vl_run, qwen3_vl_run)
    if not last.startswith(prefix) or expect not in last:
        raise CheckFailed(f"the error line {last!r} does not name {expect!r}")
    print(f"ok   {case.label}: {last}", flush=True)
