"""graphsurgeon.export.spec: finding an export source from a rule file's reference and calling it.

Sources are written here as small files (a sibling reached by relative import, a file that fails to import,
a syntax error); the expected messages are written by hand.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from graphsurgeon.errors import GsurgError  # noqa: E402
from graphsurgeon.export.errors import ExportError  # noqa: E402
from graphsurgeon.export.spec import ExportSpec, call_source, load_source  # noqa: E402


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_file_source_reaches_its_siblings_by_relative_import(tmp_path: Path) -> None:
    _write(tmp_path / "src" / "helper.py", "WIDTH = 8\n")
    _write(
        tmp_path / "src" / "my-source.py",
        "from .helper import WIDTH\n\n\ndef build(variables, checkpoint):\n"
        "    return [variables['w'] * WIDTH, checkpoint]\n",
    )
    rules = tmp_path / "rules"
    rules.mkdir()
    fn = load_source("../src/my-source.py:build", rules)
    assert fn({"w": 2}, None) == [16, None]
    assert load_source(f"{tmp_path}/src/my-source.py:build", Path("/")) is not fn  # absolute, re-read
    assert not any(str(tmp_path) in p for p in sys.path)


def test_a_dotted_source_is_imported_from_sys_path() -> None:
    assert load_source("os.path:join", Path(".")) is os.path.join


@pytest.mark.parametrize(
    ("files", "ref", "expected"),
    [
        ({}, "build", "export source 'build': expected path/to/file.py:FUNCTION or package.module:FUNCTION"),
        ({}, "x.py:", "export source 'x.py:': expected path/to/file.py:FUNCTION"),
        ({}, "nope.py:build", "export source 'nope.py:build': no such file {base}/nope.py"),
        (
            {"s.py": "X = 1\n"},
            "s.py:build",
            "export source 's.py:build': {base}/s.py has no attribute 'build'",
        ),
        ({"s.py": "build = 3\n"}, "s.py:build", "export source 's.py:build': build is a int, not a callable"),
        (
            {"s.py": "import no_such_module_gsurg\n"},
            "s.py:build",
            "export source 's.py:build': loading {base}/s.py failed: ModuleNotFoundError: "
            "No module named 'no_such_module_gsurg'",
        ),
        (
            {"s.py": "raise ValueError('the config is bad')\n"},
            "s.py:build",
            "export source 's.py:build': loading {base}/s.py failed: ValueError: the config is bad",
        ),
        (
            {"s.py": "def build(:\n"},
            "s.py:build",
            "export source 's.py:build': {base}/s.py:1: SyntaxError: ",
        ),
        (
            {},
            "no_such_pkg_gsurg.mod:build",
            "export source 'no_such_pkg_gsurg.mod:build': importing no_such_pkg_gsurg.mod failed: "
            "ModuleNotFoundError: No module named 'no_such_pkg_gsurg'",
        ),
        ({}, "os.path:no_attr", "export source 'os.path:no_attr': "),
    ],
    ids=[
        "no-colon",
        "no-attr-name",
        "no-file",
        "no-attr",
        "not-callable",
        "import",
        "raises",
        "syntax",
        "dotted",
        "dotted-attr",
    ],
)
def test_bad_source_refs_are_clear_errors(
    tmp_path: Path, files: dict[str, str], ref: str, expected: str
) -> None:
    for name, text in files.items():
        _write(tmp_path / name, text)
    with pytest.raises(ExportError) as err:
        load_source(ref, tmp_path)
    msg = str(err.value)
    assert msg.startswith(expected.format(base=tmp_path)) and "\n" not in msg
    if ref == "os.path:no_attr":
        assert msg.endswith("has no attribute 'no_attr'")


def test_call_source_names_the_source_when_it_fails_or_returns_the_wrong_thing() -> None:
    def raises(variables: Any, checkpoint: Any) -> Any:
        raise KeyError("hidden")

    def gsurg_error(variables: Any, checkpoint: Any) -> Any:
        raise ExportError("its own message")

    # sources that break the contract (typed Any, like a user's untyped build function)
    def returns_a_dict(variables: Any, checkpoint: Any) -> Any:
        return {}

    def returns_an_int_list(variables: Any, checkpoint: Any) -> Any:
        return [1]

    with pytest.raises(ExportError, match=r"^export source 'f.py:build' failed: KeyError: 'hidden'$"):
        call_source(raises, "f.py:build", {}, None)
    with pytest.raises(GsurgError, match=r"^its own message$"):
        call_source(gsurg_error, "f.py:build", {}, None)
    with pytest.raises(ExportError, match="returned a dict, not a list of ExportSpec"):
        call_source(returns_a_dict, "f.py:build", {}, None)
    with pytest.raises(ExportError, match="returned a int where an ExportSpec belongs"):
        call_source(returns_an_int_list, "f.py:build", {}, None)
    spec = ExportSpec("lin", torch.nn.Linear(2, 2).eval(), (torch.zeros(1, 2),))
    assert call_source(lambda v, c: [spec], "f.py:build", {}, None) == (spec,)
