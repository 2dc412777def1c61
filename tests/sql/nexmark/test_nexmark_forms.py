"""The SQL forms the NEXMark queries need, each on a small stream: an INSERT
whose result repeats a column name (q20), Flink's REGEXP_EXTRACT (q21), a
GROUP BY on a day of the event time (q17) and the legacy group windows (q11).
Each streaming result equals the bounded query over the same rows."""

from __future__ import annotations

import duckdb
import pytest
from sql_helpers import assert_same_rows, norm, rows, write_replay

from headwater.sql import SqlError, read_replay, sql
from headwater.sql.script import run_script

DAY = "2024-01-01"
#: (ptime, rows (bidtime, price, item, url), watermark): out of order, none late,
#: over two days.
STEPS = [
    ("10:00", [("09:58", 3, "A", "a=1&channel_id=7"), ("09:50", 5, "B", "x=2")], "09:45"),
    ("10:05", [("10:01", 4, "A", "channel_id=12&b=3"), ("09:59", 9, "B", "")], "09:55"),
    ("10:20", [("10:15", 2, "B", "channel_id=&q"), ("10:19", 8, "A", None)], "10:10"),
    ("23:59", [("23:58", 6, "A", "channel_id=4")], "23:50"),
]
COLUMNS = ("bidtime", "price", "item", "url")


@pytest.fixture(scope="module")
def bids(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("forms") / "bids.jsonl"
    write_replay(path, DAY, STEPS, "bidtime", COLUMNS)
    # and a bid of the next day
    text = path.read_text() + (
        '{"ptime": "2024-01-02T00:03:00", "row": {"bidtime": "2024-01-02T00:01:00", '
        '"price": 7, "item": "B", "url": "channel_id=9"}}\n'
    )
    path.write_text(text)
    return str(path)


def stream(path: str) -> str:
    return (
        "CREATE TABLE Bid (bidtime TIMESTAMP, price BIGINT, item VARCHAR, url VARCHAR, "
        "WATERMARK FOR bidtime AS bidtime - INTERVAL '5' MINUTE) "
        f"WITH ('format' = 'replay', 'path' = '{path}');\n"
    )


def bounded(path: str, query: str) -> list[tuple]:
    """``query`` in DuckDB over every bid of the replay (``bids``)."""
    bids = read_replay(path, "Bid", "bidtime").frame  # noqa: F841 - read by DuckDB
    return rows(duckdb.sql(query).df())


def test_an_insert_fills_repeated_names_by_position(bids, tmp_path) -> None:
    """INSERT INTO fills the sink's columns by position (Flink): two results named
    price land in their own columns."""
    sink = tmp_path / "out.duckdb"
    text = stream(bids) + (
        f"CREATE TABLE Pairs (price BIGINT, other_price BIGINT, item VARCHAR) "
        f"WITH ('format' = 'table', 'path' = '{sink}');\n"
        "INSERT INTO Pairs SELECT A.price, B.price, A.item FROM Bid A JOIN Bid B "
        "ON A.item = B.item AND A.price < B.price;"
    )
    list(run_script(text))
    with duckdb.connect(str(sink)) as con:
        got = con.execute("SELECT price, other_price, item FROM Pairs").df()
    expected = bounded(
        bids,
        "SELECT A.price, B.price, A.item FROM bids A JOIN bids B "
        "ON A.item = B.item AND A.price < B.price",
    )
    assert expected
    assert_same_rows(rows(got), expected, ordered=False)


def test_a_query_repeating_a_result_name_is_refused(bids) -> None:
    """A changelog names its columns: two of one name are refused, where written."""
    text = "SELECT A.price, B.price FROM Bid A JOIN Bid B ON A.item = B.item"
    with pytest.raises(SqlError) as raised:
        sql(text, {"Bid": read_replay(bids, "Bid", "bidtime")})
    assert "two result columns are named price" in raised.value.message
    assert (raised.value.line, raised.value.col) == (1, text.index("B.price") + 1)


def test_regexp_extract_is_flinks(bids) -> None:
    """REGEXP_EXTRACT(s, p, n): group n of the first match, '' for a group that
    matched nothing, NULL when the pattern does not match (DuckDB and Spark give
    ''); without n, the whole match (q21)."""
    text = (
        "SELECT price, REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) AS channel, "
        "REGEXP_EXTRACT(url, 'channel_id=[0-9]') AS whole FROM Bid"
    )
    got = sql(text, {"Bid": read_replay(bids, "Bid", "bidtime")}).to_pandas()
    expected = [
        (3, "7", "channel_id=7"),
        (5, None, None),
        (4, "12", "channel_id=1"),
        (9, None, None),
        (2, "", None),
        (8, None, None),
        (6, "4", "channel_id=4"),
        (7, "9", "channel_id=9"),
    ]
    assert_same_rows(rows(got), [tuple(map(norm, r)) for r in expected], ordered=False)


@pytest.mark.parametrize(
    "group",
    ["DATE_FORMAT(bidtime, 'yyyy-MM-dd')", "item, DATE_FORMAT(bidtime, 'yyyy-MM-dd')"],
)
def test_a_group_by_day_of_the_event_time(bids, group: str) -> None:
    """GROUP BY a function of the event time (a day) groups the rows of each day,
    however many instants it has, as the bounded query does (q15-q17)."""
    text = (
        f"SELECT {group}, COUNT(*) AS n, SUM(price) AS total, MAX(url) AS url "
        f"FROM Bid GROUP BY {group}"
    )
    got = sql(text, {"Bid": read_replay(bids, "Bid", "bidtime")}).to_pandas()
    day = "strftime(bidtime, '%Y-%m-%d')"
    keys = group.replace("DATE_FORMAT(bidtime, 'yyyy-MM-dd')", day)
    expected = bounded(
        bids, f"SELECT {keys}, count(*), sum(price), max(url) FROM bids GROUP BY {keys}"
    )
    assert len(expected) == (2 if group.startswith("DATE") else 3)
    assert_same_rows(rows(got), expected, ordered=False)


#: Flink's legacy group windows and what each means with a windowing TVF (q11).
LEGACY = {
    "tumble": (
        "SELECT item, TUMBLE_START(bidtime, INTERVAL '10' MINUTE) AS ws, "
        "TUMBLE_END(bidtime, INTERVAL '10' MINUTE) AS we, "
        "TUMBLE_ROWTIME(bidtime, INTERVAL '10' MINUTE) AS wt, SUM(price) AS total "
        "FROM Bid GROUP BY TUMBLE(bidtime, INTERVAL '10' MINUTE), item",
        "SELECT item, window_start, window_end, window_time, SUM(price) FROM TABLE(TUMBLE("
        "TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE)) "
        "GROUP BY window_start, window_end, window_time, item",
    ),
    "hop": (
        "SELECT HOP_START(B.bidtime, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE) AS ws, "
        "HOP_END(B.bidtime, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE) AS we, COUNT(*) AS n "
        "FROM Bid B GROUP BY HOP(B.bidtime, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE) "
        "HAVING COUNT(*) > 1",
        "SELECT window_start, window_end, COUNT(*) FROM TABLE(HOP(TABLE Bid, "
        "DESCRIPTOR(bidtime), INTERVAL '5' MINUTE, INTERVAL '10' MINUTE)) "
        "GROUP BY window_start, window_end HAVING COUNT(*) > 1",
    ),
    "session": (
        "SELECT item, COUNT(*) AS n, SESSION_START(bidtime, INTERVAL '5' MINUTE) AS ws, "
        "SESSION_END(bidtime, INTERVAL '5' MINUTE) AS we FROM Bid "
        "GROUP BY item, SESSION(bidtime, INTERVAL '5' MINUTE)",
        "SELECT item, COUNT(*), window_start, window_end FROM TABLE(SESSION(TABLE Bid "
        "PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '5' MINUTE)) "
        "GROUP BY item, window_start, window_end",
    ),
}


@pytest.mark.parametrize("form", LEGACY)
def test_a_legacy_group_window_is_its_windowing_tvf(bids, form: str) -> None:
    """GROUP BY TUMBLE/HOP/SESSION(t, ...) with <KIND>_START/_END/_ROWTIME runs as
    the windowing TVF query (a session per group key), on the stream."""
    legacy, tvf = LEGACY[form]
    tables = {"Bid": read_replay(bids, "Bid", "bidtime")}
    got = sql(legacy, tables).to_pandas()
    expected = sql(tvf, tables).to_pandas()
    assert len(expected) >= 3
    assert_same_rows(rows(got), rows(expected), ordered=False)


@pytest.mark.parametrize(
    ("query", "at", "words"),
    [
        (
            "SELECT TUMBLE_START(bidtime, INTERVAL '5' MINUTE) FROM Bid "
            "GROUP BY HOP(bidtime, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE)",
            "TUMBLE_START",
            "does not name a column of the HOP window",
        ),
        (
            "SELECT TUMBLE_END(bidtime, INTERVAL '5' MINUTE) FROM Bid "
            "GROUP BY TUMBLE(bidtime, INTERVAL '10' MINUTE)",
            "TUMBLE_END",
            "must repeat the arguments",
        ),
        (
            "SELECT COUNT(*) FROM Bid A JOIN Bid B ON A.item = B.item "
            "GROUP BY TUMBLE(A.bidtime, INTERVAL '10' MINUTE)",
            "TUMBLE(A",
            "reads one table",
        ),
        ("SELECT TUMBLE(bidtime, INTERVAL '10' MINUTE) FROM Bid", "TUMBLE", "goes in GROUP BY"),
        (
            "SELECT COUNT(*) FROM Bid GROUP BY UPPER(item), SESSION(bidtime, INTERVAL '1' MINUTE)",
            "UPPER",
            "groups by columns of its table only",
        ),
        (
            "SELECT COUNT(*) FROM Bid GROUP BY TUMBLE(bidtime, 10)",
            "10",
            "size must be an INTERVAL",
        ),
    ],
)
def test_a_legacy_group_window_refused_where_written(bids, query, at, words) -> None:
    with pytest.raises(SqlError) as raised:
        sql(query, {"Bid": read_replay(bids, "Bid", "bidtime")})
    assert words in raised.value.message
    assert (raised.value.line, raised.value.col) == (1, query.index(at) + 1)


def test_a_column_of_a_table_out_of_scope_is_refused_where_written(bids) -> None:
    """q6 reads A.id outside the subquery that names A: refused at A.id."""
    text = "SELECT S.price, A.item FROM (SELECT A.price, A.item FROM Bid A) S"
    with pytest.raises(SqlError) as raised:
        sql(text, {"Bid": read_replay(bids, "Bid", "bidtime")})
    assert "no table or alias A here" in raised.value.message
    assert (raised.value.line, raised.value.col) == (1, text.index("A.item") + 1)
