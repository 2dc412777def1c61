"""A BIGINT column with NULLs keeps every value exactly on every path: pandas turns
a nullable integer column into floats when it meets numpy, and a float rounds an
integer past 2**53 (9007199254740993 became 9007199254740992, with no error).
Each query's table view and changelog, on the local runner's two paths, a Spark
replay and a live Spark file stream, equal the bounded query in DuckDB."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from test_stateless_spark import _stream, _write

import headwater as hw
from headwater.sql.execute.spark import SparkSqlQuery

T0 = pd.Timestamp("2026-01-01 12:00:00")
BIG = 2**53 + 1
VALUES = [BIG, None, -BIG, 2**62 + 1, 3]
ROWS = pd.DataFrame(
    {
        "k": ["a", "a", "b", "c", "c"],
        "ts": [T0 + pd.Timedelta(seconds=i) for i in range(len(VALUES))],
        "v": pd.array(VALUES, dtype="Int64"),
    }
)
QUERIES = {
    "row by row": "SELECT k, v FROM t",
    "group by": "SELECT k, SUM(v) AS s, MIN(v) AS mn, MAX(v) AS mx FROM t GROUP BY k",
    "dedup": "SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER "
    "(PARTITION BY k ORDER BY ts) AS rn FROM t) WHERE rn = 1",
    "window": "SELECT wstart, MAX(v) AS mx, MIN(v) AS mn, SUM(v) AS s FROM Tumble(data => "
    "TABLE(t), timecol => DESCRIPTOR(ts), dur => INTERVAL '1' MINUTE) GROUP BY wstart, wend",
    "join": "SELECT a.k, a.v, b.v AS w FROM t a JOIN t b ON a.k = b.k",
}


def exact(frame: pd.DataFrame, columns) -> list[tuple]:
    """Rows as Python values (ints stay ints; a float would show its rounding)."""
    out = []
    for row in frame[list(columns)].astype(object).itertuples(index=False):
        out.append(
            tuple(None if pd.isna(v) else (int(v) if isinstance(v, float) else v) for v in row)
        )
    return sorted(out, key=repr)


def stream():
    arrival = ROWS["ts"] + pd.Timedelta(milliseconds=10)
    return hw.from_pandas(ROWS.assign(arrival=arrival), "ts", arrival_time="arrival")


def test_the_check_can_fail() -> None:
    """What the bug did: numpy's view of the column rounds BIG."""
    assert int(ROWS["v"].to_numpy()[0]) != BIG


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("name", list(QUERIES))
def test_local_runner_keeps_big_integers(name: str, fast_path: bool) -> None:
    bounded = hw.sql(QUERIES[name], {"t": ROWS}).to_pandas()
    query = hw.sql(QUERIES[name], {"t": stream()}, fast_path=fast_path)
    assert exact(query.to_pandas(), bounded.columns) == exact(bounded, bounded.columns)
    inserted = query.changelog()
    inserted = inserted[~inserted["undo"].astype(bool)]
    values = {v for c in bounded.columns if c != "k" for v in inserted[c].dropna().tolist()}
    assert all(int(v) == v and not isinstance(v, float) for v in values if not hasattr(v, "day"))


@pytest.mark.spark
@pytest.mark.parametrize("name", list(QUERIES))
def test_spark_replay_keeps_big_integers(spark, name: str) -> None:
    bounded = hw.sql(QUERIES[name], {"t": ROWS}).to_pandas()
    got = hw.sql(QUERIES[name], {"t": stream()}, runner="spark").to_pandas()
    assert exact(got, bounded.columns) == exact(bounded, bounded.columns)


LIVE = [
    [f"2020-04-15 08:07:00,{BIG},A", "2020-04-15 08:07:01,,A"],
    [f"2020-04-15 08:07:02,{2**62 + 1},B", "2020-04-15 08:07:03,3,B"],
]


@pytest.mark.spark
@pytest.mark.parametrize("fast_path", [True, False])
def test_live_file_stream_keeps_big_integers(spark, tmp_path, fast_path: bool) -> None:
    """The sink collects Rows (Python ints): toPandas would round them itself."""
    data = _write(tmp_path / "bids", LIVE)
    text = "SELECT item, MAX(price) AS mx, SUM(price) AS s FROM Bid GROUP BY item"
    rows: list = []
    query = SparkSqlQuery(text, {"Bid": _stream(spark, data)}, spark=spark, fast_path=fast_path)
    run = query.start(
        checkpoint_location=os.fspath(tmp_path / "checkpoint"),
        sink=lambda df, _: rows.extend(df.select("item", "mx", "s", "undo").collect()),
        dead_letter_sink=lambda df, _: None,
        trigger={"availableNow": True},
    )
    run.awaitTermination()
    final = {r.item: (r.mx, r.s) for r in rows if not r.undo}
    assert final == {"A": (BIG, BIG), "B": (2**62 + 1, 2**62 + 4)}


LATE = pd.DataFrame(
    {
        "k": ["a", "b", "c"],
        "ts": [T0, T0 + pd.Timedelta(minutes=10), T0 - pd.Timedelta(minutes=5)],
        "v": pd.array([1, None, BIG], dtype="Int64"),
    }
)
LATE_ARRIVAL = [T0 + pd.Timedelta(seconds=1), T0 + pd.Timedelta(minutes=10, seconds=1)]


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_a_late_rows_dead_letter_keeps_its_big_integer(request, runner: str) -> None:
    if runner == "spark":
        request.getfixturevalue("spark")
    arrival = [*LATE_ARRIVAL, T0 + pd.Timedelta(minutes=11)]
    stream = hw.from_pandas(
        LATE.assign(arrival=arrival), "ts", arrival_time="arrival", watermark="1 minute"
    )
    letters = hw.sql("SELECT k, v FROM t", {"t": stream}, runner=runner).dead_letters()
    assert letters[["k", "v", "reason"]].astype(object).values.tolist() == [["c", BIG, "late"]]


#: Two streams of plain BIGINT columns (no NULLs: numpy's own int64): a row of one
#: stream has NULL in the other's columns, which made floats of both.
OTHER = ROWS.assign(v=[2**62 + 5, 2**53 + 3, 7, -(2**62) - 1, BIG])
TWO = {
    "union": "SELECT k, v FROM t UNION ALL SELECT k, v FROM u",
    "join": "SELECT t.k, t.v, u.v AS w FROM t JOIN u ON t.k = u.k",
}


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(v=frame["v"].fillna(0).astype("int64"))


def _two_streams(frame: pd.DataFrame):
    arrival = frame["ts"] + pd.Timedelta(milliseconds=10)
    return hw.from_pandas(frame.assign(arrival=arrival), "ts", arrival_time="arrival")


@pytest.mark.parametrize("name", list(TWO))
def test_two_streams_keep_big_integers(name: str) -> None:
    t, u = _plain(ROWS), _plain(OTHER)
    assert t["v"].dtype == "int64" and u["v"].dtype == "int64"
    bounded = hw.sql(TWO[name], {"t": t, "u": u}).to_pandas()
    got = hw.sql(TWO[name], {"t": _two_streams(t), "u": _two_streams(u)}).to_pandas()
    assert exact(got, bounded.columns) == exact(bounded, bounded.columns)


@pytest.mark.spark
@pytest.mark.parametrize("name", list(TWO))
def test_two_streams_keep_big_integers_on_spark(spark, name: str) -> None:
    t, u = _plain(ROWS), _plain(OTHER)
    bounded = hw.sql(TWO[name], {"t": t, "u": u}).to_pandas()
    streams = {"t": _two_streams(t), "u": _two_streams(u)}
    got = hw.sql(TWO[name], streams, runner="spark").to_pandas()
    assert exact(got, bounded.columns) == exact(bounded, bounded.columns)
