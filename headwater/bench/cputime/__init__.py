"""CPU seconds of this process and every process it started: Spark's JVM and its
Python workers included.

A benchmark's engines run one after the other, so on a shared machine their wall
times meet different loads; the CPU they use moves much less with the load. The
benchmarks report both, and a comparison of two versions or two engines can be
read in CPU seconds too. Linux only (``/proc``); elsewhere :func:`tree_cpu_seconds`
is None.
"""

from __future__ import annotations

import os
from collections import defaultdict

#: Fields of ``/proc/<pid>/stat`` after the command: state is 0; ppid 1; utime,
#: stime, cutime, cstime 11-14 (clock ticks).
_PPID, _TIMES = 1, slice(11, 15)


def _stats() -> dict[int, tuple[int, int]]:
    """Every live process: pid -> (parent pid, its CPU ticks and its reaped children's)."""
    out: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:  # the process ended while we read
            continue
        out[int(name)] = (int(fields[_PPID]), sum(int(t) for t in fields[_TIMES]))
    return out


def tree_cpu_seconds(root: int | None = None) -> float | None:
    """User and system CPU seconds of ``root`` (default: this process) and its live
    descendants, with what their ended and reaped children used. The difference of
    two calls is the CPU the tree used between them (a child that ends in between
    moves its time into its parent's reaped total, counted once)."""
    if not os.path.isdir("/proc/self"):
        return None
    root = os.getpid() if root is None else root
    stats = _stats()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    ticks, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            ticks += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return ticks / os.sysconf("SC_CLK_TCK")
