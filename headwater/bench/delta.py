"""Benchmark: the Delta sink's per-batch MERGE, ``deltalake`` (delta-rs) against
Delta's Spark connector, over the same changelog in one run.

    headwater bench delta [--batches B] [--keys K] [--json]

It makes ``--batches`` micro-batches of accumulating and retracting panes of a
windowed sum over ``--keys`` keys (per batch and key: a later pane of the
previous window, the first pane of a new one; every tenth key then retracts the
previous window), stages each once with :meth:`DeltaSink.stage` (the batch reduced in
Arrow to one row per window), then applies the staged batches to two tables:

(a) ``deltalake``: :class:`~headwater.io.sinks.delta.DeltaSink`'s MERGE (the
    sink as shipped), one commit per batch with the batch id as a Delta app
    transaction;
(b) ``spark``: the same MERGE as Spark SQL (``MERGE INTO delta.`path```, the same
    clauses) through Delta's Spark connector (``io.delta:delta-spark_2.13``
    4.4.0, jars from ``scripts/kafka.sh delta-jars``), the staged rows handed to
    Spark as Arrow, idempotent by the session settings
    ``spark.databricks.delta.write.txnAppId``/``txnVersion`` (the same ``txn``
    action).

Each engine first MERGEs one batch into a warm-up table, and after the run
replays the last batch (an idempotent no-op) and the two tables
are compared. It prints rows/s of each (staged rows over the MERGE wall time),
``ratio = spark / deltalake`` and whether the tables agree; ``--json`` prints one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pandas as pd

from headwater.bench import HelpFormatter
from headwater.io.sinks.delta import (
    COUNT,
    DELETE,
    DELTA_SPARK_CONF,
    DeltaSink,
    StagedBatch,
    cached_delta_jars,
    target_bounds,
)

WINDOW_US = 10_000_000  # 10 s windows
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="headwater bench delta", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument("--batches", type=int, default=20, help="micro-batches")
    p.add_argument("--keys", type=int, default=10_000, help="keys (rows per batch: about 2.1x)")
    p.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="first MERGE one batch into a warm-up table per engine",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def pane_batch(b: int, keys: int) -> pd.DataFrame:
    """Micro-batch ``b`` of a windowed sum's panes: per key a later pane of window
    ``b - 1``, the first pane of window ``b``; every tenth key then retracts
    window ``b - 1``."""
    k = np.arange(keys)
    names = np.char.add("k", k.astype(str)).astype(object)

    def panes(window: int, pane_index: int, retraction: bool, rows: np.ndarray) -> pd.DataFrame:
        start = pd.to_datetime(window * WINDOW_US, unit="us", utc=True)
        return pd.DataFrame(
            {
                "key": names[rows],
                "window_start": start,
                "window_end": start + pd.Timedelta(microseconds=WINDOW_US),
                "total": (rows * 31 + b) % 1000,
                "pane_index": np.int64(pane_index),
                "is_retraction": retraction,
            }
        )

    parts = [panes(b, 0, False, k)]
    if b >= 1:
        parts.append(panes(b - 1, 1, False, k))
    if b >= 1:
        parts.append(panes(b - 1, 2, True, k[k % 10 == 0]))
    return pd.concat(parts, ignore_index=True)


def merge_sql(batch: StagedBatch, path: str, source: str) -> str:
    """:class:`DeltaSink`'s MERGE of ``batch`` as Spark SQL, from the view ``source``
    (with the same ranges of the target it can match)."""

    def q(name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    match = [f"t.{q(k)} <=> s.{q(k)}" for k in batch.on]
    on = " AND ".join([*target_bounds(batch.rows, batch.on, quote=q), *match])
    cols = batch.columns
    insert = f"INSERT ({', '.join(map(q, cols))}) VALUES ({', '.join(f's.{q(c)}' for c in cols)})"
    gone = f"s.{q(DELETE)}"
    if batch.guard == COUNT:
        total = f"t.{q(COUNT)} + s.{q(COUNT)}"
        clauses = [
            f"WHEN MATCHED AND {total} <= 0 THEN DELETE",
            f"WHEN MATCHED THEN UPDATE SET {q(COUNT)} = {total}",
            f"WHEN NOT MATCHED THEN {insert}",
        ]
    else:
        later = "" if batch.guard is None else f" AND s.{q(batch.guard)} >= t.{q(batch.guard)}"
        update = ", ".join(f"{q(c)} = s.{q(c)}" for c in cols)
        clauses = [
            f"WHEN MATCHED AND {gone}{later} THEN DELETE",
            f"WHEN MATCHED AND NOT {gone}{later} THEN UPDATE SET {update}",
            f"WHEN NOT MATCHED AND NOT {gone} THEN {insert}",
        ]
    target = "delta." + q(path)
    return f"MERGE INTO {target} t USING {source} s ON {on} " + " ".join(clauses)


def spark_merge(spark, batch: StagedBatch, path: str, app_id: str, batch_id: int) -> None:
    """One MERGE through Delta's Spark connector, recorded as app transaction
    ``(app_id, batch_id)``: Delta skips it if that version is already recorded."""
    spark.createDataFrame(batch.rows).createOrReplaceTempView("headwater_staged")
    spark.conf.set(TXN_APP_ID, app_id)
    spark.conf.set(TXN_VERSION, str(batch_id))
    try:
        spark.sql(merge_sql(batch, path, "headwater_staged"))
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


def session():
    """A local[2] session with Delta's Spark connector (cached jars, offline)."""
    from headwater.bench.streaming import bench_session

    jars = cached_delta_jars()
    if jars is None:
        raise SystemExit("Delta's Spark connector is not cached: run scripts/kafka.sh delta-jars")
    extra = {
        "spark.app.name": "headwater-bench-delta",
        "spark.jars": jars,
        **DELTA_SPARK_CONF,
        # Replay the Delta log in 2 tasks (the cores), not Delta's default 50.
        "spark.databricks.delta.snapshotPartitions": "2",
    }
    return bench_session(2, extra=extra)


def bench(spark, args, work: str) -> dict[str, Any]:
    """Stage the batches once, apply them with each engine; the report."""
    from deltalake import DeltaTable

    ours = DeltaSink(f"{work}/deltalake", key=("key",))
    theirs = DeltaSink(f"{work}/spark", key=("key",))
    staged = [ours.stage(pane_batch(b, args.keys)) for b in range(args.batches)]
    staged = [s for s in staged if s is not None]
    rows = sum(s.rows.num_rows for s in staged)
    schema = staged[0].rows.select(staged[0].columns).schema
    # The tables start empty with the same schema (delta-rs creates them); a warm-up
    # table takes each engine's first MERGE (JVM classes, JIT, Python workers).
    for path in (theirs.path, f"{work}/warm-spark"):
        DeltaTable.create(path, schema=schema)
    engines = {
        "deltalake": (
            lambda s, i: ours.apply(s, i),
            lambda s: DeltaSink(f"{work}/warm-deltalake", key=("key",)).apply(s, 0),
        ),
        "spark": (
            lambda s, i: spark_merge(spark, s, theirs.path, theirs.sink_id, i),
            lambda s: spark_merge(spark, s, f"{work}/warm-spark", "warm", 0),
        ),
    }
    report: dict[str, Any] = {"batches": len(staged), "keys": args.keys, "staged_rows": rows}
    took: dict[str, float] = {}
    for name, (apply, warm) in engines.items():
        if args.warmup:
            warm(staged[0])
        t0 = time.perf_counter()
        for i, s in enumerate(staged):
            apply(s, i)
        seconds = took[name] = time.perf_counter() - t0
        apply(staged[-1], len(staged) - 1)  # a replay: skipped
        report[name] = {
            "seconds": round(seconds, 3),
            "per_batch_s": round(seconds / len(staged), 3),
            "rows_per_s": round(rows / seconds),
        }
    # Same rows: the ratio of the times (unrounded), to three significant digits; a
    # tiny run's ratio can be far below 0.001 but is never 0.
    report["ratio"] = float(f"{took['deltalake'] / took['spark']:.3g}")
    a, b = (DeltaTable(p).to_pandas() for p in (ours.path, theirs.path))
    order = ["key", "window_start"]
    a = a.sort_values(order).reset_index(drop=True)
    b = b[a.columns].sort_values(order).reset_index(drop=True)
    report["rows"] = {"deltalake": len(a), "spark": len(b)}
    report["tables_agree"] = a.equals(b)
    report["versions"] = {"deltalake": ours.version(), "spark": theirs.version()}
    return report


def main(argv: list[str] | None = None, spark=None) -> int:
    """Run the benchmark (``spark``: a session with Delta's connector to use)."""
    args = _args(list(sys.argv[1:] if argv is None else argv))
    work = tempfile.mkdtemp(prefix="headwater-bench-delta-")
    try:
        report = bench(spark or session(), args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(report))
        return 0
    for name in ("deltalake", "spark"):
        r = report[name]
        print(
            f"{name:>9}: {r['rows_per_s']:>10,} staged rows/s ({r['seconds']} s, "
            f"{r['per_batch_s']} s per batch)"
        )
    print(f"    ratio: {report['ratio']} (spark / deltalake), {report['staged_rows']:,} rows")
    print(f"   tables: {report['rows']}, agree: {report['tables_agree']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
