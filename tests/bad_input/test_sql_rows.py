"""Bad rows of a SQL query have one outcome on every runner and path.

A row a query cannot use (a NULL event time, a row dropped as late) goes to
the query's dead letters with every column of the row, each value as it
came in (typed: integers stay integers, text stays text, a NULL stays NULL),
and the reason; the result rows plus the dead letters account for every input
row. Runners: ``local`` (DuckDB and the model), ``spark`` (native batch plans
for tables; the streaming runner over a replay) and, for Spark streams,
``streaming`` (parquet files arriving in a directory).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.io.arrival import in_arrival_order

pytestmark = pytest.mark.spark

T0 = pd.Timestamp("2026-01-01 12:00:00")

#: Five rows, one a NULL event time: key, event time, an integer, text, a float.
ROWS = pd.DataFrame(
    {
        "k": ["a", "a", "b", "b", "a"],
        "ts": [T0, T0 + pd.Timedelta(seconds=5), pd.NaT, T0 + pd.Timedelta(seconds=70), T0],
        "n": pd.array([1, 2, 3, 4, None], dtype="Int64"),
        "note": ["x", None, "lost", "y", "z"],
        "f": [0.5, 1.5, 2.5, None, 4.5],
    }
)

WINDOWED = """
SELECT k, wstart, COUNT(*) AS c, SUM(n) AS total
FROM Tumble(data => TABLE(t), timecol => DESCRIPTOR(ts), dur => INTERVAL '1' MINUTE)
GROUP BY k, wstart, wend
"""


def query(text, table, runner, fast_path: bool = True):
    return hw.sql(text, {"t": table}, runner=runner, fast_path=fast_path)


def as_records(frame: pd.DataFrame, columns) -> list[tuple]:
    """Rows of ``columns`` as tuples, NULLs (None, NaN, NaT, pd.NA) as None, sorted."""
    out = []
    for row in frame[list(columns)].astype(object).itertuples(index=False, name=None):
        out.append(tuple(None if pd.isna(v) else v for v in row))
    return sorted(out, key=repr)


def kept(letters: pd.DataFrame, source: pd.DataFrame) -> None:
    """Every dead letter is a row of ``source``, with its values (and types) as given."""
    columns = list(source.columns)
    assert set(columns) <= set(letters.columns)
    expected = source.merge(letters[columns].drop_duplicates(), how="inner")
    assert as_records(letters, columns) == as_records(expected, columns)
    # an integer stays an integer (not a float of a column that also holds NULLs)
    values = [v for v in letters["n"] if not pd.isna(v)]
    assert values and all(isinstance(v, int | np.integer) for v in values)


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_bounded_windowed_query_dead_letters_null_event_times(spark, runner):
    q = query(WINDOWED, ROWS, runner)
    result = q.to_pandas()
    letters = q.dead_letters()
    assert int(result["c"].sum()) + len(letters) == len(ROWS)
    assert list(letters["reason"]) == ["null_event_time"]
    assert list(letters["table"]) == ["t"]
    assert as_records(letters, ROWS.columns) == [("b", None, 3, "lost", 2.5)]


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_bounded_query_of_a_declared_event_time_dead_letters_its_nulls(spark, runner):
    # No windowing TVF: the table declares its event time (hw.from_pandas), so a
    # row without one is not input, as on a stream.
    q = query("SELECT k, n, note FROM t", hw.from_pandas(ROWS, "ts"), runner)
    result = q.to_pandas()
    letters = q.dead_letters()
    assert len(result) + len(letters) == len(ROWS)
    assert as_records(result, ["k", "n", "note"]) == as_records(
        ROWS[ROWS.ts.notna()], ["k", "n", "note"]
    )
    assert as_records(letters, ROWS.columns) == [("b", None, 3, "lost", 2.5)]


def test_bounded_spark_dataframe_dead_letters_null_event_times(spark):
    sdf = spark.createDataFrame(
        ROWS.astype({"n": "float64"}),
        "k string, ts timestamp, n bigint, note string, f double",
    )
    q = query(WINDOWED, sdf, "spark")
    result = q.to_pandas()
    letters = q.dead_letters()
    assert int(result["c"].sum()) + len(letters) == len(ROWS)
    assert as_records(letters, ROWS.columns) == [("b", None, 3, "lost", 2.5)]


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_a_table_without_an_event_time_keeps_its_null_times(spark, runner):
    # Nothing names ts an event time here: a NULL in it is an ordinary value.
    q = query("SELECT k, ts FROM t", ROWS, runner)
    assert len(q.to_pandas()) == len(ROWS)
    assert q.dead_letters().empty


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_bounded_query_without_bad_rows_has_empty_dead_letters(spark, runner):
    q = query(WINDOWED, ROWS[ROWS.ts.notna()], runner)
    assert int(q.to_pandas()["c"].sum()) == len(ROWS) - 1
    letters = q.dead_letters()
    assert letters.empty
    assert {"query", "table", "reason"} <= set(letters.columns)


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_bounded_changelog_and_dead_letters_account_for_every_row(spark, runner):
    q = query(WINDOWED + " EMIT STREAM", ROWS, runner)
    log = q.changelog()
    assert int(log["c"].sum()) + len(q.dead_letters()) == len(ROWS)


# ------------------------------------------------------------------ streams (replays)

#: Arrival order: the row at 12:00:00 last arrives after the watermark passed its window.
ARRIVALS = [0, 1_000, 2_000, 3_000, 200_000]


def replay(rows: pd.DataFrame = ROWS) -> object:
    frame = rows.assign(arrival=pd.to_datetime(ARRIVALS[: len(rows)], unit="ms"))
    return hw.from_pandas(frame, "ts", arrival_time="arrival", watermark="10 seconds")


def stream_letters(q) -> pd.DataFrame:
    return q.dead_letters()


@pytest.mark.parametrize("runner", ["local", "spark"])
@pytest.mark.parametrize("path", ["fast", "general"])
def test_stream_dead_letters_keep_every_column_of_the_row(spark, runner, path):
    q = query(WINDOWED + " EMIT STREAM", replay(), runner, fast_path=path == "fast")
    assert f"runs on: {path} path" in q.explain()
    log, letters = q.changelog(), stream_letters(q)
    assert sorted(letters["reason"]) == ["late", "null_event_time"]
    assert as_records(letters, ROWS.columns) == as_records(ROWS.iloc[[2, 4]], ROWS.columns)
    kept(letters, ROWS)
    final = log.groupby(["k", "wstart"]).tail(1)
    assert int(final.loc[~final["undo"].astype(bool), "c"].sum()) + len(letters) == len(ROWS)


# ------------------------------------------------------------------ Spark streams

SCHEMA = "k string, ts timestamp, n bigint, note string, f double"


def live(spark, tmp_path, text, parts, path="fast", schema=SCHEMA):
    """``text`` over parquet files arriving one per micro-batch: the last
    micro-batch's changelog rows (all batches) and dead letters, as pandas."""
    from headwater.model.watermarks import BoundedOutOfOrderness
    from headwater.sql.execute.spark import SparkSqlQuery
    from headwater.sql.plan.catalog import Table

    src = tmp_path / "src"
    for i, part in enumerate(parts):
        frame = spark.createDataFrame(part.astype({"n": "float64"}), schema)
        frame.coalesce(1).write.parquet(str(src / f"{i:02d}"))
    in_arrival_order(src / f"{i:02d}" for i in range(len(parts)))
    stream = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .option("recursiveFileLookup", "true")
        .parquet(str(src))
    )
    table = Table("t", spark=stream, event_time="ts", watermark=BoundedOutOfOrderness(10_000))
    got: dict[str, list] = {"log": [], "dead": []}
    q = SparkSqlQuery(text, {"t": table}, spark=spark, fast_path=path == "fast")
    handle = q.start(
        checkpoint_location=str(tmp_path / "checkpoint"),
        sink=lambda b, i: got["log"].append(b.toPandas()),
        dead_letter_sink=lambda b, i: got["dead"].append(b.toPandas()),
        trigger={"availableNow": True},
    )
    handle.awaitTermination(300)
    assert handle.exception() is None
    dead = [d for d in got["dead"] if len(d)]
    return pd.concat(got["log"], ignore_index=True), pd.concat(dead, ignore_index=True)


#: On a live stream: the first rows, then a row far later (the watermark passes
#: every test window), then the row at 12:00:00 again, now late.
SENTINEL = pd.DataFrame(
    {"k": ["zz"], "ts": [T0 + pd.Timedelta(days=1)], "n": [0], "note": ["s"], "f": [0.0]}
)


@pytest.mark.parametrize("path", ["fast", "general"])
def test_live_stream_dead_letters_keep_every_column_of_the_row(spark, tmp_path, path):
    parts = [ROWS.iloc[:4], SENTINEL, ROWS.iloc[4:]]
    log, letters = live(spark, tmp_path, WINDOWED + " EMIT STREAM", parts, path)
    assert sorted(letters["reason"]) == ["late", "null_event_time"]
    assert as_records(letters, ROWS.columns) == as_records(ROWS.iloc[[2, 4]], ROWS.columns)
    log = log[log["k"] != "zz"]
    final = log.groupby(["k", "wstart"]).tail(1)
    assert int(final.loc[~final["undo"].astype(bool), "c"].sum()) + len(letters) == len(ROWS)


#: Every column but the event time is the GROUP BY key or a number an aggregate
#: reads as it is: nothing is left for a dead letter to carry beside them, and
#: the aggregates could be lifted (partial sums per key and window).
ALL_SHIPPED = """
SELECT k, wstart, COUNT(*) AS c, SUM(n) AS total, SUM(f) AS sf
FROM Tumble(data => TABLE(t), timecol => DESCRIPTOR(ts), dur => INTERVAL '1' MINUTE)
GROUP BY k, wstart, wend
EMIT STREAM AFTER DELAY INTERVAL '1' SECOND
"""


def test_live_stream_with_nothing_to_carry_still_dead_letters_whole_rows(spark, tmp_path):
    """Rows are not lifted into partial aggregates where every column already
    travels: the late row's dead letter is that row, one element."""
    columns = ["k", "ts", "n", "f"]
    rows = ROWS[columns]
    parts = [rows.iloc[:4], SENTINEL[columns], rows.iloc[4:]]
    schema = "k string, ts timestamp, n bigint, f double"
    _, letters = live(spark, tmp_path, ALL_SHIPPED, parts, schema=schema)
    assert sorted(letters["reason"]) == ["late", "null_event_time"]
    assert as_records(letters, columns) == as_records(rows.iloc[[2, 4]], columns)
