"""Queries in stages over a live Spark file stream (headwater/sql/execute/stages_spark.py):
stage 1 is the streaming query, stage 2 runs in its foreachBatch on the driver
with its state in the checkpoint under the batch id. The final table equals the
bounded DuckDB query over the rows less the dead letters, each micro-batch's
changelog equals the local runner's step over the same file, and a restart that
runs the last batch again changes nothing."""

from __future__ import annotations

import os
import shutil

import duckdb
import pandas as pd
import pytest
from live_changelog import Recorder, final_rows, local_steps
from sql_helpers import changelog_order, rows, write_replay

from headwater.io.arrival import in_arrival_order
from headwater.model.watermarks import BoundedOutOfOrderness
from headwater.sql import read_replay, sql
from headwater.sql.execute.local import second_stage
from headwater.sql.execute.stages_spark import StageCheckpoint
from headwater.sql.plan.catalog import Table

DAY = "2024-01-01"
COLUMNS = ("ts", "k1", "k2", "v")
TYPES = {"k1": "VARCHAR", "k2": "VARCHAR", "v": "BIGINT"}
QUERIES = {
    # k2 is the MAX of each k1's rows: a k1 moves between stage-2 groups (retractions)
    "avg of max": "SELECT k2, AVG(m) AS a, COUNT(*) AS n FROM "
    "(SELECT k1, MAX(k2) AS k2, MAX(v) AS m FROM T GROUP BY k1) S GROUP BY k2",
    # a global aggregate: one stage-2 group, whose first version is the query's start
    "count of groups": "SELECT COUNT(*) AS n, SUM(s) AS total FROM "
    "(SELECT k1, SUM(v) AS s FROM T GROUP BY k1) S",
}
#: One file per micro-batch: event times out of order, a NULL event time (a dead letter).
FILES = [
    [("10:05", "a", "x", 3), ("10:01", "b", "y", 5), ("10:03", "c", None, 1)],
    [("09:50", "a", "z", 7), (None, "d", "x", 4), ("10:07", "b", "x", 2)],
    [("10:02", "c", "z", 9), ("09:40", "e", "y", 6), ("10:09", "a", "a", 1)],
    [("10:08", "d", "y", 8), ("10:00", "b", "z", 11), (None, "e", "x", 1)],
]


def _ts(clock: str | None):
    return pd.NaT if clock is None else pd.Timestamp(f"{DAY} {clock}")


def _write(directory, files) -> None:
    """The rows of ``files`` as Parquet files in ``directory``, in arrival order."""
    os.makedirs(directory, exist_ok=True)
    start = len(os.listdir(directory))
    paths = []
    for i, part in enumerate(files, start):
        frame = pd.DataFrame(part, columns=list(COLUMNS))
        frame["ts"] = [_ts(t) for t in frame["ts"]]
        frame["v"] = frame["v"].astype("int64")
        path = os.path.join(directory, f"part-{i:03d}.parquet")
        frame.to_parquet(path, coerce_timestamps="us")
        paths.append(path)
    in_arrival_order(paths)


def _stream(spark, directory) -> Table:
    df = (
        spark.readStream.schema("ts TIMESTAMP, k1 STRING, k2 STRING, v BIGINT")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(directory))
    )
    return Table("T", spark=df, event_time="ts", watermark=BoundedOutOfOrderness(300_000))


def _start(spark, text: str, directory, checkpoint, end_of_input=None):
    from headwater.sql.execute.spark import SparkSqlQuery

    query = SparkSqlQuery(text, {"T": _stream(spark, directory)}, spark=spark)
    sink, letters = Recorder(), Recorder()
    query.start(
        checkpoint_location=str(checkpoint),
        sink=sink,
        dead_letter_sink=letters,
        trigger={"availableNow": True},
        end_of_input=end_of_input,
    ).awaitTermination()
    return sink, letters, query


def _bounded(text: str, files) -> list[tuple]:
    """The query over the rows of ``files`` of non-NULL event time (DuckDB)."""
    frame = pd.DataFrame([r for f in files for r in f], columns=list(COLUMNS))
    frame = frame[frame["ts"].notna()]
    with duckdb.connect() as con:
        con.register("T", frame)
        return sorted(rows(con.sql(text).df()), key=repr)


def _local_steps(text: str, files, tmp_path) -> list[list[tuple]]:
    """The local runner's changelog over a replay of one step per file, step by
    step (the query's start in the first), without ``ptime``."""
    steps = [(f"11:{i:02d}", [tuple(r) for r in f], None) for i, f in enumerate(files)]
    path = tmp_path / "t.jsonl"
    write_replay(path, DAY, steps, "ts", COLUMNS)
    log = sql(text, {"T": read_replay(str(path), "T", "ts", TYPES)}).run(None).changelog
    return local_steps(log)


@pytest.mark.spark
@pytest.mark.parametrize("name", list(QUERIES))
def test_live_stream_in_stages_equals_bounded_and_local(spark, tmp_path, name):
    text = QUERIES[name]
    _write(tmp_path / "in", FILES)
    sink, letters, query = _start(spark, text, tmp_path / "in", tmp_path / "ck")
    assert "stage 2 runs on the driver" in query.explain()
    assert len(sink.batches) >= len(FILES)  # and the end of input's
    dead = letters.log()
    assert len(dead) == 2 and set(dead["reason"]) == {"null_event_time"}
    assert sorted(dead["k1"]) == ["d", "e"]
    assert final_rows(sink.log()) == _bounded(text, FILES)
    assert sink.steps() == _local_steps(text, FILES, tmp_path)


@pytest.mark.spark
def test_restart_running_the_last_batch_again_changes_nothing(spark, tmp_path):
    """Stop after two files; delete the last batch's commit (Spark runs that batch
    again, as after a failure), then start from the checkpoint with two files more."""
    text = QUERIES["avg of max"]
    _write(tmp_path / "in", FILES[:2])
    checkpoint = tmp_path / "ck"
    before, _, _ = _start(spark, text, tmp_path / "in", checkpoint, end_of_input=False)
    last = max(before.batches)  # the files' batches, and maybe one without data
    assert last >= 1
    for name in (str(last), f".{last}.crc"):  # the commit and its checksum
        os.remove(checkpoint / "commits" / name)
    _write(tmp_path / "in", FILES[2:])
    after, _, _ = _start(spark, text, tmp_path / "in", checkpoint)
    assert after.calls[0][0] == last, "Spark did not run the last batch again"
    again = rows(changelog_order(after.calls[0][1]))
    assert again == rows(changelog_order(before.batches[last]))
    earlier = [before.batches[b] for b in sorted(before.batches) if b < last]
    log = pd.concat([*earlier, *(after.batches[b] for b in sorted(after.batches))])
    assert final_rows(log) == _bounded(text, FILES)
    whole, _, _ = _start(spark, text, tmp_path / "in", tmp_path / "ck-whole")
    assert final_rows(whole.log()) == final_rows(log)


def test_stage_two_state_round_trips_through_the_checkpoint(tmp_path):
    """The state a batch leaves, written and read back, steps as the state kept."""
    path = tmp_path / "t.jsonl"
    steps = [(f"11:{i:02d}", [r for r in f if r[0]], None) for i, f in enumerate(FILES)]
    write_replay(path, DAY, steps, "ts", COLUMNS)
    tables = {"T": read_replay(str(path), "T", "ts", TYPES)}
    plan = sql(QUERIES["avg of max"], tables).plan
    first = sql("SELECT k1, MAX(k2) AS k2, MAX(v) AS m FROM T GROUP BY k1", tables).run(None)
    by_step = [part for _, part in first.changelog.groupby("ptime", sort=True)]
    kept, restored = second_stage(plan), second_stage(plan)
    checkpoint = StageCheckpoint(str(tmp_path / "ck"))
    for batch_id, changes in enumerate(by_step):
        checkpoint.keep(batch_id, kept.snapshot())
        restored.restore(checkpoint.read(batch_id))
        expected = kept.step(changes.reset_index(drop=True), batch_id)
        actual = restored.step(changes.reset_index(drop=True), batch_id)
        assert rows(actual) == rows(expected)
    assert len(by_step) > 2
    shutil.rmtree(tmp_path / "ck")


@pytest.mark.spark
def test_a_keyed_aggregate_streams_on_the_fast_path(spark, tmp_path):
    """Stage 1's shape alone: an unwindowed GROUP BY of a column keeps one
    accumulator per aggregate of each key value on a live stream too, and gives
    the changelog of the local runner step by step."""
    text = "SELECT k1, MAX(v) AS m, AVG(v) AS a, COUNT(DISTINCT k2) AS d FROM T GROUP BY k1"
    _write(tmp_path / "in", FILES)
    sink, letters, query = _start(spark, text, tmp_path / "in", tmp_path / "ck")
    assert "fast path (a keyed aggregate" in query.explain()
    dead = letters.log()
    assert set(dead["reason"]) == {"null_event_time"} and sorted(dead["k1"]) == ["d", "e"]
    assert final_rows(sink.log()) == _bounded(text, FILES)
    assert sink.steps() == _local_steps(text, FILES, tmp_path)
