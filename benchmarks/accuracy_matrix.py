"""What each weight storage x runtime precision costs in accuracy: every shipped conversion of an embedded
tiny model (or a checkpoint given with --checkpoint) written at each storage and verified (``gsurg verify
--format json``) at each precision against its fp32 reference.

    python benchmarks/accuracy_matrix.py [--models qwen3_llm,penguin_vl,qwen3_vl] [--trained]
        [--storages fp32,fp16,int8,int4] [--precisions fp32,fp16] [--out DIR] [--json FILE]

With ``--trained`` each family's trained fixture (``gsurg apply NAME --trained``) is converted instead of
its random-weight tiny checkpoint: verify's thresholds per storage come from those figures
(graphsurgeon/verify/criteria.py).

Per model, storage and precision it prints the mean stage cosine (and the worst stage's), the teacher-forced
next-token agreement over all cases (and the worst case's), the mean KL divergence over all steps (nats)
and whether verify passed its criteria,
as a markdown table (docs/precision.md's accuracy table comes from this script). Conversions are written once
per storage into --out (default: a temporary folder).
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
RULES = {"qwen3_llm": "llm-kv-cache.yaml", "penguin_vl": "penguin_vl.yaml", "qwen3_vl": "qwen3_vl.yaml"}


def gsurg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphsurgeon.cli", *args], cwd=REPO, capture_output=True, text=True
    )


def convert(model: str, storage: str, out: Path, extra: list[str], trained: bool = False) -> Path:
    folder = out / f"{model}-{'trained-' if trained else ''}{storage}"
    if not (folder / "model.json").exists():
        source = [model, "--trained"] if trained else [f"rules/{RULES[model]}"]
        done = gsurg("apply", *source, "--out", str(folder), "--set", f"storage={storage}", *extra)
        if done.returncode != 0:
            raise SystemExit(f"apply {model} {storage} failed:\n{done.stderr}")
    return folder


def measure(folder: Path, precision: str) -> dict[str, Any]:
    done = gsurg("verify", str(folder), "--precision", precision, "--format", "json")
    if done.returncode not in (0, 1):
        raise SystemExit(f"verify {folder} {precision} failed:\n{done.stderr}")
    doc = json.loads(done.stdout)
    stages = [s for s in doc["stages"] if not s["error"]]
    summary = doc["summary"]
    return {
        "passed": doc["passed"],
        "criteria": doc["criteria"],
        "mean_cosine": summary["mean_cosine"],
        "min_cosine": min((s["cosine"] for s in stages), default=0.0),
        "agreement": summary["agreement"],
        "min_case_agreement": min((t["agreement"] for t in doc["tokens"]), default=1.0),
        "mean_kl": summary["mean_kl"],
        "cases": len(doc["tokens"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(RULES))
    ap.add_argument("--storages", default="fp32,fp16,int8,int4")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    ap.add_argument("--trained", action="store_true", help="convert each family's trained fixture")
    ap.add_argument("--set", action="append", default=[], help="passed to every apply (K=V)")
    args = ap.parse_args(argv)
    extra = [x for kv in args.set for x in ("--set", kv)]
    out = args.out or Path(tempfile.mkdtemp(prefix="gsurg-accuracy-"))
    rows = []
    head = "| model | storage | precision | mean stage cosine (worst) | agreement (worst case) | mean KL |"
    print(head + " verify |")
    print("|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        for storage in args.storages.split(","):
            folder = convert(model, storage, out, extra, args.trained)
            for precision in args.precisions.split(","):
                m = measure(folder, precision) | {"model": model, "storage": storage, "precision": precision}
                rows.append(m)
                print(
                    f"| {model} | {storage} | {precision} | {m['mean_cosine']:.6f} ({m['min_cosine']:.4f}) | "
                    f"{m['agreement']:.1%} ({m['min_case_agreement']:.1%}) | {m['mean_kl']:.3g} | "
                    f"{'PASSED' if m['passed'] else 'FAILED'} |",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
