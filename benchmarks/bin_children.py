"""The children of the .bin cases (``bin_cases.py``): each runs in its own interpreter, started as
``bench_core.py --child NAME ARGS...``, and prints its figures with ``emit_result``. They import gsurg and
numpy; the driver never does.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from harness import MiB, emit_result, timed, vm_hwm_kib
from page_cache import drop_from_page_cache

CHUNK = 8 * MiB


def child_walk(param: str, bin_path: str) -> None:
    from graphsurgeon.formats.model_bin import walk_bin
    from graphsurgeon.formats.param_text import read_param_text

    graph = read_param_text(param)
    dt, records = timed(lambda: walk_bin(graph, bin_path))
    end = records[-1].offset + records[-1].nbytes if records else 0
    emit_result({"walk_s": dt, "records": len(records), "end": end})


def child_reemit(param: str, bin_path: str, out: str) -> None:
    """read_bin + write_bin, with write_bin's time split into its fsyncs (file and folder), its re-walk of
    the written file, and the rest (planning, the free-space check and copying). The split comes from timing
    hooks on ``os.fsync`` and ``model_bin.walk_records`` installed after read_bin (a clock read around each
    call: nothing measurable next to what they time)."""
    import graphsurgeon.formats.model_bin as model_bin
    from graphsurgeon.formats.param_text import read_param_text

    graph = read_param_text(param)
    t_read, records = timed(lambda: model_bin.read_bin(graph, bin_path))
    hwm_read = vm_hwm_kib()
    spent = {"fsync_s": 0.0, "rewalk_s": 0.0}

    def hook(fn: Callable[..., Any], key: str) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            dt, value = timed(lambda: fn(*args))
            spent[key] += dt
            return value

        return wrapper

    os.fsync = hook(os.fsync, "fsync_s")
    model_bin.walk_records = hook(model_bin.walk_records, "rewalk_s")
    t_write, plan = timed(lambda: model_bin.write_bin(graph, out))
    emit_result(
        {
            "read_bin_s": t_read,
            "write_bin_s": t_write,
            "plan_copy_s": t_write - spent["fsync_s"] - spent["rewalk_s"],
            **spent,
            "records": len(records),
            "written": len(plan),
            "vm_hwm_after_read_kib": hwm_read,
        }
    )


def child_readinto(bin_path: str) -> None:
    """The I/O floor: one sequential pass with readinto into a reused 8 MiB buffer."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)

    def read_all() -> int:
        total = 0
        with open(bin_path, "rb", buffering=0) as fh:
            while True:
                got = fh.readinto(view)
                if not got:
                    return total
                total += got

    dt, total = timed(read_all)
    emit_result({"readinto_s": dt, "bytes": total})


def child_copyfile(bin_path: str, out: str) -> None:
    """The copy floor: shutil.copyfile, then fsync of the copy (write_bin fsyncs its output too)."""
    t_copy, _ = timed(lambda: shutil.copyfile(bin_path, out))

    def sync() -> None:
        fd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    t_sync, _ = timed(sync)
    emit_result({"copyfile_s": t_copy, "fsync_s": t_sync})


def child_compare(a: str, b: str) -> None:
    """Not a benchmark: check that the re-emitted .bin is byte-identical to the source."""
    same = os.path.getsize(a) == os.path.getsize(b)
    if same:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                ca, cb = fa.read(CHUNK), fb.read(CHUNK)
                if ca != cb:
                    same = False
                    break
                if not ca:
                    break
    emit_result({"identical": same})


def child_evict(*paths: str) -> None:
    """Drop the files' clean pages from the page cache."""
    drop_from_page_cache(*paths)
    emit_result({})


def child_synth_rss(param: str, out: str, storage: str) -> None:
    """The whole synth-bin command in this process, so VmHWM is its peak (imports included)."""
    from graphsurgeon.cli import main

    dt, code = timed(lambda: main(["synth-bin", param, "-o", out, "--storage", storage, "-q"]))
    if code:
        raise SystemExit(code)
    emit_result({"synth_s": dt})


CHILDREN: dict[str, Callable[..., None]] = {
    "walk": child_walk,
    "reemit": child_reemit,
    "readinto": child_readinto,
    "copyfile": child_copyfile,
    "compare": child_compare,
    "evict": child_evict,
    "synth_rss": child_synth_rss,
}
