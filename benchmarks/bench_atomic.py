"""What the journaled group commit costs: gsurg's AtomicGroup against the plain per-file atomic write
(temporary file, fsync, rename, fsync of the folder — the protocol before the journal) of the same bytes
into the same folder, in one run; and the scan every writing command makes of its output folder.

    python benchmarks/bench_atomic.py [--repeat 15] [--big-mb 256] [--files 10000] [--dir /tmp]

The journal adds, per group, one lock file (written, fsynced) per folder, a journal (written, fsynced,
renamed), and one more folder fsync; a single file adds the lock only. Both sides write the same bytes
with the same file fsyncs, so the difference is the protocol's own cost. The two sides alternate within
each repetition; figures are medians.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graphsurgeon.formats.atomic import AtomicGroup, atomic_write_bytes  # noqa: E402
from graphsurgeon.formats.recovery import recover_folder  # noqa: E402


def plain_write(folder: Path, files: dict[str, bytes]) -> None:
    """The baseline: each file through its own temp file, fsync, rename; then one fsync of the folder."""
    for name, data in files.items():
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, folder / name)
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def gsurg_write(folder: Path, files: dict[str, bytes]) -> None:
    if len(files) == 1:
        ((name, data),) = files.items()
        atomic_write_bytes(folder / name, data)
        return
    with AtomicGroup() as group:
        for name, data in files.items():
            atomic_write_bytes(folder / name, data, group)


def median_times(fns: list[Callable[[], None]], repeat: int) -> list[float]:
    """The median time of each function, run in turn within every repetition, so that load from other
    jobs on the machine falls on both sides alike."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, out in zip(fns, times, strict=True):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--big-mb", type=int, default=256)
    ap.add_argument("--files", type=int, default=10000, help="user files in the scanned folder")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gsurg-bench-atomic-", dir=args.dir))
    try:
        param, sidecar = os.urandom(6 << 10), os.urandom(2 << 10)
        cases = [
            ("one 6 KiB file (synth-bin's shape)", {"m.param": param}, args.repeat),
            (
                "6 KiB .param + 2.5 MiB .bin (fmt)",
                {"m.param": param, "m.bin": os.urandom(2_500_000)},
                args.repeat,
            ),
            (
                ".param + 2.5 MiB .bin + sidecar (apply)",
                {"m.param": param, "m.bin": os.urandom(2_500_000), "m.gsurg.json": sidecar},
                args.repeat,
            ),
            (
                f"6 KiB .param + {args.big_mb} MiB .bin",
                {"m.param": param, "m.bin": os.urandom(args.big_mb << 20)},
                max(5, args.repeat // 2),
            ),
        ]
        print(f"folder: {work} ({args.repeat} repeats; medians)")
        print(f"{'case':<44} {'plain atomic':>13} {'gsurg group':>12} {'ratio':>7}")
        for label, files, repeat in cases:
            plain_dir, group_dir = work / "plain", work / "group"
            plain_dir.mkdir(exist_ok=True)
            group_dir.mkdir(exist_ok=True)
            plain_write(plain_dir, files)  # warm both folders and the page cache once
            gsurg_write(group_dir, files)
            t_plain, t_group = median_times(
                [
                    functools.partial(plain_write, plain_dir, files),
                    functools.partial(gsurg_write, group_dir, files),
                ],
                repeat,
            )
            print(
                f"{label:<44} {t_plain * 1e3:>10.2f} ms {t_group * 1e3:>9.2f} ms {t_group / t_plain:>6.2f}x"
            )
            shutil.rmtree(plain_dir)
            shutil.rmtree(group_dir)

        crowded = work / "crowded"
        crowded.mkdir()
        for i in range(args.files):
            (crowded / f"user-{i:06d}.txt").write_bytes(b"x")

        def list_folder() -> None:
            os.listdir(crowded)

        t_list, t_scan = median_times([list_folder, lambda: recover_folder(str(crowded))], args.repeat)
        label = f"scan of a folder of {args.files} user files"
        print(f"{label:<44} {t_list * 1e3:>7.2f} ms ls {t_scan * 1e3:>9.2f} ms {t_scan / t_list:>6.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
