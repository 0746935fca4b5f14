"""The model families found by name (issue 36, items 1-3): their manifests, the model facts the engine must
not hold, ``gsurg conversions``, ``gsurg apply NAME`` and the ``{path:, package:}`` variable that lets a
shipped rule file name the data a package ships."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from graphsurgeon import registry
from graphsurgeon.cli import main
from graphsurgeon.rewrite.package_folder import package_folder
from graphsurgeon.rewrite.yaml_source import RuleFileError
from tests.conftest import REPO

PACKAGE = REPO / "graphsurgeon"
SHIPPED = {"qwen3_llm", "penguin_vl", "qwen3_vl", "minicpm_v2"}


def test_every_shipped_family_is_found_with_its_rule_file_and_tiny_checkpoint() -> None:
    found = {f.name: f for f in registry.families()}
    assert set(found) >= SHIPPED
    for family in found.values():
        assert family.folder == PACKAGE / "models" / family.name
        assert family.rules.is_file() and family.rules.parent.name == "rules"
        assert family.default_checkpoint is not None and (family.default_checkpoint / "config.json").is_file()
        assert family.needs and family.summary
    assert found["penguin_vl"].rules.name == "penguin_vl.yaml"
    assert found["qwen3_llm"].rules.name == "llm-kv-cache.yaml"


def test_every_model_json_schema_lives_in_a_family_folder() -> None:
    schemas = registry.schema_files()
    assert {("qwen3_llm", 3), ("penguin_vl", 2), ("qwen3_vl", 1)} <= set(schemas)
    for (family, _), path in schemas.items():
        assert path.parent == PACKAGE / "models" / family
    assert not (REPO / "schemas").exists()


def test_an_unknown_family_names_the_known_ones() -> None:
    with pytest.raises(registry.RegistryError, match=r"no model family 'nope' \(known: .*penguin_vl"):
        registry.find_family("nope")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "other"}, r"name: 'other' must be the folder's name 'fam'"),
        ({"rules": "missing.yaml"}, r"rules: no rule file 'missing.yaml'"),
        ({"colour": "blue"}, r"colour: unknown key"),
        ({"mrope_layouts": {"x": "diagonal"}}, r"mrope_layouts: expected model_type: interleaved or block"),
        ({"default_checkpoint": "nowhere"}, r"default_checkpoint: no folder"),
        ({"needs": ""}, r"needs: expected a non-empty string"),
        ({"evaluator": "evaluate.py"}, r"evaluator: expected FILE.py:FUNCTION of a file in"),
        ({"batch_request": "none.py:batch_request"}, r"batch_request: expected FILE.py:FUNCTION of a file"),
        ({"batch_request": "family.yaml:not an identifier"}, r"batch_request: expected FILE.py:FUNCTION"),
    ],
)
def test_a_malformed_manifest_is_one_error_naming_file_and_key(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    folder = tmp_path / "fam"
    folder.mkdir()
    doc: dict[str, object] = {
        "name": "fam",
        "title": "Fam",
        "summary": "s",
        "rules": "penguin_vl.yaml",
        "needs": "n",
    }
    doc.update(change)
    (folder / "family.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(registry.RegistryError, match=re.escape(str(folder / "family.yaml")) + ": " + message):
        registry._manifest(folder)


def _model_facts() -> set[str]:
    """Every name a family declares: its name, title words, model types; and each name's first part."""
    facts: set[str] = set()
    for family in registry.families():
        facts |= {family.name, family.name.split("_")[0], *family.model_types, *family.mrope_layouts}
        facts |= {w for w in re.split(r"[\s(),]+", family.title) if len(w) > 3}
    return {f.lower() for f in facts}


def test_the_engine_names_no_family_and_no_model_type() -> None:
    """No family name, HF ``model_type`` or title in ``graphsurgeon/`` outside the families (code, strings,
    comments and docstrings alike), nor in the layer catalog (issue 36, item 2)."""
    facts = _model_facts()
    assert {"qwen3_vl", "penguin_vl", "penguinvl_qwen3", "qwen3", "penguin", "qwen2_5_vl"} <= facts
    pattern = re.compile(r"(?<![a-z0-9_])(" + "|".join(map(re.escape, sorted(facts))) + r")(?![a-z0-9_])")
    bad = []
    for path in sorted(PACKAGE.rglob("*")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("models", "__pycache__") or path.suffix not in (".py", ".yaml", ".md", ".j2"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            hit = pattern.search(line.lower())
            if hit:
                bad.append(f"{rel}:{number}: {hit.group(1)}")
    assert bad == []


def test_the_mrope_layout_comes_from_the_family_manifest() -> None:
    assert registry.mrope_layout("qwen3_vl") == "interleaved"
    assert registry.mrope_layout("qwen2_5_vl") == "block"
    assert registry.mrope_layout("llama") is None
    source = (PACKAGE / "verify" / "mrope_settings.py").read_text()
    strings = [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)]
    assert not any(isinstance(s, str) and s.startswith("qwen") for s in strings)


def test_gsurg_conversions_lists_each_family_with_what_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conversions", "--format", "json"]) == 0
    listed = {c["name"]: c for c in json.loads(capsys.readouterr().out)["conversions"]}
    assert set(listed) >= SHIPPED
    assert "vision_encoder_config" in listed["penguin_vl"]["needs"]
    assert listed["qwen3_vl"]["rules"].endswith("qwen3_vl.yaml")
    assert main(["conversions"]) == 0
    text = capsys.readouterr().out
    assert "gsurg apply penguin_vl [--checkpoint DIR]" in text and f"{len(listed)} conversions" in text


def test_apply_by_name_refuses_an_unknown_name_listing_the_known(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "no_such_model", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "no_such_model: neither a rule file nor a conversion name" in err and "qwen3_vl" in err


def test_apply_refuses_the_checkpoint_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["apply", "qwen3_llm", "--checkpoint", "a", "--set", "checkpoint=b", "--dry-run"]
    assert main(argv) == 2
    assert "give the checkpoint once" in capsys.readouterr().err


def test_package_folder_resolves_without_running_the_package(tmp_path: Path) -> None:
    assert package_folder("graphsurgeon.models.penguin_vl", "w") == PACKAGE / "models" / "penguin_vl"
    assert package_folder("graphsurgeon", "w") == PACKAGE
    with pytest.raises(RuleFileError, match=r"w: package 'graphsurgeon.nope': no such installed package"):
        package_folder("graphsurgeon.nope", "w")
    with pytest.raises(RuleFileError, match=r"w: package 'a..b' is not a dotted Python package name"):
        package_folder("a..b", "w")
    with pytest.raises(RuleFileError, match=r"no such installed package"):
        package_folder("graphsurgeon.models.penguin_vl.tiny", "w")  # a data folder, not a package


def test_a_package_path_variable_is_relative_to_the_package(tmp_path: Path) -> None:
    from graphsurgeon.rewrite.loader import open_rule_file

    rules = tmp_path / "r.yaml"
    body = "version: 1\nname: t\nvars:\n  where: {path: tiny, package: graphsurgeon.models.qwen3_llm}\n"
    rules.write_text(body + "graphs: {}\n")
    program = open_rule_file(str(rules))
    assert program.scope.var("where") == str(PACKAGE / "models" / "qwen3_llm" / "tiny")
    rules.write_text(body + "  missing: {path: x, package: graphsurgeon.nowhere}\ngraphs: {}\n")
    with pytest.raises(RuleFileError, match=r"r\.yaml:5.*package 'graphsurgeon.nowhere': no such installed"):
        open_rule_file(str(rules))
    rules.write_text(body + "  odd: {path: x, module: y}\ngraphs: {}\n")
    with pytest.raises(RuleFileError, match=r"r\.yaml:5.*optionally with package: NAME"):
        open_rule_file(str(rules))
