"""model.json has a schema (issue 15, item 6): one JSON Schema per family in its folder
(``graphsurgeon/models/<family>/``); the shipped rule files name it beside their template and the writer
checks the rendered file against it before the output group commits; the Python readers check it on read and
refuse another family; the C++ runtime reads exactly the schema's keys (parsed from its source) and checks the
same format, family and version.

Oracles: the files the shipped rule files write on the tiny models (accepted as they are), hand-broken
copies of them with the key each breaks written out by hand, and the C++ source of the runtime's reader."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from graphsurgeon.cli import main
from graphsurgeon.formats.json_schema import JsonSchema, SchemaFileError, json_equal
from graphsurgeon.formats.model_json import (
    FORMAT,
    ModelJsonError,
    check_model_json,
    known_schemas,
    read_model_json,
    schema_file,
)
from graphsurgeon.models.penguin_vl.ncnn_chain import PenguinNcnn
from graphsurgeon.verify.errors import VerifyError
from graphsurgeon.verify.llm_chain import LlmChain
from tests.conftest import REPO
from tests.rule_language_harness import CHAIN, err_line, write

pytest.importorskip("torch")
pytest.importorskip("pnnx")

#: The shipped rule files that write a model.json, and its family.
SHIPPED = {
    "penguin_vl": REPO / "rules" / "penguin_vl.yaml",
    "qwen3_llm": REPO / "rules" / "llm-kv-cache.yaml",
}
_RUNNER_SRC = REPO / "runtime_cpp" / "runner" / "src"
_FAMILIES = REPO / "runtime_cpp" / "families"
#: The C++ reader of each family's model.json: the runtime core's (the keys every family shares, the format)
#: and the family's (its own keys, its name and version), with the schema version it reads.
MODEL_CONFIG_CPP = _RUNNER_SRC / "model_config.cpp"
FAMILY_CONFIG_CPP = {
    "penguin_vl": (_FAMILIES / "penguin_vl" / "src" / "family_penguin_vl_config.cpp", 2),
    "qwen3_vl": (_FAMILIES / "qwen3_vl" / "src" / "family_qwen3_vl_config.cpp", 1),
    "minicpm_v2": (_FAMILIES / "minicpm_v2" / "src" / "family_minicpm_v2_config.cpp", 1),
    "qwen3_llm": (_FAMILIES / "qwen3_llm" / "src" / "family_qwen3_llm_config.cpp", 3),
}

pytestmark = pytest.mark.usefixtures("shared_exports")


def _reader_source(family: str) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (MODEL_CONFIG_CPP, FAMILY_CONFIG_CPP[family][0]))


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each shipped rule file applied once to its tiny model."""
    root = tmp_path_factory.mktemp("model_json")
    out = {}
    for family, rules in SHIPPED.items():
        assert main(["apply", str(rules), "--out", str(root / family)]) == 0
        out[family] = root / family
    return out


def _doc(converted: dict[str, Path], family: str) -> dict[str, Any]:
    return json.loads((converted[family] / "model.json").read_text(encoding="utf-8"))


def _schema_path(family: str, version: int) -> Path:
    path = schema_file(family, version)
    assert path is not None, f"no schema {family}.v{version}"
    return path


# ---- the schema files ------------------------------------------------------------------------------------


def test_each_schema_file_is_named_by_the_family_and_version_it_holds() -> None:
    assert set(known_schemas()) >= {"penguin_vl", "qwen3_llm"}
    for family, versions in known_schemas().items():
        for version in versions:
            path = schema_file(family, version)
            assert path is not None and path.parent.name == family  # in the family's own folder
            schema = JsonSchema.load(path)
            props = schema.root["properties"]
            assert props["format"] == {**props["format"], "const": FORMAT}
            assert props["family"]["const"] == family and props["version"]["const"] == version
            assert {"format", "family", "version"} <= set(schema.root["required"])
    on_disk = {p.name for p in (REPO / "graphsurgeon" / "models").glob("*/*.schema.json")}
    assert on_disk == {f"{f}.v{v}.schema.json" for f, vs in known_schemas().items() for v in vs}


def test_every_shipped_rule_file_writing_model_json_names_its_schema() -> None:
    for rules in sorted((REPO / "rules").glob("*.yaml")):
        for side in yaml.safe_load(rules.read_text()).get("side_files") or []:
            if side.get("output") == "model.json":
                assert side.get("schema"), f"{rules.name}: model.json without a schema"
                schema, template = side["schema"], side["template"]
                family_dir = "${family_dir}" if "${family_dir}" in schema else "${llm_dir}"
                assert schema.startswith(f"{family_dir}/") and template == f"{family_dir}/model.json.j2"
                folder = REPO / "graphsurgeon" / "models" / Path(schema.split("/")[1]).name.split(".v")[0]
                assert (folder / Path(schema).name).is_file() and (folder / "model.json.j2").is_file()


# ---- what the rule files write ---------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(SHIPPED))
def test_the_schema_accepts_what_the_shipped_rule_file_writes(
    converted: dict[str, Path], family: str
) -> None:
    doc = read_model_json(converted[family], {family})
    assert (doc["format"], doc["family"], doc["version"]) == (FORMAT, family, FAMILY_CONFIG_CPP[family][1])


Edit = Callable[[dict[str, Any]], None]


def _set(value: Any, *keys: str) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        for key in keys[:-1]:
            doc = doc[key]
        doc[keys[-1]] = value

    return edit


def _both(first: Edit, second: Edit) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        first(doc)
        second(doc)

    return edit


def _drop(*keys: str) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        for key in keys[:-1]:
            doc = doc[key]
        del doc[keys[-1]]

    return edit


BROKEN: list[tuple[str, Edit, str]] = [
    ("penguin_vl", _drop("decoder", "rope", "theta"), 'entry "decoder.rope.theta" is missing'),
    ("penguin_vl", _set("two", "num_layers"), 'entry "num_layers" must be an integer, not "two"'),
    ("penguin_vl", _set(2.0, "num_layers"), 'entry "num_layers" must be an integer, not 2.0'),
    ("penguin_vl", _set(True, "vocab_size"), 'entry "vocab_size" must be an integer, not true'),
    ("penguin_vl", _set(0, "hidden_size"), 'entry "hidden_size" must be at least 1, not 0'),
    ("penguin_vl", _set(7, "vision", "rope", "head_dim"), 'entry "vision.rope.head_dim" must be a multiple'),
    (
        "penguin_vl",
        _set("half", "vision", "rope", "table_width"),
        'entry "vision.rope.table_width" must be "full"',
    ),
    ("penguin_vl", _set(1.0, "decoder", "mask_value"), 'entry "decoder.mask_value" must be below 0, not 1.0'),
    ("penguin_vl", _set([], "decoder", "cache_inputs"), 'entry "decoder.cache_inputs" must hold at least 1'),
    (
        "penguin_vl",
        _set(["k", 3], "decoder", "cache_outputs"),
        'entry "decoder.cache_outputs[1]" must be a str',
    ),
    ("penguin_vl", _set("", "nets", "lm_head", "bin"), 'entry "nets.lm_head.bin" must hold at least 1 char'),
    ("penguin_vl", _drop("nets", "vision_encoder"), 'entry "nets.vision_encoder" is missing'),
    ("penguin_vl", _set({}, "nets", "extra"), 'entry "nets.extra" is not a key the schema knows'),
    ("penguin_vl", _set(1, "surprise"), 'entry "surprise" is not a key the schema knows'),
    (
        "penguin_vl",
        _set(None, "embedding_matrix", "tag"),
        'entry "embedding_matrix.tag" must be an integer, not null',
    ),
    ("penguin_vl", _drop("embedding_matrix"), 'entry "embedding_matrix" is missing'),
    ("penguin_vl", _set(["a"], "tokens", "eos"), 'entry "tokens.eos[0]" must be an integer, not "a"'),
    ("penguin_vl", _drop("image_processor", "patch_size"), 'entry "image_processor.patch_size" is missing'),
    (
        "qwen3_llm",
        _set("fast", "decoder", "rope", "theta"),
        'entry "decoder.rope.theta" must be a number, not',
    ),
    (
        "qwen3_llm",
        _set("x", "decoder", "rope", "table_width"),
        'entry "decoder.rope.table_width" must be one of',
    ),
    ("qwen3_llm", _drop("nets", "embed", "inputs"), 'entry "nets.embed.inputs" is missing'),
    ("qwen3_llm", _set({"ref": 3, "checkpoint": None}, "verifier"), 'entry "verifier.ref" must be a string'),
    ("qwen3_llm", _set(2, "version"), 'entry "version" is 2: family qwen3_llm has no schema of that version'),
    ("qwen3_llm", _set(2, "tokens", "eos"), 'entry "tokens.eos" must be a list, not 2'),
    ("qwen3_llm", _drop("tokens"), 'entry "tokens" is missing'),
    ("qwen3_llm", _set({"json": "t.json"}, "tokenizer"), 'entry "tokenizer.config" is missing'),
    ("qwen3_llm", _set({}, "embedding_matrix"), 'entry "embedding_matrix" is not a key the schema knows'),
    ("qwen3_llm", _set("gsurg-llm-kv-cache", "format"), "a model.json of version 1, before families"),
    (  # a version-1 file as it was: its own format and no family, told so rather than "family is missing"
        "penguin_vl",
        _both(_set("gsurg-penguin-vl", "format"), _drop("family")),
        'entry "format" is "gsurg-penguin-vl", not "gsurg-model" (a model.json of version 1',
    ),
    ("qwen3_llm", _drop("family"), 'entry "family" is missing'),
    ("qwen3_llm", _set(["x"], "format"), 'entry "format" is ["x"], not "gsurg-model"'),
    ("qwen3_llm", _set(2.0, "version"), 'entry "version" must be an integer, not 2.0'),
    ("qwen3_llm", _set(None, "family"), 'entry "family" is null, but this reader reads "qwen3_llm"'),
]


@pytest.mark.parametrize(("family", "edit", "message"), BROKEN, ids=[m for _, _, m in BROKEN])
def test_a_broken_model_json_is_refused_naming_the_key(
    converted: dict[str, Path], family: str, edit: Edit, message: str
) -> None:
    doc = _doc(converted, family)
    edit(doc)
    with pytest.raises(ModelJsonError) as err:
        check_model_json(doc, "DIR/model.json", {family})
    assert str(err.value).startswith("DIR/model.json: ") and message in str(err.value), err.value


def test_untied_embeddings_need_no_embedding_matrix(converted: dict[str, Path]) -> None:
    doc = _doc(converted, "penguin_vl")
    doc["tie_word_embeddings"] = False
    del doc["embedding_matrix"]
    assert check_model_json(doc, "m", {"penguin_vl"}) is doc
    doc = _doc(converted, "penguin_vl")  # an untagged (raw) matrix has no tag
    doc["embedding_matrix"] |= {"storage": "raw", "tag": None}
    assert check_model_json(doc, "m", {"penguin_vl"}) is doc


# ---- the Python readers -----------------------------------------------------------------------------------


def test_the_python_readers_refuse_another_family(converted: dict[str, Path]) -> None:
    with pytest.raises(
        VerifyError,
        match=re.escape('model.json: entry "family" is "penguin_vl", but this reader reads "qwen3_llm"'),
    ):
        LlmChain(converted["penguin_vl"], families=("qwen3_llm",))
    with pytest.raises(
        VerifyError, match='entry "family" is "qwen3_llm", but this reader reads "penguin_vl"'
    ):
        PenguinNcnn(converted["qwen3_llm"], _doc(converted, "qwen3_llm"))
    with PenguinNcnn(converted["penguin_vl"], _doc(converted, "penguin_vl")) as nets:  # its own family loads
        assert nets.llm.doc["family"] == "penguin_vl"


def test_the_python_readers_name_the_broken_key(converted: dict[str, Path], tmp_path: Path) -> None:
    doc = _doc(converted, "penguin_vl")
    del doc["vision"]["rope"]["head_dim"]
    with pytest.raises(VerifyError, match=re.escape('entry "vision.rope.head_dim" is missing')):
        PenguinNcnn(converted["penguin_vl"], doc)
    folder = tmp_path / "llm"
    folder.mkdir()
    doc = _doc(converted, "qwen3_llm")
    doc["decoder"]["output"] = 0
    (folder / "model.json").write_text(json.dumps(doc))
    with pytest.raises(
        VerifyError, match=f'{folder}/model.json: entry "decoder.output" must be a string, not 0'
    ):
        LlmChain(folder, families=("qwen3_llm",))


# ---- the writer -------------------------------------------------------------------------------------------


def _rule_file(
    tmp_path: Path,
    template: str,
    schema: Any,
    side: str = "template: t.j2, schema: s.json",
    at: str = "s.json",
) -> Path:
    write(tmp_path, "t.j2", template)
    write(tmp_path, at, schema if isinstance(schema, str) else json.dumps(schema))
    write(tmp_path, "m.param", CHAIN)
    return write(
        tmp_path,
        "r.yaml",
        f"version: 1\nname: t\ngraphs:\n  main: {{}}\nside_files:\n  - {{{side}, output: model.json}}\n",
    )


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


SCHEMA = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}


def test_the_writer_refuses_a_file_that_breaks_its_schema_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = _rule_file(tmp_path, '{"n": "x", "params": {{ graphs.main.outputs | json }}}', SCHEMA)
    out = tmp_path / "out"
    assert main(["apply", str(rules), str(tmp_path / "m.param"), "--out", str(out)]) == 2
    line = err_line(capsys)
    assert line == (
        f'gsurg: error: side file model.json (template {tmp_path / "t.j2"}): entry "n" must be an integer, '
        f'not "x" (schema {tmp_path / "s.json"})'
    ), line
    assert _files(out) == []
    # the same rule file with a template that holds to the schema writes the models and model.json
    write(tmp_path, "t.j2", '{"n": 1}')
    assert main(["apply", str(rules), str(tmp_path / "m.param"), "--out", str(out)]) == 0
    assert json.loads((out / "model.json").read_text()) == {"n": 1} and (out / "m.param").is_file()


@pytest.mark.parametrize(
    ("template", "schema", "message"),
    [
        ("{not json", SCHEMA, "side file model.json (template {t}): not valid JSON: "),
        (
            '{"n": 1}',
            {"type": "object", "patternProperties": {}},
            "schema #: keyword 'patternProperties' is not",
        ),
        ('{"n": 1}', {"type": "dict"}, 'schema #/type: "dict" is not a JSON type'),
        ('{"n": 1}', {"$ref": "#/$defs/x"}, "schema #/$ref: #/$defs/x names no entry of $defs"),
        ('{"n": 1}', "[1]", "{s}: a JSON Schema is an object, not array"),
        ('{"n": 1}', "{", "{s}: not valid JSON"),
    ],
)
def test_a_side_file_that_is_not_json_or_a_schema_gsurg_cannot_check_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str, schema: Any, message: str
) -> None:
    rules = _rule_file(tmp_path, template, schema)
    out = tmp_path / "out"
    assert main(["apply", str(rules), str(tmp_path / "m.param"), "--out", str(out)]) == 2
    line = err_line(capsys)
    assert message.format(t=tmp_path / "t.j2", s=tmp_path / "s.json") in line, line
    assert line.startswith("gsurg: error: side file model.json"), line
    assert _files(out) == []


def test_a_schema_goes_with_a_template(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = _rule_file(tmp_path, "{}", SCHEMA, side="copy: t.j2, schema: s.json")
    assert main(["apply", str(rules), str(tmp_path / "m.param"), "--out", str(tmp_path / "out")]) == 2
    assert "schema goes with template" in err_line(capsys)


def test_the_schema_is_an_input_no_output_may_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A side file written over the schema it is checked against is refused (the schema is read)."""
    rules = _rule_file(
        tmp_path, '{"n": 1}', SCHEMA, side="template: t.j2, schema: out/s.json", at="out/s.json"
    )
    rules.write_text(rules.read_text().replace("output: model.json", "output: s.json"))
    before = (tmp_path / "out" / "s.json").read_bytes()
    assert main(["apply", str(rules), str(tmp_path / "m.param"), "--out", str(tmp_path / "out")]) == 2
    line = err_line(capsys)
    assert f"{tmp_path / 'out' / 's.json'}: refusing to overwrite an input of the run" in line, line
    assert (tmp_path / "out" / "s.json").read_bytes() == before
    assert not (tmp_path / "out" / "m.param").exists()


def test_a_shipped_rule_file_refuses_a_model_json_its_schema_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["apply", str(SHIPPED["qwen3_llm"]), "--out", str(out), "--set", "rope_theta=fast"]
    assert main(argv) == 2
    line = err_line(capsys)
    assert "side file model.json (template " in line and 'entry "decoder.rope.theta" must be a number' in line
    assert "qwen3_llm.v3.schema.json" in line, line
    assert _files(out) == []


# ---- the C++ reader ---------------------------------------------------------------------------------------

_ACCESSOR = re.compile(r"\bdoc\.(?:str|integer|number|boolean|strings|integers|has|at)\(")
_HELPER = re.compile(r"\b(?:positive_int|positive_number|table_width|existing_file)\((?:cfg, )?doc, ")
_LITERAL = re.compile(r'"([^"\\]*)"')
#: Key expressions that are not literals, and what they stand for: a helper's parameter, and read_nets'
#: ``key`` (``nets.<name>`` for each name of the core's and the family's kNetNames) with the suffixes it adds.
_PARAMETER = "key"
_NET_KEY = re.compile(r'^key \+ "\.(\w+)"$')
_NET_NAME = re.compile(r'^std::string\("nets\."\) \+ name$')
#: Schema keys the runtime does not read, per family, each with who does.
_LLM_NOT_READ = {
    "embedding_matrix.net": "a description of where the matrix is; the runtime reads bin and offsets",
    "embedding_matrix.layer": "likewise",
    "embedding_matrix.slot": "likewise",
    "verifier.ref": "gsurg verify",
    "verifier.checkpoint": "gsurg verify",
}
NOT_READ_BY_RUNTIME = {
    "penguin_vl": {
        **_LLM_NOT_READ,
        "tokens.pad": "nobody yet: the checkpoint's pad id, recorded for runtimes that batch",
    },
    "qwen3_vl": {
        **_LLM_NOT_READ,
        **{
            f"vision.position_embedding.{key}": "where the table lies; the runtime looks it up with the net"
            for key in ("layer", "slot", "bin", "offset", "tag_offset", "tag", "storage")
        },
        **{
            f"nets.deepstack_merger0.{key}": "read_nets, under the names vision.deepstack[k].merger gives"
            for key in ("param", "bin", "inputs", "outputs")
        },
        "tokenizer.chat_template": "the runtime renders the template's turns itself (family prompt)",
        "tokenizer.preprocessor": "the runtime reads model.json image_processor instead",
    },
    "qwen3_llm": {
        "verifier.ref": "gsurg verify",
        "verifier.checkpoint": "gsurg verify",
    },
    "minicpm_v2": {
        "verifier.ref": "gsurg verify",
        "verifier.checkpoint": "gsurg verify",
        "vision.encoder_name": "the checkpoint's timm name, for the record; the nets are checked instead",
        **{
            f"vision.position_embedding.{key}": "where the table lies; the runtime looks it up with the net"
            for key in ("layer", "slot", "bin", "offset", "tag_offset", "tag", "storage")
        },
        **{
            f"muP.{key}": "for the record: each constant is applied inside the net named"
            for key in (
                "scale_emb",
                "scale_emb_in",
                "residual_scale",
                "residual_scale_in",
                "logit_divisor",
                "logit_divisor_in",
            )
        },
        "tokenizer.model": "the official slow tokenizer's file; the runtime reads tokenizer.json",
    },
}
#: Keys of an object the family hands on whole (doc.at), read by name where that code lives.
READ_ELSEWHERE = {
    "qwen3_vl": (
        "image_processor",
        _FAMILIES / "qwen3_vl" / "src" / "qwen3_vl_image_processor.cpp",
    ),
}


def _first_argument(source: str, start: int) -> str:
    """The C++ expression from ``start`` to the first comma outside parentheses or the call's ``)``."""
    depth = 0
    for i in range(start, len(source)):
        c = source[i]
        if c == "(":
            depth += 1
        elif c == ")" and depth > 0:
            depth -= 1
        elif c in ",)" and depth == 0:
            return source[start:i].strip()
    pytest.fail(f"{MODEL_CONFIG_CPP.name}: a call is never closed")


def _cpp_keys(source: str) -> set[str]:
    """Every model.json key the C++ reader names: literal keys of JsonDoc accessors and of the helpers that
    take one, and the nets.<name>.<field> keys read_nets makes. An expression of another shape fails the
    test, so a new way of naming keys cannot slip past it."""
    lists = re.findall(r"kNetNames\[\] = \{([^}]*)\}", source, re.S)
    assert len(lists) in (1, 2), "expected the core's kNetNames and the family's (a family may have none)"
    nets = [name for names in lists for name in _LITERAL.findall(names)]
    keys: set[str] = set()
    calls = (*_ACCESSOR.finditer(source), *_HELPER.finditer(source))
    for expr in [_first_argument(source, m.end()) for m in calls]:
        if (literal := re.fullmatch(r'"([^"\\]*)"', expr)) is not None:
            keys.add(literal[1])
        elif (suffix := _NET_KEY.fullmatch(expr)) is not None:
            keys.update(f"nets.{name}.{suffix[1]}" for name in nets)
        elif _NET_NAME.fullmatch(expr) is not None:
            keys.update(f"nets.{name}" for name in nets)
        elif expr != _PARAMETER:
            pytest.fail(f"{MODEL_CONFIG_CPP.name}: cannot tell which key {expr!r} is")
    return keys


def _schema_keys(schema: JsonSchema, node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, bool]]:
    """(dotted key, is a leaf) for every property the schema declares, through $ref."""
    if "$ref" in node:
        node = schema.root["$defs"][node["$ref"].rsplit("/", 1)[1]]
    for name, sub in node.get("properties", {}).items():
        key = f"{prefix}{name}"
        resolved = schema.root["$defs"][sub["$ref"].rsplit("/", 1)[1]] if "$ref" in sub else sub
        leaf = "properties" not in resolved
        yield key, leaf
        if not leaf:
            yield from _schema_keys(schema, sub, key + ".")


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIG_CPP))
def test_the_cpp_reader_reads_exactly_the_schemas_keys(family: str) -> None:
    source = _reader_source(family)
    cpp = _cpp_keys(source)
    assert {
        "format",
        "family",
        "version",
        "decoder.rope.theta",
        "nets.decoder.param",
    } <= cpp  # the parser works
    schema = JsonSchema.load(_schema_path(family, FAMILY_CONFIG_CPP[family][1]))
    declared = dict(_schema_keys(schema, schema.root))
    if family in READ_ELSEWHERE:
        prefix, reader = READ_ELSEWHERE[family]
        text = reader.read_text(encoding="utf-8")
        assert prefix in cpp, f"the family does not hand {prefix} on"
        for key in (k for k in declared if k.startswith(prefix + ".")):
            if f'"{key.split(".", 1)[1]}"' in text:
                cpp.add(key)
    props = schema.root["properties"]
    if props["tie_word_embeddings"].get("const") is False or "embedding_matrix" not in props:
        # the core reads embedding_matrix only for tied embeddings, and only when model.json has one: this
        # family's schema rules out the one or has no such entry (its rows come from the embed net)
        cpp = {key for key in cpp if key.split(".")[0] != "embedding_matrix"}
    unknown = sorted(cpp - set(declared))
    assert not unknown, f"the C++ reader reads keys the schema does not declare: {unknown}"
    unread = {key for key, leaf in declared.items() if leaf} - cpp
    expected = set(NOT_READ_BY_RUNTIME[family])
    assert unread == expected, (
        f"schema keys the C++ reader does not read: {sorted(unread - expected)}; listed as "
        f"unread but read: {sorted(expected - unread)}"
    )


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIG_CPP))
def test_the_cpp_reader_checks_the_schemas_format_family_and_version(family: str) -> None:
    source = MODEL_CONFIG_CPP.read_text(encoding="utf-8")
    path, version = FAMILY_CONFIG_CPP[family]
    family_source = path.read_text(encoding="utf-8")
    consts = dict(re.findall(r"\bk(Format|Family|Version) = \"?([\w-]+)\"?;", source + family_source))
    props = JsonSchema.load(_schema_path(family, version)).root["properties"]
    assert consts == {
        "Format": props["format"]["const"],
        "Family": props["family"]["const"],
        "Version": str(props["version"]["const"]),
    }
    header = source[source.index(" read_header(const JsonDoc& doc) {") :]
    header = header[: header.index("\n}\n")]
    assert "!= kFormat)" in header, "read_header does not compare with kFormat"
    # the family is looked up in the registry, and the version compared with its entry's
    assert "find_family(family)" in header and "version != entry->version" in header
    assert "FamilyEntry{kFamily, kVersion," in family_source, (
        "the family's registry entry is not kFamily, kVersion"
    )
    assert "read_header(doc);" in source


# ---- the validator ----------------------------------------------------------------------------------------


def test_json_equality_keeps_booleans_and_numbers_apart() -> None:
    assert json_equal(1, 1.0) and not json_equal(True, 1) and not json_equal([0], [False])
    assert json_equal({"a": [1, None]}, {"a": [1.0, None]}) and not json_equal({"a": 1}, {"b": 1})


def test_a_non_finite_number_is_no_number() -> None:
    schema = JsonSchema({"type": "number"}, "inline")
    assert str(schema.violation(float("nan"))) == "the document must be a number, not NaN"
    assert str(schema.violation(float("-inf"))) == "the document must be a number, not -Infinity"
    assert schema.violation(1) is None and schema.violation(0.5) is None


def test_a_reference_cycle_is_refused_not_followed_forever() -> None:
    schema = JsonSchema({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}, "cyclic.json")
    with pytest.raises(
        SchemaFileError, match=re.escape("cyclic.json: schema #: $ref nests more than 64 deep")
    ):
        schema.violation({})


def test_the_reader_refuses_an_unknown_version_with_the_versions_it_knows(converted: dict[str, Path]) -> None:
    doc = copy.deepcopy(_doc(converted, "penguin_vl")) | {"version": 1}
    with pytest.raises(
        ModelJsonError, match=r'entry "version" is 1: family penguin_vl has no schema .* \(known: 2\)'
    ):
        check_model_json(doc, "m", {"penguin_vl"})
