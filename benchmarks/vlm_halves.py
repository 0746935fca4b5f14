"""What each storage costs a trained VLM, and which half pays it: the family's trained fixture converted at
every storage, then with the vision half quantized and the LLM half kept at fp32 and the reverse
(``vision_storage``), and the mixes asked for (vision:LLM), all answered on the held-out visual questions
by ``gsurg eval`` against the fp32 conversion (task accuracy, teacher-forced agreement and mean KL).

    python benchmarks/vlm_halves.py [--family penguin_vl] [--storages fp32,bf16,fp16,int8,int6,int4]
        [--halves int8,int4] [--mixes int8:int4] [--out DIR] [--limit N] [--json FILE]

Prints one Markdown table: the vision and LLM storages of each conversion, its weight bytes (every net's
.bin), task accuracy, agreement and mean KL; then the fp32 conversion's accuracy with the images blanked
(the ``vqa-blank`` set) beside chance. Conversions are written once into --out (default: a temporary
folder); docs/precision.md's VLM tables come from this script.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def gsurg(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "graphsurgeon.cli", *args], cwd=REPO, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"gsurg {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def convert(family: str, out: Path, llm: str, vision: str) -> Path:
    folder = out / f"{family}-vision-{vision}-llm-{llm}"
    if not (folder / "model.json").exists():
        settings = ["--set", f"storage={llm}", "--set", f"vision_storage={vision}"]
        gsurg("apply", family, "--trained", "--out", str(folder), *settings, "-q")
    return folder


def weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.bin"))


def evaluate(folders: list[Path], reference: Path, name: str, limit: int | None) -> dict[str, Any]:
    args = ["eval", *map(str, folders), "--set", name, "--reference", str(reference), "--format", "json"]
    doc: dict[str, Any] = json.loads(gsurg(*args, *(["--limit", str(limit)] if limit else [])))
    return doc


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="penguin_vl")
    parser.add_argument("--storages", default="fp32,bf16,fp16,int8,int6,int4")
    parser.add_argument("--halves", default="int8,int4", help="storages each half is quantized to alone")
    parser.add_argument("--mixes", default="int8:int4", help="VISION:LLM storage pairs")
    parser.add_argument("--out", type=Path, help="where conversions are written (kept)")
    parser.add_argument("--limit", type=int, help="the first N held-out questions only")
    parser.add_argument("--json", type=Path, help="also write the eval reports here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        plan = [(s, s) for s in ["fp32", *args.storages.split(",")] if s]
        for half in filter(None, args.halves.split(",")):
            plan += [(half, "fp32"), ("fp32", half)]
        plan += [(m.split(":")[0], m.split(":")[1]) for m in filter(None, args.mixes.split(","))]
        plan = list(dict.fromkeys(plan))  # fp32 first, once
        folders = {pair: convert(args.family, out, llm=pair[1], vision=pair[0]) for pair in plan}
        reference = folders[("fp32", "fp32")]
        doc = evaluate(list(folders.values()), reference, "vqa", args.limit)
        blank = evaluate([reference], reference, "vqa-blank", args.limit)
        if args.json:
            args.json.write_text(json.dumps({"vqa": doc, "vqa-blank": blank}, indent=1) + "\n")
        print(f"{args.family}, {doc['items']} held-out questions, chance {pct(doc['chance_accuracy'])}\n")
        print("| vision | LLM | weight bytes | task accuracy | agreement | mean KL |")
        print("|---|---|---|---|---|---|")
        for (vision, llm), row in zip(folders, doc["rows"], strict=True):
            same = row["folder"] == str(reference)
            agreement = "—" if same else pct(row["agreement"])
            kl = "—" if same else f"{row['mean_kl']:.2g}"
            size = f"{weight_bytes(folders[(vision, llm)]):,}"
            print(f"| {vision} | {llm} | {size} | {pct(row['accuracy'])} | {agreement} | {kl} |")
        print(f"\nfp32 with the images blanked: {pct(blank['rows'][0]['accuracy'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
