"""The user-facing API on bounded input: headwater.api -> headwater.runners.spark.batch.

Results are compared with an independent reference written here in plain Python
(window assignment, session merging and aggregation by hand), and with the
engine-independent core (headwater.model.reducer.Reducer) fed the same rows.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

import headwater.api as hw
from headwater.model.combiners import Count, Max, Min, Sum
from headwater.model.plan import PlanError
from headwater.model.reducer import Reducer
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import GLOBAL_WINDOW_END, MAX_TIMESTAMP, MIN_TIMESTAMP

pytestmark = pytest.mark.spark

SCHEMA = "team string, ts long, score long"
PANE = (
    "timestamp",
    "pane_index",
    "nonspeculative_index",
    "timing",
    "is_first",
    "is_last",
    "is_retraction",
)


# ------------------------------------------------------------------ reference
def _windows_of(ts: int, wf) -> list[tuple[int, int]]:
    """Windows containing ``ts``, computed directly from the definitions."""
    if isinstance(wf, hw.GlobalWindows):
        return [(MIN_TIMESTAMP, GLOBAL_WINDOW_END)]
    if isinstance(wf, hw.FixedWindows):
        start = ts - (ts - wf.offset) % wf.size  # Python's % floors: right for ts < 0
        return [(start, start + wf.size)]
    if isinstance(wf, hw.SlidingWindows):
        out = []
        start = ts - (ts - wf.offset) % wf.period
        while start > ts - wf.size:
            out.append((start, start + wf.size))
            start -= wf.period
        return out
    if isinstance(wf, hw.CumulativeWindows):
        start = ts - (ts - wf.offset) % wf.size
        ends = range(start + wf.step, start + wf.size + 1, wf.step)
        return [(start, end) for end in ends if end > ts]
    raise AssertionError(wf)


def reference(rows, wf, combiner="end_of_window"):
    """{(team, start, end): {sum, n, min, max, mean, timestamp, values}} by hand."""
    groups: dict[tuple, list[tuple[int, int | None]]] = defaultdict(list)
    if isinstance(wf, hw.Sessions):
        by_team = defaultdict(list)
        for team, ts, score in rows:
            if ts is not None:
                by_team[team].append((ts, score))
        for team, elems in by_team.items():
            elems.sort(key=lambda e: e[0])
            session: list = []
            for ts, score in elems:
                if session and ts >= max(t for t, _ in session) + wf.gap:
                    groups[(team, session[0][0], max(t for t, _ in session) + wf.gap)] = session
                    session = []
                session.append((ts, score))
            groups[(team, session[0][0], max(t for t, _ in session) + wf.gap)] = session
    else:
        for team, ts, score in rows:
            if ts is None:
                continue
            for start, end in _windows_of(ts, wf):
                groups[(team, start, end)].append((ts, score))
    out = {}
    for (team, start, end), elems in groups.items():
        scores = [s for _, s in elems if s is not None]
        times = [t for t, _ in elems]
        timestamp = {
            "end_of_window": end - 1,
            "earliest": min(times),
            "earliest_transformed": min(times),
            "latest": max(times),
        }[combiner]
        out[(team, start, end)] = {
            "total": sum(scores) if scores else None,  # SQL: NULL sum of no value
            "n": len(elems),
            "lo": min(scores) if scores else None,
            "hi": max(scores) if scores else None,
            "avg": sum(scores) / len(scores) if scores else None,
            "timestamp": timestamp,
            "values": sorted(scores),
        }
    return out


def random_rows(
    seed: int, n: int = 200, teams=("a", "b", "c"), lo=-300_000, hi=900_000, null_scores=False
):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        score = rng.randrange(0, 50)
        if null_scores and rng.random() < 0.1:
            score = None
        rows.append((rng.choice(teams), rng.randrange(lo, hi), score))
    return rows


def collect(result, *extra_cols):
    """{(team, start, end): row as dict} of a result DataFrame."""
    out = {}
    for row in result.to_spark().collect():
        d = row.asDict()
        key = (d.get("team"), d["window_start"], d["window_end"])
        assert key not in out, f"two panes for one window: {key}"
        out[key] = d
    return out


def _all_aggs():
    return dict(
        total=hw.sum("score"),
        n=hw.count(),
        lo=hw.min("score"),
        hi=hw.max("score"),
        avg=hw.mean("score"),
        values=hw.collect_list("score"),
    )


def assert_single_final_pane(d: dict, timestamp: int) -> None:
    assert d["timestamp"] == timestamp
    assert d["pane_index"] == 0
    assert d["nonspeculative_index"] == 0
    assert d["timing"] == "ON_TIME"
    assert d["is_first"] is True
    assert d["is_last"] is True
    assert d["is_retraction"] is False


def check_against_reference(spark, rows, wf, combiner="end_of_window"):
    df = spark.createDataFrame(rows, SCHEMA)
    result = (
        hw.from_spark(df, event_time="ts")
        .window(wf, timestamp_combiner=combiner)
        .group_by("team")
        .agg(**_all_aggs())
    )
    got = collect(result)
    want = reference(rows, wf, combiner)
    assert set(got) == set(want)
    for key, exp in want.items():
        d = got[key]
        assert d["total"] == exp["total"], key
        assert d["n"] == exp["n"], key
        assert d["lo"] == exp["lo"] and d["hi"] == exp["hi"], key
        if exp["avg"] is None:
            assert d["avg"] is None
        else:
            assert math.isclose(d["avg"], exp["avg"]), key
        assert sorted(d["values"]) == exp["values"], key
        assert_single_final_pane(d, exp["timestamp"])
    assert list(result.to_spark().columns) == [
        "team",
        "window_start",
        "window_end",
        *_all_aggs(),
        *PANE,
    ]
    return got


# ---------------------------------------------------------- windows vs reference
@pytest.mark.parametrize(
    "wf",
    [
        hw.FixedWindows("1 minute"),
        hw.FixedWindows(60, offset=25),
        hw.SlidingWindows("2 minutes", "30 seconds"),
        hw.SlidingWindows(100, 40, offset=7),  # period does not divide size
        hw.CumulativeWindows("30 seconds", "2 minutes"),
        hw.CumulativeWindows(20, 100, offset=7),
        hw.Sessions("20 seconds"),
        hw.GlobalWindows(),
    ],
    ids=repr,
)
def test_windows_match_reference(spark, wf):
    check_against_reference(spark, random_rows(seed=1), wf)


@pytest.mark.parametrize(
    "combiner", ["end_of_window", "earliest", "latest", "earliest_transformed"]
)
@pytest.mark.parametrize(
    "wf", [hw.FixedWindows(90), hw.SlidingWindows(120, 60), hw.Sessions(15)], ids=repr
)
def test_timestamp_combiners(spark, wf, combiner):
    check_against_reference(spark, random_rows(seed=2, n=120), wf, combiner)


#: Sessions of ``test_sessions_merge_boundaries``: Beam's, then Flink's and Spark's
#: (with ``merge_touching``, [19.999 s, ...) joins the session it touches).
BOUNDARIES = {
    False: {
        ("a", 0, 19_999): (3, 2),
        ("a", 19_999, 35_000): (44, 3),
        ("b", 5_000, 15_000): (16, 1),
    },
    True: {("a", 0, 35_000): (47, 5), ("b", 5_000, 15_000): (16, 1)},
}


@pytest.mark.parametrize("touching", [False, True])
def test_sessions_merge_boundaries(spark, touching):
    # gap 10 s: [0, 10 s) and [9.999 s, 19.999 s) overlap and merge; [19.999 s, ...) only
    # touches the merged [0, 19.999 s) and starts a new session, which 25 s then extends.
    rows = [
        ("a", 0, 1),
        ("a", 9_999, 2),
        ("a", 19_999, 4),
        ("a", 25_000, 8),
        ("b", 5_000, 16),
        ("a", 25_000, 32),
    ]
    got = collect(
        hw.from_spark(spark.createDataFrame(rows, SCHEMA), "ts")
        .window(hw.Sessions(10, merge_touching=touching))
        .group_by("team")
        .agg(total=hw.sum("score"), n=hw.count())
    )
    assert {k: (d["total"], d["n"]) for k, d in got.items()} == BOUNDARIES[touching]
    local = (
        hw.from_pandas(pd.DataFrame(rows, columns=["team", "ts", "score"]), "ts")
        .window(hw.Sessions(10, merge_touching=touching))
        .group_by("team")
        .agg(total=hw.sum("score"), n=hw.count())
        .to_pandas()
    )
    assert {
        (r.team, r.window_start, r.window_end): (r.total, r.n) for r in local.itertuples()
    } == BOUNDARIES[touching]


def test_null_scores_follow_the_combiners(spark):
    rows = random_rows(seed=3, n=150, null_scores=True)
    rows.append(("z", 10, None))  # a window whose only value is null
    got = check_against_reference(spark, rows, hw.FixedWindows(60))
    only_null = got[("z", 0, 60_000)]
    assert only_null["total"] is None and only_null["n"] == 1 and only_null["lo"] is None


# ------------------------------------------------------------ many aggregations
def test_many_aggregations_and_expressions(spark):
    from pyspark.sql import functions as F

    rows = random_rows(seed=4, n=300)
    df = spark.createDataFrame(rows, SCHEMA)
    result = (
        hw.from_spark(df, "ts")
        .window(hw.FixedWindows("5 minutes"))
        .group_by("team")
        .agg(
            doubled=hw.sum(F.col("score") * 2),
            top=hw.top_k("score", 3),
            bottom=hw.top_k("score", 2, largest=False),
            distinct=hw.approx_count_distinct("score"),
            quantiles=hw.approx_quantiles("score", 3),
            n=hw.count(),
            core_style=(Sum(), "score"),
        )
    )
    got = collect(result)
    want = reference(rows, hw.FixedWindows("5 minutes"))
    assert set(got) == set(want)
    for key, exp in want.items():
        d, values = got[key], exp["values"]
        assert d["doubled"] == 2 * exp["total"] == 2 * d["core_style"]
        assert d["top"] == sorted(values, reverse=True)[:3]
        assert d["bottom"] == values[:2]
        distinct = len(set(values))
        assert abs(d["distinct"] - distinct) <= max(1, 0.1 * distinct)
        assert d["quantiles"][0] == values[0] and d["quantiles"][-1] == values[-1]
        assert d["n"] == exp["n"]
    assert not any(c.startswith("__hw") for c in result.to_spark().columns)


def test_no_key_and_many_keys(spark):
    rows = [(t, ts, s, t.upper()) for t, ts, s in random_rows(seed=5, n=100)]
    df = spark.createDataFrame(rows, "team string, ts long, score long, region string")
    wf = hw.FixedWindows(120)
    overall = hw.from_spark(df, "ts").window(wf).agg(total=hw.sum("score")).to_spark()
    assert overall.columns[:3] == ["window_start", "window_end", "total"]
    want: dict = defaultdict(int)
    for _, ts, s, _ in rows:
        want[_windows_of(ts, wf)[0]] += s
    assert {(r.window_start, r.window_end): r.total for r in overall.collect()} == dict(want)

    two = (
        hw.from_spark(df, "ts")
        .window(wf)
        .group_by("team", "region")
        .agg(total=hw.sum("score"))
        .to_spark()
    )
    assert two.columns[:4] == ["team", "region", "window_start", "window_end"]
    assert two.count() == len(reference([(t, ts, s) for t, ts, s, _ in rows], wf))


# ------------------------------------------------ triggers and modes: one pane
@pytest.mark.parametrize(
    "trigger",
    [
        hw.Default(),
        hw.AfterWatermark(early=hw.AfterProcessingTime("1 minute"), late=hw.AfterCount(1)),
        hw.AfterWatermark(early=hw.AfterCount(1)),
        hw.AfterCount(3),
        hw.Repeatedly(hw.AfterCount(2)),
        hw.AfterProcessingTime(10),
        hw.Never(),
        hw.OrFinally(hw.Repeatedly(hw.AfterCount(1)), hw.AfterWatermark()),
    ],
    ids=repr,
)
@pytest.mark.parametrize("accumulation", ["discarding", "accumulating", "retracting"])
def test_every_trigger_and_mode_gives_one_complete_pane(spark, trigger, accumulation):
    rows = random_rows(seed=6, n=60)
    df = spark.createDataFrame(rows, SCHEMA)
    result = (
        hw.from_spark(df, "ts")
        .window(
            hw.Sessions(30),
            trigger=trigger,
            accumulation=accumulation,
            allowed_lateness="10 minutes",
        )
        .group_by("team")
        .agg(total=hw.sum("score"))
    )
    got = collect(result)
    want = reference(rows, hw.Sessions(30))
    assert {k: d["total"] for k, d in got.items()} == {k: e["total"] for k, e in want.items()}
    for key, d in got.items():
        assert_single_final_pane(d, key[2] - 1)


@pytest.mark.parametrize(
    "wf",
    [
        hw.FixedWindows(10),
        hw.SlidingWindows(10, 5),
        hw.Sessions(10),
        hw.GlobalWindows(),
        hw.CalendarWindows("month"),
        hw.ValidityWindows(),
    ],
    ids=repr,
)
def test_empty_input_has_no_panes(spark, wf):
    empty = spark.createDataFrame([], SCHEMA)
    stream = hw.from_spark(empty, "ts").window(wf)
    assert stream.agg(n=hw.count(), total=hw.sum("score")).to_spark().count() == 0
    assert stream.group_by("team").agg(n=hw.count()).to_spark().count() == 0


# ------------------------------------------------------------- event-time types
def test_timestamp_event_time_round_trips_as_timestamps(spark):
    import datetime as dt

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    rows = random_rows(seed=7, n=80, lo=1_700_000_000_000, hi=1_700_000_600_000)
    df = spark.createDataFrame(rows, SCHEMA).withColumn("ts", F.timestamp_millis("ts"))
    result = (
        hw.from_spark(df, "ts")
        .window(hw.FixedWindows("1 minute"), timestamp_combiner="latest")
        .group_by("team")
        .agg(total=hw.sum("score"))
    )
    out = result.to_spark()
    types = {f.name: f.dataType for f in out.schema.fields}
    for name in ("window_start", "window_end", "timestamp"):
        assert isinstance(types[name], T.TimestampType)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

    def ms(t):  # collected timestamps are naive, in the session time zone (UTC in tests)
        return round((t.replace(tzinfo=dt.timezone.utc) - epoch).total_seconds() * 1000)

    got = {
        (r.team, ms(r.window_start), ms(r.window_end)): (r.total, ms(r.timestamp))
        for r in out.collect()
    }
    want = reference(rows, hw.FixedWindows(60), "latest")
    assert got == {k: (e["total"], e["timestamp"]) for k, e in want.items()}
    # TIMESTAMP_NTZ reads as wall time in the session time zone (UTC here)
    ntz = df.withColumn("ts", F.col("ts").cast("timestamp_ntz"))
    same = (
        hw.from_spark(ntz, "ts")
        .window(hw.FixedWindows("1 minute"), timestamp_combiner="latest")
        .group_by("team")
        .agg(total=hw.sum("score"))
        .to_spark()
    )
    assert sorted(same.collect()) == sorted(out.collect())


def test_global_window_bounds_are_null_as_timestamps(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([("a", 1_000, 1)], SCHEMA)
    for combiner, expected in [("end_of_window", None), ("earliest", 1_000)]:
        row = (
            hw.from_spark(df.withColumn("ts", F.timestamp_millis("ts")), "ts")
            .window(hw.GlobalWindows(), timestamp_combiner=combiner)
            .agg(n=hw.count())
            .to_spark()
            .select("window_start", "window_end", F.unix_millis("timestamp").alias("t"), "n")
            .first()
        )
        assert (row.window_start, row.window_end, row.t, row.n) == (None, None, expected, 1)
    row = hw.from_spark(df, "ts").window(hw.GlobalWindows()).agg(n=hw.count()).to_spark().first()
    assert (row.window_start, row.window_end) == (MIN_TIMESTAMP, GLOBAL_WINDOW_END)
    assert row.timestamp == GLOBAL_WINDOW_END - 1


def test_unusable_event_time_type_is_rejected(spark):
    df = spark.createDataFrame([("a", 1.5, 1)], "team string, ts double, score long")
    with pytest.raises(PlanError, match="event-time column 'ts' has type float64"):
        hw.from_spark(df, "ts")
    with pytest.raises(PlanError, match="'nope' is not a column of the input"):
        hw.from_spark(df, "nope")


# ------------------------------------------------------------- null event times
def test_null_event_times_become_dead_letters(spark):
    rows = random_rows(seed=8, n=50) + [("a", None, 5), ("b", None, 6)]
    df = spark.createDataFrame(rows, SCHEMA)
    result = (
        hw.from_spark(df, "ts")
        .window(hw.FixedWindows(60))
        .group_by("team")
        .agg(total=hw.sum("score"), n=hw.count())
    )
    got = collect(result)
    assert sum(d["n"] for d in got.values()) == 50
    want = reference(rows, hw.FixedWindows(60))
    assert {k: d["total"] for k, d in got.items()} == {k: e["total"] for k, e in want.items()}
    dead = result.dead_letters()
    assert dead.columns == [
        "team",
        "window_start",
        "window_end",
        "event_time",
        "reason",
        "elements",
        "score",
    ]
    assert sorted((r.team, r.score, r.reason) for r in dead.collect()) == [
        ("a", 5, "null_event_time"),
        ("b", 6, "null_event_time"),
    ]
    assert result.dead_letter_count() == 2


def test_null_event_time_can_fail_the_query(spark):
    df = spark.createDataFrame([("a", None, 5), ("a", 1, 1)], SCHEMA)
    result = (
        hw.from_spark(df, "ts", on_null_event_time="error")
        .window(hw.FixedWindows(60))
        .agg(n=hw.count())
    )
    with pytest.raises(Exception, match="null event time in column 'ts'"):
        result.to_spark().collect()


def test_elements_between_sliding_windows_are_dead_letters(spark):
    rows = [("a", 500, 1), ("a", 1_500, 2), ("a", 2_100, 4)]  # windows [0,1s), [2s,3s)
    result = (
        hw.from_spark(spark.createDataFrame(rows, SCHEMA), "ts")
        .window(hw.SlidingWindows(1, 2))
        .group_by("team")
        .agg(total=hw.sum("score"))
    )
    assert {k: d["total"] for k, d in collect(result).items()} == {
        ("a", 0, 1_000): 1,
        ("a", 2_000, 3_000): 4,
    }
    letters = result.dead_letters().collect()
    assert [(r.event_time, r.reason) for r in letters] == [(1_500, "no_window")]


# ------------------------------------------------------------------ API shape
def test_api_validation(spark):
    df = spark.createDataFrame([("a", 1, 1)], SCHEMA)
    stream = hw.from_spark(df, "ts")
    assert not stream.is_streaming
    with pytest.raises(PlanError, match="output column"):
        stream.window(hw.FixedWindows(1)).group_by("team").agg(timestamp=hw.count())
    with pytest.raises(PlanError, match="'nope' is not a column"):
        stream.window(hw.FixedWindows(1)).group_by("nope")
    with pytest.raises(PlanError, match="at least one"):
        stream.window(hw.FixedWindows(1)).agg()
    with pytest.raises(TypeError, match="aggregation 'x'"):
        stream.window(hw.FixedWindows(1)).agg(x=42)
    with pytest.raises(PlanError, match="not a window function"):
        stream.window("1 minute")
    with pytest.raises(PlanError, match="on_null_event_time"):
        hw.from_spark(df, "ts", on_null_event_time="drop")
    strategy = WindowingStrategy.of(hw.FixedWindows(5), accumulation="discarding")
    assert stream.window(strategy).strategy is strategy
    assert (
        stream.window(
            hw.FixedWindows(5), accumulation="retracting", allowed_lateness="1 minute"
        ).strategy.allowed_lateness
        == 60_000
    )


def test_streaming_input_goes_to_the_streaming_runner(spark):
    from pyspark.sql import types as T

    df = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    stream = hw.from_spark(df, "timestamp", watermark="10 seconds")
    assert stream.is_streaming
    result = stream.window(hw.FixedWindows(10)).agg(n=hw.count(), total=hw.sum("value"))
    with pytest.raises(NotImplementedError, match="dead_letter_sink"):
        result.dead_letters()
    with pytest.raises(ValueError, match="needs a watermark"):
        hw.from_spark(df, "timestamp").window(hw.FixedWindows(10)).agg(n=hw.count()).to_spark()
    out = result.to_spark()  # builds the streaming plan; nothing is started
    assert out.isStreaming
    assert out.columns == ["window_start", "window_end", "n", "total", *PANE]
    assert isinstance(out.schema["window_start"].dataType, T.TimestampType)
    with pytest.raises(ValueError, match="bounded"):
        hw.from_spark(spark.createDataFrame([("a", 1, 1)], SCHEMA), "ts").window(
            hw.FixedWindows(1)
        ).agg(n=hw.count()).start(checkpoint_location="/nonexistent")


@pytest.mark.slow
def test_streaming_and_bounded_paths_agree(spark, tmp_path, tmp_checkpoint):
    """The same rows, once as a file stream (one micro-batch, then Spark's watermark
    passes every window but the last) and once bounded: equal closed windows."""
    rows = random_rows(seed=31, n=80, lo=0, hi=120_000)
    rows.append(("a", 200_000, 1))  # moves the watermark past all other windows
    spark.createDataFrame(rows, SCHEMA).write.json(str(tmp_path / "in"))
    src = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))

    def build(df, **kw):
        return (
            hw.from_spark(df, "ts", **kw)
            .window(hw.Sessions(7))
            .group_by("team")
            .agg(total=hw.sum("score"), n=hw.count())
        )

    query = (
        build(src, watermark="0 seconds")
        .to_spark()
        .writeStream.format("memory")
        .queryName("hw_api_batch_vs_stream")
        .outputMode("append")
        .option("checkpointLocation", tmp_checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(180)
        assert query.exception() is None
    finally:
        query.stop()
    streamed = {tuple(r[:3]): tuple(r[3:]) for r in spark.table("hw_api_batch_vs_stream").collect()}
    bounded = {
        tuple(r[:3]): tuple(r[3:])
        for r in build(spark.createDataFrame(rows, SCHEMA)).to_spark().collect()
        if r.window_end <= 200_000
    }
    assert streamed == bounded and len(bounded) > 10


# --------------------------------------------------- agreement with the core
CORE_AGGS = {
    "total": (Sum(), "score"),
    "n": (Count(), None),
    "lo": (Min(), "score"),
    "hi": (Max(), "score"),
}


def core_panes(rows, strategy):
    """Feed the rows to the core as one complete-input step (rule 7): all rows added,
    the watermark to +inf, then the triggers evaluated."""
    r = Reducer(strategy, CORE_AGGS)
    keys = np.array([t for t, _, _ in rows], dtype=object)
    ts = np.array([t for _, t, _ in rows], dtype=np.int64)
    values = pd.DataFrame({"score": np.array([s for _, _, s in rows], dtype=np.int64)})
    return _pane_tuples(r.step(keys, ts, values, watermark=MAX_TIMESTAMP, now=0).panes, "key")


def _pane_tuples(frame: pd.DataFrame, key: str) -> list[tuple]:
    cols = [key, "window_start", "window_end", *CORE_AGGS, *PANE]
    out = []
    for rec in frame[cols].itertuples(index=False):
        out.append(
            tuple(
                int(v)
                if isinstance(v, (np.integer, float, np.floating)) and not isinstance(v, bool)
                else (bool(v) if isinstance(v, np.bool_) else v)
                for v in rec
            )
        )
    return sorted(out)


def spark_panes(spark, rows, strategy):
    df = spark.createDataFrame(rows, SCHEMA)
    out = (
        hw.from_spark(df, "ts")
        .window(strategy)
        .group_by("team")
        .agg(**{name: spec for name, spec in CORE_AGGS.items()})
        .to_spark()
    )
    return _pane_tuples(out.toPandas(), "team")


WINDOW_FNS = [
    hw.FixedWindows(45),
    hw.SlidingWindows(60, 20),
    hw.Sessions(12),
    hw.GlobalWindows(),
    hw.CalendarWindows("day", tz="Europe/Berlin"),
    hw.ValidityWindows(),
]


@pytest.mark.parametrize("seed", [11, 12])
@pytest.mark.parametrize("wf", WINDOW_FNS, ids=repr)
def test_bounded_plan_equals_core_on_random_input(spark, wf, seed):
    rng = random.Random(seed)
    trigger = rng.choice(
        [
            hw.Default(),
            hw.Never(),
            hw.AfterWatermark(early=hw.AfterProcessingTime(5), late=hw.AfterCount(1)),
            hw.AfterProcessingTime(period=60),
        ]
    )
    strategy = WindowingStrategy.of(
        wf,
        trigger,
        accumulation=rng.choice(["discarding", "accumulating", "retracting"]),
        allowed_lateness=rng.choice([0, 30]),
        timestamp_combiner=rng.choice(["end_of_window", "earliest", "latest"]),
    )
    lo, hi = (
        (-3 * 86_400_000, 3 * 86_400_000)
        if isinstance(wf, hw.CalendarWindows)
        else (-200_000, 400_000)
    )
    rows = random_rows(seed, n=rng.randrange(1, 150), teams=("x", "y", "z", "w"), lo=lo, hi=hi)
    assert spark_panes(spark, rows, strategy) == core_panes(rows, strategy)


@pytest.mark.parametrize(
    "trigger",
    [
        hw.AfterCount(3),
        hw.Repeatedly(hw.AfterCount(2)),
        hw.AfterWatermark(early=hw.AfterCount(1)),
        hw.AfterEach(hw.AfterCount(2), hw.AfterCount(5)),
    ],
    ids=repr,
)
def test_count_triggers_equal_core_with_complete_input_step(spark, trigger):
    rows = random_rows(seed=21, n=80)
    strategy = WindowingStrategy.of(
        hw.Sessions(20), trigger, accumulation="retracting", timestamp_combiner="earliest"
    )
    assert spark_panes(spark, rows, strategy) == core_panes(rows, strategy)


# ------------------------------------------------------------------- benchmark
def test_bench_batch_runs(spark, tmp_path, capsys):
    """`headwater bench batch` end to end on a tiny input (in the test's session)."""
    import json

    from headwater.bench import main as bench_main

    try:
        assert (
            bench_main(
                [
                    "batch",
                    "--rows",
                    "3000",
                    "--keys",
                    "20",
                    "--reps",
                    "1",
                    "--json",
                    "--data-dir",
                    str(tmp_path),
                ]
            )
            == 0
        )
    finally:
        spark.sparkContext.setLogLevel("WARN")  # the bench quiets the shared session
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 3000
    for case in ("fixed", "sessions"):
        assert report[case]["headwater_s"] > 0 and report[case]["ratio"] > 0
    assert report["sessions"]["ratio_lag"] > 0
