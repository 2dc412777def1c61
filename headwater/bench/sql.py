"""Benchmark: a windowed-aggregate SQL query through headwater against the
hand-written native Spark query, bounded and streaming, on the same files.

    headwater bench sql [--rows N] [--keys K[,K...]] [--mode both|bounded|streaming] [--json]

The query (``--window`` seconds, default 2)::

    SELECT wstart, wend, key, COUNT(*) AS n, SUM(value) AS total, MAX(value) AS top
    FROM Tumble(data => TABLE(Events), timecol => DESCRIPTOR(et), dur => INTERVAL '2' SECOND)
    GROUP BY wstart, wend, key

over the events of ``headwater bench streaming`` (``--rows`` rows, ``--keys``
keys, out of order by up to ``--disorder`` s, ``--late-fraction`` 60 s late),
written once as ``--files`` Parquet files. In ONE process and SparkSession:

* **bounded**: headwater's ``SparkSqlQuery(...).bounded()`` (the query as one
  native Spark SQL plan) against ``groupBy(window(et, '2 seconds'), key)
  .agg(count, sum, max)`` on ``spark.read.parquet``; both executed into the
  ``noop`` sink; ``ratio = native time / headwater time`` (>= 0.9 is the target).
* **streaming**: both read the directory with ``readStream`` and
  ``maxFilesPerTrigger``, run with ``trigger(availableNow=True)`` into the
  ``noop`` sink. Native: ``withWatermark(et, delay)`` and the same
  ``groupBy(...).agg(...)`` in Append mode (a window's row once the watermark
  passes its end). headwater: the query with ``EMIT AFTER WATERMARK`` (the same
  rows: each window once, when complete; ``--emit`` picks another EMIT) over
  the stream as a SQL source with ``WATERMARK FOR et AS et - INTERVAL 'delay'``
  (``Table(spark=<stream>, event_time='et', watermark=BoundedOutOfOrderness)``),
  started with ``SparkSqlQuery.start``: the fast path of windowed aggregates
  (headwater/sql/execute/aggregate_local.py), with ``end_of_input="never"``: like
  Spark's own query it leaves its last windows open and reads no end-of-input
  control stream. ``ratio = headwater rows/s / native rows/s``
  (>= 1.0 is the target).

Both produce the same windows from on-time data. Late events differ slightly:
Spark's native query filters late rows against the *previous* batch's
watermark (so it still adds some rows to windows the current watermark has
passed), headwater judges a row against the watermark at its arrival and
routes it to the dead letters; with the default ``--late-fraction`` a few
hundred of ~1.2 million window rows differ, not the amount of work.

Each engine first runs once untimed (JVM JIT, Python workers; streaming: on
one file), then ``--repeat`` times alternating; times are medians.

Where the time goes, per engine: planning (building the query's DataFrame:
parsing, analysis, compiling the fast path), and for streams the first batch
(the query's one-time start: state store, Python workers, for headwater the
driver-side set-up of ``transformWithStateInPandas``) against the steady state
(the batches after the first, ``steady_ratio``), and Spark's per-phase
``durationMs``. ``--profile DIR`` cProfiles the Python workers of the headwater
stream (packing, the shard steps with the SQL pane transform) and reports each
role's seconds and its top functions (set before the SparkSession starts: run
it as its own process).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from headwater.bench import HelpFormatter
from headwater.bench.streaming import (
    bench_session,
    file_stream,
    generate,
    measure,
    run_query,
    summary,
    with_ratios,
)

QUERY = (
    "SELECT wstart, wend, key, COUNT(*) AS n, SUM(value) AS total, MAX(value) AS top "
    "FROM Tumble(data => TABLE(Events), timecol => DESCRIPTOR(et), dur => INTERVAL '{ms}' "
    "MILLISECOND) GROUP BY wstart, wend, key"
)


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="headwater bench sql",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--rows", type=int, default=2_000_000, help="events")
    p.add_argument(
        "--keys",
        default="10000",
        help="distinct keys; a comma list runs one benchmark per value",
    )
    p.add_argument(
        "--mode", choices=["both", "bounded", "streaming"], default="both", help="which queries"
    )
    p.add_argument("--span", type=float, default=400.0, help="seconds of event time")
    p.add_argument("--window", type=float, default=2.0, help="window size, s")
    p.add_argument("--disorder", type=float, default=5.0, help="max lateness, s")
    p.add_argument("--late-fraction", type=float, default=0.001, help="fraction 60 s late")
    p.add_argument("--delay", type=float, default=10.0, help="watermark delay, s")
    p.add_argument("--emit", default="AFTER WATERMARK", help="headwater's EMIT (streaming)")
    p.add_argument("--files", type=int, default=20, help="Parquet files")
    p.add_argument("--files-per-trigger", type=int, default=5, help="maxFilesPerTrigger")
    p.add_argument("--partitions", type=int, default=2, help="shuffle partitions")
    p.add_argument(
        "--shards",
        type=int,
        default=None,
        help="headwater shards (None: --partitions, at most the cores)",
    )
    p.add_argument("--repeat", type=int, default=3, help="timed runs per engine (median)")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed first runs")
    p.add_argument("--no-lift", action="store_true", help="headwater without combiner lifting")
    p.add_argument("--arrow-batch", type=int, default=10_000, help="arrow.maxRecordsPerBatch")
    p.add_argument(
        "--only", choices=["native", "headwater"], default=None, help="run one engine (None: both)"
    )
    p.add_argument(
        "--profile", default=None, help="cProfile headwater's workers into DIR (None: not)"
    )
    p.add_argument(
        "--workdir",
        default=None,
        help="data and checkpoints (None: a temporary directory)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def query_text(args) -> str:
    return QUERY.format(ms=int(round(args.window * 1000)))


# ------------------------------------------------------------------ bounded


def _native_frame(spark, df, args):
    from pyspark.sql import functions as F

    window = F.window("et", f"{int(round(args.window * 1000))} milliseconds")
    return (
        df.groupBy(window.alias("w"), "key")
        .agg(F.count("*").alias("n"), F.sum("value").alias("total"), F.max("value").alias("top"))
        .select(
            F.col("w.start").alias("wstart"),
            F.col("w.end").alias("wend"),
            "key",
            "n",
            "total",
            "top",
        )
    )


def _headwater_bounded(spark, src: str, args):
    from headwater.sql.execute.spark import SparkSqlQuery

    start = time.perf_counter()
    query = SparkSqlQuery(query_text(args), {"Events": spark.read.parquet(src)}, spark=spark)
    df = query.bounded()
    return df, time.perf_counter() - start


def _native_bounded(spark, src: str, args):
    start = time.perf_counter()
    df = _native_frame(spark, spark.read.parquet(src), args)
    return df, time.perf_counter() - start


def _noop(df) -> float:
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def bench_bounded(spark, src: str, args) -> dict[str, Any]:
    engines = {"native": _native_bounded, "headwater": _headwater_bounded}
    if args.only:
        engines = {args.only: engines[args.only]}
    if not args.no_warmup:
        for make in engines.values():
            _noop(make(spark, src, args)[0])
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in engines}
    for _ in range(max(1, args.repeat)):
        for name, make in engines.items():
            df, planning = make(spark, src, args)
            runs[name].append((planning, _noop(df)))
    out: dict[str, Any] = {}
    for name, rs in runs.items():
        total = [p + e for p, e in rs]
        out[name] = {
            "median_s": round(statistics.median(total), 3),
            "seconds": [round(t, 3) for t in total],
            "planning_s": round(statistics.median(p for p, _ in rs), 3),
            "execution_s": round(statistics.median(e for _, e in rs), 3),
            "rows_per_s": round(args.rows / statistics.median(total)),
        }
    if len(out) == 2:
        out["ratio"] = round(out["native"]["median_s"] / out["headwater"]["median_s"], 3)
        plan = _headwater_bounded(spark, src, args)[0]
        executed = plan._jdf.queryExecution().executedPlan().toString()
        out["python_in_plan"] = any(
            op in executed for op in ("BatchEvalPython", "ArrowEvalPython", "FlatMapGroupsInPandas")
        )
    return out


# ------------------------------------------------------------------ streaming


def run_native(spark, src: str, ckpt: str, args) -> dict[str, Any]:
    start = time.perf_counter()
    df = file_stream(spark, src, args.files_per_trigger)
    agg = _native_frame(
        spark, df.withWatermark("et", f"{int(round(args.delay * 1000))} milliseconds"), args
    )
    planning = time.perf_counter() - start
    query = (
        agg.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    return {**run_query(query), "planning_s": planning}


def run_headwater(spark, src: str, ckpt: str, args) -> dict[str, Any]:
    from headwater.model.watermarks import BoundedOutOfOrderness
    from headwater.sql.execute import aggregate_spark
    from headwater.sql.execute.local import compile_sql
    from headwater.sql.execute.spark import SparkSqlQuery
    from headwater.sql.plan.catalog import Table

    start = time.perf_counter()
    table = Table(
        "Events",
        spark=file_stream(spark, src, args.files_per_trigger),
        event_time="et",
        watermark=BoundedOutOfOrderness(int(round(args.delay * 1000))),
    )
    text = f"{query_text(args)} EMIT {args.emit}" if args.emit else query_text(args)
    query = SparkSqlQuery(text, {"Events": table}, spark=spark)
    sql = compile_sql(query.plan)
    planning = time.perf_counter() - start
    if args.no_lift or args.shards:
        # the same path as query.start(), with the runner's options
        stream = aggregate_spark.start(
            sql,
            checkpoint_location=ckpt,
            trigger={"availableNow": True},
            lift=not args.no_lift,
            num_shards=args.shards,
            end_of_input="never",
        )
    else:
        # Spark's own query never closes the last windows of a bounded stream; so
        # that both emit the same rows, headwater's run does not end its input, and
        # as no later run of its checkpoint will, it reads no end-of-input control
        # stream ("never", as bench kafka's open topic).
        stream = query.start(
            checkpoint_location=ckpt, trigger={"availableNow": True}, end_of_input="never"
        )
    out = run_query(stream)
    out["planning_s"] = planning
    out["fast_path"] = type(sql).__name__ == "AggregatePlan"
    return out


def bench_streaming(spark, work: str, src: str, keys: int, args) -> dict[str, Any]:
    engines = {"native": run_native, "headwater": run_headwater}
    result: dict[str, Any] = {}
    for name, rs in measure(spark, work, src, keys, engines, args).items():
        result[name] = {
            **summary(rs, args.rows),
            "planning_s": round(statistics.median(r["planning_s"] for r in rs), 3),
        }
        if "fast_path" in rs[-1]:
            result[name]["fast_path"] = rs[-1]["fast_path"]
    return with_ratios(result)


# ------------------------------------------------------------------ profile


def profile_summary(directory: str, top: int = 8) -> dict[str, Any]:
    """Seconds per worker role (pack, unpack, step) and each role's top functions
    by cumulative time, from the cProfile files of ``HEADWATER_PROFILE_DIR``."""
    import pstats

    out: dict[str, Any] = {}
    for role in ("pack", "unpack", "step"):
        files = glob.glob(os.path.join(directory, f"{role}-*.prof"))
        if not files:
            continue
        stats = pstats.Stats(*files)
        entries = stats.stats  # type: ignore[attr-defined]
        # the role's entry point is the function with the largest cumulative time
        total = max((ct for (_, _, _, ct, _) in entries.values()), default=0.0)
        ranked = sorted(entries.items(), key=lambda kv: kv[1][3], reverse=True)
        functions = []
        for (path, line, name), (_, _, _, cumulative, _) in ranked:
            if path == "~" or "cProfile" in path:
                continue
            where = f"{os.path.basename(path)}:{line}({name})"
            functions.append({"function": where, "cumulative_s": round(cumulative, 3)})
            if len(functions) >= top:
                break
        out[role] = {"seconds": round(total, 3), "top": functions}
    return out


def main(argv: list[str] | None = None) -> int:
    args = _args(list(sys.argv[1:] if argv is None else argv))
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        os.environ["HEADWATER_PROFILE_DIR"] = os.path.abspath(args.profile)
    key_counts = [int(k) for k in str(args.keys).split(",") if k.strip()]
    work = args.workdir or tempfile.mkdtemp(prefix="headwater-bench-sql-")
    try:
        spark = bench_session(args.partitions, False, args.arrow_batch)
        spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
        report: dict[str, Any] = {
            "query": query_text(args),
            "emit": args.emit,
            "rows": args.rows,
            "window_s": args.window,
            "watermark_delay_s": args.delay,
            "files": args.files,
            "files_per_trigger": args.files_per_trigger,
            "shuffle_partitions": args.partitions,
            "repeat": args.repeat,
            "spark": spark.version,
            "results": [],
        }
        for keys in key_counts:
            src = os.path.join(work, f"events-{keys}keys")
            generate(
                src,
                rows=args.rows,
                keys=keys,
                span=args.span,
                disorder=args.disorder,
                late_fraction=args.late_fraction,
                files=args.files,
            )
            entry: dict[str, Any] = {"keys": keys}
            if args.mode in ("both", "bounded"):
                entry["bounded"] = bench_bounded(spark, src, args)
            if args.mode in ("both", "streaming"):
                entry["streaming"] = bench_streaming(spark, work, src, keys, args)
            report["results"].append(entry)
            if not args.json:
                _print(entry)
        if args.profile:
            report["profile"] = profile_summary(args.profile)
        if args.json:
            print(json.dumps(report))
        elif args.profile:
            for role, p in report["profile"].items():
                print(f"  profile {role}: {p['seconds']} s")
                for f in p["top"]:
                    print(f"      {f['cumulative_s']:>8} s  {f['function']}")
        return 0
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def _print(entry: dict[str, Any]) -> None:
    keys = entry["keys"]
    bounded = entry.get("bounded")
    if bounded:
        for name in ("native", "headwater"):
            if name in bounded:
                e = bounded[name]
                print(
                    f"{keys:>6} keys bounded   {name:>9}: {e['median_s']:>7.3f} s "
                    f"(planning {e['planning_s']} s, execution {e['execution_s']} s)",
                    flush=True,
                )
        if "ratio" in bounded:
            print(
                f"{keys:>6} keys bounded       ratio: {bounded['ratio']} (native / headwater "
                f"time; target >= 0.9); Python in headwater's plan: {bounded['python_in_plan']}",
                flush=True,
            )
    stream = entry.get("streaming")
    if stream:
        for name in ("native", "headwater"):
            if name in stream:
                e = stream[name]
                print(
                    f"{keys:>6} keys streaming {name:>9}: {e['rows_per_s']:>10,} rows/s "
                    f"(median of {e['seconds']} s; first batch {e['first_batch_s']} s, "
                    f"steady {e['steady_rows_per_s']} rows/s; {e['batches']} batches, "
                    f"{e['output_rows']:,} rows out)",
                    flush=True,
                )
        if "ratio" in stream:
            print(
                f"{keys:>6} keys streaming     ratio: {stream['ratio']} (headwater / native "
                f"rows/s; target >= 1.0); steady state: {stream.get('steady_ratio')}",
                flush=True,
            )


if __name__ == "__main__":
    raise SystemExit(main())
