"""What a rule file may read: a rule file is data, so the files it names are confined to places the user
chose or gsurg ships.

A rule file may read, by real path (symbolic links resolved, so a link cannot lead out):

* anything under the folder of the rule file the user gave (its includes, templates, schemas, models);
* anything under gsurg's own package and shipped rule files (the installed families' code, tiny
  checkpoints, templates and schemas: ``gsurg apply NAME`` reads only these and what the user gave);
* every path the user gave: each ``--set`` value read as a path relative to the working folder
  (``--checkpoint DIR`` and ``--trained`` arrive this way; a value that is no path names nothing to read)
  and the model on the command line.

Anything else — ``/etc/passwd`` as a side file's copy source or template, ``../../secret`` as an include,
a checkpoint folder named only in the rule file — is refused with the rule file's line before it is read.
``ReadScope.trusted`` (``gsurg apply --trust-rule-file``) lifts the confinement for a rule file the user
trusts. A rule file that runs Python (``source.export``, ``source.config``) could read anything from that
code; the confinement is about what the file itself names, and such a file is announced before its code
runs (``code_notice``).

The output folder has its own rule (``outside_cwd``): a rule file's ``outputs.dir`` must lie under the
working folder or a path the user gave, or be given by the user (``--out``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from graphsurgeon.resources import resource_dir
from graphsurgeon.rewrite.yaml_source import RuleFileError

TRUST_FLAG = "--trust-rule-file"
_PACKAGE = Path(__file__).resolve().parent.parent


def _real(path: str | Path, base: Path) -> Path:
    p = Path(path)
    return Path(os.path.realpath(p if p.is_absolute() else base / p))


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def package_roots() -> list[Path]:
    """gsurg's own folders: the package (families, tiny checkpoints, templates, schemas) and the shipped
    rule files (beside the package in a checkout, inside it in a wheel)."""
    roots = [_PACKAGE]
    with contextlib.suppress(FileNotFoundError):  # a package without its data: the package itself only
        roots.append(Path(os.path.realpath(resource_dir("rules"))))
    return roots


def user_roots(values: Iterable[str], cwd: Path) -> list[Path]:
    """The values (``--set``'s, flags') read as paths relative to ``cwd``, as real paths: whether or not one
    exists (an output folder may not yet), the user typed it."""
    return [_real(v, cwd) for v in values if v and "\0" not in v and len(v) <= 4096]


@dataclass
class ReadScope:
    """The folders (and single files) under which a rule file's reads must lie, or none when trusted."""

    roots: list[Path] = field(default_factory=list)
    user: list[Path] = field(default_factory=list)  # the paths the user gave (a subset of roots)
    trusted: bool = False

    @classmethod
    def for_rule_file(
        cls, rule_path: str | Path, overrides: Mapping[str, str], cwd: Path, *, trusted: bool = False
    ) -> ReadScope:
        """The scope of the rule file at ``rule_path`` run with ``overrides`` (``--set``) from ``cwd``."""
        user = user_roots(overrides.values(), cwd)
        rule_folder = _real(rule_path, cwd).parent
        return cls([rule_folder, *package_roots(), *user], user, trusted)

    def add_user_path(self, path: str | Path, cwd: Path) -> None:
        """A path the user gave outside ``--set`` (the command line's model, ``--out``)."""
        real = _real(path, cwd)
        self.roots.append(real)
        self.user.append(real)

    def allows(self, path: str | Path, base: Path) -> bool:
        """Whether ``path`` (relative to ``base``) may be read."""
        if self.trusted:
            return True
        real = _real(path, base)
        return any(_inside(real, root) for root in self.roots)

    def check(self, path: str | Path, base: Path, where: str, what: str) -> None:
        """RuleFileError naming ``where`` (the file and line) unless ``path`` may be read."""
        if not self.allows(path, base):
            raise RuleFileError(
                f"{where}: {what} {_real(path, base)} lies outside what a rule file may read (the rule "
                "file's folder, gsurg's own files, and the paths given with --set or on the command line); "
                f"give the path with --set, or trust this rule file with {TRUST_FLAG}"
            )

    def outside_cwd(self, folder: str | Path, cwd: Path) -> bool:
        """Whether an output folder the rule file chose (``outputs.dir``) lies outside the working folder
        and every path the user gave (so the user did not choose it)."""
        if self.trusted:
            return False
        real = _real(folder, cwd)
        return not any(_inside(real, root) for root in [Path(os.path.realpath(cwd)), *self.user])
