"""DATE_DIFF, TIMESTAMPDIFF and TIMESTAMPADD mean one thing on every runner and
path: DuckDB's DATE_DIFF counts unit boundaries, Flink's TIMESTAMPDIFF whole
units toward zero, TIMESTAMPADD adds units. Each is checked against DuckDB's
own functions (DATE_DIFF, DATE_SUB) or pandas, over times that cross seconds,
month ends and years in both orders, on the bounded query of both runners and
on a stream of each (Spark's stateless path)."""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, multiset, result, rows, spark_runs

import headwater as hw
from headwater.io.arrival import in_arrival_order
from headwater.model.watermarks import BoundedOutOfOrderness
from headwater.sql import sql
from headwater.sql.errors import SqlError
from headwater.sql.execute.spark import SparkSqlQuery
from headwater.sql.parse.dialect import Headwater, parse_query
from headwater.sql.parse.time_units import ADDED_UNITS, BOUNDARY_UNITS, FIXED_UNITS
from headwater.sql.plan.catalog import Table

#: The query: one column per function and unit (the diffs' spelling varies).
SPELLED = {"SECOND": "'seconds'", "DAY": "day", "MONTH": "'Month'"}
QUERY = (
    "SELECT n, "
    + ", ".join(
        [f"DATE_DIFF({SPELLED.get(u, repr(u.lower()))}, a, b) AS dd_{u}" for u in BOUNDARY_UNITS]
        + [f"TIMESTAMPDIFF({u}, a, b) AS td_{u}" for u in FIXED_UNITS]
        + [f"TIMESTAMPADD({u}, k, a) AS ta_{u}" for u in ADDED_UNITS]
        + ["DATEDIFF(b, a) AS days"]
    )
    + " FROM t"
)


def times(n: int = 120, seed: int = 3) -> pd.DataFrame:
    """Pairs of times microseconds to years apart, in both orders, some at month
    ends, sub-second ones across a second, and a NULL; ``k`` units to add."""
    rng = np.random.default_rng(seed)
    base = pd.Timestamp("2019-12-31 23:59:59.999")
    a = base + pd.to_timedelta(rng.integers(-(10**15), 10**15, n), unit="us")
    spans = 10 ** rng.integers(0, 15, n) * rng.choice([-1, 1], n) + rng.integers(-999, 999, n)
    b = a + pd.to_timedelta(spans, unit="us")
    edges = pd.to_datetime(
        [
            "2020-01-31",
            "2020-02-29",
            "2020-01-01 00:00:00.900",
            "2020-01-01 00:00:01.100",
            "2019-12-31 23:59:59.999999",
            "2020-01-01",
            "2021-03-31 12:00",
            "2020-02-29 11:00",
        ],
        format="ISO8601",
    )
    a = a.append(edges[::2]).append(edges[1::2])
    b = b.append(edges[1::2]).append(edges[::2])
    frame = pd.DataFrame({"n": np.arange(len(a)), "a": a, "b": b})
    frame["k"] = rng.integers(-30, 30, len(frame))
    frame.loc[5, "b"] = pd.NaT
    return frame.astype({"a": "datetime64[us]", "b": "datetime64[us]"})


def expected(frame: pd.DataFrame) -> list[tuple]:
    """DuckDB's own DATE_DIFF (boundaries) and DATE_SUB (whole units); pandas' sums."""
    diffs = [f"date_diff('{u}', a, b) AS dd_{u}" for u in BOUNDARY_UNITS]
    diffs += [f"date_sub('{u}', a, b) AS td_{u}" for u in FIXED_UNITS]
    with duckdb.connect() as con:
        con.register("t", frame)
        out = con.execute(f"SELECT n, {', '.join(diffs)} FROM t ORDER BY n").df()
    for unit in ADDED_UNITS:
        if unit in FIXED_UNITS:
            step = pd.to_timedelta(frame["k"] * FIXED_UNITS[unit], unit="us")
            out[f"ta_{unit}"] = frame["a"] + step
        else:
            months = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}[unit]
            shifted = [
                t + pd.DateOffset(months=int(k) * months)
                for t, k in zip(frame["a"], frame["k"], strict=True)
            ]
            out[f"ta_{unit}"] = pd.to_datetime(shifted)
    out["days"] = (frame["b"].dt.normalize() - frame["a"].dt.normalize()).dt.days
    return rows(out)


def test_the_bounded_query_equals_duckdbs_own_functions():
    frame = times()
    assert_same_rows(rows(sql(QUERY, {"t": frame}).to_pandas()), expected(frame), ordered=False)


@pytest.mark.spark
def test_spark_equals_duckdbs_own_functions(spark):
    frame = times()
    actual = rows(sql(QUERY, {"t": spark.createDataFrame(frame)}, runner="spark").to_pandas())
    assert_same_rows(actual, expected(frame), ordered=False)


def streamed(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` as a stream's rows reach a query: a row without event time is a
    dead letter (times keep their microseconds)."""
    return frame.dropna(subset=["a"])


def test_a_stream_on_the_local_runner_equals_them():
    frame = streamed(times())
    stream = hw.from_pandas(frame, event_time="a", arrival_time="a", watermark="perfect")
    actual = rows(sql(QUERY, {"t": stream}).to_pandas())
    assert_same_rows(actual, expected(frame), ordered=False)


def _parquet_stream(spark, directory, frame: pd.DataFrame) -> Table:
    """``frame`` as a Spark stream of two Parquet files in arrival order (by ``a``)."""
    paths = []
    for i, part in enumerate(np.array_split(frame.sort_values("a"), 2)):
        paths.append(str(directory / f"part-{i}.parquet"))
        os.makedirs(directory, exist_ok=True)
        part.to_parquet(paths[-1], index=False)
    in_arrival_order(paths)
    df = spark.readStream.schema("n BIGINT, a TIMESTAMP, b TIMESTAMP, k BIGINT")
    return Table(
        "t",
        spark=df.option("maxFilesPerTrigger", 1).parquet(str(directory)),
        event_time="a",
        watermark=BoundedOutOfOrderness(10**13),  # nothing is late
        types={"n": "BIGINT", "a": "TIMESTAMP", "b": "TIMESTAMP", "k": "BIGINT"},
    )


def _changes(spark, text: str, table: Table, checkpoint) -> pd.DataFrame:
    """The changelog of ``text`` over ``table`` (availableNow), Spark's UTC times naive."""
    changes = []
    run = SparkSqlQuery(text, {"t": table}, spark=spark).start(
        checkpoint_location=str(checkpoint),
        sink=lambda df, i: changes.append(df.toPandas()),
        trigger={"availableNow": True},
    )
    run.awaitTermination()
    log = pd.concat(changes, ignore_index=True).drop(columns=["ptime", "ver"])
    for column in log.columns:
        if isinstance(log[column].dtype, pd.DatetimeTZDtype):
            log[column] = log[column].dt.tz_convert(None)
    return log


@pytest.fixture(scope="module")
def spark_streams(spark, tmp_path_factory):
    """The module's queries over one Parquet stream of :func:`times`, each started
    ``availableNow``, run together (:func:`spark_runs`): name -> (its changelog, its
    checkpoint folder)."""
    root = tmp_path_factory.mktemp("time-units")
    table = _parquet_stream(spark, root / "in", times())
    texts = {"diffs": QUERY, "epochs": EPOCHS, "windowed": WINDOWED, "fields": FIELDS}

    def job(name: str):
        return lambda: (_changes(spark, texts[name], table, root / name), root / name)

    return spark_runs(spark, {name: job(name) for name in texts}), table


@pytest.mark.spark
def test_a_stream_on_sparks_stateless_path_equals_them(spark_streams):
    log, checkpoint = result(spark_streams[0], "diffs")
    assert (checkpoint / "headwater-stateless").is_dir()  # the stateless path ran it
    assert not log["undo"].any()
    assert_same_rows(rows(log.drop(columns="undo")), expected(streamed(times())), ordered=False)


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("DATE_DIFF('week', a, b)", "DATE_DIFF does not take the unit 'week'", "MONTH, QUARTER"),
        ("TIMESTAMPDIFF(MONTH, a, b)", "TIMESTAMPDIFF does not take the unit 'MONTH'", "WEEK"),
        ("DATE_DIFF(unit_of(a), a, b)", "DATE_DIFF's unit must be written out", "DATE_DIFF('"),
        ("TIMESTAMPADD(SECOND, a)", "TIMESTAMPADD takes 3 arguments", "TIMESTAMPADD(SECOND, n"),
    ],
)
def test_a_unit_that_means_two_things_is_refused_at_its_call(text, message, hint):
    with pytest.raises(SqlError, match=message) as caught:
        parse_query(f"SELECT n,\n  {text} AS d FROM t")
    assert caught.value.line == 2 and caught.value.col is not None
    assert hint in caught.value.hint


def test_the_query_as_headwater_writes_it_reads_back_the_same():
    tree = parse_query(QUERY)
    again = parse_query(tree.sql(dialect=Headwater))
    assert again.sql(dialect=Headwater) == tree.sql(dialect=Headwater)
    frame = times()
    assert_same_rows(rows(sql(again, {"t": frame}).to_pandas()), expected(frame), ordered=False)


EPOCHS = """SELECT n, EXTRACT(EPOCH FROM b - a) AS lasted, EXTRACT(EPOCH FROM a) AS since,
       EPOCH(b - INTERVAL '90' MINUTE) AS shifted
FROM t WHERE EXTRACT(EPOCH FROM b - a) > -1e12"""


def seconds(span: pd.Series) -> pd.Series:
    """A duration's microseconds / 10**6 (DuckDB's DOUBLE)."""
    micros = span.to_numpy("timedelta64[us]").astype(np.int64) / 1_000_000
    return pd.Series(np.where(span.isna(), np.nan, micros), index=span.index)


def epochs_expected(frame: pd.DataFrame) -> list[tuple]:
    """Seconds of each interval and since 1970 of each time."""
    zero = pd.Timestamp(0)
    out = pd.DataFrame({"n": frame["n"], "lasted": seconds(frame["b"] - frame["a"])})
    out["since"] = seconds(frame["a"] - zero)
    out["shifted"] = seconds(frame["b"] - pd.Timedelta(minutes=90) - zero)
    return rows(out[out["lasted"].notna()])


def test_epoch_of_an_interval_and_of_a_time_on_duckdb():
    frame = times()
    actual = rows(sql(EPOCHS, {"t": frame}).to_pandas())
    assert_same_rows(actual, epochs_expected(frame), ordered=False)


@pytest.mark.spark
def test_epoch_of_an_interval_and_of_a_time_on_spark(spark):
    frame = times()
    actual = rows(sql(EPOCHS, {"t": spark.createDataFrame(frame)}, runner="spark").to_pandas())
    assert_same_rows(actual, epochs_expected(frame), ordered=False)


@pytest.mark.spark
def test_epoch_on_a_spark_stream_and_an_interval_result_refused_at_its_item(
    spark, spark_streams, tmp_path
):
    (log, checkpoint), table = result(spark_streams[0], "epochs"), spark_streams[1]
    assert (checkpoint / "headwater-stateless").is_dir()
    assert not log["undo"].any()
    assert_same_rows(rows(log.drop(columns="undo")), epochs_expected(streamed(times())), False)
    query = SparkSqlQuery("SELECT n,\n  b - a AS lasted FROM t", {"t": table}, spark=spark)
    with pytest.raises(SqlError, match="result column 'lasted' is an INTERVAL") as caught:
        query.start(checkpoint_location=str(tmp_path / "cp2"), sink=lambda df, i: None)
    assert (caught.value.line, caught.value.col) == (2, 3)
    assert "EXTRACT(EPOCH FROM ended - started)" in caught.value.hint


WINDOWED = """SELECT window_start, ROUND(SUM(EXTRACT(EPOCH FROM b - a)), 3) AS lasted,
       COUNT(*) FILTER (WHERE DATE_DIFF('second', a, b) > 0) AS later,
       MAX(TIMESTAMPDIFF(MINUTE, a, b)) AS longest
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(a), INTERVAL '3650' DAY))
WHERE TIMESTAMPDIFF(DAY, a, b) BETWEEN -1000 AND 1000
GROUP BY window_start, window_end"""


@pytest.mark.spark
def test_a_windowed_aggregate_of_them_on_spark_equals_the_bounded_query(spark_streams):
    """The windowed fast path writes its arguments and WHERE in Spark's SQL itself
    (over the stream's own columns: microseconds kept)."""
    frame = times()
    log, checkpoint = result(spark_streams[0], "windowed")
    assert not (checkpoint / "headwater-stateless").exists()
    final = multiset(rows(log[~log["undo"]].drop(columns="undo")))
    final -= multiset(rows(log[log["undo"]].drop(columns="undo")))
    expected = rows(sql(WINDOWED, {"t": frame.dropna(subset=["a"])}).to_pandas())
    assert_same_rows(list(final.elements()), expected, ordered=False)
    assert len(expected) > 2


FIELD_NAMES = "year quarter month week day doy hour minute second millisecond microsecond"
FIELD_NAMES += " dow isodow decade century millennium isoyear yearweek"
FIELDS = (
    "SELECT n, "
    + ", ".join(
        [f"EXTRACT({f} FROM a) AS {f}" for f in FIELD_NAMES.split()]
        + [f"EXTRACT({f} FROM b - a) AS i_{f}" for f in ("second", "millisecond", "microsecond")]
        + ["DATE_PART('dow', b) AS part", "DATEPART('second', b) AS part2"]
        + ["DAYOFWEEK(a) AS dayofweek", "WEEKDAY(a) AS weekday", "ISODOW(a) AS iso"]
    )
    + " FROM t"
)


def fields_expected(frame: pd.DataFrame) -> list[tuple]:
    """The fields as DuckDB reads the same text."""
    with duckdb.connect() as con:
        con.register("t", frame)
        return rows(con.execute(FIELDS).df())


def test_fields_of_times_on_duckdb_as_duckdb_reads_them():
    frame = times()
    assert_same_rows(rows(sql(FIELDS, {"t": frame}).to_pandas()), fields_expected(frame), False)


@pytest.mark.spark
def test_fields_of_times_on_spark_bounded_and_streamed_as_duckdb_reads_them(spark, spark_streams):
    frame = times()
    bounded = sql(FIELDS, {"t": spark.createDataFrame(frame)}, runner="spark").to_pandas()
    assert_same_rows(rows(bounded), fields_expected(frame), ordered=False)
    log, _ = result(spark_streams[0], "fields")
    assert not log["undo"].any()
    assert_same_rows(rows(log.drop(columns="undo")), fields_expected(streamed(frame)), False)
