"""Where a rule run's outputs may go: every output of ``gsurg apply`` lands inside its output folder, and no
output is a file the run reads.

There is no way around either rule, on purpose: an output path in a rule file is a path *inside* the output
folder, so a rule file cannot write anywhere the user did not name with ``--out`` (or ``outputs.dir``); to
write somewhere else, the user chooses another ``--out``.

* ``formats.outpaths.check_output_name`` is what a rule file's output names (``side_files[].output``,
  ``graphs.*.output``) are held to when the file loads: relative, no ``..`` part, no NUL, not empty — so a
  bad name fails with the file and line that wrote it; the guard holds a weight map's names to it again.
* ``input_identities`` collects the files a run reads (the rule file and its includes, templates, copy
  sources, the models, checkpoint files and folders) as ``(device, inode)`` pairs, so a hard link or a
  symbolic link to an input is recognised as well as the input's own path.
* ``OutputGuard.target`` is checked for every file just before it is written: the name again (a graph name
  fills ``{graph}`` of a weight map), the real path of the target's folder inside the real output folder
  (a symbolic link inside ``--out`` pointing elsewhere is refused), and the target, if it exists, not one
  of the inputs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from graphsurgeon.errors import OutputError
from graphsurgeon.formats.outpaths import check_output_name

#: How many files of an input folder (a checkpoint folder) are collected; beyond it the walk stops and the
#: folder as a whole is protected (no output may lie inside it).
MAX_FOLDER_FILES = 20_000

Identity = tuple[int, int]


class InputSet:
    """The files a run reads, by identity, plus the folders protected as a whole."""

    def __init__(self) -> None:
        self.files: dict[Identity, str] = {}
        self.trees: list[str] = []  # real paths of folders too large to list

    def add(self, path: str | os.PathLike[str]) -> None:
        """Add a file, or every file below a folder (a missing path is skipped: nothing to protect)."""
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return
        if not os.path.isdir(path):
            self.files[(st.st_dev, st.st_ino)] = str(path)
            return
        count = 0
        for root, _dirs, names in os.walk(path):
            for n in names:
                count += 1
                if count > MAX_FOLDER_FILES:
                    self.trees.append(os.path.realpath(path))
                    return
                full = os.path.join(root, n)
                try:
                    fst = os.stat(full)
                except OSError:
                    continue
                self.files[(fst.st_dev, fst.st_ino)] = full

    def which(self, target: Path) -> str | None:
        """The input ``target`` is (following symbolic links), or None."""
        try:
            st = os.stat(target)
        except OSError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) in self.files:
            return self.files[(st.st_dev, st.st_ino)]
        real = os.path.realpath(target)
        for tree in self.trees:
            if real == tree or real.startswith(tree.rstrip(os.sep) + os.sep):
                return tree
        return None


def input_identities(paths: Iterable[str | os.PathLike[str] | None]) -> InputSet:
    """An ``InputSet`` of ``paths`` (files or folders; None entries are skipped)."""
    inputs = InputSet()
    for p in paths:
        if p is not None:
            inputs.add(p)
    return inputs


class OutputGuard:
    """Checks each output path of a run against its output folder and its inputs (see the module)."""

    def __init__(self, folder: Path, inputs: InputSet) -> None:
        self.folder = folder
        self.real_folder = Path(os.path.realpath(folder))
        self.inputs = inputs

    def target(self, name: str) -> Path:
        """The path to write output ``name`` to; raises OutputError when it would leave the output folder
        or is an input of the run. Call before creating its folder."""
        shown = str(self.folder / name)
        try:
            check_output_name(name)
        except ValueError as err:
            raise OutputError(f"{shown}: {err}") from None
        target = self.folder / name
        real_parent = Path(os.path.realpath(target.parent))
        if real_parent != self.real_folder and self.real_folder not in real_parent.parents:
            raise OutputError(
                f"{shown}: its folder resolves to {real_parent}, outside the output folder "
                f"{self.real_folder} (a symbolic link?); outputs stay inside --out"
            )
        which = self.inputs.which(target)
        if which is not None:
            raise OutputError(
                f"{shown}: refusing to overwrite an input of the run ({which}); choose another --out"
            )
        return target
