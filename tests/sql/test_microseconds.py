"""A stream's timestamp columns keep their microseconds on every path: the
stateless one, the windowed fast path (an argument, a GROUP BY column), the
general path's groups (windows, a whole-stream GROUP BY, dedup, a join) and the
dead letters, on both runners, as the bounded query over the same rows reads
them. Only the event time's watermark and windows are the model's milliseconds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, rows

import headwater as hw
from headwater.sql import sql
from headwater.sql.errors import SqlError

BASE = pd.Timestamp("2026-01-01 10:00:00")


def frame(n: int = 40, seed: int = 1) -> pd.DataFrame:
    """Rows whose event time ``ts`` and other time ``t2`` have microseconds (one
    ``t2`` NULL; two ``ts`` a microsecond apart across a millisecond)."""
    rng = np.random.default_rng(seed)
    ts = BASE + pd.to_timedelta(np.sort(rng.integers(0, 60_000_000, n)), unit="us")
    ts = ts.append(pd.DatetimeIndex([BASE + pd.Timedelta(microseconds=999)] * 1))
    ts = ts.append(pd.DatetimeIndex([BASE + pd.Timedelta(microseconds=1000)]))
    t2 = BASE + pd.to_timedelta(rng.integers(-(10**12), 10**12, len(ts)), unit="us")
    out = pd.DataFrame(
        {"ts": ts, "t2": t2, "k": rng.integers(0, 3, len(ts)), "v": np.arange(len(ts))}
    )
    out.loc[3, "t2"] = pd.NaT
    return out.sort_values("ts", kind="stable").reset_index(drop=True)


WINDOW = "TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND))"
QUERIES = {
    "stateless": "SELECT k, ts, t2, DATE_DIFF('microsecond', ts, t2) AS gap FROM t WHERE v > 1",
    "window": f"SELECT window_start, k, MAX(t2) AS m, MIN(ts) AS f, COUNT(t2) AS c FROM {WINDOW} "
    "GROUP BY window_start, window_end, k",
    "keyed by a time": f"SELECT window_start, t2, COUNT(*) AS c FROM {WINDOW} "
    "GROUP BY window_start, window_end, t2",
    "whole stream": "SELECT k, MAX(t2) AS m, MAX(ts) AS l FROM t GROUP BY k",
    "dedup": "SELECT k, ts, t2 FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) "
    "AS rn FROM t) WHERE rn = 1",
}


def _arrival(times: pd.Series) -> pd.Series:
    """Rows arrive in a few steps (each a micro-batch on Spark), in event-time order."""
    return times.dt.ceil("20s")


def _stream(rows_: pd.DataFrame, **options):
    arrived = rows_.assign(arrival=_arrival(rows_["ts"]))
    return hw.from_pandas(arrived, event_time="ts", arrival_time="arrival", **options)


def _final(query) -> list[tuple]:
    return rows(query.to_pandas())


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "general path"])
@pytest.mark.parametrize("name", list(QUERIES))
def test_a_local_stream_equals_the_bounded_query(name: str, fast: bool) -> None:
    data = frame()
    bounded = _final(sql(QUERIES[name], {"t": data}))
    streamed = _final(sql(QUERIES[name], {"t": _stream(data, watermark="perfect")}, fast_path=fast))
    assert_same_rows(streamed, bounded, ordered=False)
    assert any(isinstance(v, str) and len(v) == 26 for row in bounded for v in row)  # µs kept


def test_a_join_of_two_streams_keeps_both_sides_microseconds() -> None:
    data = frame()
    other = frame(seed=2)
    text = (
        "SELECT t.k, t.t2, u.t2 AS u2, u.ts AS uts FROM t JOIN u ON t.k = u.k "
        "AND u.ts BETWEEN t.ts - INTERVAL '2' SECOND AND t.ts + INTERVAL '2' SECOND"
    )
    bounded = _final(sql(text, {"t": data, "u": other}))
    streams = {"t": _stream(data, watermark="perfect"), "u": _stream(other, watermark="perfect")}
    assert_same_rows(_final(sql(text, streams)), bounded, ordered=False)
    assert bounded


@pytest.mark.spark
@pytest.mark.parametrize("name", ["stateless", "window", "keyed by a time", "whole stream"])
def test_spark_equals_the_bounded_query(spark, name: str) -> None:
    data = frame()
    bounded = _final(sql(QUERIES[name], {"t": data}))
    stream = _stream(data, watermark="perfect")
    assert_same_rows(_final(sql(QUERIES[name], {"t": stream}, runner="spark")), bounded, False)


def _late() -> tuple[pd.DataFrame, pd.Series]:
    """The rows, and one more that arrives a minute after its event time; their
    arrival times."""
    data = frame()
    late = data.iloc[[5]].assign(v=99, t2=BASE + pd.Timedelta(microseconds=123_456))
    arrival = _arrival(data["ts"])
    return pd.concat([data, late], ignore_index=True), pd.concat(
        [arrival, late["ts"] + pd.Timedelta(minutes=1)], ignore_index=True
    )


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)])
@pytest.mark.parametrize("name", ["stateless", "window"])
def test_a_late_rows_dead_letter_keeps_its_microseconds(request, runner: str, name: str) -> None:
    if runner == "spark":
        request.getfixturevalue("spark")
    data, arrival = _late()
    stream = hw.from_pandas(
        data.assign(arrival=arrival), "ts", arrival_time="arrival", watermark="1 second"
    )
    letters = sql(QUERIES[name], {"t": stream}, runner=runner).dead_letters()
    late = letters[letters["v"] == 99]
    assert late["t2"].tolist() == [BASE + pd.Timedelta(microseconds=123_456)]
    assert late["ts"].tolist() == [data["ts"].iloc[5]]


@pytest.mark.spark
def test_an_interval_result_of_a_replay_on_spark_is_refused_at_its_item(spark) -> None:
    """A replay runs through Spark's streaming runner too, whose results have no
    interval type: refused before it runs, as a started stream is."""
    stream = _stream(frame(), watermark="perfect")
    with pytest.raises(SqlError, match="result column 'gap' is an INTERVAL") as caught:
        sql("SELECT k,\n  t2 - ts AS gap FROM t", {"t": stream}, runner="spark").to_pandas()
    assert (caught.value.line, caught.value.col) == (2, 3)


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_nanoseconds_are_dropped_on_every_path_alike(request, runner: str) -> None:
    """SQL's TIMESTAMP is to the microsecond in DuckDB and Spark: a pandas
    column's nanoseconds are dropped by the bounded query and the stream alike."""
    if runner == "spark":
        request.getfixturevalue("spark")
    stamps = pd.to_datetime(["2026-01-01 10:00:00.123456789", "2026-01-01 10:00:01.000000999"])
    data = pd.DataFrame({"ts": stamps, "k": [1, 2]})
    text = "SELECT k, ts, ts + INTERVAL 1 SECOND AS later FROM t"
    expected = [("2026-01-01 10:00:00.123456", "2026-01-01 10:00:01.123456")]
    expected.append(("2026-01-01 10:00:01", "2026-01-01 10:00:02"))
    stream = _stream(data, watermark="perfect")
    for table in (data, stream):
        result = sql(text, {"t": table}, runner=runner).to_pandas().sort_values("k")
        pairs = zip(result["ts"], result["later"], strict=True)
        assert [(str(a), str(b)) for a, b in pairs] == expected
