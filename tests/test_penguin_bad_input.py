"""Bad input to the Penguin-VL conversion and its verifier (issue 9, item 8): a missing checkpoint file, a
tensor missing or of the wrong shape, a config that does not match what the rule file expects, pnnx
missing or failing, an unreadable image. Each is one ``gsurg: error:`` line naming the file or tensor and
the reason, exit 2, and the output folder is left as it was (a file already in it is untouched, nothing
new appears in it or beside it: no staging files, no work folder).

Oracles: the files the test breaks (it knows which path and tensor it broke), the OS's folder listing."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch")

from safetensors.numpy import load_file, save_file

from graphsurgeon.cli import main
from graphsurgeon.errors import GsurgError
from graphsurgeon.models.penguin_vl.make_tiny import SHIPPED, make_tiny
from graphsurgeon.rewrite.loader import open_rule_file
from tests.conftest import CORPUS, REPO

RULES = REPO / "rules" / "penguin_vl.yaml"
VERIFIER = REPO / "graphsurgeon" / "models" / "penguin_vl" / "verify.py"
MISSING = "model.vision_encoder.vision_encoder.encoder.layers.1.mlp.up_proj.weight"
RESHAPED = "model.layers.0.self_attn.k_proj.weight"


def _config(ckpt: Path, edit: Callable[[dict], None], name: str = "config.json") -> None:
    path = ckpt / name
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc, indent=2))


def _tensors(ckpt: Path, edit: Callable[[dict], None]) -> None:
    path = ckpt / "model.safetensors"
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def _vision_layers(n: int, *, both: bool) -> Callable[[Path], None]:
    def edit(ckpt: Path) -> None:
        _config(ckpt, lambda c: c["vision_encoder_config"].__setitem__("num_hidden_layers", n))
        if both:  # the encoder's own config.json agrees, so only the weights disagree
            _config(
                ckpt, lambda c: c.__setitem__("num_hidden_layers", n), "penguinvl_vision_encoder/config.json"
            )

    return edit


# (how the tiny checkpoint is broken, what the one error line must contain: {ckpt} is its folder)
BROKEN: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "no-tokenizer": (lambda c: (c / "tokenizer.json").unlink(), ["{ckpt}/tokenizer.json: no such file"]),
    "no-weights": (
        lambda c: (c / "model.safetensors").unlink(),
        ["{ckpt}: no model.safetensors or model.safetensors.index.json"],
    ),
    "missing-tensor": (
        lambda c: _tensors(c, lambda t: t.pop(MISSING)),
        ["{ckpt}/model.safetensors: missing tensor(s) " + MISSING],
    ),
    "wrong-shape": (
        lambda c: _tensors(c, lambda t: t.__setitem__(RESHAPED, t[RESHAPED][:32].copy())),
        [f"{{ckpt}}/model.safetensors: tensor '{RESHAPED}' has shape [32, 64]", "gives [64, 64]"],
    ),
    "vision-layers-vs-weights": (
        _vision_layers(3, both=True),
        [
            "{ckpt}/config.json: vision_encoder_config.num_hidden_layers is 3, but {ckpt}/model.safetensors "
            "holds 2 layer(s)"
        ],
    ),
    "vision-configs-differ": (
        _vision_layers(3, both=False),
        ["{ckpt}/penguinvl_vision_encoder/config.json: num_hidden_layers 2 differ", "{ckpt}/config.json"],
    ),
}


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """An output folder already holding a user's file."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "keep.txt").write_text("earlier work")
    return folder


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gsurg: error: "), err
    return err[0]


def _untouched(out: Path) -> None:
    assert sorted(os.listdir(out)) == ["keep.txt"] and (out / "keep.txt").read_text() == "earlier work"
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".")) == []  # no work folder


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_checkpoint_is_one_clear_error_and_writes_nothing(
    tmp_path: Path, out: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, ckpt)
    breaks, wanted = BROKEN[case]
    breaks(ckpt)
    assert main(["apply", str(RULES), "--set", f"checkpoint={ckpt}", "--out", str(out)]) == 2
    line = _one_error(capsys)
    for text in wanted:
        assert text.format(ckpt=ckpt) in line, line
    _untouched(out)


def test_a_missing_shard_is_named(tmp_path: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = make_tiny(tmp_path / "ckpt", shards=2)
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    assert main(["apply", str(RULES), "--set", f"checkpoint={ckpt}", "--out", str(out)]) == 2
    line = _one_error(capsys)
    assert f"{ckpt}/model-00002-of-00002.safetensors: cannot read: No such file or directory" in line
    _untouched(out)


@pytest.mark.slow
def test_a_missing_optional_config_key_is_not_an_error(tmp_path: Path, out: Path) -> None:
    """pad_token_id is optional in a checkpoint's config (the config reader gives null): model.json
    records null. A key the rule file needs is an error naming the file (the next test)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, ckpt)
    _config(ckpt, lambda c: c.pop("pad_token_id"))
    assert main(["apply", str(RULES), "--set", f"checkpoint={ckpt}", "--out", str(out)]) == 0
    assert json.loads((out / "model.json").read_text())["tokens"]["pad"] is None


def test_a_nested_config_key_is_named_with_its_file_and_object(tmp_path: Path) -> None:
    """The rule file's variables read the checkpoint's config through the example's reader
    (source.config; vision_layers from vision_encoder_config.num_hidden_layers): a key missing there names
    the file, the object and the key. The reader validates the whole config on the first config.* read,
    so the error names the checkpoint, not the rule-file line that happened to read first."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, ckpt)
    _config(ckpt, lambda c: c["vision_encoder_config"].pop("num_hidden_layers"))
    with pytest.raises(GsurgError) as err:  # at open (the inputs' repeat reads the depth) or at first use
        program = open_rule_file(str(RULES), {"checkpoint": str(ckpt)})
        program.scope.var("vision_layers")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{ckpt}/config.json: vision_encoder_config: num_hidden_layers must be"), msg


def _shadow_pnnx(monkeypatch: pytest.MonkeyPatch, root: Path, init: str, script: str | None) -> None:
    """A package named pnnx (``init`` as its ``__init__.py``, ``script`` as its executable) found first on
    PYTHONPATH: the export runs in a child Python, which sees it through the environment."""
    pkg = root / "shadow" / "pnnx"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(init)
    if script is not None:
        (pkg / "pnnx").write_text(script)
        (pkg / "pnnx").chmod(0o755)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(root / "shadow"), os.environ.get("PYTHONPATH", "")])
    )


def _fake_pnnx(monkeypatch: pytest.MonkeyPatch, root: Path, script: str) -> None:
    """A pnnx package whose folder holds ``script`` as its executable (as tests/test_export.py)."""
    _shadow_pnnx(monkeypatch, root, "", script)


def test_pnnx_missing_is_one_clear_error(
    tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _shadow_pnnx(monkeypatch, tmp_path, "raise ImportError('no pnnx here')\n", None)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert main(["apply", str(RULES), "--out", str(out)]) == 2
    assert "pnnx is not installed" in _one_error(capsys)
    _untouched(out)


def test_a_failing_pnnx_names_the_sub_model_and_its_log(
    tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_pnnx(monkeypatch, tmp_path, "#!/bin/sh\necho 'RuntimeError: boom' >&2\nexit 3\n")
    assert main(["apply", str(RULES), "--out", str(out)]) == 2
    line = _one_error(capsys)
    assert "sub-model vision_embed_patch: pnnx exited with code 3: RuntimeError: boom (log: " in line
    # the log is in the work folder, which the run removed: the message says so and how to keep it
    assert line.endswith("(the work folder is removed; --keep-work keeps it)"), line
    _untouched(out)
    assert main(["apply", str(RULES), "--out", str(out), "--keep-work"]) == 2
    log = _one_error(capsys).split("(log: ")[1].rstrip(")")
    assert Path(log).read_text().strip() == "RuntimeError: boom"  # kept, and the one it names


@pytest.fixture
def verify_folder(tmp_path: Path) -> Path:
    """A folder whose model.json names the Penguin-VL verifier (images are read before any net loads)."""
    folder = tmp_path / "converted"
    folder.mkdir()
    doc = {"nets": {}, "decoder": {}, "verifier": {"ref": f"{VERIFIER}:verify", "checkpoint": str(SHIPPED)}}
    (folder / "model.json").write_text(json.dumps(doc))
    return folder


def _text_file(path: Path) -> Path:
    path.write_text("not an image")
    return path


def _bomb(path: Path) -> Path:
    """A 48 KB PNG of 20000 x 20000 pixels: Pillow refuses to decode more than 2 x 89.5M pixels."""
    from PIL import Image

    Image.new("1", (20000, 20000)).save(path)
    return path


def _truncated_jpeg(path: Path) -> Path:
    path.write_bytes((CORPUS / "images" / "desert.jpg").read_bytes()[:3000])
    return path


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p / "missing.png", "no such image file"),
        (lambda p: _text_file(p / "text.png"), "not an image Pillow can read"),
        (lambda p: _truncated_jpeg(p / "cut.jpg"), "cannot decode the image: image file is truncated"),
        (lambda p: p, "is a folder, not a regular file"),
        (lambda p: _bomb(p / "bomb.png"), "too large to open: Image size (400000000 pixels) exceeds"),
    ],
    ids=["missing", "not-an-image", "truncated", "a-folder", "decompression-bomb"],
)
def test_an_unreadable_image_given_to_verify_is_one_clear_error(
    tmp_path: Path,
    verify_folder: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[Path], Path],
    reason: str,
) -> None:
    image = make(tmp_path)
    assert main(["verify", str(verify_folder), "--image", str(image), "--tokens", "2"]) == 2
    line = _one_error(capsys)
    assert line.startswith(f"gsurg: error: {image}: {reason}"), line
    assert capsys.readouterr().out == ""  # no report was printed
