"""Bounded-path benchmark: headwater's batch plan against hand-written Spark SQL.

    headwater bench batch [--rows N] [--keys K] [--reps R] [--json]

Generates N rows (K keys, event times spread over one hour) to Parquet once,
then times, in one Spark session, each pair of queries over that Parquet input:

* fixed windows: headwater ``FixedWindows(2 minutes)`` sum per key, against
  ``GROUP BY key, window(ts, '2 minutes')``;
* sessions: headwater ``Sessions(30 seconds)`` sum per key, against Spark's
  native ``GROUP BY key, session_window(ts, '30 seconds')`` and against the
  hand-written gaps-and-islands query (``LAG`` + running ``SUM``).

Each query is executed completely by writing it to the ``noop`` sink. After
one warm-up run of each, runs alternate between the contenders (to share any
drift) and the median of ``--reps`` runs is reported. ``ratio`` is the Spark
time divided by the headwater time: 1.0 is parity, above 1 headwater is faster,
the target is ratio >= 0.9.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from headwater.bench import HelpFormatter

SPAN_MS = 3_600_000
FIXED = "2 minutes"
GAP = "30 seconds"


def _session(args):
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(args.master)
        .appName("headwater-bench-batch")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", args.driver_memory)
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _generate(spark, path: str, rows: int, keys: int) -> None:
    from pyspark.sql import functions as F

    marker = os.path.join(path, f"_headwater_{rows}_{keys}")
    if os.path.exists(marker):
        return
    (
        spark.range(rows, numPartitions=4)
        .select(
            (F.col("id") % keys).alias("key"),
            F.timestamp_millis(
                (F.lit(1_700_000_000_000) + F.floor(F.rand(7) * SPAN_MS)).cast("long")
            ).alias("ts"),
            (F.col("id") % 100).alias("score"),
        )
        .write.mode("overwrite")
        .parquet(path)
    )
    open(marker, "w").close()


def _queries(spark, path: str) -> dict[str, dict[str, Callable]]:
    import headwater.api as hw

    def events():
        return spark.read.parquet(path)

    def headwater_fixed():
        return (
            hw.from_spark(events(), "ts")
            .window(hw.FixedWindows(FIXED))
            .group_by("key")
            .agg(total=hw.sum("score"))
            .to_spark()
        )

    def headwater_sessions():
        return (
            hw.from_spark(events(), "ts")
            .window(hw.Sessions(GAP))
            .group_by("key")
            .agg(total=hw.sum("score"))
            .to_spark()
        )

    def sql(text: str):
        def run():
            events().createOrReplaceTempView("hw_bench_events")
            return spark.sql(text)

        return run

    gap_ms = 30_000
    return {
        "fixed": {
            "headwater": headwater_fixed,
            "spark_sql": sql(
                f"""SELECT key, window.start AS window_start, window.end AS window_end,
                           sum(score) AS total
                    FROM hw_bench_events GROUP BY key, window(ts, '{FIXED}')"""
            ),
        },
        "sessions": {
            "headwater": headwater_sessions,
            "spark_sql": sql(
                f"""SELECT key, session_window.start AS window_start,
                           session_window.end AS window_end, sum(score) AS total
                    FROM hw_bench_events GROUP BY key, session_window(ts, '{GAP}')"""
            ),
            "spark_sql_lag": sql(
                f"""WITH flagged AS (
                      SELECT key, ts, score,
                        CASE WHEN unix_millis(ts) - unix_millis(lag(ts) OVER w) < {gap_ms}
                             THEN 0 ELSE 1 END AS starts
                      FROM hw_bench_events WINDOW w AS (PARTITION BY key ORDER BY ts)),
                    numbered AS (
                      SELECT key, ts, score,
                        sum(starts) OVER (PARTITION BY key ORDER BY ts
                          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session
                      FROM flagged)
                    SELECT key, min(ts) AS window_start,
                           max(ts) + INTERVAL {gap_ms // 1000} SECONDS AS window_end,
                           sum(score) AS total
                    FROM numbered GROUP BY key, session"""
            ),
        },
    }


def _time(make) -> float:
    start = time.perf_counter()
    make().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def run(args) -> dict:
    spark = _session(args)
    data_dir = args.data_dir or os.path.join(tempfile.gettempdir(), "headwater-bench-batch")
    path = os.path.join(data_dir, f"events_{args.rows}_{args.keys}")
    _generate(spark, path, args.rows, args.keys)
    report: dict = {
        "rows": args.rows,
        "keys": args.keys,
        "reps": args.reps,
        "master": spark.sparkContext.master,
        "shuffle_partitions": int(spark.conf.get("spark.sql.shuffle.partitions")),
        "spark": spark.version,
        "data": path,
    }
    for case, contenders in _queries(spark, path).items():
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for make in contenders.values():  # warm-up (JIT, file listing, caches)
            _time(make)
        for _ in range(args.reps):
            for name, make in contenders.items():
                times[name].append(_time(make))
        medians = {name: statistics.median(ts) for name, ts in times.items()}
        entry = {f"{name}_s": round(m, 3) for name, m in medians.items()}
        entry["best_s"] = {name: round(min(ts), 3) for name, ts in times.items()}
        entry["runs_s"] = {name: [round(t, 3) for t in ts] for name, ts in times.items()}
        for name in contenders:
            if name != "headwater":
                suffix = name.removeprefix("spark_sql")
                entry[f"ratio{suffix}"] = round(medians[name] / medians["headwater"], 3)
                entry[f"ratio{suffix}_best"] = round(min(times[name]) / min(times["headwater"]), 3)
        report[case] = entry
    return report


def _print(report: dict) -> None:
    print(
        f"headwater bench batch: {report['rows']:,} rows, {report['keys']:,} keys, "
        f"{report['master']}, {report['shuffle_partitions']} shuffle partitions, "
        f"median of {report['reps']} runs (noop sink)"
    )
    labels = {
        "headwater": "headwater",
        "spark_sql": "spark sql (native window fn)",
        "spark_sql_lag": "spark sql (lag + running sum)",
    }
    for case in ("fixed", "sessions"):
        e = report[case]
        print(f"  {case + ':':<32}{'median':>9}{'best':>9}")
        for name, label in labels.items():
            if f"{name}_s" not in e:
                continue
            line = f"    {label:<30}{e[name + '_s']:8.3f}s{e['best_s'][name]:8.3f}s"
            if name != "headwater":
                suffix = name.removeprefix("spark_sql")
                line += (
                    f"   ratio {e['ratio' + suffix]:.3f} (best {e['ratio' + suffix + '_best']:.3f})"
                )
            print(line)
    print("  ratio = spark time / headwater time, of the medians (target >= 0.9)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="headwater bench batch",
        description="headwater's bounded (batch) plan vs hand-written Spark SQL: fixed-window "
        "and session sums per key.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the input")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    parser.add_argument("--reps", type=int, default=5, help="timed runs per query (median)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--data-dir",
        help="where the generated Parquet is kept, reused "
        "(None: headwater-bench-batch in the temporary directory)",
    )
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument(
        "--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions"
    )
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.rows < 1 or args.keys < 1 or args.reps < 1:
        parser.error("--rows, --keys and --reps must be positive")
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
