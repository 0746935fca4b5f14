"""``gsurg eval --runner`` (issue 38 item 2, the C++ half): the trained Qwen3 LLM fixture answers the
held-out questions through the C++ runner's batch mode (``gsurg_run --batch``, the runtime family
``runtime_cpp/families/qwen3_llm``) as it does in the ncnn wheel.

Oracles: the wheel's own answers at the same storage (``--reference`` the same folder: the reference is
always answered in the wheel), item by item, text and tokens, at fp32, int8 and int4 storage; at int4 with
``--int4-activations int8`` (the runner's w4a8 kernel, which only the runner runs) the accuracy is held to a
stated bound. A bad request line is answered with its error and the batch goes on; the engine reports
such errors per item. Skipped when this checkout's gsurg_run is not built or is older than its sources
(``tests/runtime_build.py``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("pnnx")
pytest.importorskip("tokenizers")

from graphsurgeon.cli import main
from graphsurgeon.evaluation import text_tasks
from graphsurgeon.evaluation.errors import EvalError
from graphsurgeon.evaluation.runner_batch import RunnerOptions, runner_answers
from graphsurgeon.registry import find_family
from tests.runtime_build import fresh_runner

pytestmark = pytest.mark.usefixtures("shared_exports")

LIMIT = 120  # held-out items each run answers (docs/precision.md has all 500)
#: int4 weights with --int4-activations int8: accuracy on the first LIMIT items. Measured 2026-12-07 on an
#: AMD EPYC with AVX2 (the w4a8 kernel's avx2 instance): 120/120 here, and 498/500 = 99.6 % on the whole set
#: with every answer the wheel's exact-int4 one (docs/precision.md); the bound leaves room for a few flipped
#: answers on another instance (AVX-512 VNNI, NEON: the same bits by the kernel's contract) or a retrained
#: fixture, and still fails a kernel that breaks the model.
W4A8_MIN_ACCURACY = 0.95


@pytest.fixture(scope="module")
def runner() -> Path:
    return fresh_runner("gsurg_run")


@pytest.fixture(scope="module")
def conversions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The trained fixture at fp32, int8 and int4 storage, and the tiny checkpoint (no tokenizer)."""
    root = tmp_path_factory.mktemp("eval-runner")
    out = {}
    for storage in ("fp32", "int8", "int4"):
        argv = [
            "apply",
            "qwen3_llm",
            "--trained",
            "--set",
            f"storage={storage}",
            "--out",
            str(root / storage),
        ]
        assert main([*argv, "-q"]) == 0
        out[storage] = root / storage
    assert main(["apply", "qwen3_llm", "--out", str(root / "tiny"), "-q"]) == 0
    out["tiny"] = root / "tiny"
    return out


def _eval(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    argv = ["eval", *args, "--set", "text-tasks", "--limit", str(LIMIT), "--format", "json"]
    assert main(argv) == 0, capsys.readouterr().err
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


@pytest.mark.parametrize("storage", ["fp32", "int8", "int4"])
def test_the_runner_answers_each_item_as_the_wheel_does(
    runner: Path, conversions: dict[str, Path], capsys: pytest.CaptureFixture[str], storage: str
) -> None:
    folder = str(conversions[storage])
    doc = _eval(capsys, folder, "--reference", folder, "--runner", str(runner))
    (row,) = doc["rows"]
    assert row["backend"] == "gsurg_run" and row["errors"] == []
    # the reference is the same conversion answered in the wheel: every answer the same, text and tokens
    assert row["same_answers"] == LIMIT and row["same_tokens"] == LIMIT
    assert row["accuracy"] == doc["reference_accuracy"] >= 0.95
    assert row["agreement"] is None and row["mean_kl"] is None  # the runner gives no logits
    assert sum(kind["items"] for kind in row["by_kind"].values()) == LIMIT


def test_int4_with_int8_activations_runs_the_w4a8_kernel_within_its_bound(
    runner: Path, conversions: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = conversions["int4"]
    args = ["--reference", str(folder), "--runner", str(runner), "--int4-activations", "int8"]
    doc = _eval(capsys, str(folder), *args)
    (row,) = doc["rows"]
    assert row["backend"] == "gsurg_run --int4-activations int8" and row["errors"] == []
    print(
        f"w4a8: accuracy {row['accuracy']:.3f}, {row['same_answers']}/{LIMIT} answers the wheel's int4 ones"
    )
    assert row["accuracy"] >= W4A8_MIN_ACCURACY
    # the kernel really ran (on a CPU with one of its SIMD instances: else the runner says so, and ran ncnn's)
    batch = tmp_path / "one.jsonl"
    batch.write_text(json.dumps({"prompt": text_tasks.eval_items()[0].question}) + "\n")
    command = [str(runner), "--model", str(folder), "--batch", str(batch), "--verbose", "--threads", "1"]
    log = subprocess.run([*command, "--int4-activations", "int8"], capture_output=True, text=True, check=True)
    assert "through gsurg's w4a8" in log.stderr or "no SIMD instance on this CPU" in log.stderr, log.stderr


def test_a_bad_request_line_gets_its_error_and_the_batch_goes_on(
    runner: Path, conversions: dict[str, Path], tmp_path: Path
) -> None:
    question = text_tasks.eval_items()[0]
    lines = [
        json.dumps({"id": "good", "prompt": question.question}),
        "{this is not json",
        json.dumps({"id": "typo", "promt": question.question}),
        json.dumps({"id": "image", "prompt": question.question, "images": ["x.png"]}),
        json.dumps({"id": "again", "prompt": question.question}),
    ]
    batch = tmp_path / "requests.jsonl"
    batch.write_text("\n".join(lines) + "\n")
    command = [str(runner), "--model", str(conversions["int8"]), "--batch", str(batch), "--gen", "8"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    assert proc.returncode == 1  # answered, some lines with an error
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["id"], r["line"]) for r in results] == [
        ("good", 1),
        (None, 2),
        ("typo", 3),
        ("image", 4),
        ("again", 5),
    ]
    good, not_json, typo, image, again = results
    assert good["error"] == "" and good["text"].strip() == question.answer and good["stop"] == "eos"
    assert again["tokens"] == good["tokens"]  # the cache was reset between requests
    assert not_json["error"].startswith("line 2: not valid JSON: ")
    assert typo["error"] == 'line 3: unknown key "promt" (a request has id, prompt, ids, images, gen)'
    assert image["error"].startswith("line 4: ") and "text-only LLM: it takes no images" in image["error"]
    assert all(r["tokens"] == [] and r["text"] is None for r in (not_json, typo, image))
    assert proc.stderr.count(f"{batch} line ") == 3
    # an unreadable file: exit 2 before the model loads, nothing on stdout
    gone = subprocess.run([*command[:4], str(tmp_path / "absent.jsonl")], capture_output=True, text=True)
    assert gone.returncode == 2 and gone.stdout == "" and "absent.jsonl: no such file" in gone.stderr


def test_the_engine_reports_each_failed_request(
    runner: Path, conversions: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny checkpoint has no tokenizer: every text request fails, each failure an item's error."""
    argv = ["eval", str(conversions["tiny"]), "--set", "text-tasks", "--limit", "3", "--runner", str(runner)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "0.0 % (0/3)" in text and "gsurg_run" in text and "agreement and KL not available" in text
    assert "error: item 1: line 1: " in text and "names no tokenizer" in text


def test_runner_options_are_checked(
    runner: Path, conversions: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = str(conversions["int8"])
    assert main(["eval", folder, "--set", "text-tasks", "--int4-activations", "int8"]) == 2
    assert "--int4-activations goes with --runner" in capsys.readouterr().err
    script = tmp_path / "not-executable"
    script.write_text("")
    assert main(["eval", folder, "--set", "text-tasks", "--runner", str(script)]) == 2
    assert "is not an executable file" in capsys.readouterr().err


def test_a_family_without_batch_request_is_refused(
    runner: Path, conversions: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from graphsurgeon.evaluation import runner_batch

    family = replace(find_family("qwen3_llm"), batch_request=None)
    monkeypatch.setattr(runner_batch, "find_family", lambda name: family)
    items = text_tasks.eval_items()[:1]
    with pytest.raises(EvalError, match="family 'qwen3_llm' names no batch_request"):
        runner_answers(
            conversions["int8"],
            "qwen3_llm",
            items,
            runner=RunnerOptions(runner),
            precision="fp32",
            threads=1,
            max_tokens=8,
        )
