"""Inputs that are not regular files, or too large (hardening issue 14, item 8): every command refuses a
FIFO, a device or a folder given as any of its inputs with one ``gsurg: error:`` line naming the path and
exit 2, without opening it in a way that waits (a FIFO) or reading it whole (``/dev/zero``); a .param or a
weight map over the size limit is refused from its size, before it is read.

A command that waits on a FIFO would hang the suite: each run is cut by an alarm after a few seconds, so
such a regression fails instead. Sparse files stand in for large ones (no disk space is used).
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

from graphsurgeon import input_files
from graphsurgeon.cli import main
from graphsurgeon.formats.param_build import PARAM_LIMIT
from graphsurgeon.input_files import InputFileError, open_input, read_input
from tests.alarm import alarm
from tests.diff_bin_harness import FC_PARAM, fc_bin


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], path: str, reason: str) -> None:
    with alarm():
        code = main(argv)
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"gsurg: error: {path}: {reason}"), err


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.param"
    os.mkfifo(path)
    return path


@pytest.fixture
def good(tmp_path: Path) -> tuple[Path, Path]:
    """A valid one-InnerProduct model (m.param, m.bin) beside the bad inputs."""
    (tmp_path / "m.param").write_text(FC_PARAM)
    (tmp_path / "m.bin").write_bytes(fc_bin())
    return tmp_path / "m.param", tmp_path / "m.bin"


FIFO = "is a FIFO (named pipe), not a"  # regular file, or (diff-bin's weight files) .bin weight file
DEVICE = "is a character device, not a"


def commands(bad: str, param: Path, bin_path: Path, tmp: Path) -> dict[str, list[str]]:
    """Every command, with ``bad`` as one of its inputs."""
    out = str(tmp / "out")
    return {
        "lint": ["lint", bad],
        "lint --bin": ["lint", str(param), "--bin", bad],
        "fmt": ["fmt", bad, "-o", f"{out}.param"],
        "fmt --bin": ["fmt", str(param), "--bin", bad, "-o", f"{out}.param", "--out-bin", f"{out}.bin"],
        "synth-bin": ["synth-bin", bad, "-o", f"{out}.bin"],
        "diff-bin a": ["diff-bin", bad, str(bin_path)],
        "diff-bin --param-a": ["diff-bin", str(bin_path), str(bin_path), "--param-a", bad],
        "diff-bin --map": ["diff-bin", str(bin_path), str(tmp / "c.safetensors"), "--map", bad],
    }


COMMANDS = list(commands("x", Path("p"), Path("b"), Path("t")))


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_input_is_refused_without_waiting(
    command: str,
    fifo: Path,
    good: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if command == "diff-bin --map":  # the map is read after the checkpoint is found
        (tmp_path / "c.safetensors").write_bytes(b"")
    argv = commands(str(fifo), *good, tmp_path)[command]
    refused(capsys, argv, str(fifo), FIFO)
    assert not (tmp_path / "out.param").exists() and not (tmp_path / "out.bin").exists()


@pytest.mark.parametrize("command", ["lint", "lint --bin", "fmt", "synth-bin", "diff-bin --param-a"])
def test_dev_zero_is_refused_without_reading_it(
    command: str, good: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused(capsys, commands("/dev/zero", *good, tmp_path)[command], "/dev/zero", DEVICE)


def test_a_folder_given_as_the_param_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(capsys, ["lint", str(tmp_path)], str(tmp_path), "is a folder, not a regular file")


def test_a_socket_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.param"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        refused(capsys, ["fmt", str(path), "-o", str(tmp_path / "o.param")], str(path), "is a socket")


def test_a_fifo_checkpoint_is_refused(
    good: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "c.safetensors"
    os.mkfifo(ckpt)
    (tmp_path / "map.yaml").write_text("fc.weight: w\n")
    argv = ["diff-bin", str(good[1]), str(ckpt), "--map", str(tmp_path / "map.yaml")]
    refused(capsys, argv, str(ckpt), FIFO)


def test_a_fifo_shard_of_a_checkpoint_is_refused(
    good: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "c.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "shard.safetensors"}}))
    os.mkfifo(tmp_path / "shard.safetensors")
    (tmp_path / "map.yaml").write_text("fc.weight: w\n")
    argv = ["diff-bin", str(good[1]), str(index), "--map", str(tmp_path / "map.yaml")]
    refused(capsys, argv, str(tmp_path / "shard.safetensors"), FIFO)


def _verify_folder(tmp_path: Path) -> Path:
    """A model.json that gets as far as the images (its verifier is never loaded)."""
    folder = tmp_path / "out"
    folder.mkdir()
    doc = {"nets": {}, "decoder": {}, "verifier": {"ref": "nowhere.py:verify"}}
    (folder / "model.json").write_text(json.dumps(doc))
    return folder


def test_verify_refuses_a_fifo_image_before_running_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _verify_folder(tmp_path)
    image = tmp_path / "pipe.png"
    os.mkfifo(image)
    refused(capsys, ["verify", str(folder), "--image", str(image)], str(image), FIFO)


def test_verify_refuses_a_fifo_model_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    os.mkfifo(folder / "model.json")
    refused(capsys, ["verify", str(folder)], str(folder / "model.json"), FIFO)


def test_verify_refuses_a_model_json_that_is_not_an_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _verify_folder(tmp_path)
    (folder / "model.json").write_text("[1, 2]")
    refused(capsys, ["verify", str(folder)], str(folder / "model.json"), "not a JSON object")


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


@pytest.mark.parametrize("command", ["lint", "fmt", "synth-bin", "diff-bin --param-a"])
def test_a_param_over_the_limit_is_refused_from_its_size(
    command: str, good: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert PARAM_LIMIT == 256 << 20
    big = _sparse(tmp_path / "big.param", PARAM_LIMIT + 1)
    reason = f"is {PARAM_LIMIT + 1} bytes; a .param larger than 256 MiB is refused"
    refused(capsys, commands(str(big), *good, tmp_path)[command], str(big), reason)


def test_a_weight_map_over_the_limit_is_refused(
    good: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.safetensors").write_bytes(b"")
    big = _sparse(tmp_path / "map.yaml", PARAM_LIMIT + 1)
    reason = "is 268435457 bytes; a weight map larger than 256 MiB is refused"
    refused(capsys, commands(str(big), *good, tmp_path)["diff-bin --map"], str(big), reason)


def test_a_param_at_the_limit_is_read(tmp_path: Path) -> None:
    """The limit itself is allowed: ``read_input`` reads exactly ``limit`` bytes and refuses one more."""
    path = tmp_path / "x.param"
    path.write_bytes(b"7" * 100)
    assert read_input(path, limit=100) == b"7" * 100
    with pytest.raises(InputFileError, match="is 101 bytes; an input larger than 100 bytes is refused"):
        path.write_bytes(b"7" * 101)
        read_input(path, limit=100)


def test_a_fifo_swapped_in_after_the_check_is_refused_on_the_descriptor(
    fifo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the path checks as a regular file, then a FIFO is what gets opened. O_NONBLOCK opens it
    without waiting for a writer, and the descriptor's own status refuses it."""
    real_stat = os.stat

    def stat_says_regular(path: object, *args: object, **kwargs: object) -> os.stat_result:
        info = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        fields = list(info)
        fields[0] = stat.S_IFREG | 0o644
        return os.stat_result(fields)

    monkeypatch.setattr(input_files.os, "stat", stat_says_regular)
    with alarm(), pytest.raises(InputFileError, match="is a FIFO"):
        open_input(fifo)


def test_a_file_larger_than_its_size_says_is_cut_at_the_limit() -> None:
    """/proc files are regular files of size 0 that hold text: reading stops one byte past the limit."""
    with pytest.raises(InputFileError, match="grew while being read; an input larger than 10 bytes"):
        read_input("/proc/self/status", limit=10)
    assert read_input("/proc/self/status").startswith(b"Name:")
