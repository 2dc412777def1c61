"""Benchmark: headwater's streaming runner against Spark's native windowed aggregation.

    headwater bench streaming [--rows N] [--keys K[,K...]] [--json] ...

Generates out-of-order events (``--rows`` rows, ``--keys`` keys, event times
spread over ``--span`` seconds, each row up to ``--disorder`` seconds late,
``--late-fraction`` of them 60 s late) as Parquet files, then runs in ONE
process and one SparkSession, both as file-source streams with
``maxFilesPerTrigger`` and ``trigger(availableNow=True)`` into the ``noop``
sink:

(a) Spark native: ``withWatermark(et, delay).groupBy(key, window(et, 2 s)).agg(sum)``,
    append mode;
(b) headwater: ``run_streaming`` with ``FixedWindows(2 s)``, the ``Default``
    trigger, ``Sum`` and the same bounded-out-of-orderness watermark (combiner
    lifting on unless ``--no-lift``).

Each engine first runs once on one file (JVM JIT, Python workers), then
``--repeat`` times on the whole data set, alternating; rows/s are medians. One
benchmark per value of ``--keys`` (default 1000 and 10000, the ends of the
range the runner targets: native Spark's cost grows with the number of
(key, window) groups in its state store, headwater's much less). It prints
rows/s of both and ``ratio = headwater / native`` per key count and overall
(total rows / total median seconds); ``--json`` prints one JSON object.

Besides the end-to-end ratio (the whole query, from start to its last batch)
it reports each engine's first-batch time (``first_batch_ms``: the Spark phases,
``durationMs``, of the median run's first batch) and ``steady_ratio``: throughput
over the batches after the first, where neither engine pays its one-time
query start any more. A streaming query runs for hours; its steady state is
what a user sees, while the first batch of a short run like this one is a
large share of the end-to-end time (for headwater it includes PySpark's
driver-side pre-initialization of ``transformWithStateInPandas``).

Both compute the same windows from on-time data. Late events differ: Spark's
native query filters late rows against the *previous* batch's watermark, so it
still adds rows to windows that the current watermark has passed (and emits
them); headwater judges a row against the watermark at its arrival (rule 3 of
docs/semantics.md) and routes it to its dead letters. With the default
``--late-fraction`` this changes a few sums, not the amount of work.

Profile the Python side with ``HEADWATER_PROFILE_DIR=/some/dir`` (cProfile
files per worker process, see ``headwater.runners.spark.streaming``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from headwater.bench import HelpFormatter
from headwater.bench.cputime import tree_cpu_seconds
from headwater.io.arrival import in_arrival_order
from headwater.runners.spark.session import LOCAL_CHECKPOINT_CONF, ROCKSDB_PROVIDER

BASE_MS = 1_700_000_000_000  # event times start here (2023-11-14)


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="headwater bench streaming",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--rows", type=int, default=2_000_000, help="events")
    p.add_argument(
        "--keys",
        default="1000,10000",
        help="distinct keys; a comma list runs one benchmark per value "
        "(the default: both ends of the range headwater targets)",
    )
    p.add_argument(
        "--span",
        type=float,
        default=400.0,
        help="seconds of event time the events cover",
    )
    p.add_argument("--window", type=float, default=2.0, help="window size, s")
    p.add_argument("--disorder", type=float, default=5.0, help="max lateness of ordinary events, s")
    p.add_argument(
        "--late-fraction",
        type=float,
        default=0.001,
        help="fraction of events 60 s late",
    )
    p.add_argument("--delay", type=float, default=10.0, help="watermark delay, s")
    p.add_argument("--files", type=int, default=20, help="Parquet files")
    p.add_argument("--files-per-trigger", type=int, default=5, help="maxFilesPerTrigger")
    p.add_argument(
        "--shards",
        type=int,
        default=None,
        help="headwater shards (None: --partitions, at most the cores)",
    )
    p.add_argument("--partitions", type=int, default=2, help="spark.sql.shuffle.partitions")
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="measured runs of each engine, alternating; rows/s are medians",
    )
    p.add_argument(
        "--no-warmup", action="store_true", help="skip the warm-up run of each engine on one file"
    )
    p.add_argument("--no-lift", action="store_true", help="headwater without combiner lifting")
    p.add_argument(
        "--changelog", action="store_true", help="RocksDB changelog checkpointing (both engines)"
    )
    p.add_argument(
        "--arrow-batch",
        type=int,
        default=10_000,
        help="spark.sql.execution.arrow.maxRecordsPerBatch (Spark's default; "
        "100000 makes headwater's packing stage ~10%% faster)",
    )
    p.add_argument(
        "--only", choices=["native", "headwater"], default=None, help="run one engine (None: both)"
    )
    p.add_argument(
        "--workdir",
        default=None,
        help="data and checkpoints (None: a temporary directory)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def generate(
    path: str,
    *,
    rows: int,
    keys: int,
    span: float,
    disorder: float,
    late_fraction: float,
    files: int,
    seed: int = 7,
) -> None:
    """Write the events as ``files`` Parquet files, in arrival order (skipped when
    ``path`` already holds the same data)."""
    params = dict(
        rows=rows,
        keys=keys,
        span=span,
        disorder=disorder,
        late_fraction=late_fraction,
        files=files,
        seed=seed,
    )
    stamp = os.path.join(path, "_params.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == params:
                return
        shutil.rmtree(path)
    rng = np.random.default_rng(seed)
    os.makedirs(path, exist_ok=True)
    arrival = np.sort(rng.uniform(0, span * 1000, rows)).astype(np.int64)
    lateness = rng.uniform(0, disorder * 1000, rows).astype(np.int64)
    very_late = rng.random(rows) < late_fraction
    lateness[very_late] += 60_000
    et = BASE_MS + arrival - lateness
    key_ids = rng.integers(0, keys, rows)
    names = np.array([f"k{i:05d}" for i in range(keys)], dtype=object)
    values = rng.integers(0, 100, rows)
    per_file = -(-rows // files)
    written = []
    for f in range(files):
        sl = slice(f * per_file, min(rows, (f + 1) * per_file))
        table = pa.table(
            {
                "key": pa.array(names[key_ids[sl]], pa.string()),
                "et": pa.array(et[sl].astype("datetime64[ms]"), pa.timestamp("us", tz="UTC")),
                "value": pa.array(values[sl], pa.int64()),
            }
        )
        written.append(os.path.join(path, f"part-{f:05d}.parquet"))
        pq.write_table(table, written[-1])
    in_arrival_order(written)
    with open(stamp, "w") as f:
        json.dump(params, f)


def bench_session(
    partitions: int,
    changelog: bool = False,
    arrow_batch: int = 10_000,
    extra: dict[str, str] | None = None,
):
    """The benchmarks' local[2] session; ``extra``: settings of one benchmark that
    add to or override the common ones."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {
        "spark.master": "local[2]",
        "spark.app.name": "headwater-bench-streaming",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "4g",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(arrow_batch),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": str(
            changelog
        ).lower(),
        **LOCAL_CHECKPOINT_CONF,
        **(extra or {}),
    }
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def file_stream(spark, src: str, files_per_trigger: int):
    return (
        spark.readStream.schema("key string, et timestamp, value long")
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(src)
    )


def run_query(query) -> dict[str, Any]:
    start = time.perf_counter()
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    progress = query.recentProgress
    out_rows = sum(p["sink"].get("numOutputRows", 0) or 0 for p in progress)
    durations: dict[str, int] = {}
    for p in progress:
        for k, v in (p.get("durationMs") or {}).items():
            durations[k] = durations.get(k, 0) + int(v)
    metrics = {}
    for p in progress:
        for name, row in (p.get("observedMetrics") or {}).items():
            for k, v in row.asDict().items():
                metrics[f"{name}.{k}"] = metrics.get(f"{name}.{k}", 0) + int(v)
    # Steady state: every batch after the query's first. The first batch also pays
    # the query's one-time start (planning; for transformWithStateInPandas a Python
    # process on the driver that learns the state schemas), which a query running
    # for hours pays once.
    later = [p for p in progress if p["batchId"] > 0]
    later_s = sum((p.get("durationMs") or {}).get("triggerExecution", 0) for p in later) / 1000
    later_rows = sum(int(p.get("numInputRows") or 0) for p in later)
    first = [p for p in progress if p["batchId"] == 0]
    return {
        "seconds": elapsed,
        "first_batch_s": (
            first[0]["durationMs"].get("triggerExecution", 0) / 1000 if first else 0.0
        ),
        "first_batch_ms": dict(first[0].get("durationMs") or {}) if first else {},
        "steady_s": later_s,
        "steady_rows": later_rows,
        "batches": len(progress),
        "output_rows": out_rows,
        "duration_ms": durations,
        "metrics": metrics,
    }


def run_native(spark, src: str, ckpt: str, args) -> dict[str, Any]:
    from pyspark.sql import functions as F

    df = file_stream(spark, src, args.files_per_trigger)
    agg = (
        df.withWatermark("et", f"{int(args.delay * 1000)} milliseconds")
        .groupBy("key", F.window("et", f"{int(args.window * 1000)} milliseconds"))
        .agg(F.sum("value").alias("sum"))
    )
    query = (
        agg.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    return run_query(query)


def run_headwater(spark, src: str, ckpt: str, args) -> dict[str, Any]:
    from headwater.model.combiners import Sum
    from headwater.model.strategy import WindowingStrategy
    from headwater.model.triggers import Default
    from headwater.model.windows import FixedWindows
    from headwater.runners.spark.streaming import observe_counts, run_streaming

    df = file_stream(spark, src, args.files_per_trigger)
    out = run_streaming(
        df,
        key_cols="key",
        event_time_col="et",
        strategy=WindowingStrategy.of(FixedWindows(args.window), Default()),
        aggregations={"sum": (Sum(), "value")},
        watermark=args.delay,
        num_shards=args.shards,
        lift=not args.no_lift,
    )
    query = (
        observe_counts(out)
        .writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    return run_query(query)


def bench_one(spark, work: str, keys: int, args) -> dict[str, Any]:
    """Both engines on one data set: warm-up, then ``--repeat`` alternating runs."""
    src = os.path.join(work, f"events-{keys}keys")
    t0 = time.perf_counter()
    generate(
        src,
        rows=args.rows,
        keys=keys,
        span=args.span,
        disorder=args.disorder,
        late_fraction=args.late_fraction,
        files=args.files,
    )
    result: dict[str, Any] = {"keys": keys, "generate_s": round(time.perf_counter() - t0, 2)}
    engines = {"native": run_native, "headwater": run_headwater}
    runs = measure(spark, work, src, keys, engines, args)
    for name, rs in runs.items():
        last = rs[-1]
        result[name] = {
            **summary(rs, args.rows),
            "best_rows_per_s": round(args.rows / min(r["seconds"] for r in rs)),
            "metrics": last["metrics"],
        }
    return with_ratios(result)


def measure(spark, work: str, src: str, keys: int, engines, args) -> dict[str, list[dict]]:
    """Each engine's runs over ``src`` (``engine(spark, src, checkpoint, args)``):
    one untimed warm-up on the first file (JVM JIT, Python workers, imports),
    then ``--repeat`` alternating runs. ``--only`` keeps one engine."""
    if args.only:
        engines = {args.only: engines[args.only]}

    def checkpoint(name: str) -> str:
        return os.path.join(work, f"checkpoint-{name}-{time.time_ns()}")

    if not args.no_warmup:
        warm = os.path.join(work, f"warmup-{keys}keys")
        if not os.path.exists(os.path.join(warm, "part-00000.parquet")):
            os.makedirs(warm, exist_ok=True)
            shutil.copy(os.path.join(src, "part-00000.parquet"), warm)
        for fn in engines.values():
            fn(spark, warm, checkpoint("warmup"), args)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in engines}
    for _ in range(max(1, args.repeat)):
        for name, fn in engines.items():
            before = tree_cpu_seconds()
            run = fn(spark, src, checkpoint(name), args)
            after = tree_cpu_seconds()
            run["cpu_s"] = None if before is None or after is None else after - before
            runs[name].append(run)
    return runs


def summary(rs: list[dict[str, Any]], rows: int) -> dict[str, Any]:
    """One engine's runs: medians (total, first batch, steady state, CPU seconds of
    the process tree: :mod:`headwater.bench.cputime`), the Spark phases of the median
    first batch and the last run's batches, output and Spark phases (summed over
    its batches)."""
    seconds = sorted(r["seconds"] for r in rs)
    median = seconds[len(seconds) // 2]
    steady = sorted(r["steady_s"] for r in rs)[len(rs) // 2]
    median_first = sorted(rs, key=lambda r: r["first_batch_s"])[len(rs) // 2]
    first = median_first["first_batch_s"]
    last = rs[-1]
    cpu = sorted(r["cpu_s"] for r in rs if r.get("cpu_s") is not None)
    return {
        "rows_per_s": round(rows / median),
        "median_s": round(median, 3),
        "cpu_s": round(cpu[len(cpu) // 2], 1) if cpu else None,
        "seconds": [round(r["seconds"], 2) for r in rs],
        "first_batch_s": round(first, 3),
        "first_batch_ms": median_first["first_batch_ms"],
        "steady_s": round(steady, 3),
        "steady_rows_per_s": round(last["steady_rows"] / steady) if steady else None,
        "batches": last["batches"],
        "output_rows": last["output_rows"],
        "duration_ms": last["duration_ms"],
    }


def with_ratios(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with headwater's rows per second over native's (total and steady)."""
    if "native" in result and "headwater" in result:
        hw, native = result["headwater"], result["native"]
        result["ratio"] = round(hw["rows_per_s"] / native["rows_per_s"], 3)
        if hw["steady_rows_per_s"] and native["steady_rows_per_s"]:
            result["steady_ratio"] = round(hw["steady_rows_per_s"] / native["steady_rows_per_s"], 3)
    return result


def main(argv: list[str] | None = None) -> int:
    args = _args(list(sys.argv[1:] if argv is None else argv))
    key_counts = [int(k) for k in str(args.keys).split(",") if k.strip()]
    work = args.workdir or tempfile.mkdtemp(prefix="headwater-bench-")
    try:
        spark = bench_session(args.partitions, args.changelog, args.arrow_batch)
        report: dict[str, Any] = {
            "rows": args.rows,
            "window_s": args.window,
            "span_s": args.span,
            "watermark_delay_s": args.delay,
            "files": args.files,
            "files_per_trigger": args.files_per_trigger,
            "shuffle_partitions": args.partitions,
            "shards": args.shards or args.partitions,
            "lift": not args.no_lift,
            "changelog_checkpointing": args.changelog,
            "repeat": args.repeat,
            "arrow_batch": args.arrow_batch,
            "results": [],
        }
        for keys in key_counts:
            r = bench_one(spark, work, keys, args)
            report["results"].append(r)
            if not args.json:
                for name in ("native", "headwater"):
                    if name in r:
                        e = r[name]
                        print(
                            f"{keys:>6} keys {name:>9}: {e['rows_per_s']:>10,} rows/s "
                            f"(median of {e['seconds']} s; {e['batches']} batches, "
                            f"{e['output_rows']:,} output rows)",
                            flush=True,
                        )
                if "ratio" in r:
                    print(
                        f"{keys:>6} keys     ratio: {r['ratio']} (headwater / native); "
                        f"steady state (batches after the first): "
                        f"{r.get('steady_ratio')}",
                        flush=True,
                    )
        done = [r for r in report["results"] if "ratio" in r]
        if done:
            # Over all data sets: total rows / total median seconds, per engine.
            total = args.rows * len(done)
            native = total / sum(r["native"]["median_s"] for r in done)
            headwater = total / sum(r["headwater"]["median_s"] for r in done)
            report["native_rows_per_s"] = round(native)
            report["headwater_rows_per_s"] = round(headwater)
            report["ratio"] = round(headwater / native, 3)
            report["ratio_min"] = min(r["ratio"] for r in done)
        if args.json:
            print(json.dumps(report))
        elif done:
            print(
                f"   overall: native {report['native_rows_per_s']:,} rows/s, headwater "
                f"{report['headwater_rows_per_s']:,} rows/s, ratio {report['ratio']} "
                f"(min {report['ratio_min']})"
            )
        return 0
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
