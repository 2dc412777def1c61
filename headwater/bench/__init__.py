"""Benchmarks: `headwater bench NAME [options]`.

Each benchmark is a module ``headwater.bench.NAME`` with a ``main(argv)``
function; every one measures headwater against a reference in the same run and
prints the ratio (DESIGN.md: performance claims are ratios): ``batch`` and
``streaming`` against the Spark-native equivalent, ``sql`` (a windowed-aggregate
SQL query, bounded and streaming) against the hand-written native Spark query,
``core`` (the local runner's column-wise reducer) against Beam's Python direct
runner on the same timeline, ``general`` (the SQL general path, a step's groups
by one DuckDB query) against one query per group, ``keyed`` (an unwindowed
keyed aggregate on the fast path) against the general path, ``demo`` (the demo's small
micro-batches) against Spark's own windowed aggregate, phase by phase;
``versions`` runs any of them from this checkout and from an earlier git
revision, alternated, with each run's CPU seconds (the previous version as the
reference).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """A benchmark's ``--help``: its module docstring as written, and every option's
    default (what a run measures depends on them)."""


def fresh(path: Path) -> Path:
    """``path``, with what an earlier run with the same ``--workdir`` left there removed
    (the bench's own checkpoints, sinks and fed folders). Left there, a checkpoint
    resumes (Spark's own query then reads nothing new and reports 0 rows, headwater's
    refuses an input that has ended) and a sink skips the batch ids it holds."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    return path


def available() -> list[str]:
    """Names of the benchmark modules in this package (a subpackage holds helpers)."""
    modules = pkgutil.iter_modules(__path__)
    return sorted(m.name for m in modules if not m.ispkg and not m.name.startswith("_"))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names = available()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: headwater bench NAME [options]   (NAME --help for its options)")
        print("benchmarks: " + ", ".join(names))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in names:
        print(
            f"headwater bench: unknown benchmark {name!r} (have: {', '.join(names)})",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(f"{__name__}.{name}")
    return int(module.main(rest) or 0)
