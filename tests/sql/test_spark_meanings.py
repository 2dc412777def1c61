"""A function both engines have by one name means DuckDB's thing on Spark too:
rewritten where a rewrite gives DuckDB's values (checked against DuckDB on
the same rows), refused at the call where none does; LOG(x), whose meaning
differs between Flink and DuckDB, is refused on every runner. Spark's failure
on a row's value is a SqlError that says so."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, norm, rows

from headwater.sql import sql
from headwater.sql.errors import SqlError
from headwater.sql.parse.dialect import parse_query
from headwater.sql.plan.spark_meanings import OTHER_MEANINGS

ROWS = pd.DataFrame(
    {
        "g": [1, 1, 1, 1, 2, 2, 2],
        "n": [1, 2, 3, 4, 5, 6, 7],
        "s": ["a", "b", "c", None, "e", None, "g"],  # NULL at group 1's last n
        "d": [2.5, -1.0, 7.0, None, 100.0, 2.345, 3.0],
    }
)
#: sqlglot writes these in Spark SQL with another meaning; headwater rewrites them.
REWRITTEN = """SELECT g,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY d) AS median_d,
    percentile_cont(0.25) WITHIN GROUP (ORDER BY d DESC) AS upper_quartile,
    percentile_disc(0.5) WITHIN GROUP (ORDER BY d) AS disc,
    arg_max(s, n) AS last_s, arg_min(s, -n) AS last_s2,
    round(kurtosis_pop(d), 9) AS k, quantile_cont(d, 0.3) AS q3
FROM t GROUP BY g"""


def duckdbs(text: str, frame: pd.DataFrame = ROWS) -> list[tuple]:
    with duckdb.connect() as con:
        con.register("t", frame)
        return rows(con.execute(text.replace(" DIV ", " // ")).df())


@pytest.mark.spark
@pytest.mark.parametrize("name", list(OTHER_MEANINGS))
def test_a_function_spark_means_otherwise_is_refused_at_its_call(spark, name):
    call = {"hash": "hash(s)", "initcap": "initcap(s)"}.get(name, f"{name}(d)")
    text = f"SELECT g,\n  {call} AS x FROM t" + (
        " GROUP BY g" if name in ("kurtosis", "skewness") else ""
    )
    assert len(sql(text, {"t": ROWS}).to_pandas())  # DuckDB's meaning on the local runner
    with pytest.raises(SqlError, match=f"{name.upper()} means another thing on Spark") as caught:
        sql(text, {"t": spark.createDataFrame(ROWS)}, runner="spark")
    assert caught.value.line == 2 and caught.value.col >= 3  # the call (or its argument)


def test_log_of_one_argument_is_refused_on_every_runner():
    with pytest.raises(SqlError, match="natural logarithm in Flink and Spark") as caught:
        parse_query("SELECT g,\n  LOG(d) FROM t")
    assert (caught.value.line, caught.value.col) == (2, 7)
    assert "LN(x), LOG10(x)" in caught.value.hint
    both = "SELECT n, LOG(2, 8) AS two, ROUND(LOG10(100), 6) AS ten, ROUND(LN(1), 6) AS e FROM t"
    assert rows(sql(both, {"t": ROWS.head(1)}).to_pandas()) == [(1.0, 3.0, 2.0, 0.0)]


@pytest.mark.spark
def test_sparks_failure_on_a_value_is_a_sql_error(spark):
    text = "SELECT n, CAST(s AS INT) AS i FROM t"
    with pytest.raises(
        SqlError, match="Spark failed on a value of the query's rows: .*'not an integer: a'"
    ):
        sql(text, {"t": spark.createDataFrame(ROWS)}, runner="spark").to_pandas()


#: DuckDB never fails on a zero divisor: / is infinite (NaN for 0 / 0), DIV (DuckDB's
#: //) and % NULL.
BY_ZERO = """SELECT n, d / (n - 3) AS q, (d / (n - 3)) / (n - 4) AS qq, n / (n - 3) AS r,
    (n - 3) / (n - 3) AS z,
    n DIV (n - 3) AS w, n % (n - 3) AS m, d / 2 AS half, CAST(n AS DECIMAL(5, 1)) / 4 AS dq
FROM t"""


#: SUBSTRING, LEFT, RIGHT at their edges (a start of 0 or before the text, a negative
#: length or count), ISNAN of NULL: DuckDB's values on Spark too.
TEXT_EDGES = (
    "SELECT n, "
    + ", ".join(
        [
            f"SUBSTRING(s, {p}, {k}) AS sub_{i}_{j}"
            for i, p in enumerate(("-7", "-1", "0", "1", "2", "n - 3"))
            for j, k in enumerate(("-1", "0", "2", "n - 4"))
        ]
        + ["LEFT(s, -1) AS l1", "LEFT(s, n - 3) AS l2", "RIGHT(s, -1) AS r1", "RIGHT(s, 2) AS r2"]
        + ["ISNAN(d) AS nan", "SUBSTRING(s, 0) AS whole"]
    )
    + " FROM t"
)


#: Each query, over its rows, as DuckDB reads it on both runners.
CASES = {
    "rewritten": (REWRITTEN, ROWS),
    "by_zero": (BY_ZERO, ROWS),
    "text_edges": (TEXT_EDGES, ROWS.assign(s=["Hello", "ab", None, "", "ünï", "xyz", "a"])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_on_duckdb(case):
    text, frame = CASES[case]
    assert_same_rows(rows(sql(text, {"t": frame}).to_pandas()), duckdbs(text, frame), False)


@pytest.mark.spark
@pytest.mark.parametrize("case", list(CASES))
def test_on_spark_as_duckdb(spark, case):
    text, frame = CASES[case]
    actual = sql(text, {"t": spark.createDataFrame(frame)}, runner="spark").to_pandas()
    assert_same_rows(rows(actual), duckdbs(text, frame), ordered=False)


#: ARRAY_AGG keeps NULLs and follows its ORDER BY (DuckDB's NULL order: last, unless
#: NULLS FIRST); Spark's COLLECT_LIST drops both unless rewritten.
LISTS = """SELECT g, ARRAY_AGG(s) AS all_s, ARRAY_AGG(DISTINCT s) AS kinds,
    ARRAY_AGG(s ORDER BY n DESC) AS by_n, ARRAY_AGG(n ORDER BY s NULLS FIRST, n DESC) AS by_s,
    ARRAY_AGG(d ORDER BY s DESC) AS by_s_desc, ARRAY_LENGTH(ARRAY_AGG(s)) AS c
FROM t GROUP BY g"""
#: The lists whose order no ORDER BY fixes: compared as multisets.
UNORDERED = ("all_s", "kinds")


def _lists(frame: pd.DataFrame) -> list[tuple]:
    """Rows with each list a tuple of normalized items (sorted where unordered)."""
    out = frame.copy()
    for column in [c for c in out.columns if c in UNORDERED or c.startswith("by_")]:
        cells = [cell.tolist() if hasattr(cell, "tolist") else cell for cell in out[column]]
        items = [tuple(norm(v) for v in cell) for cell in cells]  # a masked item: None
        if column in UNORDERED:
            items = [tuple(sorted(cell, key=lambda v: (v is None, v))) for cell in items]
        out[column] = pd.Series(items, index=out.index, dtype=object)
    return rows(out)


def test_array_agg_on_duckdb():
    with duckdb.connect() as con:
        con.register("t", ROWS)
        expected = _lists(con.execute(LISTS).df())
    assert any(None in row[1] for row in expected)  # a NULL kept
    assert_same_rows(_lists(sql(LISTS, {"t": ROWS}).to_pandas()), expected, ordered=False)


@pytest.mark.spark
def test_array_agg_keeps_nulls_and_its_order_on_spark(spark):
    with duckdb.connect() as con:
        con.register("t", ROWS)
        expected = _lists(con.execute(LISTS).df())
    actual = sql(LISTS, {"t": spark.createDataFrame(ROWS)}, runner="spark").to_pandas()
    assert_same_rows(_lists(actual), expected, ordered=False)
