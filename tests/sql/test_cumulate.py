"""Flink's CUMULATE windowing TVF, streaming: at every processing time of an
out-of-order replay (rows late within the allowed lateness, rows late for some
windows of their period only, a row late for all of them, a NULL event time),
the table view equals DuckDB running the same query over the rows arrived, with
each (row, window) pair the run dropped as late left out; and the dropped pairs
are exactly those whose window had expired (end + lateness <= the watermark)
when the row arrived, each a dead letter with its window. On the fast path (a
windowed aggregate) and the general path, locally and on Spark (one batch).
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from sql_helpers import (
    MINUTE,
    assert_same_rows,
    changelog_order,
    expected_rows,
    iso_time,
    millis,
    result,
    rows,
    spark_runs,
    write_replay,
)

from headwater.sql import read_replay, sql
from headwater.sql.errors import SqlError
from headwater.sql.plan.catalog import PTIME
from headwater.sql.plan.fast_path import why_not

DAY = "2024-01-01"
LATENESS = 3 * MINUTE
COLUMNS = ("bidtime", "price", "item")

# (ptime, rows, watermark); a row is (event time, price, item), event times unique
# (a dead letter names its row by its time). A row arrives
# against the watermark of the steps before its own.
BIDS = [
    ("10:01", [("10:00:30", 3, "A"), ("10:03", 5, "B"), ("10:01", 2, "B"), (None, 4, "C")], None),
    ("10:04", [("10:05", 7, "A"), ("10:02", 1, "C")], "10:03"),
    ("10:07", [("10:06:30", 6, "A"), ("10:12", 9, "C")], None),
    ("10:08", [], "10:07"),
    # late: its windows ending 10:02 and 10:04 have expired, those ending 10:06+ not
    ("10:09", [("10:01:30", 8, "A")], None),
    ("10:11", [("10:09", 4, "B"), ("10:14", 2, "A")], "10:11"),
    ("10:13", [("10:08:30", 5, "C")], None),  # late within the lateness
    ("10:15", [("10:03:30", 1, "A")], "10:16"),  # in the windows ending 10:10 only
    ("10:18", [("10:19", 3, "B"), ("10:05:30", 2, "C")], None),  # late for all
    ("10:25", [], "10:25"),
    ("10:40", [], "10:40"),
]  # fmt: skip

STEP, SIZE = 2 * MINUTE, 10 * MINUTE
CUMULATE = (
    "TABLE(CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '2' MINUTE, INTERVAL '10' MINUTE))"
)
#: Named arguments in another order, and an offset: periods [10:01, 10:07), ...
CUMULATE_OFFSET = (
    "TABLE(CUMULATE(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), "
    "SIZE => INTERVAL '6' MINUTE, STEP => INTERVAL '3' MINUTE, OFFSET => INTERVAL '1' MINUTE))"
)
QUERIES = {
    "aggregate": "SELECT window_start, window_end, item, COUNT(*) AS n, SUM(price) AS total, "
    "MAX(price) AS hi FROM {tvf} GROUP BY window_start, window_end, item",
    "total": "SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS n "
    "FROM {tvf} GROUP BY window_start, window_end",
    "top1": "SELECT window_start, window_end, item, price FROM (SELECT *, ROW_NUMBER() OVER "
    "(PARTITION BY window_start, window_end ORDER BY price DESC, bidtime) AS rn FROM {tvf}) T "
    "WHERE rn = 1",
    # NEXMark Query 7 over CUMULATE: each window's highest bids, the stream joined
    # back to its windows' maxima (a raw bid bounded to the window: exact per window)
    "q7": "SELECT B.bidtime, B.price, B.item, B1.window_start, B1.window_end FROM Bid B "
    "JOIN (SELECT MAX(price) AS maxprice, window_start, window_end FROM {tvf} "
    "GROUP BY window_start, window_end) B1 ON B.price = B1.maxprice "
    "WHERE B.bidtime >= B1.window_start AND B.bidtime < B1.window_end",
}
#: What a query means over the (row, window) pairs kept (a row dropped from some
#: windows of its period only is in the others): q7's raw bids of a window are
#: its pairs, as the bounds of its WHERE select them when nothing is dropped.
REFERENCES = {
    "q7": "SELECT B.bidtime, B.price, B.item, B1.window_start, B1.window_end FROM {tvf} B "
    "JOIN (SELECT MAX(price) AS maxprice, window_start, window_end FROM {tvf} "
    "GROUP BY window_start, window_end) B1 ON B.price = B1.maxprice "
    "AND B.window_start = B1.window_start AND B.window_end = B1.window_end",
}
EMITS = ["", "EMIT AFTER WATERMARK"]
CHECKPOINTS = [p for p, _, _ in BIDS]


@pytest.fixture(scope="module")
def bids(tmp_path_factory):
    path = tmp_path_factory.mktemp("cumulate") / "bid.jsonl"
    write_replay(path, DAY, BIDS, "bidtime", COLUMNS)
    return read_replay(path, "Bid", "bidtime", allowed_lateness=LATENESS)


def text_of(shape: str, tvf: str, emit: str = "") -> str:
    return f"{QUERIES[shape].format(tvf=tvf)} {emit}".strip()


def bounded_view(shape: str, tvf: str, bids, dead: pd.DataFrame, as_of: int) -> pd.DataFrame:
    """The query in DuckDB over the (row, window) pairs of the rows arrived by
    ``as_of``, less the pairs the run dropped (its dead letters)."""
    frame = bids.frame
    arrived = frame[(frame[PTIME] <= as_of) & frame["bidtime"].notna()].drop(columns=[PTIME])
    pairs = sql(f"SELECT * FROM {tvf}", {"Bid": arrived}).to_pandas()
    late = dead[dead["window_start"].notna()]
    dropped = pd.MultiIndex.from_frame(late[["bidtime", "window_start", "window_end"]])
    named = pd.MultiIndex.from_frame(pairs[["bidtime", "window_start", "window_end"]])
    con = duckdb.connect()
    con.register("__w", pairs[~named.isin(dropped)])
    return con.sql(REFERENCES.get(shape, QUERIES[shape]).format(tvf="__w")).df()


def watermark_at(clock: str) -> pd.Timestamp:
    """The replay's watermark as of processing time ``clock`` (before any: none)."""
    marks = [mark for ptime, _, mark in BIDS if mark and ptime <= clock]
    return pd.Timestamp(iso_time(DAY, marks[-1])) if marks else pd.Timestamp.min


def check_views(run, shape: str, tvf: str, bids, what: str, complete: bool = False) -> None:
    """``complete`` (EMIT AFTER WATERMARK): a view holds the windows the watermark
    has passed only."""
    for clock in CHECKPOINTS:
        as_of = millis(DAY, clock)
        expected = bounded_view(shape, tvf, bids, run.dead_letters, as_of)
        if complete:
            expected = expected[expected["window_end"] <= watermark_at(clock)]
        view = run.table(as_of)
        assert list(view.columns) == list(expected.columns)
        assert_same_rows(rows(view), rows(expected), ordered=False, what=f"{what} at {clock}")


def expected_dead_letters(step: int, size: int, offset: int = 0) -> list[tuple]:
    """(reason, event time, window start, window end) of every pair whose window had
    expired when its row arrived, computed from the replay's steps by hand."""
    out, watermark = [], None
    for _, batch, mark in BIDS:
        for t, *_ in batch:
            if t is None:
                out.append(("null_event_time", None, None, None))
                continue
            ms = millis(DAY, t)
            start = ms - (ms - offset) % size
            for end in range(start + step, start + size + 1, step):
                if end > ms and watermark is not None and end + LATENESS <= watermark:
                    out.append(("late", iso_time(DAY, t), start, end))
        watermark = millis(DAY, mark) if mark else watermark
    return [
        (r, t, None if s is None else pd.Timestamp(s, unit="ms"), e and pd.Timestamp(e, unit="ms"))
        for r, t, s, e in out
    ]


def letters(dead: pd.DataFrame) -> list[tuple]:
    return rows(dead[["reason", "bidtime", "window_start", "window_end"]])


@pytest.mark.parametrize("emit", EMITS, ids=lambda e: e or "no EMIT")
@pytest.mark.parametrize("shape", QUERIES)
def test_table_views_are_the_bounded_query(bids, shape: str, emit: str) -> None:
    run = sql(text_of(shape, CUMULATE, emit), {"Bid": bids}).run()
    check_views(run, shape, CUMULATE, bids, f"{shape} {emit}", complete=bool(emit))
    assert_same_rows(
        letters(run.dead_letters),
        expected_rows(expected_dead_letters(STEP, SIZE)),
        ordered=False,
        what="dead letters",
    )


def test_query_7_over_cumulate_is_kept_per_window(bids) -> None:
    """Joined back to the stream within each window's bounds, the maxima of
    cumulating windows are kept per window, freed by the watermark (the bounds
    are within the shortest window of the period, so within every window); a
    lower bound reaching before a shorter window's start keeps every row, exact."""
    query = sql(text_of("q7", CUMULATE), {"Bid": bids})
    assert "key the window bounds: state freed by the watermark" in query.explain()
    run = query.run()
    without_drops = bounded_view("q7", CUMULATE, bids, run.dead_letters[:0], millis(DAY, "10:07"))
    plain = duckdb.connect()
    frame = bids.frame[bids.frame[PTIME] <= millis(DAY, "10:07")].drop(columns=[PTIME])
    plain.register("Bid", frame[frame["bidtime"].notna()])
    plain.register("__w", sql(f"SELECT * FROM {CUMULATE}", {"Bid": frame}).to_pandas())
    original = plain.sql(QUERIES["q7"].format(tvf="__w")).df()
    assert_same_rows(rows(without_drops), rows(original), ordered=False, what="the reference")
    reaching = text_of("q7", CUMULATE).replace(
        "B.bidtime >= B1.window_start", "B.bidtime >= B1.window_end - INTERVAL '4' MINUTE"
    )
    assert "no key" in sql(reaching, {"Bid": bids}).explain()


def test_the_general_path_has_the_fast_paths_views(bids) -> None:
    assert why_not(sql(text_of("aggregate", CUMULATE), {"Bid": bids}).plan) is None
    query = sql(text_of("aggregate", CUMULATE), {"Bid": bids}, fast_path=False)
    assert "runs on: general path" in query.explain()
    run = query.run()
    check_views(run, "aggregate", CUMULATE, bids, "general path")


@pytest.mark.parametrize("shape", ["total", "top1"])
def test_named_arguments_and_an_offset(bids, shape: str) -> None:
    run = sql(text_of(shape, CUMULATE_OFFSET, "EMIT AFTER WATERMARK"), {"Bid": bids}).run()
    check_views(run, shape, CUMULATE_OFFSET, bids, f"offset {shape}", complete=True)
    assert_same_rows(
        letters(run.dead_letters),
        expected_rows(expected_dead_letters(3 * MINUTE, 6 * MINUTE, MINUTE)),
        ordered=False,
        what="dead letters",
    )


def test_an_early_window_fires_before_the_later_ones_of_its_period(bids) -> None:
    """AFTER WATERMARK: [10:00, 10:04) is final once the watermark passes 10:04,
    while [10:00, 10:06) and later windows of the period wait for theirs."""
    run = sql(text_of("total", CUMULATE, "EMIT AFTER WATERMARK"), {"Bid": bids}).run()
    view = run.table(millis(DAY, "10:04"))  # watermark 10:03
    assert rows(view) == expected_rows([(iso_time(DAY, "10:00"), iso_time(DAY, "10:02"), 5, 2)])
    view = run.table(millis(DAY, "10:08"))  # watermark 10:07
    ends = sorted(r[1] for r in rows(view))
    assert ends == [iso_time(DAY, e) for e in ("10:02", "10:04", "10:06")]


# ------------------------------------------------------------------ Spark


SPARK_CASES = {
    "aggregate": text_of("aggregate", CUMULATE),
    "top1": text_of("top1", CUMULATE, "EMIT AFTER WATERMARK"),
}


@pytest.fixture(scope="module")
def spark_cumulate_runs(spark, bids) -> dict:
    from headwater.sql.execute.spark import SparkSqlQuery

    def job(text: str):
        return lambda: SparkSqlQuery(text, {"Bid": bids}, spark=spark).run(None)

    return spark_runs(spark, {shape: job(text) for shape, text in SPARK_CASES.items()})


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("shape", SPARK_CASES)
def test_spark_equals_local(spark_cumulate_runs, bids, shape: str) -> None:
    spark_run = result(spark_cumulate_runs, shape)
    local = sql(SPARK_CASES[shape], {"Bid": bids}).run()
    assert spark_run.columns == local.columns
    assert rows(changelog_order(spark_run.changelog)) == rows(changelog_order(local.changelog))
    assert_same_rows(letters(spark_run.dead_letters), letters(local.dead_letters), False)
    complete = "AFTER WATERMARK" in SPARK_CASES[shape]
    check_views(spark_run, shape, CUMULATE, bids, f"spark {shape}", complete)


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("text", "at", "message"),
    [
        (
            "SELECT * FROM TABLE(CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), "
            "INTERVAL '3' MINUTE, INTERVAL '10' MINUTE))",
            "INTERVAL '3'",
            "must divide its SIZE",
        ),
        (
            "SELECT * FROM CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), "
            "INTERVAL '2' MINUTE, INTERVAL '10' MINUTE)",
            "CUMULATE",
            "inside TABLE(...)",
        ),
        (
            "SELECT * FROM TABLE(CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '2' MINUTE))",
            "CUMULATE",
            "missing its SIZE",
        ),
        (
            "SELECT * FROM TABLE(CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), "
            "STEP => INTERVAL '2' MINUTE, SLIDE => INTERVAL '10' MINUTE))",
            "SLIDE",
            "no argument named SLIDE",
        ),
    ],
)
def test_refusals_point_at_the_argument(bids, text: str, at: str, message: str) -> None:
    with pytest.raises(SqlError) as info:
        sql(text, {"Bid": bids})
    assert message in info.value.message
    assert info.value.hint
    assert (info.value.line, info.value.col) == (1, text.index(at) + 1)


@pytest.mark.spark
def test_a_bounded_query_on_spark_is_duckdbs(spark, bids) -> None:
    """The bounded expansion written as Spark SQL (a bounded table: one batch plan)
    gives DuckDB's rows, with and without an offset; a NULL event time is in no window."""
    frame = bids.frame.drop(columns=[PTIME])
    table = spark.createDataFrame(frame.astype({"bidtime": "datetime64[us]"}))
    for tvf in (CUMULATE, CUMULATE_OFFSET):
        text = text_of("total", tvf)
        on_spark = sql(text, {"Bid": table}, runner="spark").to_pandas()
        on_duckdb = sql(text, {"Bid": frame}).to_pandas()
        assert_same_rows(rows(on_spark), rows(on_duckdb), ordered=False, what=tvf)
        assert len(on_duckdb) > 5
