"""DeltaSink: a Delta table equal to a pipeline's / a changelog's table view.

Late data and retractions (merging sessions, a dropped late row) on the local
runner and on Spark streaming; a replayed batch id changes nothing (same Delta
version, same rows); read back with ``deltalake``.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable

import headwater as hw
from headwater.io.replay import read_replay, write_timeline
from headwater.io.sinks.delta import DeltaSink, cached_delta_jars

# Sessions merge as data arrives; b at 1000 arrives after its window closed (dropped).
EVENTS = pd.DataFrame(
    [
        ("a", 1000, 1, 1000),
        ("b", 2000, 2, 1000),
        ("a", 5000, 3, 1000),
        ("a", 30000, 4, 2000),
        ("b", 9000, 5, 2000),
        ("c", 50000, 6, 5000),
        ("a", 12000, 7, 4000),
        ("a", 21000, 8, 4000),
        ("b", 1000, 9, 6000),
        ("c", 47000, 10, 6000),
    ],
    columns=["user", "ts", "value", "arrival"],
)
KEY = ["user", "window_start", "window_end"]
VALUES = ["total", "n"]


def _pipeline(stream):
    return (
        stream.window(
            hw.Sessions("10 seconds"),
            trigger=hw.AfterWatermark(early=hw.AfterCount(1), late=hw.AfterCount(1)),
            allowed_lateness="20 seconds",
            accumulation="retracting",
        )
        .group_by("user")
        .agg(total=hw.sum("value"), n=hw.count())
    )


def _rows(frame: pd.DataFrame, cols=KEY + VALUES) -> list[tuple]:
    return sorted(
        tuple(v.item() if isinstance(v, np.generic) else v for v in r)
        for r in frame[cols].itertuples(index=False)
    )


@pytest.fixture(scope="module")
def local():
    """The local runner's changelog, and the bounded answer over the kept rows."""
    agg = _pipeline(
        hw.from_pandas(EVENTS, event_time="ts", arrival_time="arrival", watermark="5 seconds")
    )
    changelog = agg.to_pandas()
    dropped = agg.dead_letters()
    kept = EVENTS[~EVENTS.ts.isin(dropped.ts) | ~EVENTS.value.isin(dropped.value)]
    final = (
        hw.from_pandas(kept, event_time="ts")
        .window(hw.Sessions("10 seconds"))
        .group_by("user")
        .agg(total=hw.sum("value"), n=hw.count())
        .to_pandas()
    )
    assert changelog.is_retraction.any() and len(dropped) == 1 and len(kept) == 9
    return changelog, final, agg


def test_local_panes_into_delta_equal_the_table_view(local, tmp_path):
    changelog, final, agg = local
    sink = DeltaSink(tmp_path / "t", aggregation=agg)
    # Three micro-batches of the changelog, in its order.
    cuts = [0, len(changelog) // 3, 2 * len(changelog) // 3, len(changelog)]
    for batch_id in range(3):
        assert sink.write(changelog.iloc[cuts[batch_id] : cuts[batch_id + 1]], batch_id)
    got = DeltaTable(str(tmp_path / "t")).to_pandas()
    assert _rows(got) == _rows(final)
    # A replayed batch changes nothing: not the version, not the rows.
    version = sink.version()
    assert sink.last_batch_id() == 2
    assert not sink.write(changelog.iloc[:3], 1)
    assert sink.version() == version
    assert _rows(DeltaTable(str(tmp_path / "t")).to_pandas()) == _rows(final)


def test_changelog_multiset_and_keyed(tmp_path):
    log = pd.DataFrame(
        [
            ("x", 1, False, 1, 0),
            ("x", 1, False, 1, 1),
            ("y", 2, False, 1, 2),
            ("x", 1, True, 2, 0),
            ("y", 2, True, 2, 1),
            ("y", 3, False, 2, 2),
        ],
        columns=["k", "v", "undo", "ptime", "ver"],
    )
    multi = DeltaSink(tmp_path / "m")
    multi.write(log.iloc[:3], 0)
    multi.write(log.iloc[3:], 1)
    assert _rows(multi.read(), ["k", "v"]) == [("x", 1), ("y", 3)]
    keyed = DeltaSink(tmp_path / "k", key=["k"])
    keyed.write(log.iloc[:3], 0)
    keyed.write(log.iloc[3:4], 1)  # x's last change is an undo: x is gone
    assert _rows(keyed.read(), ["k", "v"]) == [("y", 2)]
    keyed.write(log.iloc[4:], 2)
    assert _rows(keyed.read(), ["k", "v"]) == [("y", 3)]


def _panes(windows, key, total, pane=0, retraction=False, tz="UTC", end_us=None):
    """A pane batch as Arrow: one pane per window index (10 s windows)."""
    start = 1_700_000_000_000_000 + np.asarray(windows, dtype=np.int64) * 10_000_000
    end = start + 10_000_000 if end_us is None else np.full(len(start), end_us)
    n = len(start)
    return pa.table(
        {
            "key": pa.array(np.full(n, key), pa.int64()),
            "window_start": pa.array(start, pa.timestamp("us", tz=tz)),
            "window_end": pa.array(end, pa.timestamp("us", tz=tz)),
            "total": pa.array(np.full(n, total), pa.int64()),
            "pane_index": pa.array(np.full(n, pane), pa.int64()),
            "is_retraction": pa.array(np.full(n, retraction)),
        }
    )


@pytest.mark.parametrize("tz", ["UTC", None])
def test_merge_reads_only_the_files_its_windows_can_touch(tmp_path, tz):
    """A batch of new windows scans no file of the old ones (each MERGE bounds the
    target by the batch's window range); a batch that also updates and retracts
    old windows reads their files, and the table is still exactly the panes' view."""
    sink = DeltaSink(tmp_path / "t", key=["key"])
    batches = [
        pa.concat_tables([_panes(range(10), 1, 1, tz=tz), _panes(range(10), 2, 2, tz=tz)]),
        _panes(range(10, 20), 1, 3, tz=tz),
        _panes(range(20, 30), 2, 4, tz=tz),
    ]
    for i, batch in enumerate(batches):
        assert sink.write(batch, i)
        assert sink.last_merge["num_target_files_scanned"] == 0
        assert sink.last_merge["num_target_files_skipped_during_scan"] == i
    mixed = pa.concat_tables(
        [
            _panes([5], 1, 50, pane=1, tz=tz),  # a later pane of an old window
            _panes([12], 1, 3, pane=0, retraction=True, tz=tz),  # its retraction
            _panes([1], 2, 99, pane=-1, tz=tz),  # an earlier pane: never over a later one
            _panes(range(30, 32), 2, 6, tz=tz),
        ]
    )
    assert sink.write(mixed, 3)
    assert sink.last_merge["num_target_files_scanned"] >= 1
    expected = {}
    for batch in [*batches, mixed]:
        for r in batch.to_pylist():
            k = (r["key"], r["window_start"], r["window_end"])
            if k in expected and r["pane_index"] < expected[k][1]:
                continue
            if r["is_retraction"]:
                expected.pop(k, None)
            else:
                expected[k] = (r["total"], r["pane_index"])
    table = DeltaTable(str(tmp_path / "t")).to_pyarrow_table().to_pylist()
    got = {(r["key"], r["window_start"], r["window_end"]): r["total"] for r in table}
    assert len(table) == len(got) == 41
    assert got == {k: v[0] for k, v in expected.items()}


def test_merge_bounds_skip_values_beyond_python_dates(tmp_path):
    """A window that ends at the end of time (beyond Python's dates) gets no range
    on that column; the MERGE still matches it."""
    end = 2**62  # microseconds: year ~146,000
    sink = DeltaSink(tmp_path / "t", key=["key"])
    sink.write(_panes([0, 1], 1, 1, end_us=end), 0)
    sink.write(_panes([1, 2], 1, 2, pane=1, end_us=end), 1)
    rows = DeltaTable(str(tmp_path / "t")).to_pyarrow_table()
    assert sorted(rows["total"].to_pylist()) == [1, 2, 2]


def test_discarding_is_refused():
    agg = (
        hw.from_pandas(EVENTS, event_time="ts")
        .window(hw.FixedWindows("10 seconds"), accumulation="discarding")
        .group_by("user")
        .agg(total=hw.sum("value"))
    )
    with pytest.raises(ValueError, match="discarding"):
        DeltaSink("/nonexistent", aggregation=agg)


def _timeline(path) -> None:
    steps, seen, previous = [], None, None
    for arrival, part in EVENTS.groupby("arrival", sort=True):
        if seen is not None:
            steps.append({"proc_ms": int(previous), "watermark_ms": seen - 5000})
        rows = part[["user", "ts", "value"]].values.tolist()
        steps.append({"proc_ms": int(arrival), "rows": rows})
        seen = max(seen if seen is not None else -(2**62), int(part.ts.max()))
        previous = arrival
    steps.append({"proc_ms": int(EVENTS.arrival.max()), "watermark_ms": "inf"})
    write_timeline(path, steps, columns={"value": "bigint"})


@pytest.mark.spark
def test_spark_stream_into_delta_equals_the_table_view(spark, local, tmp_path):
    _, final, _ = local
    _timeline(tmp_path / "timeline.jsonl")
    df = read_replay(spark, str(tmp_path / "timeline.jsonl")).withColumnRenamed("key", "user")
    agg = _pipeline(hw.from_spark(df, event_time="ts"))
    sink = DeltaSink(tmp_path / "t", aggregation=agg)
    query = agg.start(
        checkpoint_location=str(tmp_path / "ckpt"),
        panes_sink=sink,
        trigger={"availableNow": True},
    )
    try:
        query.awaitTermination(300)
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    assert _rows(DeltaTable(str(tmp_path / "t")).to_pandas()) == _rows(final)
    assert sink.last_batch_id() is not None and sink.last_batch_id() >= 1
    # Any Delta reader: Spark's own Delta connector reads the same table.
    if cached_delta_jars() is None:
        pytest.fail("Delta's Spark connector is not resolved: run bash scripts/kafka.sh delta-jars")
    by_spark = spark.read.format("delta").load(str(tmp_path / "t")).toPandas()
    assert _rows(by_spark) == _rows(final)


BIDS = pd.DataFrame(
    {
        "bidtime": pd.to_datetime(
            ["2020-04-15 08:07", "2020-04-15 08:11", "2020-04-15 08:05", "2020-04-15 08:09"]
            + ["2020-04-15 08:13", "2020-04-15 08:17", "2020-04-15 08:31", "2020-04-15 08:02"]
        ),
        "price": [2, 3, 4, 5, 1, 6, 1, 9],
        "item": list("ABCDEFGH"),
    }
)
SQL_QUERY = """SELECT t.wstart, t.wend, MAX(t.price) AS top, COUNT(*) AS n
FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE) t
GROUP BY t.wstart, t.wend"""


def _replay(path, bids: pd.DataFrame) -> str:
    """One bid per processing time (a step each), in the order of ``bids``."""
    with open(path, "w") as f:
        for i, bid in enumerate(bids.itertuples(index=False)):
            row = {"bidtime": bid.bidtime.isoformat(), "price": bid.price, "item": bid.item}
            f.write(json.dumps({"ptime": f"2020-04-15T09:{i:02d}:00", "row": row}) + "\n")
    return str(path)


def _script(source: str, fmt: str, sinks: dict[str, str]) -> str:
    lines = [
        "CREATE TABLE Bid (bidtime TIMESTAMP, price BIGINT, item VARCHAR, "
        f"WATERMARK FOR bidtime AS bidtime - INTERVAL '5' MINUTE) "
        f"WITH ('path' = '{source}', 'format' = '{fmt}');"
    ]
    for name, options in sinks.items():
        lines.append(f"CREATE TABLE {name} (x BIGINT) WITH ('connector' = 'delta', {options});")
        lines.append(f"INSERT INTO {name} {SQL_QUERY} EMIT STREAM;")
    return "\n".join(lines)


def test_sql_insert_into_delta_equals_the_bounded_query(tmp_path):
    """A replayed stream (H late: dropped) into Delta, keyed and as a multiset,
    equals the bounded query over the rows kept."""
    from headwater.sql.script import run_script

    replay = _replay(tmp_path / "bids.jsonl", BIDS)
    keyed, multi = tmp_path / "keyed", tmp_path / "multi"
    sinks = {
        "Keyed": f"'path' = '{keyed}', 'key.fields' = 'wstart;wend'",
        "Multi": f"'path' = '{multi}'",
    }
    list(run_script(_script(replay, "replay", sinks)))
    BIDS[BIDS.item != "H"].to_parquet(tmp_path / "kept.parquet")
    (bounded,) = run_script(_script(tmp_path / "kept.parquet", "parquet", {}) + SQL_QUERY)
    cols = ["wstart", "wend", "top", "n"]
    assert len(bounded) == 3
    for path in (keyed, multi):
        sink = DeltaSink(path)
        assert _rows(sink.read(), cols) == _rows(bounded, cols)
        assert sink.version() > 2  # one commit per step that changed the result


def test_sql_delta_options_are_checked(tmp_path):
    from headwater.sql.errors import SqlError
    from headwater.sql.script import run_script

    replay = _replay(tmp_path / "bids.jsonl", BIDS)
    bad = {"T": f"'path' = '{tmp_path / 't'}', 'format' = 'json'"}
    with pytest.raises(SqlError, match="unknown option 'format'"):
        list(run_script(_script(replay, "replay", bad)))


def test_docs_example_runs(tmp_path, monkeypatch):
    """docs/delta.md's python block runs as written (from a scratch directory)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "delta.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    assert blocks
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "docs/delta.md", "exec"), {})
    got = DeltaSink(tmp_path / "tmp/delta-docs/scores").read()
    assert _rows(got, ["user", "total"]) == [("a", 3), ("b", 3)]
    assert DeltaSink(tmp_path / "tmp/delta-docs/scores").version() == 1


def test_a_delta_sink_alone_reads_its_batch_once():
    """The runner persists a micro-batch only for several readers: a DeltaSink
    reads it with one action, so alone it is not persisted (a copy saved); a
    sink that does not say so, or a dead-letter sink beside it, keeps it persisted
    (test_spark_stream_into_delta_equals_the_table_view runs the unpersisted one)."""
    from headwater.runners.spark.streaming import reads_once

    sink = DeltaSink("unused")
    assert reads_once(sink, None) and reads_once(None, None)
    assert not reads_once(sink, lambda batch, i: None)
    assert not reads_once(lambda batch, i: None, None)
