"""Fresh names for layers and blobs a pass, a rule or a lenient reader makes."""

from __future__ import annotations

from collections.abc import Container


def fresh_name(base: str, *taken: Container[str], sep: str = "_") -> str:
    """``base`` if no container in ``taken`` holds it, else the first free ``base{sep}2``, ``base{sep}3``, …
    (the lenient reader uses ``sep="#"`` for the second top of a duplicated name, as ncnn keeps two slots)."""
    name, n = base, 2
    while any(name in names for names in taken):
        name, n = f"{base}{sep}{n}", n + 1
    return name
