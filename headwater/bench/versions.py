"""Benchmark: a benchmark of this checkout against the same benchmark of an earlier
version, alternated in one run.

    headwater bench versions --baseline REV [--repeat N] [--json] -- NAME [options]

``REV`` (any git revision of this repository) is exported with ``git archive``
into a temporary folder: its ``headwater`` package and the files outside it that
the benchmark reads (``READS``: NEXMark's query texts under tests/, the Kafka
script), so that each version reads its own copy. ``headwater bench NAME
[options] --json`` runs from that tree and from this one, in turn (the baseline
first in odd rounds, this checkout first in even ones), ``--repeat`` times each,
each run a fresh process with ``PYTHONPATH`` naming its tree (the same Python
environment, so only headwater's code differs). Both versions must have the
benchmark and its options.

For each run it records the wall seconds, the CPU seconds of the whole process
tree (the benchmark's Python, Spark's JVM and its Python workers, sampled while it
runs: :mod:`headwater.bench.cputime`) and the benchmark's own ``ratio`` (its
headwater against its reference, when it reports one: ``ratio`` at the top of its
JSON, or of its first result's ``streaming`` / ``bounded`` part). It prints the
median of each per version and ``cpu_ratio`` = the baseline's CPU over this
checkout's (above 1.0: this checkout uses less). On a shared machine, CPU
seconds move much less with the load than wall seconds do; compare those, and
the ratios, which each run measures against its own reference at the same load.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater.bench import HelpFormatter
from headwater.bench.cputime import tree_cpu_seconds

#: How often a run's process tree is sampled for its CPU seconds.
SAMPLE_S = 0.2
#: Where a benchmark's JSON may hold its headwater-to-reference ratio.
RATIO_PLACES = (
    ("ratio",),
    ("results", 0, "streaming", "ratio"),
    ("results", 0, "bounded", "ratio"),
)
#: Runs ``headwater.cli`` with the tree in ``argv[1]`` first on ``sys.path``:
#: ``python -m`` would put the working directory there, so a run started from a
#: checkout's root would import that checkout's package, whatever PYTHONPATH says.
BOOT = (
    "import runpy, sys; sys.path[0] = sys.argv.pop(1); "
    "runpy.run_module('headwater.cli', run_name='__main__', alter_sys=True)"
)
#: Paths outside the package, relative to the checkout's root, that a benchmark
#: reads through its own ``__file__``: the baseline's export holds its revision's
#: copy, or its run would fail (or read this checkout's).
READS: dict[str, tuple[str, ...]] = {
    "nexmark": ("tests/sql/nexmark/queries",),
    "kafka": ("scripts/kafka.sh",),
}


@dataclass(frozen=True)
class Run:
    """One benchmark process: its version, wall and CPU seconds, ratio, JSON (a
    benchmark that prints JSON lines, one per case: ``{"lines": [...]}``, the
    ratio of the first)."""

    version: str
    seconds: float
    cpu_s: float | None
    ratio: float | None
    report: dict[str, Any]


def _args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    cut = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(
        prog="headwater bench versions", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument("--baseline", required=True, help="git revision to compare against")
    p.add_argument("--repeat", type=int, default=3, help="runs of each version")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv[:cut])
    bench = argv[cut + 1 :]
    if not bench:
        p.error("name the benchmark after --, e.g. -- sql --mode streaming")
    return args, bench


def export(revision: str, into: Path, bench: str | None = None) -> Path:
    """The tree of ``revision`` (this repository's) in ``into``: its ``headwater``
    package, which a run of the baseline imports, and the paths ``READS`` names for
    the benchmark ``bench``, which that package finds beside itself."""
    root = Path(__file__).resolve().parents[2]
    paths = ["headwater", *READS.get(bench or "", ())]
    done = subprocess.run(
        ["git", "-C", str(root), "archive", "--format=tar", revision, *paths],
        capture_output=True,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"git archive {revision} {' '.join(paths)} failed (bench {bench} reads "
            f"these paths; does {revision} have them?): {done.stderr.decode().strip()}"
        )
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def ratio_of(report: dict[str, Any]) -> float | None:
    """The benchmark's headwater-to-reference ratio, where its JSON has one."""
    for place in RATIO_PLACES:
        node: Any = report
        for step in place:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        if isinstance(node, int | float):
            return float(node)
    return None


def documents(text: str) -> list[Any]:
    """The JSON values a benchmark printed, in order: one a line, or one indented
    over many lines (``bench nexmark --json``)."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    at = 0
    while rest := text[at:].lstrip():
        value, at = decoder.raw_decode(text, len(text) - len(rest))
        values.append(value)
    return values


def run_once(version: str, tree: Path, bench: list[str]) -> Run:
    """``headwater bench`` from ``tree``, timed, its process tree sampled for CPU."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", BOOT, str(tree), "bench", *bench, "--json"]
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.DEVNULL)
        cpu = None
        while child.poll() is None:
            cpu = tree_cpu_seconds(child.pid) or cpu  # the last sample before it ends
            time.sleep(SAMPLE_S)
        seconds = time.perf_counter() - start
        out.seek(0)
        text = out.read()
    if child.returncode != 0:
        raise RuntimeError(
            f"{version}: headwater bench {' '.join(bench)} exited {child.returncode}"
        )
    lines = documents(text)
    report = lines[0] if len(lines) == 1 else {"lines": lines}
    return Run(version, seconds, cpu, ratio_of(lines[0]), report)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def _entry(run: Run) -> dict[str, Any]:
    cpu = None if run.cpu_s is None else round(run.cpu_s, 1)
    return {
        "version": run.version,
        "seconds": round(run.seconds, 2),
        "cpu_s": cpu,
        "ratio": run.ratio,
    }


def compare(baseline: str, bench: list[str], repeat: int, work: Path) -> dict[str, Any]:
    """Alternated runs of both versions and their medians."""
    here = Path(__file__).resolve().parents[2]
    trees = {baseline: export(baseline, work / "baseline", bench[0]), "current": here}
    runs: list[Run] = []
    for i in range(max(1, repeat)):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        runs += [run_once(v, trees[v], bench) for v in order]
    medians = {}
    for version in trees:
        mine = [r for r in runs if r.version == version]
        medians[version] = {
            "seconds": _median([r.seconds for r in mine]),
            "cpu_s": _median([r.cpu_s for r in mine]),
            "ratio": _median([r.ratio for r in mine]),
        }
    base, current = medians[baseline]["cpu_s"], medians["current"]["cpu_s"]
    return {
        "baseline": baseline,
        "bench": bench,
        "repeat": repeat,
        "runs": [
            {
                "version": r.version,
                "seconds": round(r.seconds, 2),
                "cpu_s": r.cpu_s,
                "ratio": r.ratio,
            }
            for r in runs
        ],
        "median": medians,
        "cpu_ratio": round(base / current, 3) if base and current else None,
    }


def main(argv: list[str] | None = None) -> int:
    args, bench = _args(list(sys.argv[1:] if argv is None else argv))
    with tempfile.TemporaryDirectory(prefix="headwater-bench-versions-") as work:
        out = compare(args.baseline, bench, args.repeat, Path(work))
    if args.json:
        print(json.dumps(out))
        return 0
    for version, m in out["median"].items():
        print(f"{version}: {m['seconds']} s, {m['cpu_s']} CPU s, ratio {m['ratio']}")
    print(f"cpu_ratio (baseline CPU / this checkout's): {out['cpu_ratio']}")
    return 0
