"""Streaming SQL outside windows (issue 16): a query maintained per value of its
maintenance key (:mod:`headwater.sql.plan.keys`) is, at every processing time, the
same query run bounded (DuckDB) over the rows arrived and not dropped.

The replay has repeated items and bidders, a late row (dropped by windowed
queries: a dead letter), and a second stream (auctions) to join on a key.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from sql_helpers import (
    assert_same_rows,
    changelog_order,
    millis,
    result,
    rows,
    spark_runs,
    write_replay,
)

from headwater.sql import read_replay, sql
from headwater.sql.errors import SqlError
from headwater.sql.execute.local import run_stream
from headwater.sql.plan.keys import KeyKind

DAY = "2024-01-01"
BID_COLUMNS = ("bidtime", "price", "item", "bidder", "auction")
#: (ptime, rows, watermark): repeated items, equal event times, a late row at 10:09
#: (the watermark is 10:10 when it arrives; windowed queries drop it), a NULL event time.
BID_STEPS = [
    ("10:01", [("10:00", 4, "A", "x", 1), ("10:00", 2, "B", "y", 2)], None),
    ("10:02", [("10:01", 5, "A", "y", 1)], "10:00"),
    ("10:04", [("10:03", 1, "A", "x", 1), ("10:03:30", 7, "C", "z", 3)], "10:02"),
    ("10:06", [("10:05", 3, "B", "x", 2), ("10:02", 6, "A", "x", 1)], "10:04"),
    ("10:08", [("10:07", 8, "C", "y", 3), (None, 9, "A", "x", 1)], "10:06"),
    ("10:12", [("10:11", 2, "A", "z", 1)], "10:10"),
    ("10:14", [("10:13", 4, "D", "x", 4), ("10:09", 5, "B", "y", 2)], "10:12"),
]
AUCTION_COLUMNS = ("ts", "id", "seller")
AUCTION_STEPS = [
    ("10:01", [("10:00", 1, "s1")], "10:00"),
    ("10:05", [("10:04", 2, "s2"), ("10:04", 3, "s1")], "10:03"),
    ("10:13", [("10:12", 4, "s3"), ("10:12", 5, "s2")], "10:11"),
]
PTIMES = ["10:01", "10:02", "10:04", "10:06", "10:08", "10:12", "10:14"]

HOP = (
    "Hop(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), hopsize => INTERVAL '2' MINUTE, "
    "dur => INTERVAL '4' MINUTE)"
)
SESSION_BY_ITEM = (
    "TABLE(SESSION(TABLE Bid PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '2' MINUTE))"
)
QUERIES = {
    "distinct": "SELECT DISTINCT item FROM Bid",
    "dedup": "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY item ORDER BY "
    "bidtime, price) AS rn FROM Bid) WHERE rn = 1",
    "dedup_two_keys": "SELECT bidtime, bidder, auction, price FROM (SELECT *, ROW_NUMBER() "
    "OVER (PARTITION BY bidder, auction ORDER BY bidtime DESC, price) AS rn FROM Bid) "
    "WHERE rn = 1",
    "lag": "SELECT item, bidtime, price, LAG(price) OVER (PARTITION BY item ORDER BY "
    "bidtime, price) AS prev FROM Bid",
    "running_sum": "SELECT bidtime, price, SUM(price) OVER (ORDER BY bidtime, price "
    "ROWS UNBOUNDED PRECEDING) AS total FROM Bid",
    "range_frame": "SELECT item, bidtime, SUM(price) OVER (PARTITION BY item ORDER BY "
    "bidtime RANGE BETWEEN INTERVAL '90' SECOND PRECEDING AND CURRENT ROW) AS recent FROM Bid",
    "by_date": "SELECT item, CAST(bidtime AS DATE) AS day, SUM(price) AS total FROM Bid "
    "GROUP BY item, CAST(bidtime AS DATE)",
    "group_by": "SELECT item, COUNT(*) AS n, MAX(price) AS top FROM Bid GROUP BY item",
    "group_by_alias": "SELECT k, SUM(p) AS total FROM (SELECT item AS k, price AS p FROM Bid) "
    "GROUP BY k HAVING SUM(p) > 4",
    "global_count": "SELECT COUNT(*) AS n, SUM(price) AS total FROM Bid",
    "join": "SELECT B.item, B.price, A.seller FROM Bid B JOIN Auction A ON B.auction = A.id",
    "join_aggregate": "SELECT A.seller, COUNT(*) AS bids FROM Bid B JOIN Auction A "
    "ON B.auction = A.id GROUP BY A.seller",
    "windowed_distinct": "SELECT DISTINCT item FROM Tumble(data => TABLE(Bid), "
    "timecol => DESCRIPTOR(bidtime), dur => INTERVAL '5' MINUTE)",
    "windowed_by_item": "SELECT item, COUNT(*) AS n FROM Tumble(data => TABLE(Bid), "
    "timecol => DESCRIPTOR(bidtime), dur => INTERVAL '5' MINUTE) GROUP BY item",
    "numbered_windows": "SELECT wstart, MAX(price) AS top, ROW_NUMBER() OVER (ORDER BY wstart) "
    "AS n FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), "
    "dur => INTERVAL '5' MINUTE) GROUP BY wstart, wend",
    "session_by_item": "SELECT item, MAX(wend) AS last_end FROM Session(data => TABLE(Bid), "
    "timecol => DESCRIPTOR(bidtime), gap => INTERVAL '2' MINUTE) GROUP BY item",
    "in_subquery": "SELECT bidtime, item FROM Bid WHERE item IN "
    "(SELECT item FROM Bid WHERE price > 6)",
    "union_distinct": "SELECT item FROM Bid UNION SELECT seller FROM Auction",
    "scalar_subquery": "SELECT item, price FROM Bid WHERE price = (SELECT MAX(price) FROM Bid)",
    "left_join": "SELECT A.id, COUNT(B.price) AS n FROM Auction A LEFT JOIN Bid B "
    "ON B.auction = A.id GROUP BY A.id",
    "left_join_padded": "SELECT B.auction, COUNT(*) AS n FROM Auction A LEFT JOIN Bid B "
    "ON B.auction = A.id GROUP BY B.auction",
    "union_all_keyed": "SELECT k, COUNT(*) AS n FROM (SELECT item AS k FROM Bid UNION ALL "
    "SELECT seller AS k FROM Auction) GROUP BY k",
    "union_all_opaque": "SELECT k, COUNT(*) AS n FROM (SELECT item AS k FROM Bid UNION ALL "
    "SELECT CASE WHEN bidder = 'x' THEN 'A' ELSE 'B' END AS k FROM Bid) GROUP BY k",
    "correlated": "SELECT item, price FROM Bid B WHERE price = "
    "(SELECT MAX(price) FROM Bid C WHERE C.item = B.item)",
    "session_key_renamed": "SELECT ws, we, g, COUNT(*) AS n FROM (SELECT s.item AS g, "
    f"s.window_start AS ws, s.window_end AS we FROM {SESSION_BY_ITEM} s) q GROUP BY ws, we, g",
    "hop_self_join": f"SELECT B.wstart, B.item, B.price, C.price AS other FROM {HOP} B "
    f"JOIN {HOP} C ON B.wstart = C.wstart AND B.wend = C.wend AND B.item = C.item "
    "AND B.bidtime < C.bidtime",
}
#: The key each query is maintained by.
KEYS = {
    "distinct": (KeyKind.COLUMNS, ["bid.item"]),
    "dedup": (KeyKind.COLUMNS, ["bid.item"]),
    "dedup_two_keys": (KeyKind.COLUMNS, ["bid.auction", "bid.bidder"]),
    "lag": (KeyKind.COLUMNS, ["bid.item"]),
    "running_sum": (KeyKind.NONE, []),
    "range_frame": (KeyKind.COLUMNS, ["bid.item"]),
    "by_date": (KeyKind.BUCKET, ["bid.item"]),
    "group_by": (KeyKind.COLUMNS, ["bid.item"]),
    "group_by_alias": (KeyKind.COLUMNS, ["bid.item"]),
    "global_count": (KeyKind.NONE, []),
    "join": (KeyKind.COLUMNS, ["auction.id = bid.auction"]),
    "join_aggregate": (KeyKind.NONE, []),
    "windowed_distinct": (KeyKind.COLUMNS, ["bid.item"]),
    "windowed_by_item": (KeyKind.COLUMNS, ["bid.item"]),
    "numbered_windows": (KeyKind.NONE, []),
    "session_by_item": (KeyKind.NONE, []),
    "in_subquery": (KeyKind.COLUMNS, ["bid.item"]),
    "union_distinct": (KeyKind.COLUMNS, ["auction.seller = bid.item"]),
    "scalar_subquery": (KeyKind.NONE, []),
    "left_join": (KeyKind.COLUMNS, ["auction.id = bid.auction"]),
    "left_join_padded": (KeyKind.NONE, []),
    "union_all_keyed": (KeyKind.COLUMNS, ["auction.seller = bid.item"]),
    "union_all_opaque": (KeyKind.NONE, []),
    "correlated": (KeyKind.COLUMNS, ["bid.item"]),
    "hop_self_join": (KeyKind.WINDOW, ["bid.item"]),
    "session_key_renamed": (KeyKind.WINDOW, ["bid.item"]),
}


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("keys")
    bids = write_replay(folder / "bids.jsonl", DAY, BID_STEPS, "bidtime", BID_COLUMNS)
    auctions = write_replay(folder / "auctions.jsonl", DAY, AUCTION_STEPS, "ts", AUCTION_COLUMNS)
    return {
        "Bid": read_replay(bids, "Bid", "bidtime"),
        "Auction": read_replay(auctions, "Auction", "ts"),
    }


def bounded(query: str, tables: dict, as_of: int | None, dropped=None) -> pd.DataFrame:
    """The query run bounded by DuckDB over the rows arrived by ``as_of`` (less
    those the run dropped as late); a windowing TVF in the bounded translation."""
    from headwater.sql.execute.query import SqlQuery
    from headwater.sql.plan.catalog import PTIME

    plan = SqlQuery(query, tables).plan
    con = duckdb.connect()
    for name, table in tables.items():
        frame = table.frame
        frame = frame[frame[PTIME] <= (as_of if as_of is not None else frame[PTIME].max())]
        frame = frame[frame[table.event_time].notna()]
        if dropped is not None and len(dropped):
            late = dropped[dropped["table"] == name]
            if not len(late):
                con.register(name, frame.drop(columns=[PTIME]))
                continue
            # the fast path's dead letters carry the columns it reads only
            keys = [c for c in table.columns if late[c].notna().all()]
            marked = late[keys].astype(frame[keys].dtypes.to_dict()).assign(__late=True)
            frame = frame.merge(marked, how="left", on=keys)
            frame = frame[frame["__late"].isna()].drop(columns="__late")
        con.register(name, frame.drop(columns=[PTIME]))
    from headwater.sql.execute.local import columns_of
    from headwater.sql.plan.translate import to_engine_sql

    return con.sql(to_engine_sql(plan.query, "duckdb", columns_of(plan))).df()


@pytest.mark.parametrize("name", list(QUERIES))
def test_table_view_is_the_bounded_query_over_rows_arrived(tables, name: str) -> None:
    query = sql(QUERIES[name], tables=tables)
    dropped = query.dead_letters()  # those not arrived by a time do not matter then
    for clock in PTIMES:
        as_of = millis(DAY, clock)
        # the view as of a time: the whole run's changelog applied up to then (the
        # run up to that time gives the same: checked at one time below)
        view = query.run(None).table(as_of)
        expected = bounded(QUERIES[name], tables, as_of, dropped)
        assert list(view.columns) == list(expected.columns)
        assert_same_rows(rows(view), rows(expected), ordered=False, what=f"{name} @ {clock}")
    final = query.to_pandas()
    expected = bounded(QUERIES[name], tables, None, dropped)
    assert_same_rows(rows(final), rows(expected), ordered=False, what=f"{name} final")
    middle = millis(DAY, "10:06")
    assert_same_rows(
        rows(query.to_pandas(as_of=middle)), rows(query.run(None).table(middle)), ordered=False
    )


@pytest.mark.parametrize("name", list(QUERIES))
def test_key_of_each_query(tables, name: str) -> None:
    key = sql(QUERIES[name], tables=tables).plan.key
    kind, parts = KEYS[name]
    assert key.kind is kind
    assert [p.describe() for p in key.parts] == parts


@pytest.mark.parametrize(
    ("query", "operator"),
    [
        (
            "SELECT ws, COUNT(*) AS n FROM (SELECT s.item AS g, s.window_start AS ws "
            f"FROM {SESSION_BY_ITEM} s) q GROUP BY ws",
            "GROUP BY",
        ),
        (
            "SELECT window_start, price, RANK() OVER (PARTITION BY window_start ORDER BY price) "
            f"AS r FROM {SESSION_BY_ITEM}",
            "window function",
        ),
    ],
)
def test_an_operator_across_session_keys_is_refused(tables, query: str, operator: str) -> None:
    """Sessions are per key: an operator that combines rows of several keys'
    sessions (the key renamed or not) is refused where it is written."""
    with pytest.raises(SqlError, match=f"sessions are per item: this {operator} must") as info:
        sql(query, tables=tables)
    assert info.value.line == 1 and info.value.col is not None
    assert "Add item to the GROUP BY / PARTITION BY" in str(info.value)


def test_distinct_is_each_item_once(tables) -> None:
    """The issue's first symptom: SELECT DISTINCT item returned A, A, B, A."""
    view = sql(QUERIES["distinct"], tables=tables).to_pandas()
    assert sorted(view["item"]) == ["A", "B", "C", "D"]


def test_unbounded_group_by_retracts(tables) -> None:
    """An unwindowed GROUP BY runs as Flink runs it: each new row of a key
    withdraws the key's previous row and adds the new one."""
    log = sql(QUERIES["group_by"] + " EMIT STREAM", tables=tables).to_pandas()
    a = log[log["item"] == "A"]
    assert a["undo"].any()
    last = a.iloc[-1]
    assert (last["n"], last["top"], bool(last["undo"])) == (5, 6, False)
    withdrawn = a[a["undo"]]
    assert list(withdrawn["n"]) == [1, 2, 3, 4]


def test_windowed_key_keeps_the_window_path(tables) -> None:
    """A query combining rows per window is still maintained per window (its
    state freed by the watermark; the late row a dead letter)."""
    text = (
        "SELECT wstart, item, COUNT(*) AS n FROM Tumble(data => TABLE(Bid), timecol => "
        "DESCRIPTOR(bidtime), dur => INTERVAL '5' MINUTE) GROUP BY wstart, item"
    )
    query = sql(text, tables=tables)
    assert query.plan.key.kind is KeyKind.WINDOW
    assert len(query.dead_letters()) == 2  # the late row and the NULL event time
    assert "freed by the watermark" in query.explain()


def test_explain_names_the_key_and_state_growth(tables) -> None:
    text = sql(QUERIES["dedup_two_keys"], tables=tables).explain()
    assert "grows with the distinct values of bid.auction, bid.bidder" in text
    text = sql(QUERIES["global_count"], tables=tables).explain()
    assert "one group of every row" in text


def test_after_watermark_without_event_time_key_is_refused(tables) -> None:
    text = "SELECT item, COUNT(*) AS n FROM Bid GROUP BY item\nEMIT AFTER WATERMARK"
    with pytest.raises(SqlError) as err:
        sql(text, tables=tables)
    assert err.value.line == 2 and "AFTER WATERMARK" in str(err.value)
    assert "drop AFTER WATERMARK" in err.value.hint


def test_event_time_group_is_per_instant(tables) -> None:
    """GROUP BY the event time keeps today's maintenance per instant."""
    query = sql("SELECT bidtime, COUNT(*) AS n FROM Bid GROUP BY bidtime", tables=tables)
    assert query.plan.key.kind is KeyKind.EVENT_TIME
    expected = bounded(query.plan.query.sql(), tables, None, query.dead_letters())
    assert_same_rows(rows(query.to_pandas()), rows(expected), ordered=False)


def test_regexp_extract_group_argument() -> None:
    """The third argument of REGEXP_EXTRACT is the capture group; no match is NULL
    (Flink's REGEXP_EXTRACT; DuckDB's and Spark's give '')."""
    frame = pd.DataFrame({"url": ["/v?channel_id=ch7&x=1", "/v?y=2"]})
    text = "SELECT regexp_extract(url, 'channel_id=([^&]*)', 1) AS c FROM T"
    out = sql(text, tables={"T": frame}).to_pandas()
    assert list(out["c"]) == ["ch7", None]


def test_spread_over_keys_is_not_one_group(tables) -> None:
    """Keyed groups: one per item (the model's key), not one for all."""
    plan = sql(QUERIES["distinct"], tables=tables).plan
    run = run_stream(plan)
    assert set(run.changelog["__gk"]) == {"A", "B", "C", "D"}


@pytest.fixture(scope="module")
def spark_key_runs(spark, tables) -> dict:
    from headwater.sql.execute.spark import SparkSqlQuery

    names = ["dedup", "group_by", "join", "global_count", "windowed_distinct", "hop_self_join"]

    def job(name):
        return lambda: SparkSqlQuery(QUERIES[name], tables, name=name, spark=spark).run(None)

    jobs = {name: job(name) for name in names}
    jobs["regexp"] = lambda: (
        SparkSqlQuery(
            "SELECT regexp_extract(url, 'channel_id=([^&]*)', 1) AS c FROM T",
            {"T": spark.createDataFrame(pd.DataFrame({"url": ["/v?channel_id=ch7&x=1"]}))},
            spark=spark,
        )
        .bounded()
        .toPandas()
    )
    return spark_runs(spark, jobs, workers=2)


@pytest.mark.spark
@pytest.mark.parametrize(
    "name", ["dedup", "group_by", "join", "global_count", "windowed_distinct", "hop_self_join"]
)
def test_spark_changelog_equals_local(tables, spark_key_runs, name: str) -> None:
    spark_run = result(spark_key_runs, name)
    local = sql(QUERIES[name], tables=tables).run(None)
    assert spark_run.columns == local.columns
    assert rows(changelog_order(spark_run.changelog)) == rows(changelog_order(local.changelog))


@pytest.mark.spark
@pytest.mark.parametrize("name", ["distinct", "join", "hop_self_join"])
def test_keyed_state_spreads_over_shards(spark, tables, name: str) -> None:
    """The model's key of a keyed query (unwindowed, or Hop windows with a key
    column) is the key's values, which the Spark runner's shards divide (before,
    Hop windows and unwindowed groups had the one key "0": one shard)."""
    from headwater.runners.spark.shard import shard_column
    from headwater.sql.execute.local import compile_sql, is_keyed, union_rows
    from headwater.sql.maintain.groups import KEY

    plan = sql(QUERIES[name], tables=tables).plan
    assert is_keyed(plan)
    keys = pd.DataFrame({"key": union_rows(compile_sql(plan))[KEY].astype(str)})
    shards = spark.createDataFrame(keys).select(shard_column(["key"], 4).alias("s"))
    assert len({r["s"] for r in shards.distinct().collect()}) > 1


@pytest.mark.spark
def test_spark_regexp_extract_group(spark_key_runs) -> None:
    assert list(result(spark_key_runs, "regexp")["c"]) == ["ch7"]
