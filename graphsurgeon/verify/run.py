"""``gsurg verify DIR``: run a converted model in the ``ncnn`` wheel against its PyTorch reference.

What to compare is model-specific, so the model's ``model.json`` names a **verifier**:
``{"verifier": {"ref": "path/to/verify.py:verify", "checkpoint": "/path/to/checkpoint"}}`` (``ref``
relative to the folder, or absolute; the rule file's side-file template writes it). The verifier is called
as ``verify(folder, model_json, options) -> VerifyReport`` and uses this package's runners and
``report.compare`` for its stages.

A verifier file inside the folder being verified is refused before anything is imported: everything in
that folder is a conversion's output, which a rule file without ``source:`` may have written (a ``copy:``
side file), and such a rule file must not be able to make gsurg run code."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from graphsurgeon.input_files import check_input
from graphsurgeon.plugins import load_callable, referenced_file
from graphsurgeon.verify.conversion_storage import conversion_storage
from graphsurgeon.verify.criteria import Criteria, criteria_for
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.llm_chain import read_model_json
from graphsurgeon.verify.lossless_storage import lossless_float_storage
from graphsurgeon.verify.ncnn_fp32 import Precision
from graphsurgeon.verify.report import VerifyReport


@dataclass
class VerifyOptions:
    """What the user asked for; a verifier fills in its own defaults for what is left empty."""

    checkpoint: Path | None = None
    images: list[Path] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    tokens: int = 32
    threads: int = 1
    progress: Callable[[str], None] | None = None
    precision: Precision = "fp32"  # how the verifier loads the nets (ncnn_fp32.load_net)


def run_verify(folder: Path, options: VerifyOptions) -> VerifyReport:
    doc = read_model_json(folder)
    verifier = doc.get("verifier")
    if not isinstance(verifier, dict) or not isinstance(verifier.get("ref"), str):
        raise VerifyError(f"{folder / 'model.json'}: no verifier entry (the rule file did not name one)")
    if options.checkpoint is None and verifier.get("checkpoint"):
        options.checkpoint = Path(verifier["checkpoint"])
    if options.checkpoint is not None and not options.checkpoint.exists():
        raise VerifyError(f"{options.checkpoint}: the reference checkpoint does not exist")
    for image in options.images:  # an image library would wait on a FIFO; a missing one is the verifier's
        if image.exists():
            check_input(image, error=VerifyError)
    code = referenced_file(verifier["ref"], folder)
    if code is not None and code.is_relative_to(folder.resolve()):
        raise VerifyError(
            f"{folder / 'model.json'}: verifier {verifier['ref']!r} lies inside the folder being verified "
            "(a conversion's outputs are never run as code); name a verifier outside it"
        )
    storage = conversion_storage(folder, doc)
    lossless = None
    if storage in ("fp16", "bf16"):  # two-byte floats: lossless when the checkpoint held them so already
        lossless = lossless_float_storage(folder, doc, options.checkpoint)
    criteria = criteria_for(options.precision, storage, lossless)
    fn = load_callable(verifier["ref"], folder, what="verifier", error=VerifyError)
    report = fn(folder, doc, options)
    if not isinstance(report, VerifyReport):
        raise VerifyError(
            f"verifier {verifier['ref']!r} returned a {type(report).__name__}, not a VerifyReport"
        )
    return judged(report, criteria)


def judged(report: VerifyReport, criteria: Criteria) -> VerifyReport:
    """``report`` with every stage and case held to ``criteria``'s thresholds."""
    report.criteria = criteria.describe()
    if criteria.exact:
        return report
    report.exact = False
    report.stages = [replace(s, min_cosine=criteria.min_cosine) for s in report.stages]
    report.tokens = [replace(t, exact=False) for t in report.tokens]
    report.min_mean_cosine = criteria.min_cosine
    report.min_agreement = criteria.min_agreement
    report.max_mean_kl = criteria.max_mean_kl
    return report
