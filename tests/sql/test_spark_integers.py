"""Integers on Spark (issue 16): an integer column that holds a NULL stays an
integer column in a Spark result (pandas' nullable Int64, as DuckDB gives it on
the local runner), not a float64 column (``toPandas``'s), so that a Spark
result's column types and values equal the local runner's. And the time
truncations (``DATE_TRUNC``, Flink's ``FLOOR``/``CEIL(ts TO unit)``) mean on
Spark what they mean in DuckDB.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from sql_helpers import changelog_order, write_replay

from headwater.sql import read_replay, sql
from headwater.sql.parse.dialect import parse_query
from headwater.sql.plan.translate import to_engine_sql

STEPS = [
    ("10:05", [("10:01", 3, "a"), ("10:04", None, "c"), ("10:02", None, "a")], None),
    ("10:07", [("10:12", 4, "b"), ("10:03", 5, "a"), ("10:06", None, "b")], "10:02"),
]
QUERY = (
    "SELECT item, MAX(price) AS top, COUNT(price) AS priced, SUM(price) + 1 AS s "
    "FROM Bid GROUP BY item"
)


@pytest.fixture(scope="module")
def bids(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("spark-integers") / "bids.jsonl"
    write_replay(path, "2024-01-01", STEPS, "bidtime", ("bidtime", "price", "item"))
    types = {"price": "BIGINT", "item": "VARCHAR"}
    return {"Bid": read_replay(path, "Bid", "bidtime", types)}


@pytest.mark.spark
@pytest.mark.slow
def test_a_null_in_an_integer_column_keeps_it_an_integer_on_spark(spark, bids) -> None:
    from headwater.sql.execute.spark import SparkSqlQuery

    local = sql(QUERY, tables=bids).run(None)
    on_spark = SparkSqlQuery(QUERY, bids, spark=spark).run(None)
    log, expected = changelog_order(on_spark.changelog), changelog_order(local.changelog)
    assert log["top"].isna().any() and log["s"].isna().any()  # item c: prices all NULL
    assert expected["top"].dtype == "Int64"
    columns = ["item", "top", "priced", "s", "undo"]
    assert log[columns].dtypes.to_dict() == expected[columns].dtypes.to_dict()
    pd.testing.assert_frame_equal(
        log[columns].reset_index(drop=True), expected[columns].reset_index(drop=True)
    )


@pytest.mark.spark
@pytest.mark.slow
def test_time_truncations_mean_the_same_on_spark(spark) -> None:
    """Spark's translation: DATE_TRUNC as Spark's DATE_TRUNC (sqlglot wrote TRUNC,
    of dates: NULL for an hour), FLOOR / CEIL (ts TO unit) as DuckDB computes them."""
    text = (
        "SELECT FLOOR(t TO HOUR) AS f, DATE_TRUNC('day', t) AS d, CEIL(t TO HOUR) AS c, "
        "DATE_TRUNC('minute', t) AS m FROM T"
    )
    times = pd.DataFrame({"t": pd.to_datetime(["2024-03-01 10:20:03", "2024-03-01 11:00:00"])})
    query = parse_query(text)
    con = duckdb.connect()
    con.register("T", times)
    expected = con.sql(to_engine_sql(query, "duckdb", lambda _: ["t"])).df()
    spark.createDataFrame(times).createOrReplaceTempView("T")
    got = spark.sql(to_engine_sql(query, "spark", lambda _: ["t"])).toPandas()
    assert got.notna().all().all()
    pd.testing.assert_frame_equal(got.astype("datetime64[ns]"), expected.astype("datetime64[ns]"))
