"""A SQL script on a streaming Spark source (Parquet files arriving in a
directory), end to end: the changelog (Parquet) and the current table (DuckDB
and PostgreSQL); a run that crashes in the middle and restarts from its
checkpoint ends with the same table and changelog as an uninterrupted run.
"""

from __future__ import annotations

import os
import uuid

import pandas as pd
import pytest

from headwater.io.arrival import in_arrival_order
from headwater.io.sinks import fan_out, parquet_sink
from headwater.io.sinks.relation import RelationSink
from headwater.model.watermarks import BoundedOutOfOrderness
from headwater.sql.execute.spark import SparkSqlQuery
from headwater.sql.plan.catalog import Table
from headwater.sql.script import run_script

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# The paper's bids, one file each in arrival order (C and D out of order, within
# the watermark's 5 minutes), then G, far later, moves the watermark past both
# windows, and H arrives for a closed window: a dead letter.
BIDS = [
    ("2020-04-15 08:07", 2, "A"),
    ("2020-04-15 08:11", 3, "B"),
    ("2020-04-15 08:05", 4, "C"),
    ("2020-04-15 08:09", 5, "D"),
    ("2020-04-15 08:13", 1, "E"),
    ("2020-04-15 08:17", 6, "F"),
    ("2020-04-15 08:31", 1, "G"),
    ("2020-04-15 08:02", 9, "H"),
]
QUERY = """
SELECT MaxBid.wstart, MaxBid.wend, Bid.bidtime, Bid.price, Bid.item
FROM Bid, (SELECT MAX(TumbleBid.price) maxPrice, TumbleBid.wstart wstart, TumbleBid.wend wend
           FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime),
                       dur => INTERVAL '10' MINUTE) TumbleBid
           GROUP BY TumbleBid.wstart, TumbleBid.wend) MaxBid
WHERE Bid.price = MaxBid.maxPrice AND Bid.bidtime >= MaxBid.wend - INTERVAL '10' MINUTE
  AND Bid.bidtime < MaxBid.wend
EMIT STREAM
"""
FINAL = {
    ("2020-04-15 08:09:00", 5, "D"),
    ("2020-04-15 08:17:00", 6, "F"),
    ("2020-04-15 08:31:00", 1, "G"),
}


def _write_bids(directory) -> str:
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"part-{i:03d}.parquet") for i in range(len(BIDS))]
    for path, (t, price, item) in zip(paths, BIDS, strict=True):
        frame = pd.DataFrame({"bidtime": [pd.Timestamp(t)], "price": [price], "item": [item]})
        frame.to_parquet(path, coerce_timestamps="us")
    in_arrival_order(paths)
    return str(directory)


def _stream(spark, directory) -> Table:
    df = (
        spark.readStream.schema("bidtime TIMESTAMP, price BIGINT, item STRING")
        .option("maxFilesPerTrigger", 1)
        .parquet(directory)
    )
    return Table("Bid", spark=df, event_time="bidtime", watermark=BoundedOutOfOrderness(300_000))


def _final(table: pd.DataFrame) -> set:
    return {
        (str(pd.Timestamp(b).tz_localize(None)), int(p), i)
        for b, p, i in zip(table["bidtime"], table["price"], table["item"], strict=True)
    }


def _changes(directory) -> list:
    log = pd.read_parquet(directory)
    log = log.sort_values(["batch_id", "wstart", "ver"]) if "batch_id" in log else log
    cols = ["wstart", "bidtime", "price", "item", "undo", "ver"]
    return [tuple(str(v) for v in row) for row in log[cols].itertuples(index=False)]


NAMES = ["Winners", "Log", "PgWinners"]
#: A script reads the whole directory in one micro-batch: nothing is late then,
#: and H is the highest bid of the first window.
ONE_BATCH = (FINAL - {("2020-04-15 08:09:00", 5, "D")}) | {("2020-04-15 08:02:00", 9, "H")}


class Crash(RuntimeError):
    pass


def _crash_once(at_batch: int):
    """A sink that fails the first time it sees ``at_batch`` (after the sinks
    before it in a fan-out wrote that batch): a crash in the middle of a batch."""
    state = {"crashed": False}

    def sink(batch, batch_id: int) -> None:
        if batch_id == at_batch and not state["crashed"]:
            state["crashed"] = True
            raise Crash(f"crash in batch {batch_id}")

    return sink


def _run(spark, bids: str, out, sink) -> None:
    """The query over the stream until its files are processed (``write``: what
    ``INSERT INTO`` runs, ``start`` with ``availableNow`` underneath)."""
    query = SparkSqlQuery(QUERY, {"Bid": _stream(spark, bids)}, spark=spark)
    letters = parquet_sink(str(out / "dead"))
    query.write(sink, dead_letter_sink=letters, checkpoint=str(out / "checkpoint"))


def test_crash_and_restart_give_the_uninterrupted_result(spark, tmp_path):
    bids = _write_bids(tmp_path / "bids")
    whole = tmp_path / "whole"
    table = RelationSink(str(whole / "results.duckdb"), table="winners")
    _run(spark, bids, whole, fan_out(parquet_sink(str(whole / "log")), table))
    assert _final(table.read()) == FINAL
    dead = pd.read_parquet(whole / "dead")
    # the local runner's layout: query, table, reason, window, the row's columns
    columns = ["query", "table", "reason", "window_start", "window_end", "bidtime", "price", "item"]
    assert list(dead.columns[: len(columns)]) == columns and len(dead) == 1
    h = dead.iloc[0]
    assert (h["query"], h["table"], h["reason"]) == ("query", "Bid", "late")
    assert (str(h["bidtime"]), int(h["price"]), h["item"]) == ("2020-04-15 08:02:00", 9, "H")

    broken = tmp_path / "broken"
    table2 = RelationSink(str(broken / "results.duckdb"), table="winners")
    sinks = fan_out(parquet_sink(str(broken / "log")), _crash_once(3), table2)
    with pytest.raises(Exception, match="crash in batch 3"):
        _run(spark, bids, broken, sinks)
    assert _final(table2.read()) != FINAL  # it stopped in the middle
    _run(spark, bids, broken, sinks)  # the restart re-runs batch 3, then the rest
    assert _final(table2.read()) == FINAL
    assert _changes(broken / "log") == _changes(whole / "log")


def test_script_on_a_directory_writes_duckdb_and_postgres(spark, tmp_path):
    url = os.environ.get("HEADWATER_TEST_POSTGRES", "").strip()
    if not url and os.environ.get("CI"):
        pytest.fail("HEADWATER_TEST_POSTGRES is not set: CI must run the PostgreSQL tests")
    bids = _write_bids(tmp_path / "bids")
    schema = f"t_{uuid.uuid4().hex[:8]}"
    sinks = [
        f"CREATE TABLE Winners (x BIGINT) WITH ('format' = 'table', 'path' = "
        f"'{tmp_path / 'r.duckdb'}')",
        f"CREATE TABLE Log (x BIGINT) WITH ('format' = 'changelog', 'path' = '{tmp_path / 'log'}')",
    ]
    if url:
        sinks.append(
            f"CREATE TABLE PgWinners (x BIGINT) WITH ('format' = 'table', 'path' = '{url}', "
            f"'table' = '{schema}.winners')"
        )
    script = "\n".join(
        [
            "CREATE TABLE Bid (bidtime TIMESTAMP, price BIGINT, item VARCHAR, "
            "WATERMARK FOR bidtime AS bidtime - INTERVAL '5' MINUTE) "
            f"WITH ('path' = '{bids}', 'format' = 'parquet');",
            *(s + ";" for s in sinks),
            *(
                f"INSERT INTO {name} {QUERY};"
                for name in ["Winners", "Log", "PgWinners"][: len(sinks)]
            ),
        ]
    )
    list(run_script(script, runner="spark", checkpoint=str(tmp_path / "ck"), spark=spark))
    assert _final(RelationSink(str(tmp_path / "r.duckdb"), table="Winners").read()) == ONE_BATCH
    assert len(pd.read_parquet(tmp_path / "log")) >= len(FINAL)
    if url:
        assert _final(RelationSink(url, table=f"{schema}.winners").read()) == ONE_BATCH
