"""The fast path of windowed aggregates (headwater/sql/aggregate*.py) against the
general path, on recorded timelines with late data and NULLs, under every EMIT
trigger; on the local runner, and (batched, few runs) on streaming Spark."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from sql_helpers import result, spark_runs

import headwater as hw
from headwater.model.combiners import CountDistinct
from headwater.sql import read_replay
from headwater.sql.execute.aggregate_local import AggregatePlan, with_keys
from headwater.sql.execute.local import SqlPlan, compile_sql, run_stream
from headwater.sql.plan.fast_path import why_not
from headwater.sql.plan.planner import QueryPlan

BASE = pd.Timestamp("2020-04-15T08:00:00")
TUMBLE = "Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), dur => INTERVAL '5' MINUTE)"
HOP = (
    "Hop(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE, "
    "hopsize => INTERVAL '5' MINUTE)"
)
FLINK = "TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES))"

#: Every EMIT trigger (STREAM only changes the rendering of the same changelog).
EMITS = [
    "EMIT STREAM",
    "EMIT STREAM AFTER WATERMARK",
    "EMIT STREAM AFTER DELAY INTERVAL '2' MINUTE",
    "EMIT STREAM AFTER DELAY INTERVAL '2' MINUTE AND AFTER WATERMARK",
]

#: (query without EMIT, its GROUP BY columns that are not window bounds)
QUERIES = {
    "window": (
        "SELECT wstart, wend, COUNT(*) AS n, COUNT(price) AS priced, SUM(price) AS total, "
        "MIN(price) AS low, MAX(item) AS top, AVG(price) AS mean, "
        f"COUNT(DISTINCT item) AS items FROM {TUMBLE} GROUP BY wstart, wend",
        (),
    ),
    "keyed": (
        "SELECT item, wend, COUNT(*) AS n, SUM(price * 2) + 1 AS twice, MAX(bidtime) AS latest, "
        f"CASE WHEN MIN(price) IS NULL THEN 'none' ELSE 'some' END AS priced FROM {HOP} h "
        "WHERE h.price IS NULL OR h.price < 8 GROUP BY h.item, wstart, wend "
        "HAVING COUNT(*) >= 1 AND COALESCE(SUM(price), 0) <> 7",
        ("item",),
    ),
    "raw": ("SELECT bidtime, item, COUNT(*) AS n FROM Bid GROUP BY bidtime, item", ("item",)),
    "flink": (
        "SELECT window_start, window_end, window_time, item, SUM(price) AS total, "
        f"AVG(price) AS mean FROM {FLINK} GROUP BY window_start, window_end, window_time, item",
        ("item",),
    ),
    # FILTER: the aggregate of CASE WHEN ... END on the fast path
    "filtered": (
        "SELECT wstart, wend, COUNT(*) FILTER (WHERE price < 5) AS cheap, "
        "COUNT(DISTINCT item) FILTER (WHERE price >= 5) AS items, "
        "SUM(price) FILTER (WHERE item = 'A') AS a_total, AVG(price) FILTER (WHERE item <> 'A') "
        f"AS mean, COUNT(price) FILTER (WHERE price > 2) AS priced FROM {TUMBLE} "
        "GROUP BY wstart, wend",
        (),
    ),
    # a bucket of the event time (NEXMark q15/q16's day): a tumbling window of its size
    "bucket": (
        "SELECT item, DATE_TRUNC('minute', bidtime) AS m, COUNT(*) AS n, "
        "MAX(price) FILTER (WHERE price < 8) AS top FROM Bid "
        "GROUP BY item, DATE_TRUNC('minute', bidtime) HAVING COUNT(*) > 0",
        ("item",),
    ),
}

#: Unwindowed aggregates keyed by plain columns: the global window per key value
#: (no EMIT AFTER WATERMARK: no watermark completes such a group).
KEYED = {
    "unwindowed": (
        "SELECT item, COUNT(*) AS n, COUNT(price) AS priced, SUM(price) AS total, "
        "MIN(price) AS low, MAX(bidtime) AS latest, AVG(price) AS mean, "
        "COUNT(DISTINCT price) AS prices FROM Bid WHERE price IS NULL OR price < 8 "
        "GROUP BY item HAVING COUNT(*) >= 2",
        (),
    ),
    "unwindowed two columns": (
        "SELECT price, item, COUNT(*) AS n, MAX(bidtime) AS latest FROM Bid GROUP BY item, price",
        (),
    ),
}
KEYED_EMITS = [EMITS[0], EMITS[2]]

#: Sessions of a 2-minute gap per item, in both spellings.
SESSION = (
    "Session(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), gap => INTERVAL '2' MINUTE, "
    "keys => DESCRIPTOR(item))"
)
FLINK_SESSION = (
    "TABLE(SESSION(TABLE Bid PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '2' MINUTE))"
)

#: (session query without EMIT, its GROUP BY columns that are not window bounds)
SESSION_QUERIES = {
    "flink keyed": (
        "SELECT window_start, window_end, item, COUNT(*) AS n, SUM(price) AS total, "
        "MIN(price) AS low, MAX(bidtime) AS latest, AVG(price) AS mean, "
        f"COUNT(DISTINCT price) AS prices FROM {FLINK_SESSION} "
        "GROUP BY window_start, window_end, item",
        ("item",),
    ),
    "paper keyed": (
        f"SELECT item, wend, COUNT(*) AS n, MAX(price) AS top FROM {SESSION} s "
        "WHERE s.price IS NULL OR s.price < 8 GROUP BY s.item, wstart, wend "
        "HAVING COUNT(*) > 1",
        ("item",),
    ),
    "unkeyed": (
        "SELECT wstart, wend, COUNT(*) AS n, SUM(price) AS total FROM Session(data => "
        "TABLE(Bid), timecol => DESCRIPTOR(bidtime), gap => INTERVAL '1' MINUTE) "
        "GROUP BY wstart, wend",
        (),
    ),
}


def _iso(seconds: int) -> str:
    return (BASE + pd.Timedelta(seconds=seconds)).isoformat()


def write_timeline(path, seed: int, lines: int = 90) -> None:
    """Rows arriving out of order (some beyond any lateness), NULL prices, items
    and event times, and a watermark that advances now and then."""
    rng = np.random.default_rng(seed)
    out, ptime, mark = [], 0, None
    for _ in range(lines):
        ptime += int(rng.choice([0, 0, 20, 40, 60]))
        if rng.random() < 0.2:
            candidate = ptime - 120 - int(rng.integers(0, 120))
            if mark is None or candidate > mark:
                mark = candidate
                out.append({"ptime": _iso(ptime), "watermark": _iso(mark)})
            continue
        et = ptime - int(rng.integers(0, 300)) - (900 if rng.random() < 0.1 else 0)
        row = {
            "bidtime": _iso(et) if rng.random() > 0.05 else None,
            "price": int(rng.integers(1, 10)) if rng.random() > 0.15 else None,
            "item": str(rng.choice(["A", "B", "C"])) if rng.random() > 0.1 else None,
        }
        out.append({"ptime": _iso(ptime), "row": row})
    path.write_text("\n".join(json.dumps(line) for line in out) + "\n")


@pytest.fixture(scope="module")
def bids(tmp_path_factory):
    """Two recorded timelines: without and with allowed lateness (and BIGINT prices)."""
    root = tmp_path_factory.mktemp("fast")
    tables = []
    for seed, lateness in ((3, 0), (11, 180_000)):
        path = root / f"bids-{seed}.jsonl"
        write_timeline(path, seed)
        types = {"price": "BIGINT"} if lateness else None
        tables.append(read_replay(path, "Bid", "bidtime", types=types, allowed_lateness=lateness))
    return tables


def _value(v):
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or v is pd.NaT:
        return None
    if isinstance(v, (np.integer, np.floating, int, float)) and not isinstance(v, bool):
        return round(float(v), 9)
    if isinstance(v, (pd.Timestamp, np.datetime64)):
        return pd.Timestamp(v).isoformat()
    return v


def canon(frame: pd.DataFrame, columns=None, ordered: bool = False) -> list[tuple]:
    """A frame as a list of rows of plain values (sorted: a multiset, unless ``ordered``)."""
    frame = frame if columns is None else frame[list(columns)]
    rows = [tuple(_value(v) for v in row) for row in frame.itertuples(index=False)]
    return rows if ordered else sorted(rows, key=repr)


def both_paths(table, text: str, keys: tuple[str, ...]):
    """(fast run, general run) of ``text``: the general path with the fast path's
    event-time groups (GROUP BY columns and window)."""
    query = hw.sql(text, {"Bid": table})
    fast = compile_sql(query.plan)
    assert isinstance(fast, AggregatePlan), why_not(query.plan)
    general_plan = general(with_keys(query.plan, keys))
    assert isinstance(compile_sql(general_plan), SqlPlan)
    general_run = run_stream(general_plan)
    return run_stream(query.plan), general_run, query


def general(plan: QueryPlan) -> QueryPlan:
    """``plan`` with the fast path switched off (what ``hw.sql(..., fast_path=False)`` plans)."""
    return replace(plan, fast_path=False)


#: The columns of a dead letter before the row's own.
LETTER = ["query", "table", "reason", "window_start", "window_end"]


def assert_same_letters(fast, general, keys: tuple[str, ...]) -> None:
    """The general path's columns in its order, and the same rows: every column
    of a dropped row keeps its value on both paths."""
    f, g = fast.dead_letters, general.dead_letters
    assert list(f.columns) == list(g.columns) == [*LETTER, "bidtime", "price", "item"]
    assert canon(f, list(g.columns)) == canon(g, list(g.columns))


def assert_same_runs(fast, general, keys: tuple[str, ...]) -> None:
    assert fast.columns == general.columns
    columns = [*fast.columns, "undo", "ptime", "ver"]
    f, g = fast.changes(), general.changes()
    assert canon(f, columns) == canon(g, columns)
    # in the changelog's order: by ptime, withdrawals first
    order = ["ptime", "undo"]
    assert canon(f, order, ordered=True) == canon(g, order, ordered=True)
    assert len(f) > 0
    for column in fast.columns:  # same result types as the general path
        if len(f) and len(g):
            assert f[column].dtype == g[column].dtype, column
    for as_of in sorted(set(g["ptime"].astype(np.int64) // 1_000_000))[::3]:
        assert canon(fast.table(as_of)) == canon(general.table(as_of))
    assert_same_letters(fast, general, keys)


#: (query name, EMIT): the windowed queries under every EMIT, the keyed ones
#: under those that do not wait for a watermark.
PATH_CASES = [(n, e) for n in QUERIES for e in EMITS] + [(n, e) for n in KEYED for e in KEYED_EMITS]


@pytest.mark.parametrize(("name", "emit"), PATH_CASES)
def test_fast_path_equals_general_path(bids, name, emit):
    text, keys = {**QUERIES, **KEYED}[name]
    for table in bids:
        fast, general, query = both_paths(table, f"{text} {emit}", keys)
        assert_same_runs(fast, general, keys)
        if name in KEYED:
            assert "holding an accumulator per aggregate for each" in query.explain()


def assert_grown_sessions_withdrawn(run) -> None:
    """No two sessions left in the table view share a key and a start: a session
    that grew (merged into a longer one) was withdrawn, however late the merged
    session fired. (Sessions may overlap otherwise: a row after a session was
    collected starts a new one, as in Beam.)"""
    log = run.changelog
    net = log.assign(n=np.where(log["undo"], -1, 1)).groupby(["__gk", "__gs", "__ge"])["n"].sum()
    live = net[net > 0].reset_index()
    twice = live[live.duplicated(["__gk", "__gs"], keep=False)]
    assert twice.empty, f"a grown session was not withdrawn: {twice}"


@pytest.mark.parametrize("emit", EMITS)
@pytest.mark.parametrize("name", list(SESSION_QUERIES))
def test_sessions_on_the_fast_path_equal_the_general_path(bids, name, emit):
    """Sessions keyed by the GROUP BY columns: merged-away sessions are withdrawn
    as on the general path, and late rows are the same dead letters."""
    text, keys = SESSION_QUERIES[name]
    withdrawn = 0
    for table in bids:
        fast, general, _ = both_paths(table, f"{text} {emit}", keys)
        assert_same_runs(fast, general, keys)
        assert_grown_sessions_withdrawn(fast)
        assert_grown_sessions_withdrawn(general)
        assert "late" in set(fast.dead_letters["reason"])
        log = fast.changelog
        last = log.groupby(["__gk", "__gs", "__ge"], dropna=False)["undo"].last()
        withdrawn += int(last.sum())  # groups whose last change is a withdrawal
    if "WATERMARK" not in emit:  # merges are withdrawn (on time, a session fires once)
        assert withdrawn > 0


def test_a_late_row_bridging_two_sessions(tmp_path):
    """Two sessions of A, bridged by a late row: both are withdrawn and the merged
    session replaces them; a row beyond the allowed lateness is a dead letter."""
    lines = [
        (0, "row", {"bidtime": _iso(0), "price": 1, "item": "A"}),
        (0, "row", {"bidtime": _iso(210), "price": 2, "item": "A"}),
        (10, "row", {"bidtime": _iso(30), "price": 4, "item": "B"}),
        (20, "watermark", _iso(90)),
        (30, "row", {"bidtime": _iso(105), "price": 3, "item": "A"}),
        (500, "watermark", _iso(400)),
        (510, "row", {"bidtime": _iso(200), "price": 5, "item": "A"}),
    ]
    path = tmp_path / "bridge.jsonl"
    path.write_text("".join(json.dumps({"ptime": _iso(p), kind: v}) + "\n" for p, kind, v in lines))
    table = read_replay(path, "Bid", "bidtime")
    text, keys = SESSION_QUERIES["flink keyed"]
    fast, general, query = both_paths(table, f"{text} EMIT STREAM", keys)
    assert_same_runs(fast, general, keys)
    assert "fast path" in query.explain()
    changes = fast.changes()
    undone = changes[changes["undo"]]
    assert sorted(undone["window_start"].astype(str)) == [
        "2020-04-15 08:00:00",
        "2020-04-15 08:03:30",
    ]
    final = fast.table()
    assert canon(final, ["item", "window_start", "window_end", "n", "total"]) == canon(
        pd.DataFrame(
            {
                "item": ["A", "B"],
                "window_start": [BASE, BASE + pd.Timedelta(seconds=30)],
                "window_end": BASE + pd.to_timedelta([330, 150], unit="s"),
                "n": [3, 1],
                "total": [6, 4],
            }
        )
    )
    assert list(fast.dead_letters["reason"]) == ["late"]


def test_late_rows_and_nulls_reach_the_dead_letters(bids):
    fast, general, _ = both_paths(bids[0], f"{QUERIES['keyed'][0]} EMIT STREAM", ("item",))
    reasons = set(fast.dead_letters["reason"])
    assert {"late", "null_event_time"} <= reasons
    assert len(fast.dead_letters) == len(general.dead_letters)
    assert_same_letters(fast, general, ("item",))


@pytest.mark.parametrize("name", list(QUERIES))
def test_no_dead_letters_have_the_same_columns_too(bids, name):
    """Before any input (``as_of`` before the first step), both paths' empty dead
    letters have the columns they have with rows."""
    text, keys = QUERIES[name]
    query = hw.sql(f"{text} EMIT STREAM", {"Bid": bids[0]})
    fast = run_stream(query.plan, as_of=0)
    slow = run_stream(general(with_keys(query.plan, keys)), as_of=0)
    assert len(fast.dead_letters) == len(slow.dead_letters) == 0
    assert_same_letters(fast, slow, keys)


def test_window_only_grouping_equals_the_unmodified_general_path(bids):
    """Grouped by the window alone, the two paths' event-time groups are the same."""
    text = f"{QUERIES['window'][0]} EMIT STREAM AFTER DELAY INTERVAL '2' MINUTE"
    query = hw.sql(text, {"Bid": bids[1]})
    fast = query.run()
    slow = hw.sql(text, {"Bid": bids[1]}, fast_path=False)
    assert "fast_path=False" in slow.explain()
    assert_same_runs(fast, slow.run(), ())


def test_table_view_with_order_and_limit(bids):
    text = f"{QUERIES['window'][0]} ORDER BY total DESC, wstart LIMIT 3"
    fast = hw.sql(text, {"Bid": bids[0]}).to_pandas()
    slow = hw.sql(text, {"Bid": bids[0]}, fast_path=False).to_pandas()
    assert len(fast) == 3
    assert canon(fast) == canon(slow)
    assert list(fast.columns) == list(slow.columns)


def test_multi_key_ver_counts_per_group(bids):
    """``ver`` numbers the changelog rows of each (GROUP BY key, window) group."""
    fast, _, _ = both_paths(bids[0], f"{QUERIES['keyed'][0]} EMIT STREAM", ("item",))
    log = fast.changelog
    for _, rows in log.groupby(["__gk", "__gs", "__ge"], dropna=False):
        assert list(rows["ver"]) == list(range(len(rows)))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"SELECT wstart, wend, COUNT(*) FROM {TUMBLE} GROUP BY wstart, wend", None),
        (f"SELECT wstart, item, COUNT(*) FROM {TUMBLE} GROUP BY wstart, item", None),
        ("SELECT bidtime, COUNT(*) FROM Bid GROUP BY bidtime", None),
        (f"SELECT * FROM {TUMBLE}", "it has no GROUP BY"),
        (f"SELECT item, COUNT(*) FROM {TUMBLE} GROUP BY item, wstart, wend", None),
        (
            "SELECT wstart, wend, COUNT(*) FROM Session(data => TABLE(Bid), "
            "timecol => DESCRIPTOR(bidtime), gap => INTERVAL '3' MINUTE) GROUP BY wstart, wend",
            None,
        ),
        (
            "SELECT wstart, wend, item, COUNT(*) FROM Session(data => TABLE(Bid), "
            "timecol => DESCRIPTOR(bidtime), gap => INTERVAL '3' MINUTE) "
            "GROUP BY wstart, wend, item",
            "the sessions are over all rows, not per the GROUP BY columns (item)",
        ),
        (
            f"SELECT wstart, wend, COUNT(*) FROM {SESSION} GROUP BY wstart, wend, item, price",
            "the sessions are per item, not per the GROUP BY columns (item, price)",
        ),
        (
            f"SELECT wstart, wend, APPROX_COUNT_DISTINCT(item) FROM {TUMBLE} GROUP BY wstart, wend",
            "aggregate",
        ),
        (
            f"SELECT wstart, wend, COUNT(*) FROM {TUMBLE} WHERE price IN (SELECT 1) "
            "GROUP BY wstart, wend",
            "SUBQUERY",
        ),
        (
            f"SELECT wstart, wend, COUNT(*) FROM {TUMBLE} WHERE wstart > TIMESTAMP "
            "'2020-04-15 08:00:00' GROUP BY wstart, wend",
            "window bound",
        ),
        (
            # numbered across windows: one group of every row (issue 16), not per window
            f"SELECT wstart, MAX(price), ROW_NUMBER() OVER (ORDER BY wstart) FROM {TUMBLE} "
            "GROUP BY wstart, wend",
            "one group of every row",
        ),
        (f"SELECT DISTINCT wstart, COUNT(*) FROM {TUMBLE} GROUP BY wstart", "DISTINCT"),
        (
            f"SELECT wstart, COUNT(*) FROM {TUMBLE} GROUP BY wstart, wend, price + 1",
            "not a column",
        ),
        ("SELECT COUNT(*) FILTER (WHERE price > 1) FROM Bid GROUP BY CAST(bidtime AS DATE)", None),
        (
            # a bucket of an expression, not of the event time itself: left to the general path
            "SELECT COUNT(*) FROM Bid GROUP BY CAST(bidtime AS DATE), "
            "DATE_TRUNC('minute', CAST(bidtime AS DATE))",
            "not a column",
        ),
        (
            # a bucket finer than the key's (the hour): not the same for a group's rows
            "SELECT COUNT(*) FROM Bid GROUP BY DATE_TRUNC('hour', bidtime), "
            "DATE_TRUNC('minute', bidtime)",
            "not a column",
        ),
    ],
)
def test_which_queries_take_the_fast_path(bids, text, reason):
    plan = hw.sql(text, {"Bid": bids[0]}).plan
    found = why_not(plan)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


def test_general_path_switch(bids):
    text = f"SELECT wstart, wend, COUNT(*) AS n FROM {TUMBLE} GROUP BY wstart, wend EMIT STREAM"
    plan = hw.sql(text, {"Bid": bids[0]}).plan
    assert isinstance(compile_sql(plan), AggregatePlan)
    assert isinstance(compile_sql(plan, fast=False), SqlPlan)
    off = hw.sql(text, {"Bid": bids[0]}, fast_path=False).plan
    assert not off.fast_path
    assert isinstance(compile_sql(off), SqlPlan)
    assert isinstance(compile_sql(off, fast=True), AggregatePlan)
    assert plan.fast_path, "switching one query off leaves the others on"
    assert isinstance(compile_sql(hw.sql(text, {"Bid": bids[0]}).plan), AggregatePlan)


#: (query, what ``explain()`` says of its path)
EXPLAINED = {
    "fast": (
        f"SELECT wstart, wend, COUNT(*) AS n FROM {TUMBLE} GROUP BY wstart, wend EMIT STREAM",
        "runs on: fast path (a windowed aggregate: combiners, one projection per step)",
    ),
    "session": (
        f"SELECT wstart, wend, item, COUNT(*) AS n FROM {SESSION} GROUP BY wstart, wend, item",
        "runs on: fast path (a windowed aggregate: combiners, one projection per step)",
    ),
    "session over all rows": (
        "SELECT item, COUNT(*) AS n FROM Session(data => TABLE(Bid), "
        "timecol => DESCRIPTOR(bidtime), gap => INTERVAL '3' MINUTE) GROUP BY wstart, wend, item",
        "runs on: general path (incremental maintenance per event-time group), not the "
        "fast path because the sessions are over all rows, not per the GROUP BY columns (item)",
    ),
    "no group by": (f"SELECT * FROM {TUMBLE}", "not the fast path because it has no GROUP BY"),
    "keyed": (
        "SELECT item, COUNT(*) AS n FROM Bid GROUP BY item EMIT STREAM",
        "runs on: fast path (a keyed aggregate: combiners, one projection per step)",
    ),
    "keyed dedup": (
        "SELECT item, price FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY item "
        "ORDER BY bidtime) AS rn FROM Bid) WHERE rn = 1",
        "key bid.item: state grows with the distinct values of bid.item, holding the rows of each",
    ),
}


@pytest.mark.parametrize("case", list(EXPLAINED))
def test_explain_says_which_path(bids, case):
    text, says = EXPLAINED[case]
    query = hw.sql(text, {"Bid": bids[0]})
    assert says in query.explain()
    assert query.explain().count("runs on: ") == 1
    off = hw.sql(text, {"Bid": bids[0]}, fast_path=False).explain()
    assert "not the fast path because the fast path was switched off for this query" in off
    assert "runs on: general path" in off


def test_explain_of_a_bounded_query_names_no_path(bids):
    text = EXPLAINED["fast"][0].replace(" EMIT STREAM", "")
    bounded = bids[0].frame.drop(columns="__ptime")
    assert "runs on" not in hw.sql(text, {"Bid": bounded}).explain()


def test_count_distinct_combiner():
    fn = CountDistinct()
    acc = fn.add(np.array(["a", "b", "a", None, "c"], dtype=object), np.array([0, 0, 0, 1, 2]), 3)
    assert list(fn.extract(acc)) == [2, 0, 1]
    more = fn.add(np.array(["a", "z"], dtype=object), np.array([1, 0]), 2)
    both = {"distinct": np.concatenate([acc["distinct"], more["distinct"]])}
    merged = fn.merge(both, np.array([0, 1, 2, 1, 0]), 3)
    assert list(fn.extract(merged)) == [2, 1, 1]
    back = fn.accumulator_from_arrow(
        "distinct", fn.accumulator_to_arrow("distinct", merged["distinct"])
    )
    again = fn.merge({"distinct": np.concatenate([back, acc["distinct"]])}, np.arange(6) % 3, 3)
    assert list(fn.extract(again)) == [2, 1, 1]
    numbers = fn.add(np.array([1.0, np.nan, 1.0, 2.0]), np.array([0, 0, 1, 1]), 2)
    assert list(fn.extract(numbers)) == [1, 2]


def test_expire_forgets_collected_windows(bids):
    """The transform's state keeps only the groups of windows the model still holds."""
    text = f"{QUERIES['window'][0]} EMIT STREAM"
    sql = compile_sql(hw.sql(text, {"Bid": bids[0]}).plan)
    state = sql.maintainer.restore(None)
    panes = pd.DataFrame(
        {
            "key": [0, 0],
            "window_start": [0, 300_000],
            "window_end": [300_000, 600_000],
            **{c.name: [1, 2] for c in sql.maintainer.calls},
            "is_retraction": [False, False],
        }
    )
    first = sql.maintainer.apply(panes, 1, state)
    assert list(first["ver"]) == [0, 0]
    assert len(state.rows) == 2
    sql.maintainer.expire(state, 300_000)
    assert list(state.rows["__ge"]) == [600_000]
    assert list(state.versions["__ge"]) == [600_000]
    restored = sql.maintainer.restore(sql.maintainer.snapshot(state))
    assert len(restored.rows) == 1
    again = sql.maintainer.apply(
        panes.iloc[1:].assign(**{c.name: 3 for c in sql.maintainer.calls}), 2, restored
    )
    assert list(again["undo"]) == [True, False] and list(again["ver"]) == [1, 2]


# ---------------------------------------------------------------- Spark (few runs)

#: (query, EMIT, lines of a shorter timeline, allowed lateness): one streaming run
#: each (a replay step is a micro-batch, so timelines are short here).
SPARK_CASES = [
    ("window", EMITS[1], 0),
    ("keyed", EMITS[0], 0),
    ("raw", EMITS[3], 180_000),
    ("unwindowed", EMITS[0], 0),
    ("bucket", EMITS[1], 0),
]


@pytest.mark.spark
def test_spark_streaming_equals_local(spark, tmp_path):
    """The Spark fast path gives the local fast path's changelog and dead letters
    (no key, a raw key with NULLs, a JSON key; three EMIT triggers). The Spark runs
    go together (:func:`spark_runs`)."""
    from headwater.sql.execute.spark import SparkSqlQuery

    locals_, queries = {}, {}
    for i, (name, emit, lateness) in enumerate(SPARK_CASES):
        path = tmp_path / f"bids-{i}.jsonl"
        write_timeline(path, seed=20 + i, lines=24)
        table = read_replay(path, "Bid", "bidtime", allowed_lateness=lateness)
        text = f"{({**QUERIES, **KEYED})[name][0]} {emit}"
        locals_[name] = hw.sql(text, {"Bid": table}).run()
        queries[name] = SparkSqlQuery(text, {"Bid": table}, spark=spark)
        assert isinstance(compile_sql(queries[name].plan), AggregatePlan)
    runs = spark_runs(spark, {name: query.run for name, query in queries.items()})
    for name, local in locals_.items():
        remote = result(runs, name)
        columns = [*local.columns, "undo", "ptime", "ver"]
        assert len(local.changelog) > 0
        assert canon(remote.changes(), columns) == canon(local.changes(), columns), name
        shared = list(local.dead_letters.columns)
        assert canon(remote.dead_letters, shared) == canon(local.dead_letters, shared), name


@pytest.mark.spark
def test_spark_keyed_sessions_equal_local(spark, tmp_path):
    """Keyed sessions on the Spark fast path (merging windows: never lifted) give
    the local runner's changelog, merged-away sessions withdrawn, and dead letters."""
    from headwater.sql.execute.spark import SparkSqlQuery

    path = tmp_path / "bids.jsonl"
    write_timeline(path, seed=3, lines=40)
    table = read_replay(path, "Bid", "bidtime")
    text = f"{SESSION_QUERIES['flink keyed'][0]} EMIT STREAM"
    local = hw.sql(text, {"Bid": table}).run()
    query = SparkSqlQuery(text, {"Bid": table}, spark=spark)
    assert isinstance(compile_sql(query.plan), AggregatePlan)
    remote = query.run(None)
    columns = [*local.columns, "undo", "ptime", "ver"]
    assert local.changes()["undo"].any()
    assert canon(remote.changes(), columns) == canon(local.changes(), columns)
    shared = list(local.dead_letters.columns)
    assert canon(remote.dead_letters, shared) == canon(local.dead_letters, shared)


@pytest.mark.spark
def test_spark_explain_says_the_same_path(spark, bids):
    """Spark compiles the same plan: its ``explain()`` names the same path."""
    from headwater.sql.execute.spark import SparkSqlQuery

    for text, says in EXPLAINED.values():
        explained = SparkSqlQuery(text, {"Bid": bids[0]}, spark=spark).explain()
        assert says in explained
        assert explained == hw.sql(text, {"Bid": bids[0]}).explain()


@pytest.mark.spark
def test_spark_bounded_tumble_is_one_native_plan(spark):
    """A bounded windowed aggregate is Spark SQL alone: no Python UDF in the plan."""
    from headwater.sql.execute.spark import SparkSqlQuery

    frame = pd.DataFrame(
        {
            "bidtime": pd.to_datetime(["2020-04-15 08:01", "2020-04-15 08:07", "2020-04-15 08:09"]),
            "price": [2, 5, 3],
            "item": ["A", "B", "B"],
        }
    )
    text = (
        f"SELECT wstart, wend, item, COUNT(*) AS n, SUM(price) AS total, MAX(price) AS top, "
        f"COUNT(DISTINCT item) AS items FROM {TUMBLE} GROUP BY wstart, wend, item"
    )
    query = SparkSqlQuery(text, {"Bid": spark.createDataFrame(frame)}, spark=spark)
    df = query.bounded()
    executed = df._jdf.queryExecution().executedPlan().toString()
    for operator in ("BatchEvalPython", "ArrowEvalPython", "FlatMapGroupsInPandas"):
        assert operator not in executed
    got = df.toPandas()
    assert sorted(got["total"]) == [2, 8]
