"""Loading a rule file: YAML with line numbers, ``include:`` of other rule files, variables
(``rewrite.scope``) and facts (``rewrite.rule_facts``), paths made absolute, and validation against
``rulefile.RuleFile`` with errors that name ``file:line`` and what was expected there.

Loading happens in two steps, because a graph may read facts about the models it rewrites and those may
first have to be exported: ``open_rule_file`` reads every file, merges them and evaluates the sections that
say where models come from (``source``, ``inputs``, ``checkpoints``, ``outputs``); ``RuleProgram.finish``
evaluates ``graphs`` and ``side_files`` and validates the whole. ``load_rule_file`` does both.

Merging: an included file's entries come first and the including file's win — ``vars`` and the entries of
``inputs``, ``checkpoints`` and ``graphs`` by name (a graph is replaced whole, keeping its place, unless
it says ``extend: true``: then its keys override and its rules follow the included graph's), ``source``
and ``outputs`` whole; ``side_files`` are concatenated, except that an entry with the same ``output`` as
an included one replaces it. ``--set`` overrides any variable.

Named rules: a ``rules:`` section defines rules by name, once in the whole include tree; an entry
``use: NAME`` of a graph's rules (in the defining file or a file that includes it, directly or not) becomes
that rule, named NAME, with the use's ``expect`` and its values for the rule's own ``vars`` — so reports,
provenance and ``--explain`` see an ordinary rule per use.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel, TypeAdapter, ValidationError

from graphsurgeon.errors import GsurgError
from graphsurgeon.rewrite.read_scope import ReadScope
from graphsurgeon.rewrite.rule_facts import config_fact, input_facts, json_files_fact
from graphsurgeon.rewrite.rule_paths import path_field, resolve_field
from graphsurgeon.rewrite.rule_tree import RuleDef, read_tree, rule_defs, rules_seen, var_defs
from graphsurgeon.rewrite.rulefile import RuleDefinition, RuleFile, written_graphs
from graphsurgeon.rewrite.scope import Scope
from graphsurgeon.rewrite.sections import CheckpointInput, HeaderSections, ModelInput, Outputs, Source
from graphsurgeon.rewrite.validation_errors import describe
from graphsurgeon.rewrite.yaml_source import MAX_VALUES, LocatedYaml, RuleFileError

_HEADER = ("version", "name", "description", "source", "inputs", "checkpoints", "outputs")
_BY_NAME = ("inputs", "checkpoints", "graphs")  # sections merged entry by entry
_LATE = ("graphs", "side_files")  # evaluated by finish(): they may read facts about the input models
_BOOL = TypeAdapter(bool)  # a `when` as pydantic reads it ("false", "no", 0 ...)
_LEADING_VAR = re.compile(r"\s*\$\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}")
_USE_KEYS = ("use", "expect", "vars")  # what a `use:` entry may give


@dataclass
class RuleProgram:
    """A rule file between the two loading steps (see the module docstring)."""

    path: str
    files: list[LocatedYaml]
    scope: Scope
    header: dict[str, Any]  # the merged, evaluated header sections as YAML values (for error locations)
    cli_vars: set[str]
    cwd: Path
    origins: dict[tuple[Any, ...], LocatedYaml] = field(default_factory=dict)
    tree: dict[Path, list[LocatedYaml]] = field(default_factory=dict)  # each file and all it includes
    rule_defs: dict[str, RuleDef] = field(default_factory=dict)  # the rules: sections, by name
    used_values: int = 0  # the values the uses of named rules added, within MAX_VALUES
    models: dict[str, str] = field(default_factory=dict)  # input name -> its .param, once known
    _graph_facts: Callable[[str], Any] | None = None
    notice: Callable[[str], None] | None = None  # told before source.config's Python runs
    read_scope: ReadScope | None = None  # what the file's paths may name (None: anything)
    sections: HeaderSections = field(default_factory=HeaderSections)  # typed, once validated

    # ---- facts -------------------------------------------------------------------------------------------
    def provide_model(self, input_name: str, param: str) -> None:
        """Say where an input's .param is (an export's, once pnnx made it), for ``inputs.<name>`` facts."""
        self.models[input_name] = param

    def _raw_graphs(self) -> list[tuple[dict[str, Any], str | None, bool]]:
        """The merged ``graphs`` entries before they are evaluated, each with the input it reads (None when
        that cannot be told yet) and whether it may run (its ``when`` is not known to be false)."""
        raw: dict[str, Any] = {}
        for src in self.files:
            if isinstance(src.data.get("graphs"), dict):
                _merge(raw, "graphs", src.data["graphs"], src, {})
        out: list[tuple[dict[str, Any], str | None, bool]] = []
        for entry in (raw.get("graphs") or {}).values():
            if not isinstance(entry, dict):
                continue
            try:
                name = self.scope.render(entry.get("input", "model"), self.path)
            except GsurgError:
                name = None
            may_run = self._may_hold(entry.get("when", True))
            out.append((entry, name if isinstance(name, str) else None, may_run))
        return out

    def calibrated_inputs(self) -> set[str]:
        """The inputs some graph's ``storage.calibrate`` will run on, as far as it can be told before the
        export (so the export can save their samples in the same build of the source's models). Read from
        the merged ``graphs`` sections before they are evaluated: a ``when`` or ``input`` that cannot be
        evaluated yet (it reads facts about exported models) counts as calibrating, and an unknown input as
        every input."""
        wanted: set[str] = set()
        for entry, name, may_run in self._raw_graphs():
            storage = entry.get("storage")
            cal = storage.get("calibrate") if isinstance(storage, dict) else None
            if cal is None or not may_run:
                continue
            when = cal.get("when", True) if isinstance(cal, dict) else True
            if not self._may_hold(when):
                continue
            wanted |= {name} if name is not None else set(self.sections.inputs)
        return wanted

    def unread_inputs(self) -> set[str]:
        """The declared inputs that only graphs whose ``when`` is already known to be false read: no export
        is made of them. An input no graph names, or one a graph of unknown input may read, is not one."""
        graphs = self._raw_graphs()
        if any(name is None for _, name, _ in graphs):
            return set()
        readers: dict[str, list[bool]] = {}
        for _, name, may_run in graphs:
            assert name is not None
            readers.setdefault(name, []).append(may_run)
        return {name for name, runs in readers.items() if name in self.sections.inputs and not any(runs)}

    def _may_hold(self, when: Any) -> bool:
        """False only when ``when`` can be evaluated now and is false."""
        try:
            return bool(_BOOL.validate_python(self.scope.render(when, self.path)))
        except (GsurgError, ValidationError):
            return True

    # ---- the second step ---------------------------------------------------------------------------------
    def finish(self) -> RuleFile:
        """Evaluate ``graphs`` and ``side_files`` and validate the whole rule file."""
        data = dict(self.header)
        typed = self.sections
        data.update({"inputs": typed.inputs, "checkpoints": typed.checkpoints})
        data.update(
            {k: v for k, v in (("source", typed.source), ("outputs", typed.outputs)) if v is not None}
        )
        self.used_values = 0
        data["rules"] = {name: self._define(d) for name, d in self.rule_defs.items()}
        if self.rule_defs and not any("graphs" in src.data for src in self.files):
            raise RuleFileError(
                f"{self.files[-1].path}:1: no graphs to run: a file of named rules only is included by a "
                "rule file that has graphs (include: [...])"
            )
        for section in _LATE:
            for src in self.files:
                if section in src.data:
                    _merge(data, section, self._evaluate(src, section), src, self.origins)
        data["vars"] = self.scope.values()
        data["include"] = list(self.files[-1].data.get("include") or [])
        return written_graphs(_validate(RuleFile, data, self))

    def _evaluate(self, src: LocatedYaml, section: str) -> Any:
        base = Path(src.path).parent

        def walk(value: Any, loc: tuple[Any, ...]) -> Any:
            if len(loc) == 4 and loc[0] == "graphs" and loc[2] == "rules" and _has_use(value):
                return self._use(src, loc, value)
            if isinstance(value, dict):
                return {k: walk(v, (*loc, k)) for k, v in value.items()}
            if isinstance(value, list):
                return [walk(v, (*loc, i)) for i, v in enumerate(value)]
            rendered = self.scope.render(value, src.where(loc)) if isinstance(value, str) else value
            kind = path_field(loc)
            if kind is None or not isinstance(rendered, str):
                return rendered
            lead = _LEADING_VAR.match(value) if isinstance(value, str) else None
            origin = self.cwd if lead is not None and lead.group(1) in self.cli_vars else base
            return resolve_field(kind, loc, rendered, origin, src.where(loc), self.read_scope)

        return walk(src.data[section], (section,))

    # ---- named rules -------------------------------------------------------------------------------------
    def _define(self, d: RuleDef) -> dict[str, Any]:
        """A ``rules:`` entry evaluated with its variables' defaults and validated where it is written (so
        a broken definition is reported at its own line, used or not)."""
        defaults = self._defaults(d)
        value = {"vars": defaults, **self.scope.substitute(d.body, d.src, ("rules", d.name), defaults)}
        try:
            RuleDefinition.model_validate(value)
        except ValidationError as err:
            _raise(err, {"rules": {d.name: value}}, self, prefix=("rules", d.name))
        return value

    def _defaults(self, d: RuleDef) -> dict[str, Any]:
        """The rule's own variables at their default values (``${…}`` in them read the file's variables)."""
        return {k: self.scope.render(v, d.src.where(("rules", d.name, "vars", k))) for k, v in d.vars.items()}

    def _use(self, src: LocatedYaml, loc: tuple[Any, ...], entry: dict[str, Any]) -> dict[str, Any]:
        """A graph's ``use: NAME`` entry as the rule it runs: the definition's body evaluated with this use's
        variables, named NAME, with this use's ``expect``."""
        name = entry["use"]
        extra = [k for k in entry if k not in _USE_KEYS]
        if extra:
            raise RuleFileError(
                f"{src.where((*loc, extra[0]))}: use: {name}: a use runs the rule as rules: defines it and "
                f"gives only {', '.join(_USE_KEYS)}, not {extra[0]}"
            )
        seen = rules_seen(src, self.tree, self.rule_defs)
        if not isinstance(name, str) or name not in seen:
            known = ", ".join(seen) or "none"
            there = self.rule_defs.get(name) if isinstance(name, str) else None
            hint = f"; {name} is defined at {there.where}, which this file does not include" if there else ""
            raise RuleFileError(
                f"{src.where((*loc, 'use'))}: use: no rule named {name!r} in the rules: of this file or the "
                f"files it includes (rules: {known}){hint}"
            )
        if "expect" not in entry:
            raise RuleFileError(f"{src.where(loc)}: use: {name}: give expect, the matches this use must find")
        d = self.rule_defs[name]
        self.used_values += d.size
        if self.used_values > MAX_VALUES:
            raise RuleFileError(
                f"{src.where(loc)}: use: {name}: the uses of named rules expand the rule file to more than "
                f"{MAX_VALUES} values"
            )
        given = entry.get("vars") or {}
        if not isinstance(given, dict):
            raise RuleFileError(f"{src.where((*loc, 'vars'))}: use: {name}: vars is a mapping of name: value")
        local = self._defaults(d)
        for key, raw in given.items():
            at = src.where((*loc, "vars", key))
            if key not in d.vars:
                own = ", ".join(d.vars) or "none"
                raise RuleFileError(f"{at}: use: {name}: the rule has no variable {key!r} (its vars: {own})")
            if not isinstance(raw, str | int | float | bool):
                raise RuleFileError(f"{at}: use: {name}: variable {key}: a value is a scalar")
            local[key] = self.scope.render(raw, at)
        body = self.scope.substitute(d.body, d.src, ("rules", name), local)
        return {"name": name, **body, "expect": self.scope.substitute(entry["expect"], src, (*loc, "expect"))}


def _has_use(value: Any) -> bool:
    return isinstance(value, dict) and "use" in value


def _merge(
    data: dict[str, Any],
    section: str,
    value: Any,
    src: LocatedYaml,
    origins: dict[tuple[Any, ...], LocatedYaml],
) -> None:
    if section in _BY_NAME:
        if not isinstance(value, dict):
            raise RuleFileError(f"{src.where((section,))}: {section} is a mapping of name: entry")
        merged = dict(data.get(section) or {})
        for name, entry in value.items():
            earlier = merged.get(name)
            if (
                section == "graphs"
                and isinstance(entry, dict)
                and entry.get("extend")
                and earlier is not None
            ):
                # extend an included graph: its keys are kept unless given, its rules come first
                rules = [*(earlier.get("rules") or []), *(entry.get("rules") or [])]
                entry = {**earlier, **{k: v for k, v in entry.items() if k != "extend"}, "rules": rules}
            merged[name] = entry
            origins[(section, name)] = src
        data[section] = merged
    elif section == "side_files":  # an entry with the same output as an included one replaces it
        if not isinstance(value, list):
            raise RuleFileError(f"{src.where((section,))}: side_files is a list")
        entries = list(data.get(section) or [])
        for entry in value:
            out = entry.get("output") if isinstance(entry, dict) else None
            at = next(
                (i for i, e in enumerate(entries) if isinstance(e, dict) and e.get("output") == out), None
            )
            if out is not None and at is not None:
                entries[at] = entry
            else:
                at = len(entries)
                entries.append(entry)
            origins[(section, at)] = src
        data[section] = entries
    else:
        data[section] = value
        origins[(section,)] = src


def open_rule_file(
    path: str,
    overrides: Mapping[str, str] | None = None,
    text: str | None = None,
    *,
    cwd: str | None = None,
    notice: Callable[[str], None] | None = None,
    trusted: bool = False,
) -> RuleProgram:
    """Read ``path`` and its includes, set up variables and facts, and evaluate the sections that say
    where models come from. ``overrides`` are ``--set`` values (paths in them are relative to ``cwd``);
    ``notice`` is told before any Python the rule file's ``source:`` names runs. The paths the file names
    (its includes, inputs, checkpoints, side files' sources) are held to ``read_scope.ReadScope`` unless
    ``trusted``."""
    here = Path(cwd or os.getcwd())
    start = Path(os.path.realpath(path)) if text is None else Path(path).absolute()
    overrides = dict(overrides or {})
    reads = ReadScope.for_rule_file(start, overrides, here, trusted=trusted)
    tree: dict[Path, list[LocatedYaml]] = {}
    files = read_tree(start, text, (), tree, scope=reads)
    scope = Scope(var_defs(files, overrides, here))
    program = RuleProgram(path, files, scope, {}, set(overrides), here, notice=notice, tree=tree)
    program.read_scope = reads
    scope.add_fact("config", lambda: config_fact(program))
    scope.add_fact("json", lambda: json_files_fact(program))
    scope.add_fact("inputs", lambda: input_facts(program))
    program.rule_defs = rule_defs(files, var_defs(files, {}, here), ("config", "json", "inputs"))
    for d in program.rule_defs.values():
        program.origins[("rules", d.name)] = d.src
    known = {"include", "vars", "rules", *_HEADER, *_LATE}
    for src in files:
        for key in src.data:
            if key not in known:
                raise RuleFileError(
                    f"{src.where((key,))}: unknown section {key!r} (sections: {', '.join(sorted(known))})"
                )
    for section in _HEADER:
        for src in files:
            if section in src.data:
                _merge(program.header, section, program._evaluate(src, section), src, program.origins)
        _validate_section(program, section)  # a later section's facts may read this one (source.config)
    for name, entry in program.sections.inputs.items():
        if entry.param:
            program.provide_model(name, entry.param)
    return program


def load_rule_file(
    path: str, overrides: Mapping[str, str] | None = None, text: str | None = None
) -> RuleFile:
    """Read, merge, evaluate and validate a rule file in one step (facts about exported models are not
    available this way: use ``open_rule_file`` and ``finish``)."""
    return open_rule_file(path, overrides, text).finish()


def _validate_section(program: RuleProgram, section: str) -> None:
    """Validate a header section ``open_rule_file`` just merged into ``program.sections``, so a bad source
    or input fails (with its file and line) before any export."""
    value = program.header.get(section)
    typed = program.sections
    if section == "source" and value is not None:
        typed.source = _checked(Source, value, (section,), program)
    elif section == "outputs" and value is not None:
        typed.outputs = _checked(Outputs, value, (section,), program)
    elif section in ("inputs", "checkpoints"):
        if not isinstance(value or {}, dict):
            src = program.origins.get((section,), program.files[-1])
            raise RuleFileError(f"{src.where((section,))}: {section} is a mapping of name: entry")
        model: type[BaseModel] = ModelInput if section == "inputs" else CheckpointInput
        entries = {name: _checked(model, v, (section, name), program) for name, v in (value or {}).items()}
        if section == "inputs":
            typed.inputs = entries
        else:
            typed.checkpoints = entries


def _checked(model: type[BaseModel], value: Any, loc: tuple[Any, ...], program: RuleProgram) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as err:
        _raise(err, program.header, program, prefix=loc)


def _validate(model: type[RuleFile], data: dict[str, Any], program: RuleProgram) -> RuleFile:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        _raise(err, data, program)


def _raise(err: ValidationError, data: Any, program: RuleProgram, prefix: tuple[Any, ...] = ()) -> NoReturn:
    loc, message = describe(err, data, prefix)
    where = "(top level)" if not loc else ".".join(str(p) for p in loc)
    src = program.origins.get(tuple(loc[:2])) or program.origins.get(tuple(loc[:1])) or program.files[-1]
    raise RuleFileError(f"{src.where(loc)}: {where}: {message}") from None
