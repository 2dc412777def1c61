"""The Spark streaming runner: same panes as the local runner, Spark's watermark,
dead letters and metrics, and recovery from a checkpoint."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from headwater.io.arrival import in_arrival_order
from headwater.io.replay import read_replay, write_timeline
from headwater.model.combiners import Count, Max, Mean, Sum, ToList
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MAX_TIMESTAMP
from headwater.model.triggers import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    Default,
    Repeatedly,
)
from headwater.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from headwater.runners.local import Bundle, ClockAdvance, LocalRunner, WatermarkAdvance
from headwater.runners.spark.shard import aligned_shard_ids, murmur3_int
from headwater.runners.spark.streaming import (
    dead_letters,
    lifting,
    panes,
    run_streaming,
    start_streaming,
)
from headwater.runners.spark.timeline import run_timeline, timeline_steps

pytestmark = pytest.mark.spark

_SCHEMA = StructType([StructField("value", LongType()), StructField("name", StringType())])


# ------------------------------------------------------------------ helpers


def _norm_value(v):
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(sorted(_norm_value(x) for x in v))
    if isinstance(v, (float, np.floating)):
        return None if np.isnan(v) else round(float(v), 6)
    if isinstance(v, np.generic):
        return v.item()
    return v


def _norm_panes(df: pd.DataFrame) -> list[tuple]:
    cols = [c for c in df.columns]
    return sorted((tuple(_norm_value(r[c]) for c in cols) for _, r in df.iterrows()), key=repr)


def _norm_dropped(df: pd.DataFrame) -> list[tuple]:
    cols = ["key", "timestamp", "window_start", "window_end", "reason"]
    return sorted((tuple(_norm_value(r[c]) for c in cols) for _, r in df.iterrows()), key=repr)


def _steps():
    """A timeline over three keys: on-time, early, late and too-late data."""
    return [
        Bundle(["a", "b", "a", "c"], [1000, 2000, 3000, 12000], [1, 2, 3, 4]),
        ClockAdvance(4000),
        Bundle(["a", "b"], [4000, 14000], [5, 6]),
        ClockAdvance(11000),
        WatermarkAdvance(10000),
        Bundle(["a", "c"], [5000, 25000], [7, 8]),  # a@5000 is late for [0, 10)
        ClockAdvance(20000),
        WatermarkAdvance(35000),
        Bundle(["b", "a"], [9000, 33000], [9, 10]),  # b@9000 is too late (lateness 20 s)
        WatermarkAdvance(MAX_TIMESTAMP),
    ]


STRATEGIES = {
    "fixed_default": (WindowingStrategy.of(FixedWindows(10)), {"total": (Sum(), "value")}),
    "early_late_lateness": (
        WindowingStrategy.of(
            FixedWindows(10),
            AfterWatermark(early=AfterProcessingTime(5), late=AfterCount(1)),
            allowed_lateness=20,
        ),
        {"total": (Sum(), "value"), "n": (Count(), None), "top": (Max(), "value")},
    ),
    "sessions_retracting": (
        WindowingStrategy.of(Sessions(5), Default(), accumulation="retracting"),
        {"total": (Sum(), "value")},
    ),
    "sliding_early_mean_lateness": (
        WindowingStrategy.of(
            SlidingWindows(10, 5),
            AfterWatermark(early=AfterProcessingTime(5)),
            allowed_lateness=10,
        ),
        {
            "total": (Sum(), "value"),
            "avg": (Mean(), "value"),
            "n": (Count(), None),
            "top": (Max(), "value"),
        },
    ),
    "sliding_count_discarding_values": (
        WindowingStrategy.of(
            SlidingWindows(10, 5),
            Repeatedly(AfterCount(2)),
            accumulation="discarding",
            allowed_lateness=5,
        ),
        None,
    ),
}


# -------------------------------------------------------------------- shards


def test_murmur3_matches_spark_hash(spark):
    from pyspark.sql import functions as F

    values = [0, 1, 2, 7, 42, 12345, -1, -99999, 2**31 - 1, -(2**31)]
    df = spark.createDataFrame([(v,) for v in values], "v int")
    got = [r[0] for r in df.select(F.hash("v")).collect()]
    assert got == [murmur3_int(v) for v in values]


@pytest.mark.parametrize(
    ("name", "ddl"),
    [
        ("STATE_SCHEMA", "blob BINARY, timer BIGINT"),
        ("TRANSFORM_SCHEMA", "blob BINARY"),
        ("WATERMARK_SCHEMA", "blob BINARY"),
        ("IDLE_SCHEMA", "blob BINARY"),
    ],
)
def test_state_schemas_are_the_ones_spark_parsed(spark, name, ddl):
    """The processor passes StructTypes (no parse round trip to the JVM); they must
    be what Spark parsed from the DDL strings earlier versions passed, or a query
    restarted from an older checkpoint would fail its state schema check."""
    from pyspark.sql.types import _parse_datatype_string

    from headwater.runners.spark import processor

    assert getattr(processor, name) == _parse_datatype_string(ddl)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_aligned_shard_ids_fill_every_partition(n):
    ids = aligned_shard_ids(n)
    assert len(set(ids)) == n
    assert [murmur3_int(i) % n for i in ids] == list(range(n))


# ------------------------------------------------- same panes as the local core


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_replay_matches_local_runner(spark, name):
    strategy, aggregations = STRATEGIES[name]
    steps = _steps()
    want = LocalRunner().run_steps(strategy, aggregations, steps)
    got = run_timeline(strategy, aggregations, steps, spark=spark)
    assert len(got) == len(want) == len(steps)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        cols = list(w.panes.columns) if len(w.panes) else list(g.panes.columns)
        assert _norm_panes(g.panes[cols]) == _norm_panes(w.panes[cols]), f"step {i}"
        assert _norm_dropped(g.dropped) == _norm_dropped(w.dropped), f"step {i}"
    assert sum(len(e.panes) for e in want) > 0


@pytest.mark.parametrize("name", ["fixed_default", "sliding_early_mean_lateness"])
def test_lifted_replay_matches_local_runner(spark, name):
    """Combiner lifting: same panes; a dead letter counts the elements it stands for."""
    strategy, aggregations = STRATEGIES[name]
    assert lifting(strategy, aggregations, _SCHEMA) is not None
    steps = _steps()
    want = LocalRunner().run_steps(strategy, aggregations, steps)
    got = run_timeline(strategy, aggregations, steps, spark=spark, lift=True)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        cols = list(w.panes.columns) if len(w.panes) else list(g.panes.columns)
        assert _norm_panes(g.panes[cols]) == _norm_panes(w.panes[cols]), f"step {i}"
        assert int(g.dropped.get("elements", pd.Series([], dtype=int)).sum()) == len(w.dropped)
    assert sum(len(e.dropped) for e in want) > 0


def test_lifting_validity():
    fixed = WindowingStrategy.of(FixedWindows(10))
    sums = {"s": (Sum(), "value")}
    assert lifting(fixed, sums, _SCHEMA) is not None
    assert lifting(WindowingStrategy.of(Sessions(5)), sums, _SCHEMA) is None
    counted = WindowingStrategy.of(FixedWindows(10), AfterWatermark(late=AfterCount(1)))
    assert lifting(counted, sums, _SCHEMA) is None
    earliest = WindowingStrategy.of(FixedWindows(10), timestamp_combiner="earliest")
    assert lifting(earliest, sums, _SCHEMA) is None
    assert lifting(fixed, {"v": (ToList(), "value")}, _SCHEMA) is None
    assert lifting(fixed, {"s": (Sum(), "name")}, _SCHEMA) is None  # not numeric
    sliding = lifting(WindowingStrategy.of(SlidingWindows(10, 4)), sums, _SCHEMA)
    assert sliding is not None and sliding.slice_size == 2000


def test_timeline_steps_types():
    steps, types, key_type = timeline_steps(
        [Bundle([1, 2], [10, 20], [0.5, 1.0]), ClockAdvance(5), WatermarkAdvance(30)]
    )
    assert key_type == "bigint" and types == {"value": "double"}
    assert steps == [
        {"proc_ms": 0, "rows": [[1, 10, 0.5], [2, 20, 1.0]]},
        {"proc_ms": 5},
        {"proc_ms": 5, "watermark_ms": 30},
    ]


# ------------------------------------------- Spark's watermark (bounded delay)


def _write_parquet(path, files):
    os.makedirs(path, exist_ok=True)
    paths = [os.path.join(path, f"part-{i:03d}.parquet") for i in range(len(files))]
    for target, rows in zip(paths, files, strict=True):
        pdf = pd.DataFrame(rows, columns=["user", "ms", "score"])
        pdf["et"] = pd.to_datetime(pdf["ms"], unit="ms", utc=True)
        pdf[["user", "et", "score"]].to_parquet(target, coerce_timestamps="us")
    in_arrival_order(paths)


def _collect_query(out, checkpoint, **kw):
    got: dict[tuple[str, int], pd.DataFrame] = {}
    query = start_streaming(
        out,
        checkpoint_location=checkpoint,
        panes_sink=lambda b, i: got.__setitem__(("p", i), b.toPandas()),
        dead_letter_sink=lambda b, i: got.__setitem__(("d", i), b.toPandas()),
        trigger={"availableNow": True},
        **kw,
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return query, got


@pytest.mark.parametrize("lift", [False, True])
def test_bounded_watermark_from_spark(spark, tmp_path, lift):
    src = str(tmp_path / "src")
    _write_parquet(
        src,
        [
            [("a", 1000, 1), ("b", 1500, 2), ("a", 12000, 5)],  # Spark's watermark -> 10 s
            [("a", 3000, 7), ("c", 25000, 1)],  # a@3000: behind the watermark, window closed
        ],
    )
    df = (
        spark.readStream.schema("user string, et timestamp, score long")
        .option("maxFilesPerTrigger", 1)
        .parquet(src)
    )
    out = run_streaming(
        df,
        key_cols="user",
        event_time_col="et",
        strategy=WindowingStrategy.of(FixedWindows(10)),
        aggregations={"total": (Sum(), "score"), "n": (Count(), None)},
        watermark="2 seconds",
        lift=lift,
    )
    query, got = _collect_query(out, str(tmp_path / "ck"))
    progress = query.recentProgress
    # Spark filters nothing: every row reaches headwater, which decides what is late.
    assert all(s["numRowsDroppedByWatermark"] == 0 for p in progress for s in p["stateOperators"])
    p1 = got[("p", 1)]
    assert sorted(zip(p1.user, p1.total, p1.timing, strict=True)) == [
        ("a", 1, "ON_TIME"),
        ("b", 2, "ON_TIME"),
    ]
    assert str(p1.window_end.iloc[0]) == "1970-01-01 00:00:10"
    d1 = got[("d", 1)]
    # lifted: a partial aggregate (the sum)
    scores = ["sum_score"] if lift else ["score"]
    assert list(d1.columns) == [
        "user",
        "window_start",
        "window_end",
        "event_time",
        "reason",
        "elements",
        *scores,
    ]
    partial = [7]
    assert d1[["user", "reason", "elements", *scores]].values.tolist() == [
        ["a", "late", 1, *partial]
    ]
    # The last batch has no data: the event-time timer of a's shard fires [10, 20)
    # once Spark's watermark reaches 23 s.
    last = progress[-1]
    assert last["numInputRows"] == 0
    assert last["eventTime"]["watermark"] == "1970-01-01T00:00:23.000Z"
    p2 = got[("p", last["batchId"])]
    assert p2[["user", "total", "timing", "is_last"]].values.tolist() == [["a", 5, "ON_TIME", True]]
    metrics = [p["observedMetrics"]["headwater"] for p in progress]
    assert sum(m["panes"] for m in metrics) == 3
    assert sum(m["dropped"] for m in metrics) == 1


def test_multi_column_key_global_window(spark, tmp_path):
    src = str(tmp_path / "src")
    os.makedirs(src)
    pd.DataFrame(
        {
            "user": ["a", "a", "b", "a"],
            "region": np.array([1, 1, 1, 2], dtype=np.int32),
            "ms": [10, 20, 30, 40],
            "v": [1.5, 2.5, 3.0, 4.0],
            "watermark_ms": [0, 0, 0, 0],
        }
    ).to_parquet(os.path.join(src, "part-0.parquet"))
    df = spark.readStream.schema(
        "user string, region int, ms long, v double, watermark_ms long"
    ).parquet(src)
    out = run_streaming(
        df,
        key_cols=["user", "region"],
        event_time_col="ms",
        strategy=WindowingStrategy.of(GlobalWindows(), Repeatedly(AfterCount(2))),
        aggregations={"total": (Sum(), "v")},
        watermark="punctuated",
        timestamps="timestamp",  # epoch-ms event times, window bounds as timestamps
    )
    assert out.columns[:3] == ["kind", "user", "region"]
    _, got = _collect_query(out, str(tmp_path / "ck"))
    p = got[("p", 0)]
    assert p[["user", "region", "total"]].values.tolist() == [["a", 1, 4.0]]
    # The global window's bounds lie outside Spark's timestamp range: null.
    assert p.window_start.isna().all() and p.window_end.isna().all()


def test_dead_letters_and_panes_split(spark, tmp_path):
    path = tmp_path / "t.jsonl"
    write_timeline(
        path,
        [
            {"rows": [["a", 1000, 1.0]]},
            {"watermark_ms": 20000},
            {"rows": [["a", 2000, 2.0], ["b", 25000, 3.0]]},
            {"watermark_ms": "inf"},
        ],
    )
    out = run_streaming(
        read_replay(spark, path),
        key_cols="key",
        event_time_col="ts",
        strategy=WindowingStrategy.of(FixedWindows(10)),
        aggregations={"total": (Sum(), "value")},
        timestamps="ms",
        lift=False,
    )
    batches: dict[int, pd.DataFrame] = {}
    query = (
        out.writeStream.foreachBatch(lambda b, i: batches.__setitem__(i, b.toPandas()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    allrows = pd.concat(batches.values(), ignore_index=True)
    sdf = spark.createDataFrame(allrows, schema=out.schema)
    p = panes(sdf).toPandas()
    d = dead_letters(sdf).toPandas()
    assert sorted(zip(p.key, p.total, strict=True)) == [("a", 1.0), ("b", 3.0)]
    assert d[
        ["key", "window_start", "window_end", "event_time", "reason", "elements", "value"]
    ].values.tolist() == [["a", 0, 10000, 2000, "late", 1, 2.0]]


# ---------------------------------------------------------------- recovery


def _python_workers(spark) -> list[int]:
    """Pids of the Python worker processes forked by our JVM's PySpark daemon.

    The daemon itself stays: in local mode the executor is the driver JVM, and
    a dead daemon is not restarted (a cluster would replace the executor).
    """
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))

    def cmdline(pid: int) -> str:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""

    daemons = [p for p in children.get(jvm_pid, []) if "pyspark.daemon" in cmdline(p)]
    return [w for d in daemons for w in children.get(d, [])]


def _long_timeline(path, n_steps=7):
    rng = np.random.default_rng(3)
    steps, wm, proc = [], 0, 0
    for i in range(n_steps):
        proc += 1000
        n = 30
        keys = rng.choice(["a", "b", "c", "d", "e"], n)
        ts = wm + rng.integers(-8000, 12000, n)
        steps.append(
            {
                "proc_ms": proc,
                "rows": [
                    [k, int(t), float(j)] for j, (k, t) in enumerate(zip(keys, ts, strict=True))
                ],
            }
        )
        if i % 2 == 1:
            wm += 5000
            steps.append({"proc_ms": proc, "watermark_ms": wm})
    steps.append({"proc_ms": proc + 1000, "watermark_ms": "inf"})
    write_timeline(path, steps)
    return len(steps)


def _recovery_query(spark, path, checkpoint, sink, **trigger):
    strategy = WindowingStrategy.of(
        FixedWindows(10),
        AfterWatermark(early=AfterCount(3), late=AfterCount(1)),
        accumulation="retracting",
        allowed_lateness=5,
    )
    out = run_streaming(
        read_replay(spark, path),
        key_cols="key",
        event_time_col="ts",
        strategy=strategy,
        aggregations={"total": (Sum(), "value"), "n": (Count(), None)},
        timestamps="ms",
    )
    return (
        out.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )


def _changelog(batches: dict[int, pd.DataFrame]) -> list[tuple]:
    rows = []
    for bid, df in batches.items():
        for r in df.drop(columns=["dropped"]).itertuples(index=False):
            rows.append((bid, *(_norm_value(v) for v in r)))
    return sorted(rows, key=repr)


@pytest.mark.slow
# q.stop() may interrupt a batch inside its sink's toPandas(): PySpark warns.
@pytest.mark.filterwarnings("ignore:toPandas attempted Arrow optimization")
def test_recovery_after_crash_and_stop(spark, tmp_path):
    path = tmp_path / "t.jsonl"
    n_steps = _long_timeline(path)

    # 1. Uninterrupted run.
    clean: dict[int, pd.DataFrame] = {}
    q = _recovery_query(
        spark, path, str(tmp_path / "ck-clean"), lambda b, i: clean.__setitem__(i, b.toPandas())
    )
    q.awaitTermination(300)
    assert q.exception() is None
    assert sorted(clean) == list(range(n_steps))

    # 2. Crash: the sink fails at batch 5 (after the operator committed its state for
    # that batch) and the Python workers are killed; then restart from the checkpoint.
    ck = str(tmp_path / "ck-crash")
    seen: dict[int, pd.DataFrame] = {}
    crashed = threading.Event()
    killed: list[int] = []

    def failing_sink(batch, batch_id):
        if batch_id == 5 and not crashed.is_set():
            crashed.set()
            for pid in _python_workers(spark):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            raise RuntimeError("injected crash")
        seen[batch_id] = batch.toPandas()  # idempotent per batch id

    q = _recovery_query(spark, path, ck, failing_sink)
    with pytest.raises(Exception, match="injected crash"):
        q.awaitTermination(300)
    assert crashed.is_set() and killed and 5 not in seen

    # 3. Graceful stop mid-way (processing-time trigger), then finish: stop once the
    # batch three before the last is in, so the last run has some left.
    q = _recovery_query(spark, path, ck, failing_sink, processingTime="0 seconds")
    deadline = time.time() + 300
    while max(seen, default=-1) < n_steps - 4 and time.time() < deadline:
        time.sleep(0.2)
    q.stop()
    assert q.exception() is None
    q = _recovery_query(spark, path, ck, failing_sink)
    q.awaitTermination(300)
    assert q.exception() is None

    assert sorted(seen) == list(range(n_steps))
    assert _changelog(seen) == _changelog(clean)


# ------------------------------------------------------- the transcript harness


@pytest.mark.parametrize(
    "path, name",
    [
        ("retractions.yaml", "retracting_two_keys_independent"),
        ("triggers.yaml", "repeatedly_after_processing_time_delay"),
    ],
)
def test_transcript_on_spark(spark, path, name):
    """``--runner spark`` plays a transcript through the streaming runner."""
    import yaml

    from headwater.testing.transcripts import Document, run_document, spark_runner

    here = os.path.join(os.path.dirname(__file__), "transcripts", path)
    with open(here) as f:
        (doc,) = [d for d in yaml.safe_load_all(f) if d and d.get("name") == name]
    run_document(Document.parse(doc), lambda plan, steps: spark_runner(plan, steps, spark=spark))
