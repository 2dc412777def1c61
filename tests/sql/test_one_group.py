"""A query maintained as one group (no GROUP BY: a global aggregate) has a result
before any row arrives: the bounded query over no rows is one row (``COUNT(*) =
0``, ``SUM`` NULL). Its changelog starts with that row (ptime: the query's
start), which the first rows withdraw and replace, on the local runner and on
Spark; a grouped query, or a HAVING that fails over no rows, starts empty, as
DuckDB over no rows does.
"""

from __future__ import annotations

from collections import Counter

import duckdb
import pandas as pd
import pytest
from sql_helpers import millis, write_replay

from headwater.sql import read_replay, sql
from headwater.sql.plan.catalog import PTIME

DAY = "2024-01-01"
STEPS = [
    ("10:05", [("10:01", 3, "a")], None),
    ("10:07", [("10:02", 4, "b"), ("10:03", 5, "a")], None),
    ("10:09", [("10:04", 7, "b")], None),
]
GLOBAL = "SELECT COUNT(*) AS n, SUM(price) AS total FROM Bid"
#: as-of times: before any row, at each step, after the last
AS_OF = ("10:00", "10:05", "10:06", "10:07", "10:09", "11:00")


@pytest.fixture(scope="module")
def bids(tmp_path_factory):
    path = tmp_path_factory.mktemp("one-group") / "bids.jsonl"
    write_replay(path, DAY, STEPS, "bidtime", ("bidtime", "price", "item"))
    return {"Bid": read_replay(path, "Bid", "bidtime", {"price": "BIGINT", "item": "VARCHAR"})}


def _duckdb(text: str, bids, as_of: int) -> set:
    """``text`` run by DuckDB over the rows arrived by ``as_of``."""
    frame = bids["Bid"].frame
    arrived = frame[frame[PTIME] <= as_of].drop(columns=[PTIME])
    con = duckdb.connect()
    con.register("Bid", arrived)
    return _rows(con.sql(text).df())


def _rows(frame: pd.DataFrame) -> set:
    return {
        tuple(None if pd.isna(v) else int(v) if not isinstance(v, str) else v for v in row)
        for row in frame.astype(object).itertuples(index=False)
    }


def _log(run) -> list[tuple]:
    changes = run.changes()
    return [
        (*(None if pd.isna(v) else int(v) for v in (row.n, row.total)), row.undo, row.ver)
        for row in changes.itertuples(index=False)
    ]


#: the changelog of GLOBAL: the row over no rows first, then each step's change
EXPECTED_LOG = [
    (0, None, False, 0),
    (0, None, True, 1),
    (1, 3, False, 2),
    (1, 3, True, 3),
    (3, 12, False, 4),
    (3, 12, True, 5),
    (4, 19, False, 6),
]


def _check(text: str, run, bids) -> None:
    for clock in AS_OF:
        as_of = millis(DAY, clock)
        assert _rows(run.table(as_of)) == _duckdb(text, bids, as_of), clock


def test_a_global_aggregate_starts_with_its_row_over_no_rows(bids) -> None:
    run = sql(GLOBAL, tables=bids).run(None)
    assert _log(run) == EXPECTED_LOG
    changes = run.changes()
    assert changes["ptime"].iloc[0] == pd.Timestamp(0, unit="ms")  # the query's start
    assert (changes["ptime"].iloc[1:] >= pd.Timestamp(f"{DAY}T10:05")).all()
    _check(GLOBAL, run, bids)
    assert _duckdb(GLOBAL, bids, millis(DAY, "10:00")) == {(0, None)}


@pytest.mark.parametrize(
    "text",
    [
        GLOBAL + " WHERE item = 'b'",
        "SELECT COUNT(*) AS n FROM Bid HAVING COUNT(*) > 1",
        "SELECT item, COUNT(*) AS n FROM Bid GROUP BY item",
        "SELECT COUNT(*) AS n FROM (SELECT item FROM Bid GROUP BY item)",
    ],
)
def test_the_start_is_the_query_over_no_rows(bids, text: str) -> None:
    """A filtered global aggregate starts with its row; a HAVING that fails over no
    rows and a grouped query start empty (DuckDB over no rows: no row)."""
    _check(text, sql(text, tables=bids).run(None), bids)


@pytest.mark.spark
def test_spark_starts_with_the_row_over_no_rows(spark, bids) -> None:
    """On Spark (two shards: the one group lives in one), the same changelog."""
    from headwater.sql.execute.spark import SparkSqlQuery

    run = SparkSqlQuery(GLOBAL, bids, spark=spark).run(None)
    assert _log(run) == EXPECTED_LOG
    _check(GLOBAL, run, bids)


@pytest.mark.spark
@pytest.mark.slow
def test_a_spark_stream_starts_with_the_row_over_no_rows(spark, tmp_path) -> None:
    """Over a Spark stream (files, one a micro-batch): the first batch brings the
    row over no rows, once, and the changes that withdraw it."""
    from headwater.model.watermarks import BoundedOutOfOrderness
    from headwater.sql.execute.spark import SparkSqlQuery
    from headwater.sql.plan.catalog import Table

    rows = [row for _, step, _ in STEPS for row in step]
    for i, (t, price, item) in enumerate(rows):
        frame = pd.DataFrame(
            {"bidtime": [pd.Timestamp(f"{DAY}T{t}")], "price": [price], "item": [item]}
        )
        frame.to_parquet(tmp_path / f"part-{i:03d}.parquet", coerce_timestamps="us")
    df = (
        spark.readStream.schema("bidtime TIMESTAMP, price BIGINT, item STRING")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path))
    )
    bid = Table("Bid", spark=df, event_time="bidtime", watermark=BoundedOutOfOrderness(60_000))
    batches: dict[int, pd.DataFrame] = {}
    query = SparkSqlQuery(GLOBAL, {"Bid": bid}, spark=spark).start(
        checkpoint_location=str(tmp_path / "checkpoint"),
        sink=lambda batch, batch_id: batches.setdefault(batch_id, batch.toPandas()),
        trigger={"availableNow": True},
    )
    query.awaitTermination()
    log = pd.concat([batches[i] for i in sorted(batches)], ignore_index=True)
    first = batches[min(batches)].sort_values(["ptime", "ver"]).iloc[0]
    assert (first["n"], pd.isna(first["total"]), first["undo"], first["ver"]) == (0, True, 0, 0)
    assert (log["ver"] == 0).sum() == 1  # the start, once
    values = log[["n", "total"]].astype(object).where(log[["n", "total"]].notna(), None)
    net = Counter()
    for row, undo in zip(values.itertuples(index=False), log["undo"], strict=True):
        net[tuple(row)] += -1 if undo else 1
    assert {row for row, count in net.items() if count} == {(4, 19)}
    assert set(net.values()) <= {0, 1}
