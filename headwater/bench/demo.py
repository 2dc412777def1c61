"""Benchmark: the demo's micro-batches, headwater's pipeline against Spark's own query.

    headwater bench demo [--events 600] [--seed 7] [--step-seconds 10] [--json]

``headwater demo`` replays a recorded timeline of game scores, one step per
micro-batch (60-odd small batches at the defaults). This benchmark replays the
same timeline (same events, seed and steps, so the same micro-batches and rows
per batch) in ONE process and one SparkSession (the demo's settings), with
``trigger(availableNow=True)``:

(a) headwater: the demo's pipeline (``headwater.examples.demo.pipeline``: team
    totals per 2-minute window, early panes every minute, on-time and late
    panes, 5 minutes of allowed lateness, retracting), its panes and dead
    letters collected to the driver (the demo also writes them as Parquet);
(b) Spark's nearest query: the replay's data rows,
    ``withWatermark(ts, 330 s)`` (the demo's watermark, 30 s behind the scores
    seen, plus its 5 minutes of allowed lateness),
    ``groupBy(team, window(ts, 2 min)).agg(sum, count)``, update mode (a row
    per changed window per batch, as early and late panes), ``memory`` sink.

Each engine first runs untimed on the timeline's first two steps (JVM JIT,
Python workers). Per engine it reports the total seconds, the micro-batches,
the median per-micro-batch wall time (``durationMs.triggerExecution``) and the
median of each of Spark's ``durationMs`` phases (``addBatch`` is the batch's
execution, sink included; ``queryPlanning``, ``getBatch``, ``latestOffset``,
``walCommit``, ``commitOffsets``). The ratio is headwater's median batch time
over Spark's. headwater's run also includes the end-of-input run (one more
micro-batch, docs/semantics.md "End of input"). Within headwater's
``addBatch``, ``sink_ms`` is the median time of each sink call: the panes'
call computes the micro-batch (the runner persists it), the dead letters'
call reads it back.

The final totals per (team, window) of both engines are compared (``agree``):
equal when neither drops a late row; with stragglers beyond the lateness they
can differ, since Spark judges a row against the previous batch's watermark
and by its event time, headwater against the current one and by its window.

``--profile DIR`` cProfiles headwater's Python workers (``HEADWATER_PROFILE_DIR``)
and reports their seconds per role (pack, unpack, step), the warm-up's
included; profiling slows them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import pandas as pd

from headwater.bench import HelpFormatter, fresh
from headwater.examples import demo
from headwater.io.replay import read_replay, write_timeline

PHASES = (
    "triggerExecution",
    "addBatch",
    "queryPlanning",
    "getBatch",
    "latestOffset",
    "walCommit",
    "commitOffsets",
)
WINDOW = "2 minutes"
#: the demo's watermark delay (30 s) plus its allowed lateness (5 minutes)
NATIVE_DELAY = "330 seconds"


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="headwater bench demo", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument("--events", type=int, default=600, help="events of the demo's stream")
    p.add_argument("--seed", type=int, default=7, help="random seed of the stream")
    p.add_argument(
        "--step-seconds",
        type=int,
        default=demo.STEP_SECONDS,
        help="processing time per micro-batch of the replay (the demo's option)",
    )
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up runs")
    p.add_argument("--profile", default=None, help="cProfile headwater's Python workers here")
    p.add_argument("--workdir", default=None, help="keep timelines and checkpoints here")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def timelines(work: str, args) -> tuple[str, str, int]:
    """The demo's timeline file, a two-step one for the warm-up, and the steps."""
    steps, _ = demo.recorded_timeline(args.events, args.seed, args.step_seconds)
    full = os.path.join(work, "timeline.jsonl")
    warm = os.path.join(work, "warmup.jsonl")
    write_timeline(full, steps, columns={"score": "bigint"})
    write_timeline(warm, [*steps[:2], {"watermark_ms": "inf"}], columns={"score": "bigint"})
    return full, warm, len(steps)


def run_headwater(
    spark, timeline: str, checkpoint: str
) -> tuple[Any, pd.Series, int, dict[str, float]]:
    """The demo's pipeline; its final totals per (team, window start), dead letters,
    and the median ms of each sink call per micro-batch (within ``addBatch``: the
    panes' call computes the batch, which the runner persists; the dead letters'
    reads it back)."""
    panes: list[pd.DataFrame] = []
    dropped: list[int] = []
    sink_ms: dict[str, list[float]] = {"panes_sink": [], "dead_letter_sink": []}

    def timed_sink(name: str, keep):
        def sink(batch, _batch_id: int) -> None:
            t0 = time.perf_counter()
            keep(batch.toPandas())
            sink_ms[name].append((time.perf_counter() - t0) * 1000)

        return sink

    query = demo.pipeline(spark, timeline).start(
        checkpoint_location=checkpoint,
        panes_sink=timed_sink("panes_sink", panes.append),
        dead_letter_sink=timed_sink("dead_letter_sink", lambda f: dropped.append(len(f))),
        trigger={"availableNow": True},
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"headwater's query failed: {query.exception()}")
    frame = pd.concat(panes, ignore_index=True)
    signed = frame.total.where(~frame.is_retraction, -frame.total)
    totals = signed.groupby([frame.team, frame.window_start]).sum()
    sinks = {name: round(median(ms)) for name, ms in sink_ms.items() if ms}
    return query, totals, sum(dropped), sinks


def run_native(spark, timeline: str, checkpoint: str, table: str) -> tuple[Any, pd.Series, int]:
    """Spark's own windowed aggregate over the same replay, update mode, memory sink."""
    from pyspark.sql import functions as F

    scores = (
        read_replay(spark, timeline)
        .where(F.col("kind") == "data")
        .select(F.col("key").alias("team"), F.timestamp_millis("ts").alias("ts"), "score")
    )
    agg = (
        scores.withWatermark("ts", NATIVE_DELAY)
        .groupBy("team", F.window("ts", WINDOW))
        .agg(F.sum("score").alias("total"), F.count("*").alias("n"))
        .select("team", F.unix_millis("window.start").alias("window_start"), "total", "n")
    )
    query = (
        agg.writeStream.format("memory")
        .queryName(table)
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"Spark's query failed: {query.exception()}")
    frame = spark.table(table).toPandas()
    # Scores are positive: a window's last update is its largest total.
    totals = frame.groupby(["team", "window_start"]).total.max()
    dropped = sum(
        int(op.get("numRowsDroppedByWatermark") or 0)
        for p in query.recentProgress
        for op in p.get("stateOperators") or []
    )
    return query, totals, dropped


def timed(query, seconds: float, totals: pd.Series, dropped: int) -> dict[str, Any]:
    """One engine's run: total seconds, batches, median ms per Spark phase."""
    progress = [p for p in query.recentProgress if p.get("durationMs")]
    medians = {
        phase: median(int(p["durationMs"].get(phase, 0)) for p in progress) for phase in PHASES
    }
    return {
        "seconds": round(seconds, 2),
        "batches": len(progress),
        "input_rows": sum(int(p.get("numInputRows") or 0) for p in progress),
        "median_batch_ms": medians["triggerExecution"],
        "median_ms": medians,
        "windows": len(totals),
        "dropped": dropped,
    }


def bench(spark, args, work: str) -> dict[str, Any]:
    """Both engines over the demo's timeline (after a warm-up each); the report."""
    full, warm, steps = timelines(work, args)
    n = iter(range(1_000_000))

    def checkpoint() -> str:
        return str(fresh(Path(work) / f"checkpoint-{next(n)}"))

    if not args.no_warmup:
        run_headwater(spark, warm, checkpoint())
        run_native(spark, warm, checkpoint(), "headwater_bench_demo_warmup")
    t0 = time.perf_counter()
    hw_query, hw_totals, hw_dropped, hw_sinks = run_headwater(spark, full, checkpoint())
    hw_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sp_query, sp_totals, sp_dropped = run_native(spark, full, checkpoint(), "headwater_bench_demo")
    sp_s = time.perf_counter() - t0
    report: dict[str, Any] = {
        "events": args.events,
        "seed": args.seed,
        "step_seconds": args.step_seconds,
        "steps": steps,
        "spark": spark.version,
        "headwater": {**timed(hw_query, hw_s, hw_totals, hw_dropped), "sink_ms": hw_sinks},
        "native": timed(sp_query, sp_s, sp_totals, sp_dropped),
        "agree": hw_totals.sort_index().astype(int).to_dict()
        == sp_totals.sort_index().astype(int).to_dict(),
    }
    hw, sp = report["headwater"], report["native"]
    report["ratio"] = round(hw["median_batch_ms"] / max(sp["median_batch_ms"], 1), 2)
    report["extra_ms"] = {
        phase: hw["median_ms"][phase] - sp["median_ms"][phase] for phase in PHASES
    }
    if args.profile:
        from headwater.bench.sql import profile_summary

        report["python_workers"] = profile_summary(args.profile)
    return report


def markdown(report: dict[str, Any]) -> str:
    """The report as a table: one row per Spark phase, median ms per batch."""
    hw, sp = report["headwater"], report["native"]
    lines = [
        f"{report['steps']} steps ({report['events']} events, {report['step_seconds']} s each); "
        f"headwater {hw['seconds']} s over {hw['batches']} batches, Spark {sp['seconds']} s over "
        f"{sp['batches']} batches; same final totals: {'yes' if report['agree'] else 'no'} "
        f"({hw['windows']} and {sp['windows']} windows, {hw['dropped']} and {sp['dropped']} "
        "late rows dropped)",
        "",
        "| median ms per micro-batch | headwater | Spark | headwater - Spark |",
        "|---|---|---|---|",
    ]
    for phase in PHASES:
        lines.append(
            f"| {phase} | {hw['median_ms'][phase]:g} | {sp['median_ms'][phase]:g} "
            f"| {report['extra_ms'][phase]:g} |"
        )
    lines.append(f"\nratio (median batch, headwater / Spark): {report['ratio']}")
    lines.append(f"headwater's addBatch, median ms per sink call: {hw['sink_ms']}")
    for role, entry in (report.get("python_workers") or {}).items():
        per_batch = entry["seconds"] / max(hw["batches"], 1)
        lines.append(
            f"headwater's Python workers, {role}: {entry['seconds']} s ({per_batch:.3f} s/batch)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _args(list(sys.argv[1:] if argv is None else argv))
    if args.profile:
        shutil.rmtree(args.profile, ignore_errors=True)
        os.makedirs(args.profile)
        os.environ["HEADWATER_PROFILE_DIR"] = os.path.abspath(args.profile)
    work = args.workdir or tempfile.mkdtemp(prefix="headwater-bench-demo-")
    try:
        spark = demo.spark_session()
        report = bench(spark, args, work)
        print(json.dumps(report) if args.json else markdown(report), flush=True)
        return 0
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
