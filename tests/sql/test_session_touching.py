"""SQL's SESSION merges windows that only touch, as Flink's and Spark's sessions
do: a row exactly one gap after a session's last row joins it, on every path
(bounded and streaming, fast and general, local and Spark), and a row that
touches a session the watermark already closed reopens it instead of starting
a session of its own."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sql_helpers import write_replay

import headwater as hw
from headwater.sql import read_replay
from headwater.sql.errors import SqlError

DAY = "2020-04-15"
#: Sessions of a 2-minute gap per item (Flink's spelling).
TEXT = (
    "SELECT window_start, window_end, item, COUNT(*) AS n, SUM(price) AS total "
    "FROM TABLE(SESSION(TABLE Bid PARTITION BY item, DESCRIPTOR(bidtime), "
    "INTERVAL '2' MINUTE)) GROUP BY window_start, window_end, item"
)
COLUMNS = ("bidtime", "price", "item")
#: (ptime, rows, watermark). A: 08:02 touches 08:00 while both are open. B: the
#: watermark (08:03) closes [08:00, 08:02) before 08:02 arrives; that row is not
#: late (its window ends at 08:04) and bridges the closed session. C: three
#: minutes apart, two sessions. D: 08:07 touches 08:05. E: late, a dead letter.
STEPS = [
    ("08:10", [("08:00", 1, "A"), ("08:00", 10, "B"), ("08:00", 100, "C")], None),
    ("08:11", [("08:02", 2, "A")], "08:03"),
    ("08:12", [("08:02", 20, "B"), ("08:03", 200, "C"), ("08:00", 5, "E")], None),
    ("08:13", [("08:05", 1000, "D"), ("08:07", 2000, "D")], "08:20"),
]
#: (item, start, end, n, total): Flink's and Spark's sessions of the rows that are not late.
EXPECTED = [
    ("A", "08:00", "08:04", 2, 3),
    ("B", "08:00", "08:04", 2, 30),
    ("C", "08:00", "08:02", 1, 100),
    ("C", "08:03", "08:05", 1, 200),
    ("D", "08:05", "08:09", 2, 3000),
]


def stamp(clock: str) -> pd.Timestamp:
    return pd.Timestamp(f"{DAY}T{clock}:00")


def sessions(frame: pd.DataFrame) -> list[tuple]:
    """(item, start, end, n, total) rows of a result, sorted."""
    return sorted(
        (
            r.item,
            pd.Timestamp(r.window_start).strftime("%H:%M"),
            pd.Timestamp(r.window_end).strftime("%H:%M"),
            int(r.n),
            int(r.total),
        )
        for r in frame.itertuples(index=False)
    )


def not_late_rows() -> pd.DataFrame:
    rows = [r for _, step, _ in STEPS for r in step if r[2] != "E"]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["bidtime"] = frame["bidtime"].map(stamp)
    return frame


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    path = tmp_path_factory.mktemp("touching") / "bids.jsonl"
    write_replay(path, DAY, STEPS, "bidtime", COLUMNS)
    return read_replay(path, "Bid", "bidtime")


def test_the_model_merges_touching_sessions_only_when_asked() -> None:
    starts, ends, same = np.array([0, 10, 25]), np.array([10, 20, 35]), np.zeros(3, np.int64)
    apart = hw.Sessions(10).merge(same, starts, ends)
    merged = hw.Sessions(10, merge_touching=True).merge(same, starts, ends)
    assert [list(a) for a in apart] == [[0, 10, 25], [10, 20, 35]]
    assert [list(a) for a in merged] == [[0, 0, 25], [20, 20, 35]]


def test_the_bounded_query_merges_touching_rows() -> None:
    query = hw.sql(TEXT, {"Bid": not_late_rows()})
    assert sessions(query.to_pandas()) == EXPECTED
    with pytest.raises(SqlError, match="reads no stream.*to_pandas"):
        query.run()  # a bounded query has no run over processing time


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_stream_reopens_a_closed_session_a_touching_row_bridges(replay, fast_path) -> None:
    run = hw.sql(f"{TEXT} EMIT STREAM", {"Bid": replay}, fast_path=fast_path).run()
    assert sessions(run.table()) == EXPECTED
    withdrawn = sessions(run.changes().query("undo"))
    assert ("B", "08:00", "08:02", 1, 10) in withdrawn  # the closed session, reopened
    assert list(run.dead_letters["item"]) == ["E"]


@pytest.mark.spark
def test_spark_sessions_equal_spark_own_session_window(spark, replay) -> None:
    """headwater on Spark, bounded and streaming, against Spark's own
    ``session_window`` over the same rows (an engine that merges touching windows)."""
    from pyspark.sql import functions as F

    from headwater.sql.execute.spark import SparkSqlQuery

    frame = spark.createDataFrame(not_late_rows())
    own = (
        frame.groupBy("item", F.session_window("bidtime", "2 minutes").alias("s"))
        .agg(F.count("*").alias("n"), F.sum("price").alias("total"))
        .select(F.col("s.start").alias("window_start"), F.col("s.end").alias("window_end"), "*")
        .toPandas()
    )
    assert sessions(own) == EXPECTED
    bounded = SparkSqlQuery(TEXT, {"Bid": frame}, spark=spark).bounded().toPandas()
    assert sessions(bounded) == EXPECTED
    streamed = SparkSqlQuery(f"{TEXT} EMIT STREAM", {"Bid": replay}, spark=spark).run(None)
    assert sessions(streamed.table()) == EXPECTED
    assert ("B", "08:00", "08:02", 1, 10) in sessions(streamed.changes().query("undo"))
