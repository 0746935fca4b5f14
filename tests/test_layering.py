"""Dependencies run one way (hardening issue, item 13): lower layers never import higher ones, the package
never imports tests or benchmarks, and benchmarks never import tests. Read from the sources' imports."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "graphsurgeon"
#: Each layer may import only from layers at or below it.
RANK = {
    "errors": 0,
    "input_files": 0,
    "resources": 0,
    "registry": 0,  # the model families found by name: reads their manifests, imports none of their code
    "plugins": 0,
    "progress": 0,
    "evaluation": 0,  # model-agnostic evaluation sets (numpy and Pillow): they know no model, nor gsurg
    "schema": 1,
    "ir": 2,
    "formats": 3,
    "layout": 3,
    "quant": 3,  # ncnn's block-quantization formats and gsurg's quantizer: numpy only
    "transforms": 3,
    "synth": 4,
    "check": 4,
    "export": 4,
    "rewrite": 5,  # the rule language and engine: no pnnx (export/), no ncnn (verify/)
    "verify": 5,
    "pipeline": 6,  # gsurg apply's phases: the only package calling export/, verify/ and check/ together
    "testing": 6,  # test support calls check/ and formats/, never the command line
    "cli": 7,
    "models": 8,  # the model families and what they share: the top floor, which nothing else imports
}
#: Ranks inside a package, for the modules listed (a sub-package counts as one); the same rule, one level
#: down. The rule engine's helpers sit below the action kinds that call them: ``weight_ops`` once imported
#: ``actions.weights`` back (for the ``WeightOp`` model), a circle hidden by a lazy import; and selectors
#: take their value types from ``rule_values``, not from an action module.
SUB_RANK = {
    "rewrite": {
        "strict": 0,
        "rule_values": 0,
        "match_template": 0,
        "safe_regex": 0,
        "select": 1,
        "weight_ops": 1,
        "actions": 2,
    },
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "graphsurgeon" else None


def test_every_package_module_has_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if not p.name.startswith("_")}
    tops.discard("py")
    assert tops - {"__pycache__"} <= set(RANK), sorted(tops - set(RANK))


def test_lower_layers_never_import_higher_ones() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        own = rel.parts[0].removesuffix(".py")
        if own not in RANK:
            continue
        for module in _imports(path):
            if module.split(".")[0] in ("tests", "benchmarks", "examples"):
                bad.append(f"{rel} imports {module}")
            other = _layer(module)
            if other is not None and other in RANK and RANK[other] > RANK[own]:
                bad.append(f"{rel} ({own}) imports {module} ({other})")
    assert bad == []


#: Layers a layer must not import although their rank is lower: the rule engine and language run no pnnx
#: and no ncnn (issue 15, item 1) — exporting and running nets is the apply pipeline's business.
APART = {"rewrite": {"export", "verify", "pipeline"}}


def test_the_rule_engine_imports_neither_export_nor_verify() -> None:
    bad = []
    for own, banned in APART.items():
        for path in sorted((PACKAGE / own).rglob("*.py")):
            bad += [
                f"{path.relative_to(PACKAGE)} imports {module}"
                for module in _imports(path)  # every import, those inside functions too
                if _layer(module) in banned
            ]
    assert bad == []


def test_only_tests_and_benchmarks_import_the_test_support() -> None:
    bad = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "testing"
        and any(module.startswith("graphsurgeon.testing") for module in _imports(path))
    ]
    assert bad == []


def test_sub_layers_never_import_higher_ones() -> None:
    bad = []
    for package, ranks in SUB_RANK.items():
        for path in sorted((PACKAGE / package).rglob("*.py")):
            own = path.relative_to(PACKAGE / package).parts[0].removesuffix(".py")
            if own not in ranks:
                continue
            for module in _imports(path):
                parts = module.split(".")
                if parts[:2] != ["graphsurgeon", package] or len(parts) < 3:
                    continue
                other = parts[2]
                if other in ranks and ranks[other] > ranks[own]:
                    bad.append(f"{package}/{path.relative_to(PACKAGE / package)} ({own}) imports {module}")
    assert bad == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports, anywhere in it (``from pkg import mod`` names ``pkg.mod``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found & modules


def test_no_circle_of_imports() -> None:
    """No two modules need each other, lazy imports inside functions counted: a lazy import only hides a
    circle (``weight_ops`` and ``actions.weights`` had one)."""
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges = {name: _imported_modules(path, set(paths)) - {name} for name, path in paths.items()}
    circles = []
    for start in sorted(edges):
        stack, seen = [(start, [start])], {start}
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(edges[node]):
                if nxt == start:
                    circles.append(" -> ".join([*trail, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert circles == []


def test_benchmarks_never_import_tests() -> None:
    bad = [
        f"{path.name} imports {module}"
        for path in sorted((REPO / "benchmarks").glob("*.py"))
        for module in _imports(path)
        if module.split(".")[0] == "tests"
    ]
    assert bad == []


def test_pattern_only_values_live_with_the_pattern_code() -> None:
    """The formats read models; %captures and * exist only in rule patterns, so their types are the rule
    engine's (formats only know a Placeholders protocol that makes them)."""
    for path in sorted((PACKAGE / "formats").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        assert not classes & {"Capture", "AnyValue", "ArrayPattern"}, path.name


MODELS = PACKAGE / "models"


def _relative_imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every relative import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.level, node.module or "")
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]


def test_a_family_never_imports_a_sibling_and_common_imports_no_family() -> None:
    """Each family folder reaches the engine and ``models.common`` only; ``common`` reaches no family
    (issue 36, item 1)."""
    families = {p.name for p in MODELS.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert {"common", "qwen3_llm", "penguin_vl", "qwen3_vl"} <= families
    bad = []
    for path in sorted(MODELS.rglob("*.py")):
        rel = path.relative_to(MODELS)
        own = rel.parts[0] if len(rel.parts) > 1 else None
        for module in _imports(path):
            parts = module.split(".")
            if parts[:2] != ["graphsurgeon", "models"] or len(parts) < 3:
                continue
            other = parts[2]
            allowed = {own} if own == "common" else {own, "common"}
            if other not in allowed:
                bad.append(f"models/{rel} imports {module}")
        bad += [
            f"models/{rel} imports {'.' * level}{module}"
            for level, module in _relative_imports(path)
            if level > 1
        ]
    assert bad == []


def test_only_the_families_import_the_families() -> None:
    bad = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "models"
        for module in _imports(path)
        if module.startswith("graphsurgeon.models")
    ]
    assert bad == []
