"""A run of batches written in one call holds one DuckDB connection
(``holding(sink)``, as a local replay's ``SqlQuery.write`` does), and writes the
same table as one connection per batch; the file is free again afterwards, even
when the run fails."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import pytest

import headwater.sql as hsql
from headwater.io.sinks.relation import RelationSink
from headwater.io.sinks.stores import holding
from headwater.sql import read_replay
from headwater.sql.execute.query import changelog_batches

BIDS = Path(__file__).resolve().parents[1] / "sql" / "data" / "paper" / "bids.jsonl"


def _batch(rows: list[tuple[str, int, bool]], ptime: int) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["item", "price", "undo"])
    return frame.assign(ptime=ptime, ver=1)


BATCHES = [
    _batch([("a", 1, False), ("b", 2, False)], 1),
    _batch([("a", 1, True), ("a", 3, False)], 2),
    _batch([("c", 4, False), ("c", 4, False)], 3),
]


@pytest.fixture
def connects(monkeypatch):
    """How many times duckdb.connect opened a file."""
    calls = []
    real = duckdb.connect

    def counted(*args, **kwargs):
        database = args[0] if args else kwargs.get("database")
        if database not in (None, ":memory:"):  # the query's own DuckDB is in memory
            calls.append(database)
        return real(*args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", counted)
    return calls


def _table(path) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT item, price, __n FROM t ORDER BY item, price").fetchall()


def test_held_run_connects_once_and_writes_the_same_table(tmp_path, connects):
    held, per_batch = tmp_path / "held.duckdb", tmp_path / "per_batch.duckdb"
    sink = RelationSink(held, table="t")
    with holding(sink):
        for i, batch in enumerate(BATCHES):
            sink(batch, i)
    assert len(connects) == 1
    other = RelationSink(per_batch, table="t")
    for i, batch in enumerate(BATCHES):
        other(batch, i)
    assert len(connects) == 1 + len(BATCHES)  # each batch: one connection, its check and apply
    assert _table(held) == _table(per_batch) == [("a", 3, 1), ("b", 2, 1), ("c", 4, 2)]


def test_the_file_is_free_after_a_run_that_failed(tmp_path):
    path = tmp_path / "r.duckdb"
    sink = RelationSink(path, table="t")
    with pytest.raises(RuntimeError, match="stopped"), holding(sink):
        sink(BATCHES[0], 0)
        raise RuntimeError("stopped")
    assert _table(path) == [("a", 1, 1), ("b", 2, 1)]  # another connection opens it
    sink(BATCHES[1], 1)  # and the sink connects per batch again
    assert _table(path) == [("a", 3, 1), ("b", 2, 1)]


def test_holding_any_other_sink_does_nothing():
    seen = []
    with holding(lambda batch, batch_id: seen.append(batch_id)) as held:
        assert held is None
    assert seen == []


def test_a_local_replay_into_duckdb_connects_once(tmp_path, connects):
    """SqlQuery.write holds the sink's connection over every step of a replay."""
    bids = read_replay(BIDS, "Bid", "bidtime")
    query = hsql.sql("SELECT item, price FROM Bid WHERE price > 3", {"Bid": bids})
    log = query.changelog()
    steps = log.groupby("ptime", sort=True)
    assert len(steps) >= 3
    query.write(RelationSink(tmp_path / "held.duckdb", table="t"))
    assert len(connects) == 1
    other = RelationSink(tmp_path / "per_batch.duckdb", table="t")
    for i, (_, batch) in enumerate(steps):
        other(batch.reset_index(drop=True), i)
    held = _table(tmp_path / "held.duckdb")
    assert held == _table(tmp_path / "per_batch.duckdb") and held


def test_a_row_withdrawn_in_a_batch_with_a_null_leaves_the_table(tmp_path):
    """A nullable BIGINT column reads as integers in a batch without a NULL and as
    floats in one with a NULL: the row added in the first and withdrawn in the
    second hashed apart, and stayed in the table."""
    sink = RelationSink(tmp_path / "n.duckdb", table="t")
    change = ["undo", "ptime", "ver"]
    first = pd.DataFrame([(5, False, 1, 0)], columns=["x", *change]).astype({"x": object})
    second = pd.DataFrame([(True, 2, 1), (False, 2, 0)], columns=change)
    second.insert(0, "x", pd.Series([5, None], dtype=object))  # Python ints, as SQL's BIGINT
    sink(first, 0)
    sink(second, 1)
    with duckdb.connect(str(tmp_path / "n.duckdb"), read_only=True) as con:
        assert con.execute("SELECT x, __n FROM t").fetchall() == [(None, 1)]
    flags = pd.DataFrame([(True, False, 3, 0)], columns=["b", *change])
    both = pd.DataFrame([(True, True, 4, 1), (None, False, 4, 0)], columns=["b", *change])
    other = RelationSink(tmp_path / "b.duckdb", table="t")
    other(flags, 0)
    other(both.astype({"b": object}), 1)
    with duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True) as con:
        assert con.execute("SELECT b, __n FROM t").fetchall() == [(None, 1)]


def test_a_query_whose_first_step_is_all_null_lands_typed(tmp_path):
    """A column NULL in every row of the first step (or of all) used to reach the
    table as Arrow's NULL type, which has no DuckDB type: the write crashed. Each
    batch is now a slice of one Arrow table of the whole changelog."""
    path = tmp_path / "nulls.jsonl"
    rows = [
        ("2020-01-01T00:00:01", "2020-01-01T00:00:00", "A", None, None),
        ("2020-01-01T00:00:02", "2020-01-01T00:00:01", "B", "web", 3),
        ("2020-01-01T00:00:03", "2020-01-01T00:00:02", "C", None, None),
    ]
    lines = [
        {"ptime": p, "row": {"bidtime": t, "item": i, "channel": c, "price": n}}
        for p, t, i, c, n in rows
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    types = {"bidtime": "TIMESTAMP", "item": "VARCHAR", "channel": "VARCHAR", "price": "BIGINT"}
    bids = read_replay(path, "Bid", "bidtime", types)
    query = hsql.sql("SELECT item, channel, price, NULL AS nothing FROM Bid", {"Bid": bids})
    query.write(RelationSink(tmp_path / "q.duckdb", table="t"))
    with duckdb.connect(str(tmp_path / "q.duckdb"), read_only=True) as con:
        got = con.execute("SELECT item, channel, price, nothing, __n FROM t ORDER BY item")
        assert got.fetchall() == [
            ("A", None, None, None, 1),
            ("B", "web", 3, None, 1),
            ("C", None, None, None, 1),
        ]
        kinds = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 't'"
        ).fetchall()
    assert dict(kinds) == {
        "__row": "BIGINT",
        "item": "VARCHAR",
        "channel": "VARCHAR",
        "price": "BIGINT",
        "nothing": "INTEGER",  # DuckDB's type of an untyped NULL
        "__n": "BIGINT",
        "batch_id": "BIGINT",
    }


def test_a_run_written_as_one_leaves_the_table_batch_by_batch_leaves(tmp_path, connects):
    """``write_run`` (a local run's INSERT: one transaction for all its steps) and
    the same batches one by one give the same table and last batch id, with
    retractions across steps; the run again writes nothing."""
    bids = read_replay(BIDS, "Bid", "bidtime")
    query = hsql.sql("SELECT COUNT(*) AS n, MAX(price) AS top FROM Bid", {"Bid": bids})
    log = query.changelog()
    assert log["undo"].any()  # counts withdrawn as they grow
    one = RelationSink(tmp_path / "one.duckdb", table="t")
    query.write(one)
    assert len(connects) == 1
    per_batch = RelationSink(tmp_path / "each.duckdb", table="t")
    batches = changelog_batches(log, per_batch)
    assert len(batches) > 3
    for i, batch in enumerate(batches):
        per_batch(batch, i)
    assert _table_of(tmp_path / "one.duckdb") == _table_of(tmp_path / "each.duckdb")
    assert one.last_batch_id() == per_batch.last_batch_id() == len(batches) - 1
    assert not one.write_run([(b, i) for i, b in enumerate(batches)])


def _table_of(path) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT n, top, __n FROM t ORDER BY n").fetchall()
