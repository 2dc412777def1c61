"""Benchmark: the SQL general path on the local runner, a step's fired groups
evaluated by one DuckDB query (batched) against one query per group.

    headwater bench general [--rows N] [--windows W] [--steps S] [--small N]
                            [--dedup-rows N] [--dedup-keys K] [--dedup-steps S]
                            [--per-group | --batched] [--json]

The query is a window Top-1, which the windowed-aggregate fast path does not
take (a window function), so it runs on the general path::

    SELECT wstart, wend, item, price
    FROM (SELECT wstart, wend, item, price,
                 ROW_NUMBER() OVER (PARTITION BY wstart, wend ORDER BY price DESC, item) AS rn
          FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime),
                      dur => INTERVAL '1' SECOND)) T
    WHERE rn = 1
    EMIT STREAM AFTER WATERMARK

over a replayed stream of bids (seeded: ``--rows`` rows over ``--windows``
one-second windows, arriving in ``--steps`` steps in event-time order with a
little disorder; the watermark follows each step, so about W/S windows fire
per step). Two cases, each timed from the query's start (``sql(...)``) to its
changelog, after the process has started and imported headwater, in CPU
seconds of the process (all threads: DuckDB's too) and wall seconds (on a
shared machine, the CPU time is the steadier one):

* **small**: ``--small`` rows (default 310) over windows of 10 rows, one step
  per 10 rows;
* **large**: ``--rows`` rows (default 1,000,000);
* **dedup**: an unwindowed keyed deduplication (the first bid of each item,
  :data:`DEDUP`; key ``item``, so a group is an item's rows and fires whenever
  one arrives), ``--dedup-rows`` bids (default 1,000,000) of ``--dedup-keys``
  items (default 100,000) in ``--dedup-steps`` steps (default 10). Per group,
  that is one DuckDB query per item a step touches; ``--dedup-rows 0`` skips it.

After one untimed warm-up run, each case runs per group and batched in the
same process (``--per-group`` or ``--batched``: only that one), checks that
both changelogs are equal, and prints the times and
``cpu_ratio = per-group CPU time / batched CPU time``.
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
from headwater.sql.execute.local import run_stream
from headwater.sql.plan.catalog import PTIME, Table

QUERY = """
SELECT wstart, wend, item, price
FROM (SELECT wstart, wend, item, price,
             ROW_NUMBER() OVER (PARTITION BY wstart, wend ORDER BY price DESC, item) AS rn
      FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime),
                  dur => INTERVAL '1' SECOND)) T
WHERE rn = 1
EMIT STREAM AFTER WATERMARK
"""


#: The dedup case: each item's first bid (ties broken by the bid's id).
DEDUP = """
SELECT item, bidtime, price, id
FROM (SELECT item, bidtime, price, id,
             ROW_NUMBER() OVER (PARTITION BY item ORDER BY bidtime, id) AS rn
      FROM Bid) T
WHERE rn = 1
"""


def keyed_bids(rows: int, keys: int, steps: int, seed: int = 0) -> Table:
    """The dedup case's stream: :func:`bids` over one window a step, with ``keys``
    items (``k0``, ``k1``, ...) and a unique ``id``."""
    table = bids(rows, steps, steps, seed)
    rng = np.random.default_rng(seed + 1)
    items = np.char.add("k", rng.integers(0, keys, rows).astype(str)).astype(object)
    frame = table.frame.assign(item=items, id=np.arange(rows, dtype=np.int64))
    return Table(name="Bid", frame=frame, event_time="bidtime", watermarks=table.watermarks)


def bids(rows: int, windows: int, steps: int, seed: int = 0) -> Table:
    """A replayed stream: ``rows`` bids over ``windows`` seconds, arriving in
    ``steps`` steps (in event-time order, up to 0.5 s out of order); the
    watermark after each step is the step's smallest future event time."""
    rng = np.random.default_rng(seed)
    et = np.sort(rng.integers(0, windows * 1000, rows))
    step = np.minimum(np.arange(rows) * steps // rows, steps - 1)
    jitter = rng.integers(0, 500, rows)
    ptime = step.astype(np.int64) * 1000 + 1
    frame = pd.DataFrame(
        {
            "bidtime": pd.to_datetime(np.maximum(et - jitter, 0), unit="ms"),
            "price": rng.integers(1, 1000, rows).astype(np.float64),
            "item": pd.Series(rng.choice(list("ABCDEFGHIJ"), rows), dtype=object),
            PTIME: ptime,
        }
    )
    first = np.searchsorted(step, np.arange(steps))
    marks = np.r_[et[first[1:]] - 500, windows * 1000 + 1000]
    watermarks = pd.DataFrame({"ptime": np.arange(steps) * 1000 + 1, "watermark": marks})
    return Table(name="Bid", frame=frame, event_time="bidtime", watermarks=watermarks)


def measure(table: Table, batched: bool, text: str = QUERY) -> tuple[float, float, pd.DataFrame]:
    """Seconds (CPU of this process, all threads; wall) from the query's start to
    its changelog, and the changelog."""
    cpu, wall = time.process_time(), time.perf_counter()
    query = sql(text, {"Bid": table}, name="bench")
    changelog = run_stream(query.plan, batched=batched).changelog
    return time.process_time() - cpu, time.perf_counter() - wall, changelog


def run_case(name: str, table: Table, modes: Sequence[bool], text: str = QUERY) -> dict:
    """One case in the modes asked for; the changelogs must agree."""
    out: dict = {"case": name, "rows": len(table.frame)}
    cpu, logs = {}, {}
    for batched in modes:
        label = "batched" if batched else "per_group"
        cpu[label], wall, logs[label] = measure(table, batched, text)
        out[f"{label}_cpu_s"], out[f"{label}_wall_s"] = round(cpu[label], 3), round(wall, 3)
    if len(logs) == 2:
        pd.testing.assert_frame_equal(logs["batched"], logs["per_group"], check_dtype=False)
        out["cpu_ratio"] = round(cpu["per_group"] / cpu["batched"], 2)
    out["changes"] = len(next(iter(logs.values())))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="headwater bench general",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="rows of the large case (many groups a step)"
    )
    parser.add_argument("--windows", type=int, default=1_000, help="windows of the large case")
    parser.add_argument("--steps", type=int, default=50, help="steps of the large case")
    parser.add_argument(
        "--small", type=int, default=310, help="rows of the small case (one group a step)"
    )
    parser.add_argument(
        "--dedup-rows", type=int, default=1_000_000, help="rows of the dedup case (0: skip it)"
    )
    parser.add_argument("--dedup-keys", type=int, default=100_000, help="items of the dedup case")
    parser.add_argument("--dedup-steps", type=int, default=10, help="steps of the dedup case")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--per-group", action="store_true", help="only one query per group")
    only.add_argument("--batched", action="store_true", help="only one query per step")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    modes = [False] if args.per_group else [True] if args.batched else [False, True]
    small = max(args.small // 10, 1)
    for batched in modes:  # untimed: the first query's one-time imports and set-up
        measure(bids(20, 2, 2), batched)
        measure(keyed_bids(20, 5, 2), batched, DEDUP)
    results = [
        run_case("small", bids(args.small, small, small), modes),
        run_case("large", bids(args.rows, args.windows, args.steps), modes),
    ]
    if args.dedup_rows:
        table = keyed_bids(args.dedup_rows, args.dedup_keys, args.dedup_steps)
        results.append({**run_case("dedup", table, modes, DEDUP), "keys": args.dedup_keys})
    for result in results:
        print(json.dumps(result) if args.json else result)
    return 0
