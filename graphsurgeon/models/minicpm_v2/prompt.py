"""MiniCPM-V-2's prompt text around an image, as the official remote code writes it (``modeling_minicpmv.py``
at 1878519: ``get_slice_image_placeholder``, ``get_grid_placeholder``, ``chat``; docs/minicpm-v-2.md §7).

- One image (the overview or a slice): ``<image>`` + ``query_num`` x ``<unk>`` + ``</image>`` (64 ``<unk>``,
  each replaced by one resampler output row).
- A sliced image: the overview's, then **one** ``<slice>`` ... ``</slice>`` pair around the whole grid;
  inside, a row's slices are concatenated and the rows joined by ``"\\n"``.
- The chat text: ``<用户>`` or ``<AI>`` before each message, the image's placeholder and ``"\\n"`` in front of
  the first (user) message, a final ``<AI>``; no system prompt, no separators. These markers are plain text.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphsurgeon.errors import GsurgError

IM_START, IM_END = "<image>", "</image>"
SLICE_START, SLICE_END = "<slice>", "</slice>"
UNK = "<unk>"
USER, ASSISTANT = "<用户>", "<AI>"


class PromptError(GsurgError):
    """A chat the official template cannot write (exit 2)."""


def image_placeholder(grid: tuple[int, int] | None, query_num: int = 64) -> str:
    """The placeholder text of one image sliced into ``grid`` (columns, rows), or not sliced (None)."""
    one = IM_START + UNK * query_num + IM_END
    if grid is None:
        return one
    cols, rows = grid
    return one + SLICE_START + "\n".join(one * cols for _ in range(rows)) + SLICE_END


def chat_prompt(messages: Sequence[tuple[str, str]], placeholder: str | None) -> str:
    """The official chat text of ``messages`` (role, content), roles ``user`` and ``assistant``, the image's
    ``placeholder`` (None: no image) in front of the first message, which must then be the user's."""
    out = []
    for i, (role, content) in enumerate(messages):
        if role not in ("user", "assistant"):
            raise PromptError(f"message {i}: role {role!r} is neither 'user' nor 'assistant'")
        if i == 0 and placeholder is not None:
            if role != "user":
                raise PromptError("message 0: the image goes with a user message, not an assistant one")
            content = placeholder + "\n" + content
        out.append((USER if role == "user" else ASSISTANT) + content)
    return "".join(out) + ASSISTANT
