"""Benchmark: a windowed aggregate from a Kafka topic into Delta, headwater against
Spark's native Structured Streaming query, over the same topic in one run.

    headwater bench kafka [--events N] [--keys K] [--bootstrap HOST:PORT] [--json] ...

Needs a broker (``bash scripts/kafka.sh`` prints its address; default
``$HEADWATER_TEST_KAFKA`` or ``127.0.0.1:59092``) and Spark's Kafka connector
(resolved once by ``scripts/kafka.sh jars``). It writes ``--events`` JSON records
``{"key", "value", "et"}`` (``--keys`` keys, event times 2 ms apart, each up to
``--disorder`` ms out of order, none late: keep it under ``--delay``) to a new
topic of ``--partitions`` partitions (event i in partition i mod P, in order) with
one Spark batch write, then runs, in ONE SparkSession, each from
the earliest offset with ``maxOffsetsPerTrigger`` and ``trigger(availableNow)``:

(a) Spark native: ``from_json``, ``withWatermark(et, delay)``,
    ``groupBy(key, window(et, W)).agg(sum(value))`` in append mode, each
    micro-batch's final windows appended to a Delta table (``deltalake`` in
    ``foreachBatch``: the pinned Spark has no Delta connector on its classpath);
(b) headwater: ``hw.from_kafka`` (its decoding routes bad records to the dead
    letters), ``FixedWindows(W)``, the default trigger, ``sum``, into a
    :class:`~headwater.io.sinks.delta.DeltaSink` (one idempotent MERGE per
    micro-batch), ``end_of_input="never"`` (the topic is open, as native's is: no
    end-of-input control stream).

``--sink noop`` replaces both Delta writers with Spark's ``noop`` sink (the
engines alone). Each engine first runs once over a small warm-up topic
(``--warmup-events``; JIT, Python workers). It prints events/s of each (events
over the query's wall time, start to last batch; with ``--repeat R``, R runs of
each, alternating which goes first, and the median run's) and ``ratio = headwater /
native``; ``--json`` prints one JSON object. Both emit the windows the
watermark closed; ``windows_agree`` says whether their Delta tables hold the
same (key, window, sum) rows.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any

from headwater.bench import HelpFormatter
from headwater.bench.streaming import bench_session

BASE_MS = 1_700_000_000_000  # event times start here (2023-11-14)
SCHEMA = "key string, value bigint, et timestamp"


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="headwater bench kafka", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument("--events", type=int, default=1_000_000, help="events in the topic")
    p.add_argument("--keys", type=int, default=1000, help="distinct keys")
    p.add_argument("--window", type=int, default=10, help="window length, seconds")
    p.add_argument("--delay", type=int, default=2, help="watermark delay, seconds")
    p.add_argument("--disorder", type=int, default=1000, help="out-of-orderness, ms")
    p.add_argument("--partitions", type=int, default=2, help="topic partitions")
    p.add_argument(
        "--max-offsets-per-trigger", type=int, default=100_000, help="records per micro-batch"
    )
    p.add_argument("--warmup-events", type=int, default=2000, help="0: no warm-up")
    p.add_argument(
        "--repeat", type=int, default=1, help="timed runs per engine, alternating (the median)"
    )
    p.add_argument("--sink", choices=("delta", "noop"), default="delta", help="where results go")
    p.add_argument(
        "--bootstrap",
        default=os.environ.get("HEADWATER_TEST_KAFKA") or "127.0.0.1:59092",
        help="the broker (scripts/kafka.sh prints it)",
    )
    p.add_argument("--workdir", default=None, help="Delta tables and checkpoints (default: temp)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def session():
    """A local[2] session with Spark's Kafka connector (cached jars, offline)."""
    from headwater.io.kafka import spark_jars

    extra = {
        "spark.app.name": "headwater-bench-kafka",
        "spark.driver.memory": "2g",
        "spark.jars": ",".join(spark_jars()),
    }
    return bench_session(2, extra=extra)


def fill_topic(spark, bootstrap: str, events: int, args) -> str:
    """A new topic of ``events`` JSON records, written by one Spark batch job."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import functions as F

    topic = f"hw-bench-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=args.partitions, replication_factor=1)
    admin.create_topics([new])[topic].result(30)
    i = F.col("id")
    et_ms = F.lit(BASE_MS) + i * 2 + (i * 7919) % max(args.disorder, 1)
    # Event i to partition i mod P, written in order by one task: every micro-batch
    # (an equal share of each partition) covers one stretch of event time.
    rows = spark.range(0, events, 1, 1).select(
        (i % args.partitions).cast("int").alias("partition"),
        F.to_json(
            F.struct(
                F.concat(F.lit("k"), (i % args.keys).cast("string")).alias("key"),
                ((i * 31) % 100).alias("value"),
                F.timestamp_millis(et_ms).alias("et"),
            )
        ).alias("value"),
    )
    rows.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).save()
    return topic


def _delta_append(path: str):
    """Native's Delta writer: each micro-batch's rows appended (deltalake)."""

    def write(batch, batch_id: int) -> None:
        from deltalake import write_deltalake

        table = batch.toArrow()
        if table.num_rows:
            write_deltalake(path, table, mode="append")

    return write


def native_query(spark, topic: str, sink: str | None, checkpoint: str, args):
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .load()
    )
    rows = raw.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*")
    agg = (
        rows.withWatermark("et", f"{args.delay} seconds")
        .groupBy("key", F.window("et", f"{args.window} seconds"))
        .agg(F.sum("value").alias("total"))
        .select("key", "window.start", "window.end", "total")
        .withColumnRenamed("start", "window_start")
        .withColumnRenamed("end", "window_end")
    )
    writer = agg.writeStream.outputMode("append").option("checkpointLocation", checkpoint)
    writer = writer.format("noop") if sink is None else writer.foreachBatch(_delta_append(sink))
    return writer.trigger(availableNow=True).start()


def headwater_query(spark, topic: str, sink: str | None, checkpoint: str, args):
    import headwater as hw
    from headwater.io.sinks.delta import DeltaSink

    stream = hw.from_kafka(
        topic,
        args.bootstrap,
        schema=SCHEMA,
        event_time="et",
        watermark=f"{args.delay} seconds",
        spark=spark,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
    )
    agg = (
        stream.window(hw.FixedWindows(f"{args.window} seconds"))
        .group_by("key")
        .agg(total=hw.sum("value"))
    )
    panes = DeltaSink(sink, aggregation=agg) if sink else (lambda batch, i: batch.count())
    return agg.start(
        checkpoint_location=checkpoint,
        panes_sink=panes,
        trigger={"availableNow": True},
        end_of_input="never",  # the topic stays open, as the native query's does
    )


ENGINES = {"native": native_query, "headwater": headwater_query}


def run(engine: str, spark, topic: str, work: str, events: int, args) -> dict[str, Any]:
    """One engine over the whole topic: wall seconds, events/s, batches."""
    tag = f"{engine}-{uuid.uuid4().hex[:6]}"
    rules = spark._jvm.org.apache.spark.sql.catalyst.rules.RuleExecutor
    rules.resetMetrics()
    sink = None if args.sink == "noop" else os.path.join(work, f"delta-{tag}")
    start = time.perf_counter()
    query = ENGINES[engine](spark, topic, sink, os.path.join(work, f"ck-{tag}"), args)
    query.awaitTermination()
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"{engine}: {query.exception()}")
    progress = query.recentProgress
    return {
        "seconds": round(seconds, 3),
        "events_per_s": round(events / seconds),
        "batches": len(progress),
        "input_rows": sum(int(p.get("numInputRows") or 0) for p in progress),
        "phases_ms": phases(progress),
        "planner": planner_runs(rules.dumpTimeSpent()),
        "delta": sink,
    }


def planner_runs(metrics: str) -> dict[str, int]:
    """How much planning a run did, from Spark's rule metrics (``RuleExecutor.
    dumpTimeSpent``, reset at the run's start): rule runs in all, and analyzer runs
    (those of ``ResolveReferences``, which every analysis runs)."""
    total = re.search(r"Total number of runs: (\d+)", metrics)
    analyses = re.search(r"Analyzer\$ResolveReferences\s+\d+ / \d+\s+\d+ / (\d+)", metrics)
    return {
        "rule_runs": int(total.group(1)) if total else 0,
        "analyzer_runs": int(analyses.group(1)) if analyses else 0,
    }


def phases(progress: list[dict[str, Any]]) -> dict[str, int]:
    """Where a run's time went: each ``durationMs`` phase summed over its
    micro-batches (``triggerExecution`` is a batch's whole time), and the first
    batch's ``triggerExecution`` on its own (the start costs land there)."""
    total: dict[str, int] = {}
    for p in progress:
        for phase, ms in (p.get("durationMs") or {}).items():
            total[phase] = total.get(phase, 0) + int(ms)
    if progress:
        first = progress[0].get("durationMs") or {}
        total["first_batch"] = int(first.get("triggerExecution", 0))
    return dict(sorted(total.items()))


def median_run(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """An engine's median run by wall time, with every run's seconds (``runs_s``);
    its ``delta`` is the last run's table (each run writes its own)."""
    median = sorted(rs, key=lambda r: r["seconds"])[len(rs) // 2]
    return {**median, "runs_s": [r["seconds"] for r in rs], "delta": rs[-1]["delta"]}


def windows(path: str | None) -> list[tuple] | None:
    """A result table's (key, window_start, window_end, total) rows, sorted."""
    if path is None or not os.path.exists(path):
        return None
    import pandas as pd
    from deltalake import DeltaTable

    frame = DeltaTable(path).to_pandas()
    start, end = (pd.to_datetime(frame[c], utc=True) for c in ("window_start", "window_end"))
    return sorted(zip(frame["key"], start, end, frame["total"].astype("int64"), strict=True))


def bench(spark, args, work: str) -> dict[str, Any]:
    """Fill the topics, warm both engines up, run each ``--repeat`` times; the report."""
    t0 = time.perf_counter()
    topic = fill_topic(spark, args.bootstrap, args.events, args)
    report: dict[str, Any] = {
        "events": args.events,
        "keys": args.keys,
        "window_s": args.window,
        "watermark_delay_s": args.delay,
        "partitions": args.partitions,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "sink": args.sink,
        "repeat": max(1, args.repeat),
        "produce_s": round(time.perf_counter() - t0, 2),
    }
    if args.warmup_events:
        warm = fill_topic(spark, args.bootstrap, args.warmup_events, args)
        for engine in ENGINES:
            run(engine, spark, warm, work, args.warmup_events, args)
    runs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in ENGINES}
    for i in range(max(1, args.repeat)):  # alternating: each engine goes first in turn
        for engine in list(ENGINES)[:: 1 if i % 2 == 0 else -1]:
            runs[engine].append(run(engine, spark, topic, work, args.events, args))
    for engine, rs in runs.items():
        report[engine] = median_run(rs)
    report["ratio"] = round(
        report["headwater"]["events_per_s"] / max(report["native"]["events_per_s"], 1), 3
    )
    if args.sink == "delta":
        native, ours = (windows(report[e].pop("delta")) for e in ENGINES)
        report["windows"] = {"native": len(native or []), "headwater": len(ours or [])}
        report["windows_agree"] = native == ours
        if native != ours:  # what differs, a few rows each way
            a, b = set(native or []), set(ours or [])
            report["only_native"] = [list(map(str, r)) for r in sorted(a - b)[:5]]
            report["only_headwater"] = [list(map(str, r)) for r in sorted(b - a)[:5]]
    else:
        for engine in ENGINES:
            report[engine].pop("delta")
    return report


def _print(report: dict[str, Any]) -> None:
    for engine in ENGINES:
        r = report[engine]
        print(
            f"{engine:>9}: {r['events_per_s']:>10,} events/s ({report['events']:,} events in "
            f"{r['seconds']} s, {r['batches']} batches)"
        )
    print(f"    ratio: {report['ratio']} (headwater / native), sink {report['sink']}")
    if "windows_agree" in report:
        print(f"  windows: {report['windows']}, agree: {report['windows_agree']}")


def main(argv: list[str] | None = None, spark=None) -> int:
    """Run the benchmark (``spark``: a session to use instead of a new one)."""
    args = _args(list(sys.argv[1:] if argv is None else argv))
    work = args.workdir or tempfile.mkdtemp(prefix="headwater-bench-kafka-")
    try:
        report = bench(spark or session(), args, work)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(report))
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
