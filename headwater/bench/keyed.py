"""Benchmark: an unwindowed keyed aggregate on the local runner, the aggregate
fast path (an accumulator per aggregate of each key value) against the general
path (each key value's rows, re-evaluated when it fires).

    headwater bench keyed [--rows N] [--keys K] [--steps S] [--json]

The query groups a replayed stream of bids by auction, with no window, so its
state holds every key value seen (what ``explain()`` calls "holding an
accumulator per aggregate for each" on the fast path)::

    SELECT auction, COUNT(*) AS n, SUM(price) AS total, AVG(price) AS mean,
           MAX(price) AS top, COUNT(DISTINCT category) AS categories
    FROM Bid GROUP BY auction

over ``--rows`` bids on ``--keys`` auctions arriving in ``--steps`` steps (the
bids of ``headwater bench stages``). Each path runs once in the same process,
after an untimed warm-up; the two changelogs must be equal (rows, ``undo``,
``ptime``, ``ver``). Printed: each path's CPU seconds of the process (all
threads: on a shared machine the steadier figure) and wall seconds, the
changelog's rows, and ``cpu_ratio = general CPU / fast CPU``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import pandas as pd

from headwater.bench import HelpFormatter
from headwater.bench.stages import bids
from headwater.sql import sql
from headwater.sql.execute.aggregate_local import takes_fast_path
from headwater.sql.execute.local import run_stream
from headwater.sql.plan.catalog import Table

QUERY = """
SELECT auction, COUNT(*) AS n, SUM(price) AS total, AVG(price) AS mean,
       MAX(price) AS top, COUNT(DISTINCT category) AS categories
FROM Bid GROUP BY auction
"""


def measure(table: Table, fast: bool) -> tuple[float, float, pd.DataFrame]:
    """Seconds (CPU of the process, all threads; wall) from the query's start to
    its changelog on one path, and the changelog in a canonical order."""
    cpu, wall = time.process_time(), time.perf_counter()
    plan = sql(QUERY, {"Bid": table}, name="keyed", fast_path=fast).plan
    if takes_fast_path(plan) != fast:
        raise RuntimeError(f"the query did not take the {'fast' if fast else 'general'} path")
    log = run_stream(plan).changelog
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    order = ["ptime", "auction", "undo", "ver"]
    return cpu, wall, log.sort_values(order, kind="stable").reset_index(drop=True)


def compare(table: Table) -> dict:
    """Both paths over ``table``: times, the changelog's size, the ratio."""
    general_cpu, general_wall, general = measure(table, fast=False)
    fast_cpu, fast_wall, fast = measure(table, fast=True)
    pd.testing.assert_frame_equal(fast, general[list(fast.columns)], check_dtype=False)
    return {
        "rows": len(table.frame),
        "keys": int(table.frame["auction"].nunique()),
        "changelog_rows": len(fast),
        "general_cpu_s": round(general_cpu, 3),
        "general_wall_s": round(general_wall, 3),
        "fast_cpu_s": round(fast_cpu, 3),
        "fast_wall_s": round(fast_wall, 3),
        "cpu_ratio": round(general_cpu / max(fast_cpu, 1e-9), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="headwater bench keyed", description=__doc__, formatter_class=HelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000, help="bids")
    parser.add_argument("--keys", type=int, default=20_000, help="auctions (the key)")
    parser.add_argument("--steps", type=int, default=100, help="steps of arrival")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    compare(bids(50, 10, 3, 3))  # untimed: one-time imports and set-up
    result = compare(bids(args.rows, args.keys, 20, args.steps))
    print(json.dumps(result) if args.json else result)
    return 0
