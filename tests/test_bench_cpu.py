"""The CPU seconds the benchmarks report: this process's and its children's."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from headwater.bench.cputime import tree_cpu_seconds

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_a_child_process_counts_while_it_runs_and_after_it_ends() -> None:
    """A child's CPU counts while it runs (its own ticks) and once it has ended
    (reaped: its parent's children's ticks), and only once."""
    before = tree_cpu_seconds()
    if before is None:
        pytest.skip("no /proc on this system")
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.6) + "time.sleep(5)"])
    try:
        deadline = time.monotonic() + 30
        while tree_cpu_seconds() - before < 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        running = tree_cpu_seconds() - before
        assert running >= 0.5  # counted while it sleeps, alive
    finally:
        child.kill()
        child.wait()
    ended = tree_cpu_seconds() - before
    assert 0.5 <= ended < running + 0.3  # moved into the reaped total, not counted twice


def test_a_tree_holds_its_root_and_no_process_holds_nothing() -> None:
    """Asked from a child for its parent's tree: at least the parent's own CPU; a
    pid of no process: zero."""
    before = tree_cpu_seconds()
    if before is None:
        pytest.skip("no /proc on this system")
    mine = time.process_time()
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "from headwater.bench.cputime import tree_cpu_seconds; import os;"
            "print(tree_cpu_seconds(os.getppid()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    seen_from_child = float(other.stdout)
    assert seen_from_child >= mine - 0.05  # the parent's tree holds the parent itself
    alone = tree_cpu_seconds(1 << 30)  # no such process: nothing
    assert alone == 0.0
