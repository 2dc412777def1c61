"""The SQL a Flink user pastes: Flink's spellings parse, and a bounded query over
a table gives the rows Flink's meaning gives."""

from __future__ import annotations

import pandas as pd
import pytest
from sql_helpers import assert_same_rows, rows

from headwater.sql import sql
from headwater.sql.parse.dialect import Headwater, SqlError, parse_query
from headwater.sql.plan.translate import to_engine_sql
from headwater.sql.script import run_script

BID = pd.DataFrame(
    {
        "auction": [1, 1, 2],
        "price": [10, 30, 20],
        "dateTime": pd.to_datetime(
            ["2020-04-15 08:05:00", "2020-04-15 23:59:00", "2020-04-16 00:01:00"]
        ),
    }
)


def bounded(text: str, tables=None) -> list[tuple]:
    return rows(sql(text, tables or {"bid": BID}).to_pandas())


def test_backticked_identifiers_keep_their_case():
    column = parse_query("SELECT B.`dateTime` FROM bid B").expressions[0]
    assert column.name == "dateTime" and column.this.args.get("quoted")
    # quoted in headwater's own spelling, so that it parses back the same
    assert column.sql(dialect=Headwater) == 'B."dateTime"'


def test_backticked_identifiers_run():
    actual = bounded("SELECT `auction`, B.`dateTime` AS `when` FROM bid B WHERE `price` > 15")
    expected = [(1, "2020-04-15T23:59:00"), (2, "2020-04-16T00:01:00")]
    assert_same_rows(actual, expected, ordered=False)


DAILY = """SELECT DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`,
       max(DATE_FORMAT(`dateTime`, 'HH:mm')) AS `minute`,
       count(*) AS total_bids,
       count(*) FILTER (WHERE price < 20) AS cheap_bids,
       count(DISTINCT auction) FILTER (WHERE price >= 20) AS dear_auctions,
       sum(price) FILTER (WHERE price >= 20) AS dear_total
FROM bid
GROUP BY DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""
DAILY_ROWS = [("2020-04-15", "23:59", 2, 1, 1, 30), ("2020-04-16", "00:01", 1, 0, 1, 20)]


def test_date_format_and_filter_on_duckdb():
    assert_same_rows(bounded(DAILY), DAILY_ROWS, ordered=False)


def test_date_format_and_filter_on_spark(spark):
    actual = rows(sql(DAILY, {"bid": spark.createDataFrame(BID)}, runner="spark").to_pandas())
    assert_same_rows(actual, DAILY_ROWS, ordered=False)


def test_date_format_pattern_letters_are_checked():
    with pytest.raises(SqlError, match="pattern 'EEE' is not supported"):
        parse_query("SELECT DATE_FORMAT(t, 'EEE yyyy') FROM bid")


#: Flink's SPLIT_INDEX edge cases: commons-lang's splitByWholeSeparatorPreserveAllTokens
#: keeps empty parts (a//b, a trailing /), splits '' into no part (NULL at every index),
#: reads the separator as text (. and |), and a negative or too large index is NULL.
URLS = pd.DataFrame({"url": ["https://a.com/x/y", "a//b", None, "", "a/b/", "x.y|z.w"]})
SPLITS = """SELECT url, SPLIT_INDEX(url, '/', 0) AS p0, SPLIT_INDEX(url, '/', 2) AS p2,
                   SPLIT_INDEX(url, '/', 3) AS p3, SPLIT_INDEX(url, '/', 4) AS p4,
                   SPLIT_INDEX(url, '//', 1) AS q1, SPLIT_INDEX(url, '/', -1) AS neg,
                   SPLIT_INDEX(url, '.', 1) AS dot, SPLIT_INDEX(url, '|', 1) AS bar
            FROM t"""
SPLIT_ROWS = [
    ("https://a.com/x/y", "https:", "a.com", "x", "y", "a.com/x/y", None, "com/x/y", None),
    ("a//b", "a", "b", None, None, "b", None, None, None),
    (None, None, None, None, None, None, None, None, None),
    ("", None, None, None, None, None, None, None, None),
    ("a/b/", "a", "", None, None, None, None, None, None),
    ("x.y|z.w", "x.y|z.w", None, None, None, None, None, "y|z", "z.w"),
]


def test_split_index_is_zero_based_and_null_past_the_end():
    assert_same_rows(bounded(SPLITS, {"t": URLS}), SPLIT_ROWS, ordered=False)


def test_split_index_on_spark_splits_once_with_flinks_meaning(spark):
    """On Spark, SPLIT_INDEX with a literal separator and index is one SPLIT read by
    GET (not three string functions per call), with the same rows as DuckDB's form."""
    text = to_engine_sql(parse_query(SPLITS), "spark", lambda name: ["url"])
    assert text.count("GET(SPLIT(") == 7 and text.count("SPLIT_PART") == 1  # neg: the CASE
    actual = rows(sql(SPLITS, {"t": spark.createDataFrame(URLS)}, runner="spark").to_pandas())
    assert_same_rows(actual, SPLIT_ROWS, ordered=False)


def test_create_view_is_a_named_subquery_in_a_script():
    text = """CREATE VIEW dear AS SELECT auction, price FROM bid WHERE price >= 20;
    CREATE VIEW dearest AS SELECT max(price) AS top FROM dear;
    SELECT D.auction, `top` FROM dear D JOIN dearest ON D.price = dearest.top"""
    (result,) = run_script(text, {"bid": BID})
    assert_same_rows(rows(result), [(1, 30)], ordered=False)
