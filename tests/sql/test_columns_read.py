"""The general path keeps only the columns a query reads
(:mod:`headwater.sql.plan.columns`): which columns those are, by the query's text
alone; that the table view is still, at every processing time, the query run
bounded over the rows arrived; and that a late row's dead letter still has every
column, those the query does not read included, on both runners."""

from __future__ import annotations

import random

import pytest
import sqlglot
from sql_helpers import assert_same_rows, millis, result, rows, spark_runs, write_replay
from test_keys import bounded

from headwater.sql import read_replay, sql
from headwater.sql.execute.local import compile_sql
from headwater.sql.plan.columns import reaches_unnamed_columns, stream_columns_read

DAY = "2024-01-01"
COLUMNS = ("bidtime", "price", "item", "bidder", "note")
PTIMES = [f"10:0{step}:59" for step in range(6)]


def _steps(seed: int) -> list[tuple]:
    """Six steps of eight bids, each with a ``note`` of its own that no query
    reads; from the fifth step on, every fourth bid four minutes behind its step:
    the watermark (a minute behind the step before) has passed both its hopping
    windows, so it is late in each."""
    rng = random.Random(seed)
    steps = []
    for step in range(6):
        bids = []
        for i in range(8):
            minute = step - 4 if i % 4 == 3 and step >= 4 else step
            at = f"10:0{minute}:{rng.randrange(60):02d}"
            price = rng.choice([1, 2, 3, 5, 8])
            bids.append((at, price, rng.choice("ABC"), rng.choice("xyz"), f"n{step}.{i}"))
        mark = f"10:0{step - 1}:00" if step else None
        steps.append((PTIMES[step], bids, mark))
    return steps


@pytest.fixture(scope="module", params=[1, 2])
def tables(request, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp(f"read{request.param}")
    path = write_replay(folder / "bids.jsonl", DAY, _steps(request.param), "bidtime", COLUMNS)
    return {"Bid": read_replay(path, "Bid", "bidtime")}


_HOP = "TABLE(HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE, INTERVAL '2' MINUTE))"

#: query -> the columns of Bid it reads (the event time always among them).
QUERIES = {
    # NEXMark's q5: the hottest items per hopping window
    "hot_items": (
        "SELECT a.item, a.num FROM (SELECT item, COUNT(*) AS num, window_start, window_end "
        f"FROM {_HOP} GROUP BY item, window_start, window_end) AS a JOIN (SELECT MAX(num) AS m, "
        "window_start, window_end FROM (SELECT COUNT(*) AS num, window_start, window_end "
        f"FROM {_HOP} GROUP BY item, window_start, window_end) GROUP BY window_start, "
        "window_end) AS b ON a.window_start = b.window_start AND a.window_end = b.window_end "
        "AND a.num >= b.m",
        {"bidtime", "item"},
    ),
    "top2": (
        "SELECT item, price FROM (SELECT item, price, ROW_NUMBER() OVER (PARTITION BY item "
        "ORDER BY price DESC, bidtime) AS rn FROM Bid) WHERE rn <= 2",
        {"bidtime", "item", "price"},
    ),
    "per_bidder": (
        "SELECT bidder, SUM(price) AS total, COUNT(*) AS n FROM Bid GROUP BY bidder",
        {"bidtime", "bidder", "price"},
    ),
    "every_column": ("SELECT item, COUNT(*) AS n FROM (SELECT * FROM Bid) GROUP BY item", None),
}


@pytest.mark.parametrize("name", list(QUERIES))
def test_the_columns_a_query_reads(tables, name: str) -> None:
    text, read = QUERIES[name]
    query = sql(text, tables=tables, fast_path=False)
    plan = query.plan
    assert stream_columns_read(plan) == {"Bid": frozenset(read or COLUMNS)}
    kept_line = [line for line in query.explain().splitlines() if "general path keeps" in line]
    assert kept_line == [
        "  general path keeps: every column of Bid"
        if read is None
        else f"  general path keeps: Bid's {', '.join(c for c in COLUMNS if c in read)} (the "
        f"columns the query reads; its dead letters have all {len(COLUMNS)})"
    ]
    compiled = compile_sql(plan, fast=False)
    kept = {c for layout in compiled.maintainer.streams for c in layout.columns}
    assert kept == set(read or COLUMNS)
    assert len(compiled.aggregations) == 1 + len(kept)  # the source, and each column kept
    assert len(compiled.values) == 1 + len(COLUMNS)  # the reducer still takes them all


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * FROM t",
        "SELECT t.* FROM t",
        "SELECT * EXCLUDE (a) FROM t",
        "SELECT a FROM t NATURAL JOIN u",
        "SELECT COLUMNS('a.*') FROM t",
        "SELECT to_json(t) FROM t",
        "SELECT to_json(x) FROM t AS x",
    ],
)
def test_columns_reached_without_their_names(text: str) -> None:
    assert reaches_unnamed_columns(sqlglot.parse_one(text, read="duckdb"))


@pytest.mark.parametrize(
    "text",
    [
        "SELECT COUNT(*), a FROM t",
        "SELECT t.a, u.b FROM t JOIN u USING (id)",
        "SELECT x.a FROM t AS x",
    ],
)
def test_columns_all_named(text: str) -> None:
    assert not reaches_unnamed_columns(sqlglot.parse_one(text, read="duckdb"))


def _late_notes(letters) -> set[tuple]:
    """The late rows' own columns, the unread ``note`` included."""
    late = letters[letters["reason"] == "late"]
    return set(late[["item", "bidder", "price", "note"]].itertuples(index=False, name=None))


def _arrived_late(tables) -> set[tuple]:
    """The rows four minutes behind their step (:func:`_steps`)."""
    frame = tables["Bid"].frame
    behind = frame["note"].str.extract(r"n(\d)\.(\d)").astype(int)
    late = (behind[1] % 4 == 3) & (behind[0] >= 4)
    return set(frame[late][["item", "bidder", "price", "note"]].itertuples(index=False, name=None))


@pytest.mark.parametrize("name", ["hot_items", "top2", "per_bidder"])
def test_table_view_is_the_bounded_query(tables, name: str) -> None:
    text = QUERIES[name][0]
    query = sql(text, tables=tables, fast_path=False)
    run = query.run(None)
    dropped = query.dead_letters()
    if name == "hot_items":  # its hopping windows close: the late rows are dropped
        assert _late_notes(dropped) == _arrived_late(tables)
        assert set(dropped.columns) >= set(COLUMNS)
    for clock in PTIMES:
        as_of = millis(DAY, clock)
        expected = bounded(text, tables, as_of, dropped)
        assert_same_rows(
            rows(run.table(as_of)), rows(expected), ordered=False, what=f"{name} @ {clock}"
        )


@pytest.fixture(scope="module")
def spark_hot_items(spark, tables) -> dict:
    from headwater.sql.execute.spark import SparkSqlQuery

    text = QUERIES["hot_items"][0]
    job = {"hot_items": lambda: SparkSqlQuery(text, tables, name="hot", spark=spark).run(None)}
    return spark_runs(spark, job, workers=1)


@pytest.mark.spark
def test_spark_dead_letters_keep_every_column(tables, spark_hot_items) -> None:
    run = result(spark_hot_items, "hot_items")
    local = sql(QUERIES["hot_items"][0], tables=tables, fast_path=False).run(None)
    assert _late_notes(run.dead_letters) == _arrived_late(tables)
    assert rows(run.table(None)) == rows(local.table(None))
