"""Loading a rule file: YAML with line numbers, ``include:`` of other rule files, variables and facts
(``rewrite.scope``), paths made absolute, and validation against ``rulefile.RuleFile`` with errors that
name ``file:line`` and what was expected there. Also the JSON Schema behind ``gsurg schema rules``.

Loading happens in two steps, because a graph may read facts about the models it rewrites and those may
first have to be exported: ``open_rule_file`` reads every file, merges them and evaluates the sections that
say where models come from (``source``, ``inputs``, ``checkpoints``, ``outputs``); ``RuleProgram.finish``
evaluates ``graphs`` and ``side_files`` and validates the whole. ``load_rule_file`` does both.

Merging: an included file's entries come first and the including file's win — ``vars`` and the entries of
``inputs``, ``checkpoints`` and ``graphs`` by name (a graph is replaced whole, keeping its place, unless
it says ``extend: true``: then its keys override and its rules follow the included graph's), ``source``
and ``outputs`` whole; ``side_files`` are concatenated, except that an entry with the same ``output`` as
an included one replaces it. ``--set`` overrides any variable.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel, ValidationError

from graphsurgeon.formats.safetensors import JSON_FILE_LIMIT
from graphsurgeon.input_files import read_json_input
from graphsurgeon.plugins import load_callable
from graphsurgeon.rewrite.rule_tree import read_tree, real_path, var_defs
from graphsurgeon.rewrite.rulefile import RuleFile
from graphsurgeon.rewrite.scope import JsonFact, LazyFacts, Scope
from graphsurgeon.rewrite.sections import CheckpointInput, ModelInput, Outputs, Source
from graphsurgeon.rewrite.validation_errors import describe
from graphsurgeon.rewrite.yaml_source import LocatedYaml, RuleFileError

_HEADER = ("version", "name", "description", "source", "inputs", "checkpoints", "outputs")
_BY_NAME = ("inputs", "checkpoints", "graphs")  # sections merged entry by entry
_LATE = ("graphs", "side_files")  # evaluated by finish(): they may read facts about the input models
_LEADING_VAR = re.compile(r"\s*\$\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}")


def json_schema() -> str:
    """The JSON Schema editors use for completion (``gsurg schema rules``)."""
    schema = RuleFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gsurg rule file"
    return json.dumps(schema, indent=2)


#: How deep includes may nest, and how many files one rule file may bring in.
def _path_field(loc: tuple[Any, ...]) -> str | None:
    """Which kind of path a field holds: "path", "module" (source.export), "template", or None."""
    if loc in (("source", "export"), ("source", "config")):
        return "module"
    if loc in (("source", "checkpoint"), ("outputs", "dir")):
        return "path"
    if len(loc) == 3 and loc[0] == "inputs" and loc[2] in ("param", "bin"):
        return "path"
    if len(loc) == 3 and loc[0] == "checkpoints" and loc[2] == "path":
        return "path"
    if len(loc) == 3 and loc[0] == "side_files" and loc[2] in ("copy", "weight_map", "schema"):
        return "path"
    if len(loc) == 3 and loc[0] == "side_files" and loc[2] == "template":
        return "template"
    return None


def _resolve(kind: str, value: str, base: Path, where: str) -> str:
    if kind == "module":
        module, sep, attr = value.rpartition(":")
        if sep and (module.endswith(".py") or "/" in module or os.sep in module):
            return f"{real_path(module, base, where)}:{attr}"
        return value
    if kind == "template" and "/" not in value and "\0" not in value and not (base / value).exists():
        return value  # a template name in emit/
    return str(real_path(value, base, where))


@dataclass
class RuleProgram:
    """A rule file between the two loading steps (see the module docstring)."""

    path: str
    files: list[LocatedYaml]
    scope: Scope
    header: dict[str, Any]
    cli_vars: set[str]
    cwd: Path
    origins: dict[tuple[Any, ...], LocatedYaml] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)  # input name -> its .param, once known
    _graph_facts: Callable[[str], Any] | None = None
    notice: Callable[[str], None] | None = None  # told before source.config's Python runs

    # ---- facts -------------------------------------------------------------------------------------------
    def provide_model(self, input_name: str, param: str) -> None:
        """Say where an input's .param is (an export's, once pnnx made it), for ``inputs.<name>`` facts."""
        self.models[input_name] = param

    def _input_facts(self) -> Mapping[str, Any]:
        names = list(self.header.get("inputs") or {})

        def facts(name: str) -> Any:
            if name not in self.models:
                raise RuleFileError(f"{self.path}: facts about input {name} are read before it is exported")
            from graphsurgeon.formats.param_any import read_param  # the grammar, loaded on first use

            graph = read_param(self.models[name])
            count: dict[str, int] = {}
            for layer in graph.layers:
                count[layer.type] = count.get(layer.type, 0) + 1
            return {"count": _Counts(count), "layer_count": len(graph.layers), "blob_count": len(graph.blobs)}

        return LazyFacts(names, facts)

    def _checkpoint_folder(self, fact: str) -> Path:
        source = self.header.get("source") or {}
        checkpoint = source.get("checkpoint") if isinstance(source, dict) else None
        if not checkpoint:
            raise RuleFileError(f"{self.path}: `{fact}` facts need source.checkpoint (a checkpoint folder)")
        return Path(checkpoint)

    def _config(self) -> Any:
        """``source.config``'s reading of the checkpoint folder when the rule file names one (a model's own
        config reader: both config styles, EOS from any file), else ``config.json`` as it is."""
        folder = self._checkpoint_folder("config")
        source = self.header.get("source") or {}
        reader = source.get("config") if isinstance(source, dict) else None
        if not reader:
            return _read_json(folder / "config.json")
        if self.notice is not None:
            self.notice(code_notice(self.path, f"its config reader {reader} (source.config)"))
        value = load_callable(reader, Path(self.path).parent, what="source.config", error=RuleFileError)(
            str(folder)
        )
        if not isinstance(value, Mapping):
            raise RuleFileError(f"source.config {reader!r}: returned a {type(value).__name__}, not a mapping")
        return JsonFact(value, f"{folder} (as {reader} reads it)")

    def _json_files(self) -> Mapping[str, Any]:
        folder = self._checkpoint_folder("json")
        names = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
        where = f"the JSON files of {folder}"
        return LazyFacts(names, lambda stem: _read_json(folder / f"{stem}.json"), where)

    # ---- the second step ---------------------------------------------------------------------------------
    def finish(self) -> RuleFile:
        """Evaluate ``graphs`` and ``side_files`` and validate the whole rule file."""
        data = dict(self.header)
        for section in _LATE:
            for src in self.files:
                if section in src.data:
                    _merge(data, section, self._evaluate(src, section), src, self.origins)
        data["vars"] = self.scope.values()
        data["include"] = list(self.files[-1].data.get("include") or [])
        return _validate(RuleFile, data, self)

    def _evaluate(self, src: LocatedYaml, section: str) -> Any:
        base = Path(src.path).parent

        def walk(value: Any, loc: tuple[Any, ...]) -> Any:
            if isinstance(value, dict):
                return {k: walk(v, (*loc, k)) for k, v in value.items()}
            if isinstance(value, list):
                return [walk(v, (*loc, i)) for i, v in enumerate(value)]
            rendered = self.scope.render(value, src.where(loc)) if isinstance(value, str) else value
            kind = _path_field(loc)
            if kind is None or not isinstance(rendered, str):
                return rendered
            lead = _LEADING_VAR.match(value) if isinstance(value, str) else None
            origin = self.cwd if lead is not None and lead.group(1) in self.cli_vars else base
            return _resolve(kind, rendered, origin, src.where(loc))

        return walk(src.data[section], (section,))


def _read_json(path: Path) -> Any:
    """A checkpoint's JSON file as a fact (an object remembers its file, for errors)."""
    value = read_json_input(path, limit=JSON_FILE_LIMIT, what="a checkpoint's JSON file", error=RuleFileError)
    return JsonFact(value, str(path)) if isinstance(value, dict) else value


class _Counts(dict[str, int]):
    """Layer counts by type; a type the model does not use counts 0."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)

    def __missing__(self, key: str) -> int:
        return 0


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


def code_notice(rule_path: str, what: str) -> str:
    """What a user is told before Python code a rule file's ``source:`` names runs."""
    return (
        f"{rule_path}: running {what}: Python code with your permissions; a rule file without source: runs "
        "no code"
    )


def open_rule_file(
    path: str,
    overrides: Mapping[str, str] | None = None,
    text: str | None = None,
    *,
    cwd: str | None = None,
    notice: Callable[[str], None] | None = None,
) -> RuleProgram:
    """Read ``path`` and its includes, set up variables and facts, and evaluate the sections that say
    where models come from. ``overrides`` are ``--set`` values (paths in them are relative to ``cwd``);
    ``notice`` is told before any Python the rule file's ``source:`` names runs."""
    here = Path(cwd or os.getcwd())
    start = Path(os.path.realpath(path)) if text is None else Path(path).absolute()
    files = read_tree(start, text, (), {})
    overrides = dict(overrides or {})
    scope = Scope(var_defs(files, overrides, here))
    program = RuleProgram(path, files, scope, {}, set(overrides), here, notice=notice)
    scope.add_fact("config", program._config)
    scope.add_fact("json", program._json_files)
    scope.add_fact("inputs", program._input_facts)
    known = {"include", "vars", *_HEADER, *_LATE}
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
    _validate_header(program)
    for name, entry in (program.header.get("inputs") or {}).items():
        if isinstance(entry, dict) and entry.get("param"):
            program.provide_model(name, entry["param"])
    return program


def load_rule_file(
    path: str, overrides: Mapping[str, str] | None = None, text: str | None = None
) -> RuleFile:
    """Read, merge, evaluate and validate a rule file in one step (facts about exported models are not
    available this way: use ``open_rule_file`` and ``finish``)."""
    return open_rule_file(path, overrides, text).finish()


def _validate_header(program: RuleProgram) -> None:
    """Check the sections ``open_rule_file`` evaluated, so a bad source or input fails before any export."""
    header = program.header
    checks: list[tuple[type[BaseModel], Any, tuple[Any, ...]]] = []
    if header.get("source") is not None:
        checks.append((Source, header["source"], ("source",)))
    if header.get("outputs") is not None:
        checks.append((Outputs, header["outputs"], ("outputs",)))
    entry_models: tuple[tuple[str, type[BaseModel]], ...] = (
        ("inputs", ModelInput),
        ("checkpoints", CheckpointInput),
    )
    for section, model in entry_models:
        entries = header.get(section) or {}
        if not isinstance(entries, dict):
            src = program.origins.get((section,), program.files[-1])
            raise RuleFileError(f"{src.where((section,))}: {section} is a mapping of name: entry")
        checks.extend((model, value, (section, name)) for name, value in entries.items())
    for model, value, loc in checks:
        try:
            model.model_validate(value)
        except ValidationError as err:
            _raise(err, header, program, prefix=loc)


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
