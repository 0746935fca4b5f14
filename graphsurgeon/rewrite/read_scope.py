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
Inside a path the user gave, links are the user's: ``${checkpoint}/tokenizer.json`` is read even when it
is a link elsewhere (a Hugging Face cache snapshot is a folder of links into ``../../blobs``), as long as
the path, as written, stays inside what the user gave; a link in the rule file's own folder is resolved
and must stay inside.
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


def _lexical(path: str | Path, base: Path) -> Path:
    """``path`` made absolute against ``base``, ``.`` and ``..`` folded in the text, links left alone."""
    p = Path(os.path.expanduser(path))
    return Path(os.path.normpath(p if p.is_absolute() else base / p))


def _given(values: Iterable[str]) -> list[str]:
    return [v for v in values if v and "\0" not in v and len(v) <= 4096]


@dataclass
class ReadScope:
    """The folders under which a rule file's reads must lie, or none when trusted.

    ``roots`` are real paths (the rule file's folder, gsurg's folders, the user's paths resolved): a path
    the rule file names must resolve inside one. A path the user gave also counts as written
    (``user_lexical``): a path the rule file builds on it (``${checkpoint}/tokenizer.json``) that stays
    inside it as text is allowed wherever its links lead, since the links in a folder the user chose are
    the user's (a Hugging Face cache snapshot is a folder of links into ``../../blobs``)."""

    roots: list[Path] = field(default_factory=list)
    user: list[Path] = field(default_factory=list)  # the paths the user gave, resolved (a subset of roots)
    user_lexical: list[Path] = field(default_factory=list)  # the same paths as the user wrote them
    trusted: bool = False

    @classmethod
    def for_rule_file(
        cls, rule_path: str | Path, overrides: Mapping[str, str], cwd: Path, *, trusted: bool = False
    ) -> ReadScope:
        """The scope of the rule file at ``rule_path`` run with ``overrides`` (``--set``) from ``cwd``."""
        values = _given(overrides.values())
        user = [_real(v, cwd) for v in values]
        rule_folder = _real(rule_path, cwd).parent
        lexical = [_lexical(v, cwd) for v in values]
        return cls([rule_folder, *package_roots(), *user], user, lexical, trusted)

    def allows(self, path: str | Path, base: Path, written: str | Path | None = None) -> bool:
        """Whether ``path`` (relative to ``base``) may be read; ``written`` is the path as the rule file
        wrote it (relative to ``base`` too), when it differs from ``path`` (already resolved)."""
        if self.trusted:
            return True
        real = _real(path, base)
        if any(_inside(real, root) for root in self.roots):
            return True
        text = _lexical(written if written is not None else path, base)
        return any(_inside(text, root) for root in self.user_lexical)

    def check(
        self, path: str | Path, base: Path, where: str, what: str, written: str | Path | None = None
    ) -> None:
        """RuleFileError naming ``where`` (the file and line) unless ``path`` may be read."""
        if not self.allows(path, base, written):
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
