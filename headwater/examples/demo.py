"""The README's main job: a streaming pipeline with early, on-time and late panes.

A recorded timeline of game scores (three teams; scores arrive out of order,
some minutes late, a few too late to count) is replayed into Spark Structured
Streaming, one micro-batch per 10 seconds of processing time, with a
heuristic watermark 30 seconds behind the scores seen. headwater computes team
totals per 2-minute window with speculative (EARLY) panes every minute, the
ON_TIME pane when the watermark passes, and a LATE pane per late score within
5 minutes of allowed lateness, in accumulating-and-retracting mode. The job
prints the life of one window, a summary, and writes the changelog (Parquet)
and the dead letters.

    headwater demo [--events 600] [--seed 7] [--out headwater-demo]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence

import numpy as np
import pandas as pd

import headwater as hw
from headwater.io.replay import read_replay, write_timeline
from headwater.runners.spark.session import LOCAL_CHECKPOINT_CONF, ROCKSDB_PROVIDER

TEAMS = ("blue", "red", "green")
STEP_SECONDS = 10


def recorded_timeline(
    events: int, seed: int, step_seconds: int = STEP_SECONDS
) -> tuple[list[dict], pd.DataFrame]:
    """Scores over 10 minutes of event time; arrival = event time + a delay
    (mostly seconds, some minutes: stragglers). Steps of ``step_seconds`` of
    processing time (one micro-batch each), each with a punctuated watermark
    30 s behind the largest event time seen so far."""
    step_ms = step_seconds * 1000
    rng = np.random.default_rng(seed)
    base = 1_767_268_800_000  # 2026-01-01T12:00:00Z
    ts = base + np.sort(rng.integers(0, 600_000, events))
    delay = rng.exponential(4_000, events).astype(np.int64)
    stragglers = rng.random(events) < 0.06
    delay[stragglers] += rng.integers(60_000, 480_000, stragglers.sum())
    frame = pd.DataFrame(
        {
            "team": rng.choice(TEAMS, events),
            "ts": ts,
            "score": rng.integers(1, 10, events),
            "arrival": ts + delay,
        }
    ).sort_values("arrival", kind="stable")
    frame["batch"] = (frame["arrival"] - base) // step_ms
    steps, seen = [], None
    for batch in range(int(frame["batch"].max()) + 1):
        rows = frame[frame["batch"] == batch]
        if len(rows):
            seen = max(seen or 0, int(rows["ts"].max()))
        step = {
            "proc_ms": base + (batch + 1) * step_ms,
            "rows": rows[["team", "ts", "score"]].values.tolist(),
        }
        if seen is not None:
            step["watermark_ms"] = seen - 30_000
        steps.append(step)
    steps.append({"proc_ms": steps[-1]["proc_ms"] + step_ms, "watermark_ms": "inf"})
    return steps, frame


def spark_session():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config(map=LOCAL_CHECKPOINT_CONF)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def pipeline(spark, timeline: str) -> hw.WindowedAggregation:
    """The demo's job over the replay of ``timeline``: team totals per 2-minute
    window, early, on-time and late panes, accumulating and retracting (also
    what ``headwater bench demo`` measures)."""
    scores = read_replay(spark, timeline).withColumnRenamed("key", "team")
    return (
        hw.from_spark(scores, event_time="ts", watermark="punctuated")
        .window(
            hw.FixedWindows("2 minutes"),
            trigger=hw.AfterWatermark(
                early=hw.AfterProcessingTime("1 minute"), late=hw.AfterCount(1)
            ),
            allowed_lateness="5 minutes",
            accumulation="retracting",
        )
        .group_by("team")
        .agg(total=hw.sum("score"), n=hw.count())
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="headwater demo",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=600, help="events of the generated stream")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the stream")
    parser.add_argument(
        "--step-seconds",
        type=int,
        default=STEP_SECONDS,
        help="processing time between micro-batches of the replay (fewer, larger steps run faster)",
    )
    parser.add_argument("--out", default="headwater-demo", help="output directory (emptied first)")
    args = parser.parse_args(argv)
    if args.step_seconds < 1:
        parser.error(f"--step-seconds must be at least 1, not {args.step_seconds}")

    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    steps, recorded = recorded_timeline(args.events, args.seed, args.step_seconds)
    timeline = os.path.join(out, "timeline.jsonl")
    write_timeline(timeline, steps, columns={"score": "bigint"})

    # Spark and its Python workers print a lot; keep it in a log, not on the console.
    console = _quiet(os.path.join(out, "spark.log"))
    spark = spark_session()
    result = pipeline(spark, timeline)
    collected: list[pd.DataFrame] = []
    dropped: list[pd.DataFrame] = []

    def keep_panes(batch, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(
            os.path.join(out, "changelog", f"batch_id={batch_id}")
        )
        collected.append(batch.toPandas().assign(batch=batch_id))

    def keep_dropped(batch, batch_id: int) -> None:
        frame = batch.toPandas()
        if len(frame):
            batch.write.mode("overwrite").parquet(
                os.path.join(out, "dead_letters", f"batch_id={batch_id}")
            )
            dropped.append(frame)

    query = result.start(
        checkpoint_location=os.path.join(out, "checkpoint"),
        panes_sink=keep_panes,
        dead_letter_sink=keep_dropped,
        trigger={"availableNow": True},
        query_name="headwater_demo",
    )
    query.awaitTermination()
    if query.exception() is not None:
        print(f"the streaming query failed: {query.exception()}", file=console)
        return 1
    progress = query.lastProgress or {}
    panes = pd.concat(collected, ignore_index=True)
    lost = pd.concat(dropped, ignore_index=True) if dropped else pd.DataFrame()
    try:
        ok = report(panes, lost, recorded, console)
    except Exception as exc:  # the console is all the user sees
        print(f"report failed: {exc!r} (details in {out}/spark.log)", file=console)
        raise
    metrics = (progress.get("observedMetrics") or {}).get("headwater")
    if metrics:
        counts = metrics.asDict() if hasattr(metrics, "asDict") else metrics
        print(
            f"Query progress, last micro-batch (observed metrics 'headwater'): {counts}",
            file=console,
        )
    print(f"\nchangelog (Parquet): {os.path.join(out, 'changelog')}", file=console)
    print(f"dead letters (Parquet): {os.path.join(out, 'dead_letters')}", file=console)
    print(f"Spark's log: {os.path.join(out, 'spark.log')}", file=console)
    spark.stop()
    return 0 if ok else 1


def _quiet(log_path: str):
    """Send this process's (and the Spark JVM's, started later) stdout and
    stderr to ``log_path``; return a stream to the original console."""
    sys.stdout.flush()
    sys.stderr.flush()
    console = os.fdopen(os.dup(1), "w", buffering=1)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    return console


def report(panes: pd.DataFrame, dropped: pd.DataFrame, recorded: pd.DataFrame, console) -> bool:
    """Print one window's life and a summary; check the totals against the input."""
    shown = panes.assign(
        window_start=pd.to_datetime(panes.window_start, unit="ms"),
        window_end=pd.to_datetime(panes.window_end, unit="ms"),
    )
    cols = [
        "team",
        "window_start",
        "window_end",
        "total",
        "n",
        "timing",
        "pane_index",
        "is_retraction",
        "is_last",
        "batch",
    ]
    fresh = shown[~shown.is_retraction]
    busiest = fresh.groupby(["team", "window_start"]).size().idxmax()
    life = shown[(shown.team == busiest[0]) & (shown.window_start == busiest[1])]
    print(
        f"The life of one window (team {busiest[0]}, from {busiest[1]}), one row per pane;",
        "'batch' is the micro-batch that emitted it:",
        file=console,
    )
    print(life[cols].to_string(index=False), file=console)
    print(
        "\nPanes by timing:",
        fresh.timing.value_counts().to_dict(),
        "| retractions:",
        int(shown.is_retraction.sum()),
        "| dead letters (beyond the allowed lateness):",
        len(dropped),
        file=console,
    )
    # Replaying the changelog (retractions negated) must give the totals of the input
    # minus the dead letters, per team and window.
    signed = panes.total.where(~panes.is_retraction, -panes.total)
    final = signed.groupby([panes.team, panes.window_start]).sum()
    # A dead letter carries the whole record (team, ts, score) and the model's
    # event_time (ms): the event time identifies the row in the recorded input.
    gone = (
        dropped.drop(columns=["ts"], errors="ignore").rename(columns={"event_time": "ts"})
        if len(dropped)
        else pd.DataFrame(columns=["team", "ts"])
    )
    kept = recorded.merge(
        gone[["team", "ts"]].assign(gone=True),
        on=["team", "ts"],
        how="left",
    )
    kept = kept[kept["gone"].isna()]
    expected = kept.score.groupby([kept.team, kept.ts - kept.ts % 120_000]).sum()
    ok = final.sort_index().astype(int).to_dict() == expected.sort_index().astype(int).to_dict()
    print(
        f"Changelog replayed: {len(final)} windows, {int(final.sum())} points from "
        f"{len(kept)} scores; equals the input's totals: {'yes' if ok else 'NO'}",
        file=console,
    )
    return ok


if __name__ == "__main__":
    sys.exit(main())
