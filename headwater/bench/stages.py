"""Benchmark: a query in stages (:mod:`headwater.sql.plan.stages`) on the local
runner, stage 1 and stage 2 timed apart.

    headwater bench stages [--rows N] [--auctions A] [--categories C] [--steps S]
                           [--repeat R] [--json]

The query has NEXMark q4's shape (the average per category of each auction's
highest bid), which runs in two stages: stage 1 keyed by the auction, stage 2
by the category over stage 1's table view::

    SELECT category, AVG(final) AS a, COUNT(*) AS n
    FROM (SELECT auction, MAX(category) AS category, MAX(price) AS final
          FROM Bid GROUP BY auction) Q
    GROUP BY category

over a replayed stream of bids (seeded: ``--rows`` bids on ``--auctions``
auctions in ``--categories`` categories, arriving in ``--steps`` steps). Stage
1 runs once; stage 2 runs ``--repeat`` times over its changelog (the fastest
counts). Printed: each stage's CPU seconds of the process (all threads: on a
shared machine the steadier figure), stage 2's per step, the changelog's rows
and a checksum of it, so that two versions of headwater run by the same command
(``cd`` to each checkout) show both their times and whether their changelogs
are the same.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

from headwater.bench import HelpFormatter
from headwater.sql import sql
from headwater.sql.execute.local import run_stages, run_stream
from headwater.sql.plan.catalog import PTIME, Table

QUERY = """
SELECT category, AVG(final) AS a, COUNT(*) AS n
FROM (SELECT auction, MAX(category) AS category, MAX(price) AS final
      FROM Bid GROUP BY auction) Q
GROUP BY category
"""


def bids(rows: int, auctions: int, categories: int, steps: int, seed: int = 0) -> Table:
    """A replayed stream of ``rows`` bids arriving in ``steps`` steps one second
    apart; an auction's category is fixed (its number modulo ``categories``)."""
    rng = np.random.default_rng(seed)
    auction = rng.integers(0, auctions, rows)
    step = np.minimum(np.arange(rows) * steps // rows, steps - 1)
    frame = pd.DataFrame(
        {
            "bidtime": pd.to_datetime(step * 1000 + rng.integers(0, 1000, rows), unit="ms"),
            "auction": auction,
            "category": auction % categories,
            "price": rng.integers(1, 10_000, rows),
            PTIME: step.astype(np.int64) * 1000 + 1,
        }
    )
    return Table(name="Bid", frame=frame, event_time="bidtime")


def measure(table: Table, repeat: int) -> dict:
    """Stage 1 once, stage 2 ``repeat`` times: CPU seconds, and the changelog's size
    and checksum."""
    plan = sql(QUERY, {"Bid": table}, name="stages").plan
    cpu = time.process_time()
    first = run_stream(plan.first_stage)
    stage1 = time.process_time() - cpu
    times = []
    for _ in range(repeat):
        cpu = time.process_time()
        log = run_stages(plan, first).changelog
        times.append(time.process_time() - cpu)
    steps = first.changelog["ptime"].nunique()
    checksum = int(pd.util.hash_pandas_object(log.astype(str), index=False).sum() % 2**61)
    return {
        "rows": len(table.frame),
        "stage1_changes": len(first.changelog),
        "steps": int(steps),
        "stage1_cpu_s": round(stage1, 3),
        "stage2_cpu_s": round(min(times), 3),
        "stage2_ms_per_step": round(1000 * min(times) / max(steps, 1), 2),
        "changelog_rows": len(log),
        "checksum": checksum,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="headwater bench stages", description=__doc__, formatter_class=HelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000, help="bids")
    parser.add_argument("--auctions", type=int, default=20_000, help="auctions (stage 1's key)")
    parser.add_argument("--categories", type=int, default=20, help="categories (stage 2's key)")
    parser.add_argument("--steps", type=int, default=100, help="steps of arrival")
    parser.add_argument("--repeat", type=int, default=2, help="runs of stage 2 (fastest counts)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    measure(bids(50, 10, 3, 3), 1)  # untimed: one-time imports and set-up
    table = bids(args.rows, args.auctions, args.categories, args.steps)
    result = measure(table, args.repeat)
    print(json.dumps(result) if args.json else result)
    return 0
