"""Files in arrival order, as Spark's file stream source reads them.

Spark's file source takes new files in modification-time order, and
``maxFilesPerTrigger`` cuts that order into micro-batches. Files written within
one tick of the file system's clock share a modification time and are then read
in directory order: a later file may arrive first, and with a watermark the
rows of the earlier one become late. Every writer of files meant to arrive in
order (the benchmarks, the NEXMark generator, the hybrid runner, the tests)
stamps them with :func:`in_arrival_order`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path


def in_arrival_order(paths: Iterable[str | os.PathLike]) -> None:
    """Stamp ``paths`` with modification times one millisecond apart, the first now,
    so that Spark's file source reads them in the order given. A directory stands
    for every file under it, in sorted order (a Spark write's part files).

    Stamp files written together in one call: a later call starts from its own now.
    """
    files = [f for p in paths for f in _files(Path(p))]
    start = time.time_ns() // 1_000_000
    for i, path in enumerate(files):
        stamp = (start + i) * 1_000_000
        os.utime(path, ns=(stamp, stamp))


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(f for f in path.rglob("*") if f.is_file())
    return [path]
