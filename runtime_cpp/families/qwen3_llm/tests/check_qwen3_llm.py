"""ctest checks of gsurg_run on the text-only Qwen3 LLM (model.json family ``qwen3_llm``, what
``rules/llm-kv-cache.yaml`` writes), against the fp32 PyTorch reference (``graphsurgeon/models/common/
qwen3_llm_model.py``, the checkpoint model.json's ``verifier.checkpoint`` names) and the ``ncnn`` wheel
running the same nets (``graphsurgeon/verify/llm_chain.py``):

    check_qwen3_llm.py convert --out DIR --trained-out DIR
    check_qwen3_llm.py greedy|bad-input|batch|limits --runner EXE --model DIR --trained-model DIR
                       [--wrapper CMD] [--with-tokenizer] [--with-preprocess]

``convert`` converts the embedded tiny checkpoint (random weights, no tokenizer) into ``--out`` and the
trained fixture (``graphsurgeon/models/qwen3_llm/trained``, which answers evaluation.text_tasks' questions)
into ``--trained-out``, each reused while its ``model.json`` is newer than every file the conversion reads.

``greedy``: on the tiny model, three id prompts (``--ids``, as ``gsurg verify``'s own), 32 tokens with
``--ignore-eos`` equal to the reference's and the wheel's, and once without (cut after the first EOS); on
the trained model, 24 held-out questions and three other texts (one non-ASCII) through ``--prompt``: the
prompt ids (``--print-ids``) equal HF ``tokenizers``' ids of the text (no chat template: what the fixture
was trained on), the tokens up to EOS equal the reference's and the wheel's, and the streamed text equals
the tokenizer's decoding. Without the tokenizer in the build, the trained prompts go in as ``--ids``.

``bad-input``: an image (``--image`` / ``--pixel-values``: a text-only family), ``--prompt`` on the tiny
model (its model.json names no tokenizer), a model.json of version 2 or version 1, without tokens.eos,
naming a missing tokenizer file, a tied model without its embed net, ``--threads 1024``, a ``--prompt-file``
missing, a folder, not UTF-8, empty or blank or beside another prompt flag, one of 200 KB (read, then past
the context) and, on Linux, a prompt whose prefill the memory estimate refuses, against MemAvailable and
under ulimit -v (not under ASan): each exit 2 with one
``gsurg_run: error:`` line naming the culprit.

``limits``: on the trained model, ``--gen`` past the context stops there with one stderr line giving the
numbers (none within it, none when EOS comes first); a batch request past it has ``stop`` ``"context"``;
``--prompt-file`` (a file, a byte order mark and ``\\r\\n``, stdin) gives the prompt ids and tokens of
``--prompt``.

``batch``: the batch mode (``--batch``, runner/README.md) on the trained model: every result equals the
single run of the same input (prompt or ids, a per-request ``gen``), in file order with the ids echoed,
also read from stdin; bad lines interleaved with good ones each get an error result naming their line (the
good ones after them still answered right, exit 1); \\r\\n endings, a byte order mark and blank lines; the
tiny model's ids requests (text null) and its refused text prompt; ``--print-ids``; an unreadable file or
a flag ``--batch`` refuses: exit 2 and nothing on stdout. Exit status 0 when every check holds, 1
otherwise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runner_bad_inputs import BadCase, _drop, _set, run_cases
from runner_harness import REPO, CheckFailed, Runner, first_difference, gsurg_apply

from graphsurgeon.formats.model_json import read_model_json

RULES = REPO / "rules" / "llm-kv-cache.yaml"
TRAINED = REPO / "graphsurgeon" / "models" / "qwen3_llm" / "trained"
CONVERSION_INPUTS = (
    "rules/llm-kv-cache.yaml",
    "rules/common-rules.yaml",
    "graphsurgeon/models/qwen3_llm",
    "graphsurgeon/models/common",
)
#: gsurg verify's own prompts for this family (graphsurgeon/models/qwen3_llm/verify.py)
ID_PROMPTS = ([5, 17, 42, 99, 3, 250], [1, 2, 3], [123, 45, 67, 89, 10, 11, 12, 13, 14])
NEW_TOKENS = 32
ANSWER_TOKENS = 8  # what gsurg eval gives an answer
QUESTIONS = 24  # held-out questions of evaluation.text_tasks
OTHER_TEXTS = ("largest of 7 700 70?", "  twice in: a b a ", "Réponds 🙂 — 你好?")


def convert(out: Path, trained_out: Path) -> None:
    gsurg_apply(RULES, out, CONVERSION_INPUTS, ["-q"])
    gsurg_apply(RULES, trained_out, CONVERSION_INPUTS, ["-q", "--set", f"checkpoint={TRAINED}"])


# --- the references -------------------------------------------------------------------------------------


class Reference:
    """The fp32 PyTorch model of a conversion's checkpoint, the wheel running its nets, its tokenizer."""

    def __init__(self, model: Path) -> None:
        from graphsurgeon.models.common.qwen3_llm_model import load_model
        from graphsurgeon.verify.llm_chain import LlmChain

        self.doc = read_model_json(model, ("qwen3_llm",))
        checkpoint = Path(self.doc["verifier"]["checkpoint"])
        self.model = load_model(checkpoint)
        self.chain = LlmChain(model, families=("qwen3_llm",), num_threads=1)
        self.eos = set(self.doc["tokens"]["eos"])
        self.tokenizer: Any = None
        if (checkpoint / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))

    def greedy(self, ids: Sequence[int], new_tokens: int) -> list[int]:
        """The reference's greedy tokens past any EOS; the wheel's must be the same."""
        import torch

        with torch.no_grad():
            want = self.model.generate(list(ids), new_tokens)
        wheel = self.chain.greedy(list(ids), new_tokens)
        if wheel != want:
            at = first_difference(wheel, want)
            raise CheckFailed(
                f"the wheel parts from PyTorch at step {at}: {wheel} vs {want} (ids {list(ids)})"
            )
        return want

    def cut(self, tokens: Sequence[int]) -> list[int]:
        """Up to and including the first EOS."""
        for i, token in enumerate(tokens):
            if token in self.eos:
                return list(tokens[: i + 1])
        return list(tokens)

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text).ids]

    def answer_text(self, tokens: Sequence[int]) -> str:
        body = [t for t in tokens if t not in self.eos]
        return str(self.tokenizer.decode(body, skip_special_tokens=False))

    def close(self) -> None:
        self.chain.close()


def questions() -> list[str]:
    from graphsurgeon.evaluation import text_tasks

    return [item.question for item in text_tasks.eval_items()[:QUESTIONS]]


def _ids_arg(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


# --- greedy ---------------------------------------------------------------------------------------------


def attempt(failures: list[str], label: str, check: Callable[[], None]) -> None:
    """Run ``check``: "ok" and its label, or "FAIL" with the reason and its label added to ``failures``."""
    try:
        check()
        print(f"ok   {label}", flush=True)
    except CheckFailed as err:
        print(f"FAIL {label}: {err}", flush=True)
        failures.append(label)


def greedy(runner: Runner, trained: Path) -> list[str]:
    failures: list[str] = []

    tiny = Reference(runner.model)
    try:
        for ids in ID_PROMPTS:

            def tiny_case(ids: Sequence[int] = ids) -> None:
                want = tiny.greedy(ids, NEW_TOKENS)
                args = ["--ids", _ids_arg(ids), "--gen", str(NEW_TOKENS), "--print-ids", "--threads", "1"]
                got = runner.run([*args, "--ignore-eos"]).ids()["tokens"]
                if got != want:
                    raise CheckFailed(f"step {first_difference(got, want)}: {got} vs the reference's {want}")
                stopped = runner.run(args).ids()["tokens"]
                if stopped != tiny.cut(want):
                    raise CheckFailed(f"without --ignore-eos: {stopped} vs {tiny.cut(want)}")

            attempt(
                failures,
                f"tiny, ids {list(ids)}: {NEW_TOKENS} tokens equal PyTorch's and the wheel's",
                tiny_case,
            )
    finally:
        tiny.close()

    ref = Reference(trained)
    try:
        for text in [*questions(), *OTHER_TEXTS]:

            def trained_case(text: str = text) -> None:
                ids = ref.encode(text)
                want = ref.cut(ref.greedy(ids, ANSWER_TOKENS))
                common = ["--gen", str(ANSWER_TOKENS), "--print-ids", "--threads", "1"]
                prompt = ["--prompt", text] if runner.tokenizer else ["--ids", _ids_arg(ids)]
                result = runner.run([*prompt, *common], model=trained)
                doc = result.ids()
                if doc["prompt_ids"] != ids:
                    raise CheckFailed(f"prompt ids {doc['prompt_ids']} are not the tokenizer's {ids}")
                if doc["tokens"] != want:
                    raise CheckFailed(f"tokens {doc['tokens']} vs the reference's {want}")
                if runner.tokenizer and result.text().decode("utf-8") != ref.answer_text(want):
                    raise CheckFailed(f"text {result.text()!r} vs {ref.answer_text(want)!r}")

            attempt(
                failures,
                f"trained, {text!r}: prompt ids, tokens and text equal the references'",
                trained_case,
            )
    finally:
        ref.close()
    return failures


# --- bad input ------------------------------------------------------------------------------------------


#: a prompt of this many words is at least as many tokens: its prefill's attention alone (4 bytes x L^2 x the
#: heads) needs terabytes, more than any test machine has available
HUGE_PROMPT_WORDS = 600_000


def bad_input(runner: Runner, trained: Path, tmp: Path) -> list[str]:
    (tmp / "x.pvlpix").write_bytes(b"PVLPIX01" + bytes(12))
    (tmp / "latin1.txt").write_bytes("largest of 7 700 70? café\n".encode("latin-1"))
    (tmp / "empty.txt").write_bytes(b"")
    (tmp / "blank.txt").write_bytes(b"\xef\xbb\xbf  \r\n\n")
    (tmp / "large.txt").write_text("a b " * 50_000, encoding="utf-8")  # 200 KB: past one argument's 128 KiB
    (tmp / "huge.txt").write_text(" a" * HUGE_PROMPT_WORDS, encoding="utf-8")
    on_tiny = [
        BadCase("a text prompt without a tokenizer", ["--prompt", "hi"], "model.json names no tokenizer"),
        BadCase("--ids past the vocabulary", ["--ids", "300"], "token id 300 is outside the embedding table"),
    ]
    text_only = "family qwen3_llm is a text-only LLM: it takes no images"
    on_trained = [
        BadCase("an image", ["--image", "{tmp}/x.png", "--prompt", "hi"], text_only),
        BadCase("a pixel dump", ["--pixel-values", "{tmp}/x.pvlpix", "--ids", "5"], text_only),
        BadCase(
            "version 2",
            ["--ids", "5"],
            'entry "version" is 2, not 3 (this runtime reads qwen3_llm version 3)',
            damage=_set(2, "version"),
        ),
        BadCase(
            "version 1",
            ["--ids", "5"],
            "a model.json of version 1",
            damage=_set("gsurg-llm-kv-cache", "format"),
        ),
        BadCase(
            "no tokens.eos", ["--ids", "5"], 'entry "tokens.eos" is missing', damage=_drop("tokens", "eos")
        ),
        BadCase(
            "a missing tokenizer file",
            ["--prompt", "hi"],
            "tokenizer_config.json: no such file",
            damage=lambda folder: (folder / "tokenizer_config.json").unlink(),
        ),
        BadCase(
            "tied without embed net",
            ["--ids", "5"],
            'entry "nets.embed" is missing (tied embeddings without embedding_matrix need the embed net)',
            damage=_drop("nets", "embed"),
        ),
        BadCase(
            "--batch with --prompt", ["--batch", "{tmp}/b.jsonl", "--prompt", "hi"], "--prompt cannot go with"
        ),
        BadCase("--batch of a missing file", ["--batch", "{tmp}/absent.jsonl"], "absent.jsonl: no such file"),
        BadCase(
            "--batch of a folder", ["--batch", "{tmp}"], "is a folder, not a regular file (the --batch file)"
        ),
        # issue 40 item 5: an absurd thread count was libgomp's abort (exit 1, no message) or a hang
        BadCase(
            "--threads 1024",
            ["--ids", "5", "--threads", "1024"],
            '--threads: "1024" is not an integer in [1, 256]',
        ),
        BadCase(
            "--threads 1024 with --batch",
            ["--batch", "{tmp}/b.jsonl", "--threads", "1024"],
            '--threads: "1024" is not an integer in [1, 256]',
        ),
        # --prompt-file: a prompt past what one argument may hold; its problems name the file
        BadCase(
            "--prompt-file missing",
            ["--prompt-file", "{tmp}/absent.txt"],
            "{tmp}/absent.txt: no such file (--prompt-file)",
        ),
        BadCase(
            "--prompt-file a folder",
            ["--prompt-file", "{tmp}"],
            "is a folder, not a regular file (--prompt-file)",
        ),
        BadCase(
            "--prompt-file not UTF-8",
            ["--prompt-file", "{tmp}/latin1.txt"],
            "{tmp}/latin1.txt: not UTF-8 text (byte 24 is 0xE9) (--prompt-file)",
        ),
        BadCase(
            "--prompt-file empty",
            ["--prompt-file", "{tmp}/empty.txt"],
            "{tmp}/empty.txt: the prompt is empty",
        ),
        BadCase(
            "--prompt-file blank",
            ["--prompt-file", "{tmp}/blank.txt"],
            "{tmp}/blank.txt: the prompt is empty",
        ),
        BadCase(
            "--prompt and --prompt-file",
            ["--prompt", "hi", "--prompt-file", "{tmp}/large.txt"],
            "give exactly one of --prompt TEXT, --prompt-file FILE and --ids 1,2,3",
        ),
        BadCase(
            "--prompt-file and --ids",
            ["--ids", "5", "--prompt-file", "{tmp}/large.txt"],
            "give exactly one of --prompt TEXT, --prompt-file FILE and --ids 1,2,3",
        ),
        BadCase(
            "--batch with --prompt-file",
            ["--batch", "{tmp}/b.jsonl", "--prompt-file", "{tmp}/large.txt"],
            "--prompt-file cannot go with --batch",
        ),
        # read whole: 200 KB of text gets in, and is then refused by the context as --prompt would be
        BadCase(
            "--prompt-file of 200 KB",
            ["--prompt-file", "{tmp}/large.txt"],
            "tokens; the model's context is 256 positions",
        ),
    ]
    # a prompt whose prefill cannot fit in memory is refused before the allocation, with the numbers: on a
    # model.json whose context would take it (the check reads /proc/meminfo: Linux only, not under wine)
    if not runner.wrapper:
        on_trained.append(
            BadCase(
                f"a prompt of {HUGE_PROMPT_WORDS} words, more than memory",
                ["--prompt-file", "{tmp}/huge.txt", "--threads", "1", "--prefill-chunk", "0"],
                "tokens: its prefill would need about ",
                damage=_set(10**9, "max_positions"),
            )
        )
    failures = run_cases(runner, on_tiny, tmp)
    failures += run_cases(
        Runner(runner.program, trained, runner.wrapper, runner.tokenizer, runner.preprocess), on_trained, tmp
    )
    failures += address_space_cap(runner, trained, tmp)
    return failures


#: The address-space limit (ulimit -v) the capped run gets, and the prompt it is given: 20,000 ids, whose
#: prefill on the trained fixture is estimated at 7.6 GiB. Before the check read the limit, the runner
#: ran out of memory inside ncnn, whose pool allocator then printed "pool allocator destroyed too early".
CAPPED_ADDRESS_SPACE = 4_000_000 * 1024
CAPPED_PROMPT_IDS = 20_000


def address_space_cap(runner: Runner, trained: Path, tmp: Path) -> list[str]:
    """Under ``ulimit -v`` the memory check reads the limit (RLIMIT_AS less the process's size), not only
    MemAvailable, and refuses the prompt with one line naming it, nothing from ncnn before it. Linux only,
    and not under ASan (it reserves terabytes of address space) or a wrapper (wine)."""
    label = f"a prompt of {CAPPED_PROMPT_IDS} ids under ulimit -v"
    if (
        runner.wrapper
        or not sys.platform.startswith("linux")
        or b"__asan_init" in Path(runner.program).read_bytes()
    ):
        print(f"skip {label}: Linux without ASan or a wrapper only", flush=True)
        return []
    import resource

    model = tmp / "capped_model"
    shutil.copytree(trained, model)
    doc = json.loads((model / "model.json").read_text(encoding="utf-8"))
    doc["max_positions"] = 10**6
    (model / "model.json").write_text(json.dumps(doc), encoding="utf-8")
    ids = ",".join(["5"] * CAPPED_PROMPT_IDS)
    command = [str(runner.program), "--model", str(model), "--ids", ids, "--gen", "2", "--threads", "1"]
    command += ["--prefill-chunk", "0"]  # the whole prompt at once: the estimate the cap must refuse

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAPPED_ADDRESS_SPACE, CAPPED_ADDRESS_SPACE))

    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, preexec_fn=cap, check=False)
    lines = proc.stderr.splitlines()
    want = "more than the "
    if (
        proc.returncode == 2
        and len(lines) == 1
        and want in lines[0]
        and "(the address-space limit, ulimit -v)" in lines[0]
    ):
        print(f"ok   {label}", flush=True)
        return []
    print(f"FAIL {label}: exit {proc.returncode}, stderr {proc.stderr[-600:]!r}", flush=True)
    return [label]


# --- batch ----------------------------------------------------------------------------------------------


def run_batch(
    runner: Runner, model: Path, batch: Path | None, extra: Sequence[str] = (), stdin: bytes | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """gsurg_run --batch FILE (or - with stdin): exit code, the result lines, stderr."""
    command = [
        *runner.wrapper,
        runner.program,
        "--model",
        str(model),
        "--batch",
        "-" if batch is None else str(batch),
        "--threads",
        "1",
        *extra,
    ]
    proc = subprocess.run(command, input=stdin, capture_output=True, timeout=600, check=False)
    lines = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    return proc.returncode, lines, proc.stderr.decode("utf-8", "replace")


def single(runner: Runner, model: Path, request: dict[str, Any], gen: int) -> dict[str, Any]:
    """The one-prompt run of a batch request: its --print-ids line and streamed text."""
    prompt = ["--prompt", request["prompt"]] if "prompt" in request else ["--ids", _ids_arg(request["ids"])]
    result = runner.run(
        [*prompt, "--gen", str(request.get("gen", gen)), "--print-ids", "--threads", "1"], model=model
    )
    doc = result.ids()
    return {"tokens": doc["tokens"], "prompt_tokens": doc["prompt_tokens"], "text": result.text().decode()}


def batch(runner: Runner, trained: Path, tmp: Path) -> list[str]:
    failures: list[str] = []

    ref = Reference(trained)
    texts = [*questions()[:10], *OTHER_TEXTS]
    ref.close()
    requests: list[dict[str, Any]] = []
    for k, text in enumerate(texts):
        request: dict[str, Any] = {"id": f"q{k}"}
        request.update({"prompt": text} if runner.tokenizer else {"ids": ref.encode(text)})
        requests.append(request)
    requests.append({"id": 100, "ids": ref.encode(texts[0]), "gen": 2})  # the same input, a shorter budget
    requests.append({"ids": ID_PROMPTS[0], "gen": 5})  # no id; a prompt far from the training data
    gen = ANSWER_TOKENS
    good = tmp / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in requests), encoding="utf-8")
    singles = [single(runner, trained, r, gen) for r in requests]

    def same_as_single(results: list[dict[str, Any]], lines: Sequence[int]) -> None:
        if len(results) != len(requests):
            raise CheckFailed(f"{len(results)} results for {len(requests)} requests")
        for request, want, got, line in zip(requests, singles, results, lines, strict=True):
            where = f"line {line} ({request})"
            if (got["id"], got["line"], got["error"]) != (request.get("id"), line, ""):
                raise CheckFailed(f"{where}: id, line, error {got['id']!r}, {got['line']}, {got['error']!r}")
            if (got["tokens"], got["prompt_tokens"]) != (want["tokens"], want["prompt_tokens"]):
                raise CheckFailed(f"{where}: tokens {got['tokens']} vs the single run's {want['tokens']}")
            if runner.tokenizer and got["text"] != want["text"]:
                raise CheckFailed(f"{where}: text {got['text']!r} vs the single run's {want['text']!r}")
            stop = "eos" if got["tokens"] and got["tokens"][-1] in ref.eos else "length"
            if got["stop"] != stop:
                raise CheckFailed(f"{where}: stop {got['stop']!r}, expected {stop!r}")

    def from_file() -> None:
        code, results, err = run_batch(runner, trained, good, ["--gen", str(gen)])
        if code != 0 or err:
            raise CheckFailed(f"exit {code}, stderr {err!r}")
        same_as_single(results, range(1, len(requests) + 1))

    attempt(failures, f"{len(requests)} requests from a file equal their single runs", from_file)

    def from_stdin() -> None:
        code, results, _ = run_batch(runner, trained, None, ["--gen", str(gen)], stdin=good.read_bytes())
        if code != 0:
            raise CheckFailed(f"exit {code}")
        same_as_single(results, range(1, len(requests) + 1))

    attempt(failures, "the same requests from stdin (--batch -)", from_stdin)

    def line_ends() -> None:
        crlf = tmp / "crlf.jsonl"
        body = [json.dumps(r) for r in requests[:3]]
        crlf.write_bytes(b"\xef\xbb\xbf" + "\r\n\r\n   \r\n".join(body).encode())  # BOM, blank lines, no end
        code, results, _ = run_batch(runner, trained, crlf, ["--gen", str(gen)])
        lines = [results[k]["line"] for k in range(len(results))]
        if code != 0 or len(results) != 3 or lines != [1, 4, 7]:
            raise CheckFailed(f"exit {code}, lines {lines}")
        for got, want in zip(results, singles, strict=False):
            if got["tokens"] != want["tokens"]:
                raise CheckFailed(f"line {got['line']}: {got['tokens']} vs {want['tokens']}")

    attempt(failures, "a byte order mark, \\r\\n endings and blank lines", line_ends)

    bad_lines = [
        ("{not json", None, "not valid JSON: "),
        ('["a list"]', None, "a request is a JSON object {...}, not"),
        ('{"id": "b1", "prompt": "x", "max_tokens": 3}', "b1", 'unknown key "max_tokens"'),
        ('{"id": "b2", "prompt": "x", "ids": [1]}', "b2", 'give exactly one of "prompt" and "ids"'),
        ('{"id": "b3", "ids": [1, 335]}', "b3", "token id 335 is outside the embedding table (335 rows)"),
        (
            '{"id": "b4", "ids": [1], "gen": 0}',
            "b4",
            'key "gen" must be an integer in [1, 1073741824], not 0',
        ),
        ('{"id": "b5", "prompt": "x", "images": ["scene.png"]}', "b5", "it takes no images"),
        ('{"id": "b6", "prompt": "  "}', "b6", "the prompt is empty"),
        (
            '{"id": "b7", "ids": [' + ",".join(["5"] * 300) + "]}",
            "b7",
            "the model's context is 256 positions",
        ),
    ]
    if not runner.tokenizer:
        bad_lines = [b for b in bad_lines if b[1] not in ("b5", "b6")]

    def bad_and_good() -> None:
        lines: list[tuple[str, Any, str]] = []
        for k, (text, ident, message) in enumerate(bad_lines):
            lines.append((text, ident, message))
            lines.append((json.dumps(requests[k % len(requests)]), requests[k % len(requests)].get("id"), ""))
        path = tmp / "mixed.jsonl"
        path.write_text("".join(text + "\n" for text, _, _ in lines), encoding="utf-8")
        code, results, err = run_batch(runner, trained, path, ["--gen", str(gen)])
        if code != 1:
            raise CheckFailed(f"exit {code}, not 1 (some lines failed)")
        if len(results) != len(lines):
            raise CheckFailed(f"{len(results)} results for {len(lines)} lines")
        for number, ((_, ident, message), got) in enumerate(zip(lines, results, strict=True), 1):
            if got["line"] != number or got["id"] != ident:
                raise CheckFailed(f"line {number}: line {got['line']}, id {got['id']!r} (expected {ident!r})")
            if not message:
                want = singles[((number - 2) // 2) % len(requests)]
                if got["error"] or got["tokens"] != want["tokens"]:
                    raise CheckFailed(f"line {number} after a bad one: {got} vs {want}")
                continue
            prefix = f"line {number}: "
            if not got["error"].startswith(prefix) or message not in got["error"]:
                raise CheckFailed(f"line {number}: error {got['error']!r}, expected {message!r}")
            if got["tokens"] != [] or got["text"] is not None or got["stop"] != "":
                raise CheckFailed(f"line {number}: a failed request with an answer: {got}")
            if f"{path} line {number}: error: " not in err:
                raise CheckFailed(f"line {number}: not reported on stderr: {err!r}")

    attempt(
        failures,
        f"{len(bad_lines)} bad lines each answered with their error, the good ones after them right",
        bad_and_good,
    )

    def tiny_ids() -> None:
        path = tmp / "tiny.jsonl"
        path.write_text(
            json.dumps({"ids": ID_PROMPTS[1], "gen": 4}) + "\n" + json.dumps({"prompt": "x"}) + "\n"
        )
        code, results, _ = run_batch(runner, runner.model, path, ["--print-ids", "--ignore-eos"])
        if code != 1 or len(results) != 2:
            raise CheckFailed(f"exit {code}, {len(results)} results")
        first, second = results
        if first["text"] is not None or first["prompt_ids"] != ID_PROMPTS[1] or len(first["tokens"]) != 4:
            raise CheckFailed(f"the ids request: {first}")
        if "names no tokenizer" not in second["error"] or second["prompt_ids"] != []:
            raise CheckFailed(f"the text request: {second}")

    attempt(
        failures,
        "the tiny model (no tokenizer): ids answered with null text, a text prompt refused",
        tiny_ids,
    )
    return failures


# --- limits -------------------------------------------------------------------------------------------


def limits(runner: Runner, trained: Path, tmp: Path) -> list[str]:
    """Issue 40 item 5's runs that succeed: --gen past the context says so (single run: one stderr line;
    batch: stop "context"), chunked prefill gives the whole prompt's tokens, and --prompt-file (a file,
    stdin, a byte order mark and \\r\\n) gives what --prompt gives."""
    failures: list[str] = []

    doc = read_model_json(trained, ("qwen3_llm",))
    context, eos = doc["max_positions"], doc["tokens"]["eos"]
    eos = eos if isinstance(eos, list) else [eos]
    ids = [5, 6, 7]
    room = context - len(ids)  # the most new tokens the context leaves
    common = ["--ids", _ids_arg(ids), "--print-ids", "--ignore-eos", "--threads", "1"]
    note = f"{Path(runner.program).stem}: generation stopped at the context limit: "

    def past_context() -> None:
        result = runner.run([*common, "--gen", str(room + 1)], model=trained)
        tokens = result.ids()["tokens"]
        want = (
            f"{note}{len(ids)} prompt + {room} new tokens = {context} positions (max_positions / "
            f"model_max_length), short of --gen {room + 1}"
        )
        if len(tokens) != room or result.stderr.strip() != want:
            raise CheckFailed(f"{len(tokens)} tokens (expected {room}), stderr {result.stderr!r}")

    attempt(failures, f"--gen past the context: {room} tokens and one stderr line saying so", past_context)

    def within_context() -> None:
        for gen in (room, 4):
            result = runner.run([*common, "--gen", str(gen)], model=trained)
            if len(result.ids()["tokens"]) != gen or note in result.stderr:
                raise CheckFailed(f"--gen {gen}: stderr {result.stderr!r}")
        if runner.tokenizer:  # EOS before the context is full: no such line either
            args = [
                "--prompt",
                "largest of 7 700 70?",
                "--print-ids",
                "--threads",
                "1",
                "--gen",
                str(room + 1),
            ]
            result = runner.run(args, model=trained)
            tokens = result.ids()["tokens"]
            if not tokens or tokens[-1] not in eos or note in result.stderr:
                raise CheckFailed(f"EOS first: tokens {tokens}, stderr {result.stderr!r}")

    attempt(failures, "--gen within the context, or EOS first: no such line", within_context)

    def batch_context() -> None:
        path = tmp / "context.jsonl"
        requests = [{"id": "c", "ids": ids, "gen": room + 1}, {"id": "l", "ids": ids, "gen": 4}]
        path.write_text("".join(json.dumps(r) + "\n" for r in requests), encoding="utf-8")
        code, results, err = run_batch(runner, trained, path, ["--ignore-eos"])
        stops = [(r["stop"], len(r["tokens"])) for r in results]
        if code != 0 or err or stops != [("context", room), ("length", 4)]:
            raise CheckFailed(f"exit {code}, stderr {err!r}, (stop, tokens) {stops}")

    attempt(failures, 'batch: a request past the context ends with stop "context"', batch_context)

    def chunked_prefill() -> None:
        """The prompt fed in chunks (each run attending to the cache of the ones before) gives the tokens of
        the whole prompt at once, on the trained model and on the tiny random one, whose near-ties show any
        difference: chunk 1 (every row its own run), 7 (a last, shorter chunk), the default, and one past
        the prompt."""
        long_ids = [5 + (k * 37) % 200 for k in range(75)]
        for model in (trained, runner.model):
            args = [
                "--ids",
                _ids_arg(long_ids),
                "--print-ids",
                "--ignore-eos",
                "--gen",
                "12",
                "--threads",
                "1",
            ]
            whole = runner.run([*args, "--prefill-chunk", "0"], model=model).ids()["tokens"]
            for chunk in ("1", "7", str(len(long_ids) + 1)):
                got = runner.run([*args, "--prefill-chunk", chunk], model=model).ids()["tokens"]
                if got != whole:
                    raise CheckFailed(f"{model.name}, chunk {chunk}: {got} != whole prompt's {whole}")
            default = runner.run(args, model=model).ids()["tokens"]
            if default != whole:
                raise CheckFailed(f"{model.name}, default chunk: {default} != {whole}")

    attempt(
        failures,
        "--prefill-chunk 1, 7, past the prompt and the default give the whole prompt's tokens",
        chunked_prefill,
    )

    if not runner.tokenizer:
        print("skip --prompt-file: no tokenizer in this build")
        return failures
    text = "largest of 7 700 70? Réponds 🙂"
    plain = ["--gen", "4", "--print-ids", "--threads", "1"]
    want = runner.run(["--prompt", text, *plain], model=trained).ids()
    files = {"a file": text + "\n", "a byte order mark and \\r\\n": "\ufeff" + text + "\r\n"}
    for label, content in files.items():

        def from_file(label: str = label, content: str = content) -> None:
            path = tmp / "prompt.txt"
            path.write_bytes(content.encode("utf-8"))
            got = runner.run(["--prompt-file", str(path), *plain], model=trained).ids()
            if got != want:
                raise CheckFailed(f"{got} vs --prompt's {want}")

        attempt(failures, f"--prompt-file, {label}: what --prompt gives", from_file)

    def from_stdin() -> None:
        command = [*runner.wrapper, runner.program, "--model", str(trained), "--prompt-file", "-", *plain]
        proc = subprocess.run(command, input=text.encode(), capture_output=True, timeout=300, check=False)
        lines = proc.stdout.decode("utf-8").splitlines()
        if proc.returncode != 0 or not lines or json.loads(lines[-1]) != want:
            raise CheckFailed(f"exit {proc.returncode}, stdout {proc.stdout!r}, stderr {proc.stderr!r}")

    attempt(failures, "--prompt-file - (stdin): what --prompt gives", from_stdin)
    return failures


# --- main -----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("convert", "greedy", "bad-input", "batch", "limits"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--trained-out", type=Path)
    parser.add_argument("--runner")
    parser.add_argument("--model", type=Path)
    parser.add_argument("--trained-model", type=Path)
    parser.add_argument("--wrapper", default="")
    parser.add_argument("--with-tokenizer", action="store_true")
    parser.add_argument("--with-preprocess", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.mode == "convert":
            if args.out is None or args.trained_out is None:
                parser.error("convert needs --out and --trained-out")
            convert(args.out, args.trained_out)
            return 0
        if args.runner is None or args.model is None or args.trained_model is None:
            parser.error(f"{args.mode} needs --runner, --model and --trained-model")
        wrapper = tuple(shlex.split(args.wrapper))
        runner = Runner(args.runner, args.model, wrapper, args.with_tokenizer, args.with_preprocess)
        with tempfile.TemporaryDirectory(prefix="qwen3-llm-check-") as tmp:
            if args.mode == "greedy":
                failures = greedy(runner, args.trained_model)
            elif args.mode == "bad-input":
                failures = bad_input(runner, args.trained_model, Path(tmp))
            elif args.mode == "limits":
                failures = limits(runner, args.trained_model, Path(tmp))
            else:
                failures = batch(runner, args.trained_model, Path(tmp))
    except CheckFailed as err:
        print(f"FAIL: {err}", flush=True)
        return 1
    print(f"{'PASSED' if not failures else 'FAILED: ' + ', '.join(failures)}", flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
