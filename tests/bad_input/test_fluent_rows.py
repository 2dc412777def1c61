"""Bad input has one outcome on every runner: a matrix of cases x runners.

Runners: ``local`` (pandas, the core in this process), ``bounded`` (a Spark
DataFrame: a native batch plan) and ``streaming`` (the same rows as files
arriving in a directory, on Structured Streaming). Each case states its
outcome once; every runner must produce it (docs/semantics.md, "bad input").
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.io.arrival import in_arrival_order
from headwater.model.plan import PlanError

pytestmark = pytest.mark.spark

RUNNERS = ["local", "bounded", "streaming"]
#: A row far in the future, in a later file: it moves a stream's watermark past
#: every test window, so they close (its own window stays open and is ignored).
SENTINEL_KEY = "zz-sentinel"
DAY_MS = 86_400_000


def pipeline(stream, agg=None):
    aggregations = agg or {"total": hw.sum("v"), "n": hw.count()}
    return stream.window(hw.FixedWindows(60)).group_by("k").agg(**aggregations)


def run(spark, tmp_path, runner, pdf, build=pipeline, schema=None, **source):
    """(panes, dead letters) as pandas frames, from ``runner``."""
    if runner == "local":
        result = build(hw.from_pandas(pdf, "ts", **source))
        return result.to_pandas(), result.dead_letters()
    sdf = spark.createDataFrame(pdf, schema=schema) if schema else spark.createDataFrame(pdf)
    if runner == "bounded":
        result = build(hw.from_spark(sdf, "ts", **source))
        return result.to_pandas(), result.dead_letters().toPandas()
    src = str(tmp_path / f"src-{len(os.listdir(tmp_path))}")
    sentinel = pdf.iloc[:1].copy()
    sentinel["k"] = SENTINEL_KEY
    sentinel["ts"] = _far_future(pdf["ts"])
    for i, part in enumerate([pdf, sentinel]):
        # one file per part: the stream reads one file per micro-batch
        spark.createDataFrame(part, schema=sdf.schema).coalesce(1).write.parquet(f"{src}/{i}")
    in_arrival_order(f"{src}/{i}" for i in range(2))
    stream = (
        spark.readStream.schema(sdf.schema)
        .option("maxFilesPerTrigger", 1)
        .option("recursiveFileLookup", "true")
        .parquet(src)
    )
    result = build(hw.from_spark(stream, "ts", watermark="1 second", **source))
    got: dict[str, list[pd.DataFrame]] = {"p": [], "d": []}
    query = result.start(
        checkpoint_location=src + "-checkpoint",
        panes_sink=lambda b, i: got["p"].append(b.toPandas()),
        dead_letter_sink=lambda b, i: got["d"].append(b.toPandas()),
        trigger={"availableNow": True},
    )
    query.awaitTermination(300)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    panes = pd.concat(got["p"], ignore_index=True)
    return panes[panes.k != SENTINEL_KEY], pd.concat(got["d"], ignore_index=True)


def _far_future(ts: pd.Series):
    if pd.api.types.is_datetime64_any_dtype(ts):
        return ts.dropna().max() + pd.Timedelta(days=1)
    if pd.api.types.is_integer_dtype(ts):
        return int(ts.max()) + DAY_MS
    return ts.iloc[0]  # not an event time: the plan refuses it before anything runs


def totals(panes: pd.DataFrame) -> list[tuple]:
    """(key, window start in ms, total, n) of every pane, NULL as None."""
    start = panes["window_start"]
    if pd.api.types.is_datetime64_any_dtype(start):
        utc = start.dt.tz_convert("UTC").dt.tz_localize(None) if start.dt.tz else start
        start = utc.astype("datetime64[ms]").astype(np.int64)
    out = []
    for k, s, total, n in zip(panes.k, start, panes.total, panes.n, strict=True):
        out.append((k, int(s), None if pd.isna(total) else float(total), int(n)))
    return sorted(out)


def frame(ts, v, k=None):
    return pd.DataFrame({"k": k or ["a"] * len(ts), "ts": ts, "v": v})


T0 = pd.Timestamp("2026-01-01 12:00:00")


@pytest.mark.parametrize("runner", RUNNERS)
def test_null_event_time_goes_to_the_dead_letters(spark, tmp_path, runner):
    pdf = frame([T0, pd.NaT, T0 + pd.Timedelta(seconds=5)], [1, 2, 3])
    panes, letters = run(spark, tmp_path, runner, pdf)
    assert totals(panes) == [("a", int(T0.value // 10**6), 4.0, 2)]
    nulls = letters[letters.reason == "null_event_time"]
    # The whole record on every runner (a streaming run carries it, unlifted).
    assert nulls[["k", "v", "elements"]].values.tolist() == [["a", 2, 1]]
    assert nulls["event_time"].isna().all()


@pytest.mark.parametrize("runner", RUNNERS)
def test_null_event_time_fails_the_query_when_asked(spark, tmp_path, runner):
    pdf = frame([T0, pd.NaT], [1, 2])
    with pytest.raises(Exception, match="null event time in column 'ts'"):
        run(spark, tmp_path, runner, pdf, on_null_event_time="error")


@pytest.mark.parametrize("runner", RUNNERS)
def test_event_time_of_a_wrong_type_is_refused_when_the_pipeline_is_built(spark, tmp_path, runner):
    for bad in (["12:00", "12:01"], [1.5, 2.5]):
        pdf = frame(bad, [1, 2])
        with pytest.raises(PlanError, match="event-time column 'ts' has type") as err:
            run(spark, tmp_path, runner, pdf)
        assert "epoch milliseconds" in str(err.value)


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_value_column_the_combiner_cannot_take_is_refused_at_plan_time(spark, tmp_path, runner):
    pdf = frame([T0, T0], ["x", "y"])
    with pytest.raises(PlanError, match=r"'total'.*Sum.*column 'v' of type string"):
        run(spark, tmp_path, runner, pdf)


@pytest.mark.parametrize("runner", RUNNERS)
def test_nan_values_are_nulls_and_a_window_of_only_nulls_sums_to_null(spark, tmp_path, runner):
    later = T0 + pd.Timedelta(minutes=5)
    pdf = frame([T0, T0, later], [1.5, np.nan, np.nan])
    panes, letters = run(spark, tmp_path, runner, pdf)
    start = int(T0.value // 10**6)
    assert totals(panes) == [("a", start, 1.5, 2), ("a", start + 300_000, None, 1)]
    assert letters.empty


@pytest.mark.parametrize("runner", ["local", "bounded"])
def test_empty_input_gives_no_panes_and_no_dead_letters(spark, tmp_path, runner):
    pdf = frame([T0], [1]).iloc[:0]
    panes, letters = run(spark, tmp_path, runner, pdf, schema="k string, ts timestamp, v long")
    assert panes.empty and letters.empty


@pytest.mark.parametrize("runner", RUNNERS)
def test_event_times_at_the_ends_of_the_timestamp_range(spark, tmp_path, runner):
    # Epoch milliseconds of 0001-01-01T00:00:00 and 9999-12-31T23:58:00 (whole minutes).
    lo, hi = -62_135_596_800_000, 253_402_300_680_000
    pdf = frame([lo, hi], [1, 2], k=["lo", "hi"])
    panes, letters = run(spark, tmp_path, runner, pdf)
    assert totals(panes) == [("hi", hi, 2.0, 1), ("lo", lo, 1.0, 1)]
    assert letters.empty


@pytest.mark.parametrize("runner", RUNNERS)
def test_time_zone_aware_event_times_are_instants(spark, tmp_path, runner):
    berlin = pd.Series(pd.to_datetime(["2026-01-01 13:00:10", "2026-01-01 13:00:50"]))
    pdf = frame(berlin.dt.tz_localize("Europe/Berlin"), [1, 2])
    panes, _ = run(spark, tmp_path, runner, pdf)
    # 13:00 in Berlin (UTC+1 in winter) is 12:00 UTC.
    assert totals(panes) == [("a", int(T0.value // 10**6), 3.0, 2)]


def test_a_streaming_query_starts_on_a_session_without_the_rocksdb_state_store(spark, tmp_path):
    key = "spark.sql.streaming.stateStore.providerClass"
    saved = spark.conf.get(key)
    spark.conf.unset(key)  # a user's session as it comes
    try:
        panes, _ = run(spark, tmp_path, "streaming", frame([T0], [1]))
        assert totals(panes) == [("a", int(T0.value // 10**6), 1.0, 1)]
        assert spark.conf.get(key, None) is None  # the user's setting is left as it was
    finally:
        spark.conf.set(key, saved)


def test_dead_letters_are_the_same_on_the_streaming_runner_as_locally(spark, tmp_path):
    """A dead letter is the whole original record on both runners: the same columns,
    in the same order, of the same types, with the same values (on Spark the rows
    are then not lifted: a partial aggregate has no record)."""
    pdf = pd.DataFrame(
        {
            "k": ["a", "a", "b"],
            "ts": [T0, pd.NaT, pd.NaT],
            "v": [1, 2, 3],
            "w": [0.5, 1.5, 2.5],
            "note": ["x", "y", "z"],
        }
    )
    _, local = run(spark, tmp_path, "local", pdf)
    _, streamed = run(spark, tmp_path, "streaming", pdf)
    assert list(streamed.columns) == list(local.columns)
    assert streamed.dtypes.astype(str).tolist() == local.dtypes.astype(str).tolist()
    order = ["k", "v"]
    pd.testing.assert_frame_equal(
        streamed.sort_values(order).reset_index(drop=True),
        local.sort_values(order).reset_index(drop=True),
    )
    assert local[["k", "v", "w", "note"]].values.tolist() == [
        ["a", 2, 1.5, "y"],
        ["b", 3, 2.5, "z"],
    ]
