"""Result sinks: the Parquet changelog, the current-results table (DuckDB and
PostgreSQL) and dead letters, fed by real streaming queries and checked against
the local runner; idempotency per batch id; the table's pane semantics.

PostgreSQL tests read the server URL from ``HEADWATER_TEST_POSTGRES`` (``export
HEADWATER_TEST_POSTGRES=$(bash scripts/postgres.sh)``; ``scripts/test.sh`` does it).
Without it they skip, except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import headwater as hw
from headwater.io.replay import read_replay, write_timeline
from headwater.io.sinks import (
    ChangelogSink,
    CurrentResultsSink,
    DeadLetterSink,
    duckdb_results,
    fan_out,
    postgres_results,
)

POSTGRES_ENV = "HEADWATER_TEST_POSTGRES"

# Scores of three users, with the processing time at which each arrives. Sessions
# with a 10 s gap merge as data arrives (b at 2000 and 9000; a's two sessions bridged
# late by 12000 and 21000), c's session grows backwards, and b at 1000 arrives after
# its window closed (dropped: a dead letter).
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
DELAY = "5 seconds"  # bounded out-of-orderness of the watermark
DELAY_MS = 5000
WINDOW_COLS = ["user", "window_start", "window_end"]
VALUE_COLS = ["total", "n"]


# ------------------------------------------------------------------ helpers


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _postgres_url() -> str:
    """The test server's URL; skip without one, but fail in CI (a broken setup)."""
    url = os.environ.get(POSTGRES_ENV, "").strip()
    if not url:
        msg = f"{POSTGRES_ENV} is not set (export {POSTGRES_ENV}=$(bash scripts/postgres.sh))"
        if _in_ci():
            pytest.fail(f"{msg}: CI must run the PostgreSQL tests", pytrace=False)
        pytest.skip(msg)
    return url


@pytest.fixture(scope="module")
def pg_schema():
    """A fresh PostgreSQL schema for this module's tables (dropped afterwards)."""
    url = _postgres_url()
    import psycopg

    schema = f"hw_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield url, schema
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _pipeline(stream, accumulation="retracting", window_fn=None, **aggs):
    return (
        stream.window(
            window_fn or hw.Sessions("10 seconds"),
            trigger=hw.AfterWatermark(early=hw.AfterCount(1), late=hw.AfterCount(1)),
            allowed_lateness="20 seconds",
            accumulation=accumulation,
        )
        .group_by("user")
        .agg(**(aggs or {"total": hw.sum("value"), "n": hw.count()}))
    )


def _local(events=EVENTS, **kw):
    """The pipeline on the local runner, replaying ``events`` by arrival time."""
    stream = hw.from_pandas(events, event_time="ts", arrival_time="arrival", watermark=DELAY)
    return _pipeline(stream, **kw)


def _timeline(path, events=EVENTS) -> None:
    """A replay of ``events`` with the local runner's watermark: before each
    arrival's rows, a step (at the previous arrival time) moves the watermark
    to the largest event time of the earlier rows minus the delay, as Spark's
    bounded out-of-orderness does; then the end of input."""
    steps, seen, previous = [], None, None
    for arrival, part in events.groupby("arrival", sort=True):
        if seen is not None:
            steps.append({"proc_ms": int(previous), "watermark_ms": seen - DELAY_MS})
        steps.append(
            {"proc_ms": int(arrival), "rows": part[["user", "ts", "value"]].values.tolist()}
        )
        seen = max(seen if seen is not None else -(2**62), int(part.ts.max()))
        previous = arrival
    steps.append({"proc_ms": int(events.arrival.max()), "watermark_ms": "inf"})
    write_timeline(path, steps, columns={"value": "bigint"})


def _spark_stream(spark, path):
    df = read_replay(spark, str(path)).withColumnRenamed("key", "user")
    return hw.from_spark(df, event_time="ts")  # watermark: punctuated (watermark_ms)


def _run(agg, checkpoint, panes_sink, dead_letter_sink=None):
    query = agg.start(
        checkpoint_location=str(checkpoint),
        panes_sink=panes_sink,
        dead_letter_sink=dead_letter_sink,
        trigger={"availableNow": True},
    )
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(300)
    except StreamingQueryException:
        pass  # the caller checks query.exception()
    finally:
        query.stop()
    return query


def _rows(frame: pd.DataFrame, cols) -> list[tuple]:
    out = []
    for rec in frame[list(cols)].itertuples(index=False):
        out.append(tuple(v.item() if isinstance(v, np.generic) else v for v in rec))
    return sorted(out, key=repr)


def _final(panes: pd.DataFrame) -> pd.DataFrame:
    """Per window, the last pane of an ACCUMULATING run (an independent oracle)."""
    panes = panes.sort_values("pane_index", kind="stable")
    return panes.groupby(WINDOW_COLS, as_index=False).tail(1)


# ---------------------------------------------------- one streaming query, all sinks


@pytest.fixture(scope="module")
def streamed(spark, tmp_path_factory):
    """The retracting session pipeline on Spark (replay source, punctuated watermark)
    into a changelog, DuckDB, PostgreSQL (when available) and a dead-letter sink."""
    work = tmp_path_factory.mktemp("sinks")
    _timeline(work / "timeline.jsonl")
    agg = _pipeline(_spark_stream(spark, work / "timeline.jsonl"))
    changelog = ChangelogSink(work / "changelog")
    duck = CurrentResultsSink(work / "results.duckdb", aggregation=agg)
    dead = DeadLetterSink(work / "dead_letters")
    pg = schema = None
    url = os.environ.get(POSTGRES_ENV, "").strip()
    if url:
        import psycopg

        schema = f"hw_test_{uuid.uuid4().hex[:10]}"
        pg = postgres_results(url, table=f"{schema}.scores", aggregation=agg)
    query = _run(agg, work / "checkpoint", fan_out(changelog, duck, pg), dead)
    assert query.exception() is None, query.exception()
    yield SimpleNamespace(
        changelog=changelog, duck=duck, pg=pg, dead=dead, progress=query.recentProgress
    )
    if pg is not None:
        pg.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="module")
def expected():
    """The local runner's answer: the retracting changelog, the dead letters, and the
    final result per window (the bounded run over the elements that were kept)."""
    local = _local()
    changelog = local.to_pandas()
    dropped = local.dead_letters()
    kept = EVENTS.merge(
        dropped[["ts", "value"]].drop_duplicates(),
        on=["ts", "value"],
        how="left",
        indicator=True,
    )
    kept = kept[kept["_merge"] == "left_only"].drop(columns="_merge")
    final = (
        hw.from_pandas(kept, event_time="ts")
        .window(hw.Sessions("10 seconds"))
        .group_by("user")
        .agg(total=hw.sum("value"), n=hw.count())
        .to_pandas()
    )
    # Preconditions: the scenario really retracts, merges and drops.
    assert changelog.is_retraction.any() and len(dropped) == 1
    assert len(final) < changelog[~changelog.is_retraction][WINDOW_COLS].drop_duplicates().shape[0]
    return SimpleNamespace(changelog=changelog, dropped=dropped, final=final)


# Pane metadata compared with the local runner. Not ``timing`` and
# ``nonspeculative_index``: when one micro-batch both adds elements to a window and
# moves the watermark past its end, the local runner (``Reducer.step``) fires one
# ON_TIME pane, the streaming runner (``add_bundle`` then ``advance_watermark``) an
# EARLY one (a's merged session [1000, 40000) here).
COMMON_META = ["pane_index", "is_first", "is_last", "timestamp"]
STORED_META = ["timestamp", "pane_index", "nonspeculative_index", "timing", "is_first", "is_last"]


def _check_table(table: pd.DataFrame, expected, changelog: pd.DataFrame) -> None:
    assert _rows(table, WINDOW_COLS + VALUE_COLS) == _rows(expected.final, WINDOW_COLS + VALUE_COLS)
    # The stored metadata is that of the window's latest pane in the changelog ...
    panes = changelog[~changelog.is_retraction].sort_values(["batch_id", "pane_index"])
    latest = panes.groupby(WINDOW_COLS, as_index=False).tail(1)
    latest = latest.merge(expected.final[WINDOW_COLS], on=WINDOW_COLS)
    assert _rows(table, WINDOW_COLS + STORED_META) == _rows(latest, WINDOW_COLS + STORED_META)
    # ... which is the local runner's latest pane, and the batch that wrote it.
    local = _final(expected.changelog[~expected.changelog.is_retraction])
    local = local.merge(expected.final[WINDOW_COLS], on=WINDOW_COLS)
    assert _rows(table, WINDOW_COLS + COMMON_META) == _rows(local, WINDOW_COLS + COMMON_META)
    assert _rows(table, WINDOW_COLS + ["batch_id"]) == _rows(latest, WINDOW_COLS + ["batch_id"])


@pytest.mark.spark
def test_duckdb_results_equal_local_runner(streamed, expected):
    _check_table(streamed.duck.read(), expected, streamed.changelog.read())
    last = streamed.duck.last_batch_id()
    assert last is not None and last <= max(p["batchId"] for p in streamed.progress)


@pytest.mark.spark
@pytest.mark.postgres
def test_postgres_results_equal_local_runner(streamed, expected):
    _postgres_url()  # skip (locally) or fail (CI) without a server
    assert streamed.pg is not None
    _check_table(streamed.pg.read(), expected, streamed.changelog.read())


@pytest.mark.spark
def test_changelog_replays_to_the_results(streamed, expected):
    log = streamed.changelog.read()
    assert "batch_id" in log and log.is_retraction.any()
    # The changelog is the local runner's, row for row (retractions included).
    cols = WINDOW_COLS + VALUE_COLS + COMMON_META + ["is_retraction"]
    assert _rows(log, cols) == _rows(expected.changelog, cols)
    # Replayed: values summed with retractions negated, withdrawn windows net to zero.
    sign = np.where(log.is_retraction, -1, 1)
    signed = log.assign(total=log.total * sign, n=log.n * sign)
    replay = signed.groupby(WINDOW_COLS, as_index=False)[VALUE_COLS].sum()
    replay = replay[replay.n != 0]
    assert _rows(replay, WINDOW_COLS + VALUE_COLS) == _rows(
        expected.final, WINDOW_COLS + VALUE_COLS
    )


@pytest.mark.spark
def test_dead_letters_hold_the_late_rows(streamed, expected):
    dead = streamed.dead.read()
    # the local runner's columns, in its order
    assert list(dead.columns[:5]) == ["user", "event_time", "window_start", "window_end", "reason"]
    want = expected.dropped.rename(columns={"timestamp": "event_time"})
    want = want.loc[:, ~want.columns.duplicated()]
    cols = ["user", "event_time", "window_start", "window_end", "reason", "value"]
    assert _rows(dead, cols) == _rows(want, cols) == [("b", 1000, 1000, 11000, "late", 9)]


# --------------------------------------------------------------- idempotency


def _pane_frame(rows, key="user"):
    return pd.DataFrame(
        rows,
        columns=[
            key,
            "window_start",
            "window_end",
            "total",
            "timestamp",
            "pane_index",
            "nonspeculative_index",
            "timing",
            "is_first",
            "is_last",
            "is_retraction",
        ],
    )


def _pane(user, start, end, total, pane_index, retraction=False, timing="EARLY"):
    return (
        user,
        start,
        end,
        total,
        end - 1,
        pane_index,
        -1 if timing == "EARLY" else 0,
        timing,
        pane_index == 0,
        False,
        retraction,
    )


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def results(request, tmp_path):
    """A factory of current-results sinks on each backend (fresh tables)."""
    if request.param == "duckdb":

        def make(**kw):
            return duckdb_results(tmp_path / "r.duckdb", **kw)

        yield make
        return
    url, schema = request.getfixturevalue("pg_schema")
    made = []

    def make(table="results", **kw):
        sink = postgres_results(url, table=f"{schema}.{table}_{uuid.uuid4().hex[:6]}", **kw)
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.reset()
        sink.close()


def test_results_idempotent_per_batch_id(results):
    sink = results()
    b0 = _pane_frame([_pane("a", 0, 10, 3, 0), _pane("b", 0, 10, 1, 0)])
    b1 = _pane_frame([_pane("a", 0, 10, 3, 0, retraction=True), _pane("a", 0, 10, 8, 1)])
    assert sink.write(b0, 0) is True
    sink(b0, 0)  # the batch re-run after a failure: skipped
    first = sink.read()
    assert len(first) == 2 and sink.last_batch_id() == 0
    assert sink.write(b1, 1) and not sink.write(b1, 1) and not sink.write(b0, 0)
    table = sink.read()
    assert _rows(table, ["user", "total", "pane_index", "batch_id"]) == [
        ("a", 8, 1, 1),
        ("b", 1, 0, 0),
    ]
    assert sink.last_batch_id() == 1
    # A new writer on the same table (e.g. after a restart) knows the applied batches.
    again = CurrentResultsSink(sink.target, table=sink.table)
    assert again.last_batch_id() == 1 and not again.write(b1, 1)
    again.close()


def test_results_pane_order_within_a_batch(results):
    sink = results()
    sink.write(
        _pane_frame([_pane("a", 0, 10, 1, 0), _pane("b", 0, 10, 2, 0), _pane("c", 0, 10, 3, 0)]), 0
    )
    batch = _pane_frame(
        [
            # a: pane 1 then pane 2 in one batch, rows in any order: the latest pane wins
            _pane("a", 0, 10, 9, 2),
            _pane("a", 0, 10, 1, 0, retraction=True),
            _pane("a", 0, 10, 5, 1),
            _pane("a", 0, 10, 5, 1, retraction=True),
            # b: retracted with no replacement (merged into a new session): deleted
            _pane("b", 0, 10, 2, 0, retraction=True),
            _pane("b", 0, 15, 6, 0),
            # c: a retraction of an older pane than the stored one is ignored
            _pane("c", 0, 10, 0, -1, retraction=True),
            # d: a new window fired and withdrawn in the same batch: never stored
            _pane("d", 0, 10, 4, 0),
            _pane("d", 0, 10, 4, 0, retraction=True),
        ]
    )
    sink.write(batch, 1)
    assert _rows(sink.read(), WINDOW_COLS + ["total", "pane_index"]) == [
        ("a", 0, 10, 9, 2),
        ("b", 0, 15, 6, 0),
        ("c", 0, 10, 3, 0),
    ]
    # An older pane arriving late never replaces a newer one.
    sink.write(_pane_frame([_pane("a", 0, 10, 100, 1)]), 2)
    assert sink.read().set_index("user").loc["a", "total"] == 9


def test_results_discarding_panes_merge(results):
    sink = results(accumulation="discarding", merge={"total": "sum"})
    sink.write(
        _pane_frame([_pane("a", 0, 10, 3, 0), _pane("a", 0, 10, 4, 1), _pane("b", 0, 10, 1, 0)]), 0
    )
    sink.write(_pane_frame([_pane("a", 0, 10, 5, 2)]), 1)
    sink.write(_pane_frame([_pane("a", 0, 10, 5, 2)]), 1)  # re-run: not added twice
    assert _rows(sink.read(), ["user", "total", "pane_index"]) == [("a", 12, 2), ("b", 1, 0)]
    extremes = results(table="extremes", accumulation="discarding", merge={"total": "max"})
    extremes.write(_pane_frame([_pane("a", 0, 10, 3, 0)]), 0)
    extremes.write(_pane_frame([_pane("a", 0, 10, 2, 1)]), 1)
    assert extremes.read().total.tolist() == [3]


def test_results_reject_what_they_cannot_hold(tmp_path):
    events = EVENTS.drop(columns="arrival")
    stream = hw.from_pandas(events, event_time="ts")
    fixed = hw.FixedWindows("10 seconds")
    with pytest.raises(ValueError, match="sum, count, min and max"):
        CurrentResultsSink(
            tmp_path / "x.duckdb",
            aggregation=_pipeline(stream, "discarding", fixed, avg=hw.mean("value")),
        )
    with pytest.raises(ValueError, match="merging windows"):
        CurrentResultsSink(tmp_path / "x.duckdb", aggregation=_pipeline(stream, "discarding"))
    with pytest.raises(ValueError, match="merge="):
        CurrentResultsSink(tmp_path / "x.duckdb", accumulation="discarding")
    ok = CurrentResultsSink(
        tmp_path / "x.duckdb", aggregation=_pipeline(stream, "discarding", fixed)
    )
    assert ok.merge == {"total": "sum", "n": "sum"}
    with pytest.raises(ValueError, match="null key"):
        ok.write(_pane_frame([_pane(None, 0, 10, 1, 0)]).assign(n=1), 0)
    assert ok.read().empty


@pytest.mark.spark
def test_results_timestamps_and_global_window(spark, results):
    """Spark TIMESTAMP windows; the global window's null bounds are stored as
    -infinity/infinity and read back as null; two key columns."""
    t0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    minute = dt.timedelta(minutes=1)
    schema = (
        "team string, region int, window_start timestamp, window_end timestamp, "
        "total bigint, top array<bigint>, timestamp timestamp, pane_index bigint, "
        "nonspeculative_index bigint, timing string, is_first boolean, is_last boolean, "
        "is_retraction boolean"
    )
    batch = spark.createDataFrame(
        [
            (
                "blue",
                1,
                t0,
                t0 + minute,
                14,
                [9, 3],
                t0 + minute,
                0,
                0,
                "ON_TIME",
                True,
                True,
                False,
            ),
            ("blue", 1, None, None, 18, [9, 4], None, 0, 0, "ON_TIME", True, True, False),
            ("red", 2, None, None, 6, [5, 1], None, 0, 0, "ON_TIME", True, True, False),
        ],
        schema,
    )
    sink = results(key_cols=["team", "region"])
    sink(batch, 0)
    sink(batch, 0)
    table = sink.read()
    assert len(table) == 3
    bounded = table[table.window_start.notna()]
    assert bounded.total.tolist() == [14]
    assert pd.Timestamp(bounded.window_end.iloc[0]) == pd.Timestamp(t0 + minute)
    glob = table[table.window_start.isna()]
    assert glob.window_end.isna().all() and sorted(glob.total) == [6, 18]
    assert [list(v) for v in table.sort_values("total").top] == [[5, 1], [9, 3], [9, 4]]
    # The global window's pane 1 replaces pane 0 (null bounds match the stored row).
    later = batch.where("team = 'red'").selectExpr(
        *[c if c not in ("total", "pane_index") else f"{c} + 1 AS {c}" for c in batch.columns]
    )
    sink(later, 1)
    assert sink.read().set_index("team").loc["red", "total"] == 7


@pytest.mark.spark
def test_parquet_sinks_idempotent_per_batch_id(spark, tmp_path):
    panes = spark.createDataFrame(
        _pane_frame(
            [
                _pane("a", 0, 10, 3, 0),
                _pane("a", 0, 10, 3, 0, retraction=True),
                _pane("a", 0, 10, 5, 1),
            ]
        )
    )
    log = ChangelogSink(tmp_path / "log")
    log(panes, 0)
    log(panes, 0)  # re-run: overwritten, not appended
    log(panes.limit(1), 1)
    log(panes.limit(0), 2)  # an empty batch writes nothing
    got = log.read()
    assert sorted(got.batch_id.tolist()) == [0, 0, 0, 1]
    assert sorted(os.listdir(tmp_path / "log")) == ["batch_id=0", "batch_id=1"]
    assert log.read(spark).count() == 4
    # pandas batches (e.g. the local runner's) too, and a re-run that turns out empty
    local = ChangelogSink(tmp_path / "local")
    local(panes.toPandas(), 7)
    local(panes.toPandas(), 7)
    assert len(local.read()) == 3
    local(panes.toPandas().iloc[:0], 7)
    assert local.read().empty

    dead = DeadLetterSink(tmp_path / "dead")
    letters = spark.createDataFrame(
        [("b", 1000, "late", 9)], "user string, event_time bigint, reason string, value bigint"
    )
    dead(letters, 3)
    dead(letters, 3)
    assert dead.read()[["user", "reason", "batch_id"]].values.tolist() == [["b", "late", 3]]


def test_dead_letter_sink_refuses_raw_output(tmp_path):
    """The sink takes split dead letters (``start(dead_letter_sink=...)``), not a
    runner's raw output, whose format the io layer does not know."""
    dead = DeadLetterSink(tmp_path / "dead")
    raw = pd.DataFrame({"kind": ["pane", "dropped"], "user": ["a", "b"], "value": [1, 9]})
    for batch in (raw, pa.Table.from_pandas(raw)):
        with pytest.raises(TypeError, match=r"split dead letters.*dead_letter_sink="):
            dead(batch, 0)
    assert not os.path.exists(tmp_path / "dead") and dead.read().empty


# --------------------------------------------- recovery and DISCARDING on Spark


@pytest.mark.spark
@pytest.mark.slow
def test_discarding_stream_recovers_without_double_counting(spark, tmp_path):
    """Fixed windows, DISCARDING panes merged (sum) into DuckDB; the query fails
    after the sinks applied batch 2 and restarts from its checkpoint: batch 2 runs
    again and is skipped by the table and overwritten in the changelog."""
    _timeline(tmp_path / "timeline.jsonl")
    fixed = hw.FixedWindows("10 seconds")
    agg = _pipeline(_spark_stream(spark, tmp_path / "timeline.jsonl"), "discarding", fixed)
    duck = CurrentResultsSink(tmp_path / "r.duckdb", aggregation=agg)
    log = ChangelogSink(tmp_path / "log")
    failed = []

    def fail_once(batch, batch_id):
        if batch_id == 2 and not failed:
            failed.append(batch_id)
            raise RuntimeError("injected failure after the sinks")

    query = _run(agg, tmp_path / "ck", fan_out(log, duck, fail_once))
    assert failed and "injected failure" in str(query.exception())
    assert duck.last_batch_id() == 2
    query = _run(agg, tmp_path / "ck", fan_out(log, duck, fail_once))
    assert query.exception() is None, query.exception()

    want = _final(_local(accumulation="accumulating", window_fn=fixed).to_pandas())
    table = duck.read()
    assert _rows(table, WINDOW_COLS + VALUE_COLS) == _rows(want, WINDOW_COLS + VALUE_COLS)
    # The changelog of deltas sums to the same, with no duplicated batch.
    deltas = log.read().groupby(WINDOW_COLS, as_index=False)[VALUE_COLS].sum()
    assert _rows(deltas, WINDOW_COLS + VALUE_COLS) == _rows(want, WINDOW_COLS + VALUE_COLS)


# ---------------------------------------------------------------- the CI rule


def test_postgres_tests_fail_in_ci_without_a_server(monkeypatch):
    monkeypatch.delenv(POSTGRES_ENV, raising=False)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run"):
        _postgres_url()
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception):
        _postgres_url()
