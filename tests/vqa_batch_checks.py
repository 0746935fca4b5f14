"""The check every VLM family's ``batch_request`` (``gsurg eval --runner``'s request per item) is held to:
the question is the prompt, each image is written once, losslessly, under a name equal images share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from graphsurgeon.evaluation import vqa


def check_batch_requests(
    batch_request: Callable[[Any, Path], dict[str, Any]], items: Sequence[vqa.VqaItem], folder: Path
) -> None:
    """``items``' requests written into the empty ``folder``: one PNG per distinct image, equal to the
    item's pixels, and one file per size for the blanked items."""
    from PIL import Image

    requests = [batch_request(item, folder) for item in items]
    assert all(r["prompt"] == i.question for r, i in zip(requests, items, strict=True))
    names = [r["images"][0] for r in requests]
    assert sorted(p.name for p in folder.iterdir()) == sorted(set(names))
    for request, item in zip(requests, items, strict=True):
        with Image.open(folder / request["images"][0]) as image:
            assert image.size == item.size and image.tobytes() == item.image.convert("RGB").tobytes()
    blanks = {batch_request(vqa.blank(i), folder)["images"][0] for i in items}
    assert len(blanks) == len({i.size for i in items})  # one file per blank size
