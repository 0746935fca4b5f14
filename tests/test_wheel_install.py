"""Conversions by name from an installed wheel (issue 36, item 3): the wheel is built from this checkout,
installed (not editable) into a fresh virtual environment outside it, and there, from a folder outside the
checkout, ``gsurg conversions`` lists the families and ``gsurg apply qwen3_llm`` converts the embedded tiny
model by name, which ``gsurg verify`` then passes.

The environment sees the interpreter's site-packages for the dependencies (torch, pnnx and ncnn are the
pinned versions the test command installed; a second 1 GB copy would prove nothing about the wheel), but
``graphsurgeon`` itself must come from the wheel: the test checks where it was imported from, and that no
path the conversion used lies in the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the venv's bin folder, a work folder outside the checkout, an environment for both)."""
    root = tmp_path_factory.mktemp("wheel")
    assert not root.resolve().is_relative_to(REPO.resolve())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    wheels = root / "wheels"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(REPO),
        ],
        root,
        env,
    )
    (wheel,) = wheels.glob("graphsurgeon-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "graphsurgeon/_data/rules/penguin_vl.yaml",
        "graphsurgeon/_data/grammars/ncnn_param.lark",
        "graphsurgeon/models/penguin_vl/family.yaml",
        "graphsurgeon/models/qwen3_llm/tiny/model.safetensors",
        "graphsurgeon/models/qwen3_vl/qwen3_vl.v1.schema.json",
        "graphsurgeon/models/common/qwen3_layers.py",
    ):
        assert needed in names, needed
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], root, env)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    _run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", "--ignore-installed", str(wheel)],
        root,
        env,
    )
    work = root / "work"
    work.mkdir()
    env = {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}
    return bin_dir, work, env


def test_the_installed_package_is_the_wheel_not_the_checkout(
    installed: tuple[Path, Path, dict[str, str]],
) -> None:
    bin_dir, work, env = installed
    where = _run(
        [str(bin_dir / "python"), "-c", "import graphsurgeon; print(graphsurgeon.__file__)"], work, env
    )
    assert Path(where.strip()).resolve().is_relative_to(bin_dir.parent.resolve()), where


def test_a_tiny_model_converts_and_verifies_by_name_from_the_wheel(
    installed: tuple[Path, Path, dict[str, str]],
) -> None:
    bin_dir, work, env = installed
    listed = json.loads(_run([str(bin_dir / "gsurg"), "conversions", "--format", "json"], work, env))
    assert {"qwen3_llm", "penguin_vl", "qwen3_vl"} <= {c["name"] for c in listed["conversions"]}
    for entry in listed["conversions"]:
        assert not Path(entry["rules"]).resolve().is_relative_to(REPO.resolve()), entry["rules"]
    _run([str(bin_dir / "gsurg"), "apply", "qwen3_llm"], work, env)
    out = work / "out" / "qwen3_llm"
    doc = json.loads((out / "model.json").read_text())
    assert doc["verifier"]["ref"] == "graphsurgeon.models.qwen3_llm.verify:verify"
    assert Path(doc["verifier"]["checkpoint"]).resolve().is_relative_to(bin_dir.parent.resolve())
    report = _run([str(bin_dir / "gsurg"), "verify", str(out), "--tokens", "8"], work, env)
    assert report.rstrip().endswith("PASSED"), report
