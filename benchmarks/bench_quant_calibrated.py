"""Calibrated quantization on the trained tiny Qwen3 (issue 38 item 4): round-to-nearest (minmax, clip)
against GPTQ, AWQ, both, and mixed precision within a budget, at int4 and int8, scored by ``gsurg eval``
on the held-out text-task questions against the fp32 conversion.

    python benchmarks/bench_quant_calibrated.py [--out DIR] [--lines 128] [--seeds 0,1,2] [--json FILE]

Every conversion is ``gsurg apply qwen3_llm --trained --set storage=...`` with the variant's ``--set``s;
the calibrated ones (and, for their fp16 marks, all but fp32) calibrate on ``--lines`` lines of the
training half (``text_tasks.training_lines(lines, seed)``: question and answer, never an evaluation
question), written to a text file passed as ``calibration_text``. The GPTQ and AWQ variants are converted
once per calibration seed (``--seeds``), to show how much of a difference the calibration set alone makes;
rounding does not read the samples. ``gsurg eval --set text-tasks --reference FP32`` scores all of them
(500 held-out questions: accuracy, teacher-forced agreement with fp32's answers, mean KL(fp32 || it) over
those steps). The sizes are the Gemm weight records (codes, block scales, input scales) of the decoder and
lm_head, per weight. Prints a markdown table; ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: (name, storage, extra --set values, reads the calibration samples)
VARIANTS: list[tuple[str, str, list[str], bool]] = [
    ("int4 minmax", "int4", ["quant_method=minmax"], False),
    ("int4 clip (default)", "int4", [], False),
    ("int4 gptq", "int4", ["quant_gptq=true"], True),
    ("int4 awq", "int4", ["quant_awq=true"], True),
    ("int4 awq+gptq", "int4", ["quant_awq=true", "quant_gptq=true"], True),
    ("int4 mixed 5.0", "int4", ["quant_budget=5.0"], True),
    ("int4 mixed 5.0 + gptq", "int4", ["quant_budget=5.0", "quant_gptq=true"], True),
    ("int4 mixed 6.0", "int4", ["quant_budget=6.0"], True),
    ("int8 minmax (default)", "int8", [], False),
    ("int8 gptq", "int8", ["quant_gptq=true"], True),
]


def gsurg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphsurgeon.cli", *args], cwd=REPO, capture_output=True, text=True
    )


def convert(folder: Path, sets: list[str]) -> float:
    """Convert into ``folder`` (skipped when it holds a conversion); the wall time, or 0 when skipped."""
    if (folder / "model.json").exists():
        return 0.0
    argv = ["apply", "qwen3_llm", "--trained", "--out", str(folder), "-q"]
    for s in sets:
        argv += ["--set", s]
    start = time.perf_counter()
    done = gsurg(*argv)
    if done.returncode != 0:
        raise SystemExit(f"apply {' '.join(sets)} failed:\n{done.stderr}")
    return time.perf_counter() - start


def gemm_bits(folder: Path) -> float:
    """Bits per weight of the Gemm weights of decoder and lm_head as stored (codes, block scales and
    input scales; float32 for one not quantized), counted as ``quant.mixed.stored_bits`` counts them."""
    from graphsurgeon.formats.param_text import read_param_text
    from graphsurgeon.quant.blocks import BlockFormat
    from graphsurgeon.quant.mixed import stored_bits

    bits = weights = 0
    for net in ("decoder", "lm_head"):
        for layer in read_param_text(folder / f"{net}.ncnn.param").layers:
            if layer.type != "Gemm":
                continue
            n, k = int(layer.get("constantN")), int(layer.get("constantK"))
            parsed = BlockFormat.parse_term(int(layer.get("quantize_term")))
            bits += 32 * n * k if parsed is None else stored_bits(parsed[0], n, k, input_scales=parsed[1])
            weights += n * k
    return bits / weights


def calibration_ratio(folder: Path) -> str:
    """What the apply log says of the decoder's output error on the calibration samples."""
    doc = json.loads((folder / "decoder.ncnn.gsurg.json").read_text())
    for line in doc.get("quantization", []):
        if "output error" in line:
            return line.rsplit("x", 1)[1].split(" ")[0]
    return "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="conversions folder (reused; default: a temporary one)")
    parser.add_argument("--lines", type=int, default=128, help="calibration prompts (training half)")
    parser.add_argument("--seeds", default="0,1,2", help="calibration sets of the calibrated variants")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from graphsurgeon.evaluation.text_tasks import training_lines

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-quant-cal-"))
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    texts = {}
    for seed in seeds:
        path = out / f"calibration-{args.lines}-{seed}.txt"
        path.write_text("\n".join(training_lines(args.lines, seed=seed)) + "\n", encoding="utf-8")
        texts[seed] = path
    fp32 = out / "fp32"
    convert(fp32, [])
    runs: list[dict[str, Any]] = []
    for name, storage, extra, calibrated in VARIANTS:
        for seed in seeds if calibrated else seeds[:1]:
            tag = name.replace(" ", "_").replace("(", "").replace(")", "").replace("+", "p")
            folder = out / (f"{tag}-s{seed}" if calibrated else tag)
            sets = [f"storage={storage}", f"calibration_text={texts[seed]}", *extra]
            wall = convert(folder, sets)
            runs.append({"name": name, "seed": seed if calibrated else None, "folder": folder, "wall": wall})
    # GPTQ on the rule file's default calibration (two prompts of seeded random ids), for the default
    folder = out / "int4_gptq-random-ids"
    runs.append(
        {
            "name": "int4 gptq, random-id calibration",
            "seed": None,
            "folder": folder,
            "wall": convert(folder, ["storage=int4", "quant_gptq=true"]),
        }
    )
    done = gsurg(
        "eval", *[str(r["folder"]) for r in runs], "--set", "text-tasks", "--reference", str(fp32),
        "--format", "json",
    )  # fmt: skip
    if done.returncode not in (0, 1):
        raise SystemExit(f"eval failed:\n{done.stderr}")
    scores = {row["folder"]: row for row in json.loads(done.stdout)["rows"]}
    print(f"<!-- {time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
          f"{args.lines} calibration lines, seeds {args.seeds} -->")  # fmt: skip
    print("| conversion | calib. seed | Gemm bits/weight | calib. output error vs rounding | accuracy | "
          "agreement | mean KL | apply s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for r in runs:
        s = scores[str(r["folder"])]
        row = {
            "name": r["name"],
            "seed": r["seed"],
            "bits": gemm_bits(r["folder"]),
            "calibration_error": calibration_ratio(r["folder"]),
            "accuracy": s["accuracy"],
            "agreement": s["agreement"],
            "mean_kl": s["mean_kl"],
            "wall": r["wall"],
        }
        rows.append(row)
        seed_text = "-" if r["seed"] is None else str(r["seed"])
        print(
            f"| {row['name']} | {seed_text} | {row['bits']:.3f} | {row['calibration_error']} | "
            f"{100 * row['accuracy']:.1f} % | {100 * row['agreement']:.2f} % | {row['mean_kl']:.3g} | "
            f"{row['wall']:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
