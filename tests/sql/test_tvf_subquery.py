"""A windowing TVF over a subquery that filters and projects one table
(headwater/sql/plan/tvf_inputs.py): at every processing time, its table view is
the bounded query over the rows arrived so far, less the rows dropped as late;
on both runners. What would not mean the same is refused at the TVF."""

from __future__ import annotations

import pandas as pd
import pytest
from sql_helpers import write_replay

import headwater as hw
from headwater.sql import read_replay
from headwater.sql.errors import SqlError
from headwater.sql.plan.catalog import PTIME

DAY = "2020-04-15"
COLUMNS = ("bidtime", "price", "item")
#: (ptime, rows, watermark); 08:01 arrives after the watermark passed 08:10: late.
STEPS = [
    ("08:10", [("08:00", 1, "A"), ("08:03", 4, "B"), ("08:06", 6, "A")], None),
    ("08:11", [("08:08", 3, "C"), ("08:02", 9, "A")], "08:10"),
    ("08:12", [("08:01", 7, "B"), ("08:12", 8, "A"), ("08:14", 2, "B")], None),
    ("08:13", [("08:11", 5, "C")], "08:30"),
]
LATE = ("08:01", 7, "B")

SUB = "SELECT item, price, bidtime FROM Bid b WHERE b.price > 2"
QUERIES = {
    "tumble star": (
        "SELECT wstart, wend, COUNT(*) AS n, SUM(price) AS total FROM "
        "Tumble(TABLE(SELECT * FROM Bid WHERE price > 2), DESCRIPTOR(bidtime), "
        "INTERVAL '5' MINUTE) GROUP BY wstart, wend"
    ),
    "tumble keyed": (
        f"SELECT w.item, w.wstart, COUNT(*) AS n FROM Tumble(TABLE({SUB}), "
        "DESCRIPTOR(bidtime), INTERVAL '5' MINUTE) AS w GROUP BY w.item, w.wstart, w.wend"
    ),
    "hop flink": (
        "SELECT window_start, window_end, MAX(doubled) AS top FROM TABLE(HOP(TABLE "
        "(SELECT price * 2 AS doubled, bidtime FROM Bid WHERE item <> 'C'), "
        "DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)) "
        "GROUP BY window_start, window_end"
    ),
    "cumulate renamed": (
        "SELECT window_start, window_end, SUM(p) AS total FROM TABLE(CUMULATE(TABLE "
        "(SELECT price AS p, bidtime AS t FROM Bid WHERE item = 'A'), DESCRIPTOR(t), "
        "INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)) GROUP BY window_start, window_end"
    ),
    "cte": (
        "WITH f AS (SELECT * FROM Bid WHERE price > 2) SELECT f.wstart, COUNT(*) AS n "
        "FROM Tumble(TABLE(f), DESCRIPTOR(bidtime), INTERVAL '5' MINUTE) GROUP BY f.wstart, wend"
    ),
    # the other way round, a subquery over a TVF, whose star carries the window
    # columns out (key derivation follows them: AFTER WATERMARK runs)
    "star over tumble": (
        "SELECT wstart, COUNT(*) AS n FROM (SELECT * FROM Tumble(TABLE(Bid), "
        "DESCRIPTOR(bidtime), INTERVAL '5' MINUTE) WHERE price > 2) GROUP BY wstart, wend"
    ),
    "rows": (
        "SELECT item, bidtime, wstart FROM "
        f"Tumble(TABLE({SUB}), DESCRIPTOR(bidtime), INTERVAL '5' MINUTE)"
    ),
}


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    path = tmp_path_factory.mktemp("tvf-sub") / "bids.jsonl"
    write_replay(path, DAY, STEPS, "bidtime", COLUMNS)
    return read_replay(path, "Bid", "bidtime")


def rows(frame: pd.DataFrame) -> list[tuple]:
    out = frame.astype(object).where(frame.notna(), None)
    return sorted(map(tuple, out.astype(str).values.tolist()))


def arrived(replay, as_of: int) -> pd.DataFrame:
    """The rows arrived by ``as_of`` (ms), less the late one."""
    frame = replay.frame[replay.frame[PTIME] <= as_of].drop(columns=PTIME)
    late = (frame["item"] == LATE[2]) & (frame["price"] == LATE[1])
    return frame[~late].reset_index(drop=True)


@pytest.mark.parametrize("emit", ["EMIT STREAM", "EMIT STREAM AFTER WATERMARK"])
@pytest.mark.parametrize("name", list(QUERIES))
def test_the_table_view_is_the_bounded_query_at_every_step(replay, name, emit) -> None:
    text = QUERIES[name]
    run = hw.sql(f"{text} {emit}", {"Bid": replay}).run()
    ptimes = sorted(set(replay.frame[PTIME].tolist()))
    for as_of in ptimes:
        bounded = hw.sql(text, {"Bid": arrived(replay, as_of)}).to_pandas()
        table = run.table(as_of)
        if emit.endswith("WATERMARK") and as_of < ptimes[-1]:
            continue  # only windows the watermark closed: checked at the end
        assert rows(table) == rows(bounded[list(table.columns)]), (name, as_of)
    # the late row, once per window it was late for (as over the table itself)
    letters = run.dead_letters[list(COLUMNS)].drop_duplicates()
    assert letters["price"].tolist() == [LATE[1]]


def test_a_cte_that_aggregates_is_refused_at_the_tvf(replay) -> None:
    """Not "unknown table": the CTE is named, and what it does is the reason."""
    text = (
        "WITH f AS (SELECT item, MAX(bidtime) AS bidtime FROM Bid GROUP BY item)\n"
        "SELECT * FROM Tumble(TABLE(f), DESCRIPTOR(bidtime), INTERVAL '5' MINUTE) EMIT STREAM"
    )
    with pytest.raises(SqlError, match="more than filter and project") as info:
        hw.sql(text, {"Bid": replay}).run()
    assert (info.value.line, info.value.col) == (2, 15)


@pytest.mark.parametrize(
    ("subquery", "reason"),
    [
        ("SELECT item, bidtime FROM Bid", "session"),
        ("SELECT item, MAX(bidtime) AS bidtime FROM Bid GROUP BY item", "more than filter"),
        ("SELECT DISTINCT item, bidtime FROM Bid", "more than filter"),
        ("SELECT b.item, b.bidtime FROM Bid b JOIN Bid c ON b.item = c.item", "more than"),
        ("SELECT item, bidtime + INTERVAL '1' MINUTE AS bidtime FROM Bid", "computed"),
        ("SELECT item FROM Bid", "no column 'bidtime'"),
        ("SELECT item, bidtime FROM Bid WHERE price IN (SELECT price FROM Bid)", "another"),
    ],
)
def test_what_would_not_mean_the_same_is_refused_at_the_tvf(replay, subquery, reason) -> None:
    kind = "Session" if reason == "session" else "Tumble"
    text = (
        f"SELECT *\nFROM {kind}(TABLE({subquery}), DESCRIPTOR(bidtime), "
        "INTERVAL '5' MINUTE) EMIT STREAM"
    )
    with pytest.raises(SqlError, match=reason) as info:
        hw.sql(text, {"Bid": replay}).run()
    assert (info.value.line, info.value.col) == (2, 6)
    assert "filter in WHERE" in info.value.hint


@pytest.mark.spark
def test_spark_streams_the_same_table_view(spark, replay) -> None:
    from headwater.sql.execute.spark import SparkSqlQuery

    text = f"{QUERIES['tumble keyed']} EMIT STREAM"
    local = hw.sql(text, {"Bid": replay}).run()
    streamed = SparkSqlQuery(text, {"Bid": replay}, spark=spark).run(None)
    assert rows(streamed.table()) == rows(local.table())
    assert streamed.dead_letters["price"].tolist() == [LATE[1]]
