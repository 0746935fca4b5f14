"""The facts a rule file's ``${…}`` may read beside its variables: ``config`` (the source checkpoint's
config, through ``source.config``'s reader when the rule file names one), ``json`` (every JSON file of that
folder) and ``inputs`` (layer counts of the models it reads, exports included once made). Each is computed
when first read, from the rule program's typed header sections; ``code_notice`` is what a user is told
before Python a rule file names runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from graphsurgeon.formats.safetensors import JSON_FILE_LIMIT
from graphsurgeon.input_files import read_json_input
from graphsurgeon.plugins import load_callable
from graphsurgeon.rewrite.scope import JsonFact, LazyFacts
from graphsurgeon.rewrite.sections import HeaderSections
from graphsurgeon.rewrite.yaml_source import RuleFileError


class RuleProgram(Protocol):
    """What the facts read of a rule program (``loader.RuleProgram`` is one)."""

    path: str
    sections: HeaderSections
    models: dict[str, str]  # input name -> its .param, once known
    notice: Callable[[str], None] | None


def code_notice(rule_path: str, what: str) -> str:
    """What a user is told before Python code a rule file's ``source:`` names runs."""
    return (
        f"{rule_path}: running {what}: Python code with your permissions; a rule file without source: runs "
        "no code"
    )


def input_facts(program: RuleProgram) -> Mapping[str, Any]:
    """``${inputs.NAME.*}``: layer counts of an input model, read when first asked (an export's once pnnx
    made it)."""
    names = list(program.sections.inputs)

    def facts(name: str) -> Any:
        if name not in program.models:
            raise RuleFileError(f"{program.path}: facts about input {name} are read before it is exported")
        from graphsurgeon.formats.param_any import read_param  # the grammar, loaded on first use

        graph = read_param(program.models[name])
        count: dict[str, int] = {}
        for layer in graph.layers:
            count[layer.type] = count.get(layer.type, 0) + 1
        return {"count": _Counts(count), "layer_count": len(graph.layers), "blob_count": len(graph.blobs)}

    return LazyFacts(names, facts)


def _checkpoint_folder(program: RuleProgram, fact: str) -> Path:
    source = program.sections.source
    checkpoint = source.checkpoint if source is not None else None
    if not checkpoint:
        raise RuleFileError(f"{program.path}: `{fact}` facts need source.checkpoint (a checkpoint folder)")
    return Path(checkpoint)


def config_fact(program: RuleProgram) -> Any:
    """``source.config``'s reading of the checkpoint folder when the rule file names one (a model's own
    config reader: both config styles, EOS from any file), else ``config.json`` as it is."""
    folder = _checkpoint_folder(program, "config")
    reader = program.sections.source.config if program.sections.source is not None else None
    if not reader:
        return _read_json(folder / "config.json")
    if program.notice is not None:
        program.notice(code_notice(program.path, f"its config reader {reader} (source.config)"))
    value = load_callable(reader, Path(program.path).parent, what="source.config", error=RuleFileError)(
        str(folder)
    )
    if not isinstance(value, Mapping):
        raise RuleFileError(f"source.config {reader!r}: returned a {type(value).__name__}, not a mapping")
    return JsonFact(value, f"{folder} (as {reader} reads it)")


def json_files_fact(program: RuleProgram) -> Mapping[str, Any]:
    """``${json.STEM.*}``: every JSON file of the source checkpoint folder, read when first asked."""
    folder = _checkpoint_folder(program, "json")
    names = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
    where = f"the JSON files of {folder}"
    return LazyFacts(names, lambda stem: _read_json(folder / f"{stem}.json"), where)


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
