"""A graph's declared interface (``interface: {inputs, outputs}``), checked on the result of its rules.

ncnn has no list of inputs and outputs: a runtime feeds and extracts blobs by name, so the names are the
contract. Entries are blob names or globs (``cache_k*``). The result must satisfy all of:

* every entry names at least one blob, of the right kind (an input entry an Input layer's top, an output
  entry a blob nothing reads);
* every Input top and every blob nothing reads is named by an entry (nothing undeclared dangles);
* no layer reads a blob nothing produces (ncnn would hand it an empty orphan).
"""

from __future__ import annotations

import fnmatch

from graphsurgeon.errors import GsurgError
from graphsurgeon.ir.graph import Graph
from graphsurgeon.rewrite.sections import Interface


class InterfaceError(GsurgError):
    """A result whose inputs or outputs differ from the declared interface (exit 1: a finding)."""

    exit_code = 1


def _matches(entries: list[str], name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, entry) for entry in entries)


def declared_names(graph: Graph, interface: list[str] | Interface) -> set[str]:
    """The graph's blobs an interface names now (list form: the names themselves)."""
    if isinstance(interface, list):
        return set(interface)
    entries = [*interface.inputs, *interface.outputs]
    return {name for name in graph.blobs if _matches(entries, name)}


def check_interface(graph: Graph, interface: Interface, where: str) -> tuple[list[str], list[str]]:
    """Raise InterfaceError unless the graph's inputs and outputs are exactly the declared ones; returns
    the input and output blob names in graph order (for a runtime's side files)."""
    inputs = [b.name for b in graph.input_blobs()]
    outputs = [b.name for b in graph.output_blobs()]
    problems: list[str] = []
    for kind, entries, present in (
        ("input", interface.inputs, inputs),
        ("output", interface.outputs, outputs),
    ):
        for entry in entries:
            if not any(fnmatch.fnmatchcase(name, entry) for name in present):
                other = [n for n in graph.blobs if fnmatch.fnmatchcase(n, entry)]
                why = f" ({', '.join(other[:3])} exist but are not graph {kind}s)" if other else ""
                problems.append(f"declared {kind} {entry!r} names no graph {kind}{why}")
        extra = [name for name in present if not _matches(entries, name)]
        if extra:
            shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
            problems.append(f"undeclared {kind}(s): {shown}")
    orphans = sorted(b.name for b in graph.blobs.values() if b.producer is None and b.consumers)
    if orphans:
        problems.append(f"blob(s) read but never produced: {', '.join(orphans[:5])}")
    if problems:
        raise InterfaceError(f"{where}: the result breaks its interface: " + "; ".join(problems))
    return inputs, outputs
