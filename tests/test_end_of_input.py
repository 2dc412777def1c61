"""End of input (docs/semantics.md, "End of input"): a bounded input ends with the
watermark at the end of time, on every front end and runner, so the streaming
run's final table is the bounded run's over the rows that were not dropped.

Property tests draw random pipelines (window kinds, triggers with early
processing-time and count triggers, accumulation modes, allowed lateness) over
random finite inputs with seeded numpy generators; the Spark part runs a few
cases with ``trigger(availableNow=True)`` in the session's one SparkSession.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.api import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    FixedWindows,
    Repeatedly,
    Sessions,
    SlidingWindows,
)
from headwater.io.arrival import in_arrival_order
from headwater.io.end_of_input import EndOfInputReader, InputEndedError

START = pd.Timestamp("2024-01-01")

# ------------------------------------------------------------------ the final table


def final_table(panes: pd.DataFrame, accumulation: str, merging: bool) -> pd.DataFrame:
    """What a reader of the panes holds at the end: per key and window (per key for
    sessions), the aggregates ``n``, ``s``."""
    frame = panes.copy()
    frame["s"] = pd.to_numeric(frame["s"]).fillna(
        0
    )  # an empty ON_TIME pane sums to NULL (Beam fires it)
    window = ["key", "window_start", "window_end"]
    if accumulation == "accumulating" and not merging:
        last = frame.sort_values("pane_index", kind="stable").groupby(window).tail(1)
        out = last[[*window, "n", "s"]]
    else:
        sign = np.where(frame["is_retraction"].astype(bool), -1, 1)
        frame["n"] = frame["n"].to_numpy(np.int64) * sign
        frame["s"] = frame["s"].to_numpy(np.int64) * sign
        # Sessions: per key. A session that closed is not extended by a later element
        # (not late for its own window) that would have bridged it in the bounded run:
        # Beam's expired windows do not merge, so only the per-key totals agree.
        by = ["key"] if merging else window
        out = frame.groupby(by, as_index=False)[["n", "s"]].sum()
        out = out[out["n"] != 0]
    return _sorted(out)


def bounded_table(rows: pd.DataFrame, strategy, merging: bool, accumulation: str):
    """The bounded run of the same pipeline over ``rows``, as :func:`final_table` reads it."""
    if not len(rows):
        return pd.DataFrame(columns=["key", "n", "s"])
    panes = (
        hw.from_pandas(rows.drop(columns=["arrival"]), event_time="et")
        .window(strategy)
        .group_by("key")
        .agg(n=hw.count(), s=hw.sum("v"))
        .to_pandas()
    )
    assert (panes["timing"] == "ON_TIME").all()
    return final_table(panes, accumulation, merging)


def without(table: pd.DataFrame, dropped: pd.DataFrame, merging: bool) -> pd.DataFrame:
    """``table`` less the dropped elements (one dead letter per element and window)."""
    if not len(dropped):
        return table
    by = ["key"] if merging else ["key", "window_start", "window_end"]
    gone = dropped.assign(n=1, s=dropped["v"]).groupby(by, as_index=False)[["n", "s"]].sum()
    both = table.merge(gone, on=by, how="left", suffixes=("", "_gone")).fillna(0)
    both["n"] -= both.pop("n_gone")
    both["s"] -= both.pop("s_gone")
    return _sorted(both[both["n"] != 0])


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    for c in ("n", "s"):
        frame[c] = frame[c].astype(np.int64)
    cols = [c for c in ("key", "window_start", "window_end") if c in frame]
    return frame.sort_values(cols, kind="stable").reset_index(drop=True)[[*cols, "n", "s"]]


# ------------------------------------------------------------------ random pipelines


def random_input(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """``n`` rows over 10 minutes of event time, arriving 0-40 s after it, in a few
    bursts (arrival rounded to 5 s, so rows share micro-batches)."""
    et = rng.integers(0, 600_000, n)
    delay = rng.integers(0, 40_000, n)
    arrival = (et + delay) // 5_000 * 5_000
    return pd.DataFrame(
        {
            "key": rng.choice(["a", "b", "c"], n),
            "et": START + pd.to_timedelta(et, unit="ms"),
            "arrival": START + pd.to_timedelta(arrival, unit="ms"),
            "v": np.arange(n, dtype=np.int64),  # distinct: a dropped row is identified
        }
    )


def random_trigger(rng: np.random.Generator):
    choice = int(rng.integers(0, 7))
    delay = f"{int(rng.integers(5, 90))} seconds"
    count = int(rng.integers(1, 6))
    return [
        None,
        AfterWatermark(early=AfterProcessingTime(delay)),
        AfterWatermark(early=AfterProcessingTime(delay), late=AfterCount(1)),
        AfterWatermark(early=AfterCount(count), late=AfterProcessingTime(delay)),
        Repeatedly(AfterCount(count)),
        Repeatedly(AfterProcessingTime(delay)),
        AfterWatermark(late=AfterCount(count)),
    ][choice]


def random_strategy(rng: np.random.Generator):
    """A random windowing strategy and whether its windows merge."""
    kind = int(rng.integers(0, 3))
    if kind == 0:
        window = FixedWindows(f"{int(rng.integers(1, 4))} minutes")
    elif kind == 1:
        window = SlidingWindows("2 minutes", f"{int(rng.choice([30, 60]))} seconds")
    else:
        window = Sessions(f"{int(rng.integers(10, 60))} seconds")
    accumulation = str(rng.choice(["discarding", "accumulating", "retracting"]))
    if kind == 2 and accumulation == "accumulating":
        accumulation = "retracting"  # accumulating sessions leave merged panes standing
    lateness = f"{int(rng.choice([0, 0, 20, 120]))} seconds"
    strategy = hw.WindowingStrategy.of(
        window_fn=window,
        trigger=random_trigger(rng),
        accumulation=accumulation,
        allowed_lateness=lateness,
    )
    return strategy, kind == 2, accumulation


def _check_local(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = random_input(rng, int(rng.integers(1, 120)))
    strategy, merging, accumulation = random_strategy(rng)
    watermark = f"{int(rng.choice([0, 5, 30]))} seconds"
    agg = (
        hw.from_pandas(rows, event_time="et", arrival_time="arrival", watermark=watermark)
        .window(strategy)
        .group_by("key")
        .agg(n=hw.count(), s=hw.sum("v"))
    )
    panes, dropped = agg.to_pandas(), agg.dead_letters()
    got = final_table(panes, accumulation, merging)
    want = without(bounded_table(rows, strategy, merging, accumulation), dropped, merging)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, obj=f"seed {seed}: {strategy}")


@pytest.mark.parametrize("seed", range(40))
def test_streaming_local_run_ends_as_the_bounded_run(seed: int) -> None:
    _check_local(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40, 240))
def test_streaming_local_run_ends_as_the_bounded_run_more(seed: int) -> None:
    _check_local(seed)


# ------------------------------------------------------------------ reported symptoms

TUMBLE = (
    "SELECT window_start, window_end, COUNT(*) AS n, SUM(v) AS s "
    "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(et), INTERVAL '1' MINUTE)) "
    "GROUP BY window_start, window_end EMIT AFTER WATERMARK"
)


def _hour_of_rows(seed: int = 0) -> pd.DataFrame:
    """48 minutes of rows (48 one-minute windows), arriving up to 30 s late, in
    bursts every 6 minutes (a replay plays one micro-batch per arrival time on
    Spark: 9 steps, not 480)."""
    rng = np.random.default_rng(seed)
    n = 480
    et = START + pd.to_timedelta(np.sort(rng.integers(0, 48 * 60_000, n)), unit="ms")
    et = et.where(np.arange(n) >= 48, START + pd.to_timedelta(np.arange(48) * 60_000, unit="ms"))
    arrival = (et + pd.to_timedelta(rng.integers(0, 30_000, n), unit="ms")).ceil("6min")
    return pd.DataFrame({"et": et, "arrival": arrival, "v": rng.integers(0, 10, n)})


def _sql_symptom(runner: str) -> None:
    rows = _hour_of_rows()
    # A delay longer than the stream: the watermark never passes a window before the end.
    stream = hw.from_pandas(rows, event_time="et", arrival_time="arrival", watermark="2 hours")
    got = hw.sql(TUMBLE, {"t": stream}, runner=runner).to_pandas()
    want = hw.sql(TUMBLE, {"t": rows.drop(columns=["arrival"])}).to_pandas()
    assert len(want) == 48 and len(got) == 48
    key = ["window_start"]
    pd.testing.assert_frame_equal(
        got.sort_values(key).reset_index(drop=True)[want.columns],
        want.sort_values(key).reset_index(drop=True),
        check_dtype=False,
    )


def test_sql_tumble_after_watermark_over_finite_stream_local() -> None:
    _sql_symptom("local")


def test_fluent_after_watermark_over_finite_stream_local() -> None:
    rows = _hour_of_rows()
    panes = (
        hw.from_pandas(rows, event_time="et", arrival_time="arrival", watermark="2 hours")
        .window(FixedWindows("1 minute"))
        .agg(n=hw.count())
        .to_pandas()
    )
    assert len(panes) == 48 and (panes["timing"] == "ON_TIME").all()
    assert panes["n"].sum() == len(rows)


def test_sql_replay_as_of_before_the_end_does_not_end_it() -> None:
    """A replay read up to a processing time before its last line has not ended."""
    rows = _hour_of_rows()
    stream = hw.from_pandas(rows, event_time="et", arrival_time="arrival", watermark="2 hours")
    query = hw.sql(TUMBLE, {"t": stream})
    last = int(rows["arrival"].max().value // 1_000_000)
    assert len(query.to_pandas(as_of=last - 1)) == 0
    assert len(query.to_pandas(as_of=last)) == 48


@pytest.mark.spark
def test_sql_tumble_after_watermark_over_finite_stream_spark(spark) -> None:
    _sql_symptom("spark")


def _write_files(rows: pd.DataFrame, directory: str, parts: int) -> None:
    os.makedirs(directory, exist_ok=True)
    # Instants (UTC-adjusted microseconds): Spark reads them as TIMESTAMP.
    rows = rows.assign(et=rows["et"].dt.tz_localize("UTC"))
    paths = [os.path.join(directory, f"part-{i:03d}.parquet") for i in range(parts)]
    for path, part in zip(paths, np.array_split(rows, parts), strict=True):
        part.to_parquet(path, index=False, coerce_timestamps="us")
    in_arrival_order(paths)


def _run_available_now(spark, stream, strategy, checkpoint, end_of_input=None):
    """Panes and dead letters of a fluent pipeline run with availableNow."""
    panes, letters = [], []

    def keep_panes(batch, _):
        panes.append(batch.toPandas())

    def keep_letters(batch, _):
        letters.append(batch.toPandas())

    agg = stream.window(strategy).group_by("key").agg(n=hw.count(), s=hw.sum("v"))
    query = agg.start(
        checkpoint_location=checkpoint,
        panes_sink=keep_panes,
        dead_letter_sink=keep_letters,
        trigger={"availableNow": True},
        end_of_input=end_of_input,
    )
    query.awaitTermination()
    assert query.exception() is None
    out = pd.concat([p for p in panes if len(p)] or [pd.DataFrame()], ignore_index=True)
    dropped = sum(len(x) for x in letters)
    return out, dropped


@pytest.mark.spark
def test_available_now_fires_the_last_early_pane_spark(spark, tmp_path) -> None:
    """One window of 501 elements with early processing-time panes: the run over
    the bounded file stream ends with its ON_TIME pane of all 501."""
    rng = np.random.default_rng(1)
    n = 501
    rows = pd.DataFrame(
        {
            "key": "a",
            "et": START + pd.to_timedelta(np.sort(rng.integers(0, 60_000, n)), unit="ms"),
            "v": np.arange(n, dtype=np.int64),
        }
    )
    _write_files(rows, str(tmp_path / "in"), 3)
    df = spark.readStream.schema("key STRING, et TIMESTAMP, v BIGINT").option(
        "maxFilesPerTrigger", 1
    )
    stream = hw.from_spark(df.parquet(str(tmp_path / "in")), event_time="et", watermark="1 hour")
    strategy = hw.WindowingStrategy.of(
        window_fn=FixedWindows("1 hour"),
        trigger=AfterWatermark(early=AfterProcessingTime("1 second")),
        accumulation="accumulating",
    )
    panes, dropped = _run_available_now(spark, stream, strategy, str(tmp_path / "cp"))
    assert dropped == 0
    last = panes.sort_values("pane_index").iloc[-1]
    assert last["n"] == n and last["timing"] == "ON_TIME" and bool(last["is_last"])


@pytest.mark.spark
def test_incremental_runs_then_a_last_run_that_ends_the_input_spark(spark, tmp_path) -> None:
    """An incremental job on one checkpoint: a run with ``end_of_input=False`` keeps
    the window pending; a later run with the default reads the new rows and ends
    the input, so the panes are the bounded run's over both runs' rows; the end is
    final: a run after it is refused before it reads anything (its rows would all
    be late)."""
    rows = pd.DataFrame(
        {"key": ["a"] * 5, "et": START + pd.to_timedelta([0, 1, 2, 3, 70], unit="s")}
    ).assign(v=[1, 2, 3, 4, 5])
    directory, checkpoint = str(tmp_path / "in"), str(tmp_path / "cp")
    _write_files(rows.iloc[:3], directory, 1)
    schema = "key STRING, et TIMESTAMP, v BIGINT"
    stream = hw.from_spark(
        spark.readStream.schema(schema).parquet(directory), event_time="et", watermark="1 hour"
    )
    strategy = hw.WindowingStrategy.of(window_fn=FixedWindows("1 minute"))
    panes, _ = _run_available_now(spark, stream, strategy, checkpoint, False)
    assert len(panes) == 0

    rows.iloc[3:].assign(et=rows["et"].iloc[3:].dt.tz_localize("UTC")).to_parquet(
        os.path.join(directory, "part-later.parquet"), index=False, coerce_timestamps="us"
    )
    panes, dropped = _run_available_now(spark, stream, strategy, checkpoint)
    assert dropped == 0
    got = panes.sort_values("window_start")[["n", "s", "timing"]].values.tolist()
    assert got == [[4, 10, "ON_TIME"], [1, 5, "ON_TIME"]]

    for end_of_input in (None, False):
        with pytest.raises(InputEndedError, match="has ended"):
            _run_available_now(spark, stream, strategy, checkpoint, end_of_input)
    # Its runs read the control stream: a run without it is refused before it starts.
    with pytest.raises(ValueError, match="read the end-of-input control stream"):
        _run_available_now(spark, stream, strategy, checkpoint, "never")


@pytest.mark.spark
def test_runs_of_an_input_that_never_ends_spark(spark, tmp_path) -> None:
    """``end_of_input="never"``: an availableNow run reads no control stream, so it
    ends nothing (the window stays pending, as on an open topic), and a run that
    would read the control stream on that checkpoint is refused before it starts
    (Spark would fail it for a changed number of sources)."""
    rows = pd.DataFrame({"key": ["a"] * 3, "et": START + pd.to_timedelta([0, 1, 2], unit="s")})
    directory, checkpoint = str(tmp_path / "in"), str(tmp_path / "cp")
    _write_files(rows.assign(v=[1, 2, 3]), directory, 1)
    schema = "key STRING, et TIMESTAMP, v BIGINT"
    stream = hw.from_spark(
        spark.readStream.schema(schema).parquet(directory), event_time="et", watermark="1 hour"
    )
    strategy = hw.WindowingStrategy.of(window_fn=FixedWindows("1 minute"))
    panes, dropped = _run_available_now(spark, stream, strategy, checkpoint, "never")
    assert len(panes) == 0 and dropped == 0
    assert not any("ends" in line for f in _offsets(checkpoint) for line in f)
    for end_of_input in (None, False):
        with pytest.raises(ValueError, match="end_of_input='never'"):
            _run_available_now(spark, stream, strategy, checkpoint, end_of_input)
    with pytest.raises(ValueError, match="end_of_input='sometimes'"):
        _run_available_now(spark, stream, strategy, checkpoint, "sometimes")


def _offsets(checkpoint: str) -> list[list[str]]:
    """The lines of each offset-log file of a local checkpoint."""
    folder = os.path.join(checkpoint, "offsets")
    names = [n for n in os.listdir(folder) if n.isdigit()]
    assert names
    return [open(os.path.join(folder, n), encoding="utf-8").read().splitlines() for n in names]


def test_the_control_stream_refuses_a_run_after_the_end() -> None:
    """On a checkpoint the driver cannot read (not a local path), the control stream
    refuses a run that resumes after an end played by an earlier run, at its first
    offset, before any row is read; the run that plays the end goes on."""
    reader = EndOfInputReader("/nonexistent/signal")
    reader.prepareForTriggerAvailableNow()
    with pytest.raises(InputEndedError, match="has ended"):
        reader.latestOffset({"ends": 1})
    replaying = EndOfInputReader("/nonexistent/signal")
    assert replaying.partitions({"ends": 1}, {"ends": 1}) == []  # a batch after the end
    with pytest.raises(InputEndedError, match="has ended"):
        replaying.latestOffset({"ends": 1})
    ending = EndOfInputReader("/nonexistent/signal")
    ending.prepareForTriggerAvailableNow()
    assert len(ending.partitions({"ends": 0}, {"ends": 1})) == 1  # this run plays the end
    assert ending.latestOffset({"ends": 1}) == {"ends": 1}
    fresh = EndOfInputReader("/nonexistent/signal")
    assert fresh.latestOffset({"ends": 0}) == {"ends": 0}  # not signalled: no end


# ------------------------------------------------------------------ Spark, random


def _spark_case(spark, tmp_path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = random_input(rng, int(rng.integers(20, 80))).sort_values("et", kind="stable")
    strategy, merging, accumulation = random_strategy(rng)
    directory = str(tmp_path / f"in-{seed}")
    _write_files(rows.drop(columns=["arrival"]), directory, 2)
    df = (
        spark.readStream.schema("key STRING, et TIMESTAMP, v BIGINT")
        .option("maxFilesPerTrigger", 1)
        .parquet(directory)
    )
    # A delay longer than the input: no row is late, so the bounded run is over all rows.
    stream = hw.from_spark(df, event_time="et", watermark="1 hour")
    panes, dropped = _run_available_now(spark, stream, strategy, str(tmp_path / f"cp-{seed}"))
    assert dropped == 0
    panes["window_start"] = pd.to_datetime(panes["window_start"])
    panes["window_end"] = pd.to_datetime(panes["window_end"])
    got = final_table(panes, accumulation, merging)
    want = bounded_table(rows, strategy, merging, accumulation)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, obj=f"seed {seed}: {strategy}")


@pytest.mark.spark
@pytest.mark.slow
def test_available_now_ends_as_the_bounded_run_spark(spark, tmp_path) -> None:
    for seed in (3, 7, 11):
        _spark_case(spark, tmp_path, seed)
