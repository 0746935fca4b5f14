"""``gsurg verify`` cases drawn from the visual-question task (``vqa``) a trained VLM fixture learnt.

verify's default cases (photographs from the corpus, generic prompts) are far from anything a fixture was
trained on: its logits there are near-flat and a rounding flips near-ties, which says little about a
storage. These cases are the task's own: the first held-out item of each kind in ``KINDS`` (the images
written as PNG files, the questions as prompts). verify asks every prompt of every image, so it also asks
questions about objects an image does not hold — still the task's images, words and answers.

    gsurg verify DIR $(python -m graphsurgeon.evaluation.vqa_cases FOLDER)

prints the ``--image``/``--prompt`` arguments after writing the images into FOLDER.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from graphsurgeon.evaluation import vqa

#: The kinds whose first held-out item is a case: five images, so 5 x 5 image cases and a text-only one.
KINDS = ("color", "shape", "count", "left_right", "above_below")


def verify_items(kinds: Sequence[str] = KINDS) -> list[vqa.VqaItem]:
    """The first held-out item (``vqa.eval_items``) of each kind, in the order given."""
    return [vqa.eval_items(1, kinds=[kind])[0] for kind in kinds]


def verify_arguments(folder: Path, kinds: Sequence[str] = KINDS) -> list[str]:
    """Writes each item's image into ``folder`` (``K_KIND.png``; the folder is created) and returns verify's
    ``--image`` arguments, then its ``--prompt`` arguments, in the items' order."""
    folder.mkdir(parents=True, exist_ok=True)
    images: list[str] = []
    prompts: list[str] = []
    for k, item in enumerate(verify_items(kinds)):
        path = folder / f"{k}_{item.kind}.png"
        item.image.save(path)
        images += ["--image", str(path)]
        prompts += ["--prompt", item.question]
    return [*images, *prompts]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m graphsurgeon.evaluation.vqa_cases FOLDER", file=sys.stderr)
        return 2
    print(shlex.join(verify_arguments(Path(args[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
