"""Every materialization mode on recorded timelines of our own: a windowed
aggregate, a Query-7-style join, window joins of two streams (inner, left) and a
window Top-N, with out-of-order rows, several keys, late data within and beyond
the allowed lateness, and a NULL event time.

Locally, every query runs under all eight EMIT forms and its changelog is checked:
``ver`` numbers each event-time group's changes 0..n-1, no row is withdrawn that
is not there, no change is a no-op, the table view as of any step is the whole
run's changelog cut there, EMIT STREAM only renders the same changelog, the final
table is the bounded query over the rows that were not dropped, and the dropped
rows are the dead letters, with the query's name, the table and the reason.

On Spark every trigger runs once for the aggregate (its own fast path) and once
for the other four queries side by side: a UNION ALL of them, whose event-time
groups are theirs (the window) and whose changelog is theirs put together (checked
locally below), so four runs cover four queries; its changelog and dead letters
must equal the local runner's exactly.
"""

from __future__ import annotations

import pandas as pd
import pytest
from sql_helpers import (
    MINUTE,
    assert_same_rows,
    changelog_order,
    expected_rows,
    millis,
    multiset,
    result,
    rows,
    spark_runs,
    write_replay,
)

from headwater.sql import read_replay, sql
from headwater.sql.maintain.changelog import GROUP_COLUMNS

DAY = "2024-01-01"
LATENESS = 5 * MINUTE
DELAY = "INTERVAL '2' MINUTE"

# (ptime, rows, watermark). A row is (event time, price, item). Windows are
# tumbling 10 minutes: W1 = [10:00, 10:10), W2 = [10:10, 10:20); lateness 5 minutes.
BIDS = [
    # out of order (10:08 before 10:03), three keys, a NULL event time (dropped)
    ("10:01", [("10:00:30", 3, "A"), ("10:02", 5, "B"), ("10:08", 2, "B"), ("10:03", 1, "C"),
               (None, 4, "C")], None),
    # a NULL price (counted by COUNT(*), ignored by the others)
    ("10:04", [("10:01", 7, "A"), ("10:12", 6, "A"), ("10:04", None, "A")], "10:02"),
    ("10:09", [("10:09", 8, "B"), ("10:15", 9, "C")], None),
    ("10:12", [], "10:11"),  # W1 complete
    # late within the lateness (W1 ends 10:10 + 5 > 10:11), then W1 expires (10:16)
    ("10:13", [("10:07", 10, "A")], "10:16"),
    # late beyond the lateness: dropped; an on-time row of W2; another NULL event time
    ("10:18", [("10:05", 11, "B"), ("10:18", 4, "B"), (None, 13, "A")], None),
    ("10:22", [], "10:21"),  # W2 complete
    ("10:23", [("10:19", 12, "C")], None),  # late within the lateness for W2
    ("10:31", [], "10:31"),  # everything complete and expired
]  # fmt: skip
ASKS = [
    ("10:01", [("10:01", 4, "A")], None),
    ("10:04", [("10:06", 6, "B")], "10:02"),
    ("10:09", [("10:14", 5, "A"), ("10:08", 7, "C")], None),
    ("10:12", [], "10:11"),
    ("10:13", [("10:03", 9, "B")], "10:16"),  # late within the lateness
    ("10:18", [("10:02", 1, "C")], None),  # late beyond: dropped
    ("10:22", [], "10:21"),
    ("10:23", [("10:12", 3, "B")], None),  # late within
    ("10:31", [], "10:31"),
]  # fmt: skip
#: The rows the streams drop: (table, arrival, event time or None, price, item, reason).
DROPPED = [
    ("Bid", "10:01", None, 4, "C", "null_event_time"),
    ("Bid", "10:18", "10:05", 11, "B", "late"),
    ("Bid", "10:18", None, 13, "A", "null_event_time"),
    ("Ask", "10:18", "10:02", 1, "C", "late"),
]

EMITS = [
    "",
    "EMIT STREAM",
    "EMIT AFTER WATERMARK",
    "EMIT STREAM AFTER WATERMARK",
    f"EMIT AFTER DELAY {DELAY}",
    f"EMIT STREAM AFTER DELAY {DELAY}",
    f"EMIT AFTER DELAY {DELAY} AND AFTER WATERMARK",
    f"EMIT STREAM AFTER DELAY {DELAY} AND AFTER WATERMARK",
]
#: The four triggers (an EMIT form without STREAM renders the same changelog).
TRIGGERS = [e for e in EMITS if "STREAM" in e]


def tumble(table: str, time_column: str) -> str:
    return (
        f"Tumble(data => TABLE({table}), timecol => DESCRIPTOR({time_column}), "
        "dur => INTERVAL '10' MINUTE)"
    )


AGGREGATE = f"""
SELECT wstart, wend, item, COUNT(*) AS n, SUM(price) AS total, MIN(price) AS lo,
       MAX(price) AS hi, AVG(price) AS mean, COUNT(DISTINCT price) AS prices
FROM {tumble("Bid", "bidtime")}
GROUP BY wstart, wend, item
"""
QUERY7 = f"""
SELECT M.wstart, M.wend, B.bidtime, B.price, B.item
FROM Bid B,
     (SELECT MAX(price) AS maxprice, wstart, wend
      FROM {tumble("Bid", "bidtime")} T GROUP BY wstart, wend) M
WHERE B.price = M.maxprice AND B.bidtime >= M.wstart AND B.bidtime < M.wend
"""
WINDOW_JOIN = """
SELECT B.wstart, B.wend, B.item, B.bidtime, B.price AS bid, A.asktime, A.price AS ask
FROM {bid} B {kind} JOIN {ask} A
  ON B.wstart = A.wstart AND B.wend = A.wend AND B.item = A.item
"""
TOP2 = f"""
SELECT wstart, wend, item, price, rn
FROM (SELECT wstart, wend, item, price,
             ROW_NUMBER() OVER (PARTITION BY wstart, wend ORDER BY price DESC) AS rn
      FROM {tumble("Bid", "bidtime")}) T
WHERE rn <= 2
"""
SHAPES = {
    "aggregate": AGGREGATE,
    "query7": QUERY7,
    "join": WINDOW_JOIN.format(
        bid=tumble("Bid", "bidtime"), ask=tumble("Ask", "asktime"), kind="INNER"
    ),
    "left_join": WINDOW_JOIN.format(
        bid=tumble("Bid", "bidtime"), ask=tumble("Ask", "asktime"), kind="LEFT"
    ),
    "top2": TOP2,
}
#: The union's columns (a shape's missing ones are NULL) and the shapes in it.
UNION_COLUMNS = ("wstart", "wend", "item", "bidtime", "price", "asktime", "ask", "rn")
_WINDOW = {"wstart": "wstart", "wend": "wend", "item": "item"}
_JOIN = {**_WINDOW, "bidtime": "bidtime", "price": "bid", "asktime": "asktime", "ask": "ask"}
#: The union columns each shape fills: union column -> the shape's own column.
FILLS = {
    "query7": {**_WINDOW, "bidtime": "bidtime", "price": "price"},
    "join": _JOIN,
    "left_join": _JOIN,
    "top2": {**_WINDOW, "price": "price", "rn": "rn"},
}


def union_query() -> str:
    """The four general-path shapes as one query: ``shape`` tags each branch."""
    branches = []
    for shape, fills in FILLS.items():
        items = [f"'{shape}' AS shape"]
        items += [f"{fills.get(c, 'NULL')} AS {c}" for c in UNION_COLUMNS]
        branches.append(f"SELECT {', '.join(items)} FROM ({SHAPES[shape]}) {shape}_q")
    return "\nUNION ALL\n".join(branches)


def with_emit(query: str, emit: str) -> str:
    return f"{query.strip()}\n{emit}" if emit else query.strip()


@pytest.fixture(scope="module")
def streams(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("timelines")
    bid = write_replay(folder / "bid.jsonl", DAY, BIDS, "bidtime", ("bidtime", "price", "item"))
    ask = write_replay(folder / "ask.jsonl", DAY, ASKS, "asktime", ("asktime", "price", "item"))
    return {
        "Bid": read_replay(bid, "Bid", "bidtime", allowed_lateness=LATENESS),
        "Ask": read_replay(ask, "Ask", "asktime", allowed_lateness=LATENESS),
    }


def bounded_tables() -> dict[str, pd.DataFrame]:
    """Every row the streams keep, as bounded tables."""
    dropped = {(table, p, i) for table, _, _, p, i, _ in DROPPED}
    out = {}
    for name, steps, column in (("Bid", BIDS, "bidtime"), ("Ask", ASKS, "asktime")):
        kept = [r for _, rs, _ in steps for r in rs if (name, r[1], r[2]) not in dropped]
        frame = pd.DataFrame(kept, columns=[column, "price", "item"])
        frame[column] = pd.to_datetime([t(c) for c in frame[column]])
        frame["price"] = frame["price"].astype("float64")
        out[name] = frame
    return out


def t(clock: str) -> str:
    """A clock time of the timeline as the results print it."""
    return f"{DAY}T{clock}:00" if clock.count(":") == 1 else f"{DAY}T{clock}"


# ------------------------------------------------------------------ the changelog's laws


def check_versions(log: pd.DataFrame) -> None:
    """``ver`` is 0..n-1 per event-time group, in the changelog's order."""
    for group, part in changelog_order(log).groupby(list(GROUP_COLUMNS), sort=False):
        assert list(part["ver"].astype(int)) == list(range(len(part))), group


def check_withdrawals(log: pd.DataFrame, columns: list[str]) -> None:
    """A step never withdraws a row that is not in the view, and never withdraws and
    adds back the same row (a row appears only when the relation changes)."""
    keys = [*GROUP_COLUMNS, *columns]
    view: dict = {}
    for ptime, step in changelog_order(log).groupby("ptime", sort=True):
        withdrawn = multiset(rows(step[step["undo"].astype(bool)], keys))
        added = multiset(rows(step[~step["undo"].astype(bool)], keys))
        assert not (withdrawn & added), f"no-op change at {ptime}: {withdrawn & added}"
        for row, n in withdrawn.items():
            assert view.get(row, 0) >= n, f"withdraws {row} at {ptime}, not in the view"
            view[row] -= n
        for row, n in added.items():
            view[row] = view.get(row, 0) + n


# ------------------------------------------------------------------ local runner


@pytest.fixture(scope="module")
def query(streams):
    """``query(text, name)``: the bound query, one per text and name in this module
    (a query keeps its runs, so tests that read the same run share it)."""
    cache: dict = {}

    def bound(text: str, name: str = "query"):
        if (text, name) not in cache:
            cache[text, name] = sql(text, streams, name=name)
        return cache[text, name]

    return bound


def _emit_param(emit: str):
    return pytest.param(emit, id=emit or "no EMIT")


@pytest.mark.parametrize("emit", EMITS, ids=lambda e: e or "no EMIT")
@pytest.mark.parametrize("shape", SHAPES)
def test_changelog_laws(query, shape: str, emit: str) -> None:
    bound = query(with_emit(SHAPES[shape], emit), shape)
    run = bound.run()
    check_versions(run.changelog)
    check_withdrawals(run.changelog, run.columns)
    # the rendering
    out = bound.to_pandas()
    if "STREAM" in emit:
        assert list(out.columns) == [*run.columns, "undo", "ptime", "ver"]
        assert rows(out) == rows(run.changes())
    else:
        assert rows(out) == rows(run.table())
    # the table view as of a step is the whole run's changelog cut there (once per
    # trigger: a form without STREAM has the same changelog, as tested below)
    for ptime in (millis(DAY, "10:09"), millis(DAY, "10:18")) if "STREAM" in emit else ():
        assert rows(bound.run(ptime).table(ptime)) == rows(run.table(ptime)), ptime


@pytest.mark.parametrize("emit", [_emit_param(e) for e in EMITS])
@pytest.mark.parametrize("shape", SHAPES)
def test_final_table_is_the_bounded_query_over_the_kept_rows(query, shape: str, emit: str):
    """After the last watermark every EMIT form shows the same table: the query over
    every row that was not dropped."""
    run = query(with_emit(SHAPES[shape], emit), shape).run()
    bounded = sql(SHAPES[shape], bounded_tables()).to_pandas()
    assert_same_rows(rows(run.table()), rows(bounded[run.columns]), ordered=False, what=shape)


@pytest.mark.parametrize("trigger", TRIGGERS)
@pytest.mark.parametrize("shape", SHAPES)
def test_stream_only_renders_the_changelog(query, shape: str, trigger: str) -> None:
    as_table = "" if trigger == "EMIT STREAM" else trigger.replace("EMIT STREAM", "EMIT")
    stream_log = query(with_emit(SHAPES[shape], trigger), shape).run().changelog
    table_log = query(with_emit(SHAPES[shape], as_table), shape).run().changelog
    assert rows(stream_log) == rows(table_log)


@pytest.mark.parametrize("as_of", [None, "10:13"])
@pytest.mark.parametrize("shape", SHAPES)
def test_dropped_rows_are_dead_letters(query, shape: str, as_of: str | None) -> None:
    """The query's name, the table, why, and the row's event time; as of a processing
    time, the rows dropped until then."""
    bound = query(with_emit(SHAPES[shape], "EMIT STREAM"), shape)
    letters = bound.dead_letters(None if as_of is None else millis(DAY, as_of))
    tables = {"Bid"} if shape not in ("join", "left_join") else {"Bid", "Ask"}
    expected = [
        (shape, table, reason, None if et is None else t(et))
        for table, arrival, et, _, _, reason in DROPPED
        if table in tables and (as_of is None or arrival <= as_of)
    ]
    assert_same_rows(_letters(letters), expected_rows(expected), ordered=False, what=shape)


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_the_union_is_the_shapes_side_by_side(query, trigger: str) -> None:
    """What lets one Spark run stand for four queries: the union's changelog, split
    by shape, is each shape's own changelog (all but ``ver``, which numbers the
    changes of a group across the shapes)."""
    union = query(with_emit(union_query(), trigger), "union").run().changes()
    for shape in FILLS:
        own = query(with_emit(SHAPES[shape], trigger), shape).run().changes()
        mine = union[union["shape"] == shape]
        expect = own[[*FILLS[shape].values(), "undo", "ptime"]]
        actual = mine[[*FILLS[shape], "undo", "ptime"]]
        assert_same_rows(rows(actual), rows(expect), ordered=False, what=f"{shape} {trigger}")


# ------------------------------------------------------------------ other windows


OTHER_WINDOWS = {
    "hop": "Hop(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE, "
    "hopsize => INTERVAL '5' MINUTE)",
    "hop with gaps": "TABLE(HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTE, "
    "INTERVAL '3' MINUTE))",
    "tumble with offset": "Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), "
    "dur => INTERVAL '10' MINUTE, offset => INTERVAL '3' MINUTE)",
    "session": "Session(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), "
    "gap => INTERVAL '2' MINUTE)",
    "session per item": "TABLE(SESSION(TABLE Bid PARTITION BY item, DESCRIPTOR(bidtime), "
    "INTERVAL '2' MINUTE))",
}
OTHER_QUERIES = {
    "aggregate": "SELECT {ws}, {we}, item, COUNT(*) AS n, SUM(price) AS total, MAX(price) AS hi "
    "FROM {tvf} GROUP BY {ws}, {we}, item",
    "top1": "SELECT {ws}, {we}, item, price FROM (SELECT *, ROW_NUMBER() OVER "
    "(PARTITION BY {ws}, {we}, item ORDER BY price DESC) AS rn FROM {tvf}) T WHERE rn <= 1",
}


@pytest.fixture(scope="module")
def on_time_streams(tmp_path_factory) -> dict:
    """The bids without the row late beyond the lateness (which other windows than
    W1 may still accept: with hops or an offset the row is in a later window too)."""
    steps = [(p, [r for r in rs if r[1] != 11], wm) for p, rs, wm in BIDS]
    path = tmp_path_factory.mktemp("on_time") / "bid.jsonl"
    write_replay(path, DAY, steps, "bidtime", ("bidtime", "price", "item"))
    return {"Bid": read_replay(path, "Bid", "bidtime", allowed_lateness=LATENESS)}


@pytest.mark.parametrize("emit", ["", "EMIT AFTER WATERMARK", f"EMIT AFTER DELAY {DELAY}"])
@pytest.mark.parametrize("shape", OTHER_QUERIES)
@pytest.mark.parametrize("windows", OTHER_WINDOWS)
def test_other_windows_final_table(on_time_streams, windows: str, shape: str, emit: str):
    """Hops (overlapping, and with gaps), an offset, sessions (of all rows, of each
    item): after the last watermark, the bounded query over the rows."""
    tvf = OTHER_WINDOWS[windows]
    ws, we = ("window_start", "window_end") if tvf.startswith("TABLE(") else ("wstart", "wend")
    text = OTHER_QUERIES[shape].format(tvf=tvf, ws=ws, we=we)
    run = sql(with_emit(text, emit), on_time_streams).run()
    check_versions(run.changelog)
    check_withdrawals(run.changelog, run.columns)
    tables = {"Bid": bounded_tables()["Bid"].query("price != 11")}
    bounded = sql(text, tables).to_pandas()
    assert_same_rows(rows(run.table()), rows(bounded), ordered=False, what=windows)


# ------------------------------------------------------------------ hand-checked values


def test_aggregate_emit_stream_after_watermark(streams) -> None:
    """On time when the watermark passes the window's end, then once per late row."""
    out = sql(with_emit(AGGREGATE, "EMIT STREAM AFTER WATERMARK"), streams).to_pandas()
    w1, w2 = (t("10:00"), t("10:10")), (t("10:10"), t("10:20"))
    expected = [
        # wstart, wend, item, n, total, lo, hi, mean, prices, undo, ptime
        (*w1, "A", 3, 10, 3, 7, 5, 2, False, t("10:12")),
        (*w1, "B", 3, 15, 2, 8, 5, 3, False, t("10:12")),
        (*w1, "C", 1, 1, 1, 1, 1, 1, False, t("10:12")),
        (*w1, "A", 3, 10, 3, 7, 5, 2, True, t("10:13")),
        (*w1, "A", 4, 20, 3, 10, 20 / 3, 3, False, t("10:13")),
        (*w2, "A", 1, 6, 6, 6, 6, 1, False, t("10:22")),
        (*w2, "B", 1, 4, 4, 4, 4, 1, False, t("10:22")),
        (*w2, "C", 1, 9, 9, 9, 9, 1, False, t("10:22")),
        (*w2, "C", 1, 9, 9, 9, 9, 1, True, t("10:23")),
        (*w2, "C", 2, 21, 9, 12, 10.5, 2, False, t("10:23")),
    ]
    actual = rows(out.drop(columns=["ver"]))
    assert_same_rows(actual, expected_rows(expected), ordered=False)
    assert list(out["ptime"]) == sorted(out["ptime"])


def test_query7_after_delay_and_watermark(streams) -> None:
    """Early rows at most every 2 minutes after a change, the complete row when the
    watermark passes the end, late rows after the delay."""
    out = sql(with_emit(QUERY7, f"EMIT STREAM AFTER DELAY {DELAY} AND AFTER WATERMARK"), streams)
    w1, w2 = (t("10:00"), t("10:10")), (t("10:10"), t("10:20"))
    expected = [
        # W1 changed at 10:01: early at the first step after 10:03, with that step's rows
        (*w1, t("10:01"), 7, "A", False, t("10:04"), 0),
        # changed at 10:09 (B 8): complete at 10:12 (and the delay is up)
        (*w1, t("10:01"), 7, "A", True, t("10:12"), 1),
        (*w1, t("10:09"), 8, "B", False, t("10:12"), 2),
        # late A 10 at 10:13; the window expires in the same step: its pending pane is flushed
        (*w1, t("10:09"), 8, "B", True, t("10:13"), 3),
        (*w1, t("10:07"), 10, "A", False, t("10:13"), 4),
        # W2 changed at 10:04: early at 10:09 (C 9 arrived then); on time at 10:22: no change
        (*w2, t("10:15"), 9, "C", False, t("10:09"), 0),
        # late C 12 at 10:23: due at 10:25, fired by the next step, when W2 expires
        (*w2, t("10:15"), 9, "C", True, t("10:31"), 1),
        (*w2, t("10:19"), 12, "C", False, t("10:31"), 2),
    ]
    assert_same_rows(rows(out.to_pandas()), expected_rows(expected), ordered=False)


def test_window_joins_final_tables(streams) -> None:
    """Inner: bids and asks of one item in one window; left: also the bids of no ask."""
    w1, w2 = (t("10:00"), t("10:10")), (t("10:10"), t("10:20"))
    a1, b1, c1 = (t("10:01"), 4), (t("10:06"), 6), (t("10:08"), 7)
    b1_late, a2, b2 = (t("10:03"), 9), (t("10:14"), 5), (t("10:12"), 3)
    inner = [
        *[(*w1, "A", t(bt), p, *a1) for bt, p in (("10:00:30", 3), ("10:01", 7), ("10:07", 10))],
        (*w1, "A", t("10:04"), None, *a1),
        *[(*w1, "B", t(bt), p, *ask) for bt, p in (("10:02", 5), ("10:08", 2), ("10:09", 8))
          for ask in (b1, b1_late)],
        (*w1, "C", t("10:03"), 1, *c1),
        (*w2, "A", t("10:12"), 6, *a2),
        (*w2, "B", t("10:18"), 4, *b2),
    ]  # fmt: skip
    left = [*inner, (*w2, "C", t("10:15"), 9, None, None), (*w2, "C", t("10:19"), 12, None, None)]
    for kind, expected in (("join", inner), ("left_join", left)):
        out = sql(SHAPES[kind], streams).to_pandas()
        assert_same_rows(rows(out), expected_rows(expected), ordered=False, what=kind)


def test_top2_after_watermark_views(streams) -> None:
    """A complete window's two highest bids; nothing of a window before it is complete."""
    query = sql(with_emit(TOP2, "EMIT AFTER WATERMARK"), streams)
    w1, w2 = (t("10:00"), t("10:10")), (t("10:10"), t("10:20"))
    views = {
        "10:11": [],
        "10:12": [(*w1, "B", 8, 1), (*w1, "A", 7, 2)],
        "10:13": [(*w1, "A", 10, 1), (*w1, "B", 8, 2)],
        "10:22": [(*w1, "A", 10, 1), (*w1, "B", 8, 2), (*w2, "C", 9, 1), (*w2, "A", 6, 2)],
        "10:31": [(*w1, "A", 10, 1), (*w1, "B", 8, 2), (*w2, "C", 12, 1), (*w2, "C", 9, 2)],
    }
    for clock, expected in views.items():
        view = query.to_pandas(millis(DAY, clock))
        assert_same_rows(rows(view), expected_rows(expected), ordered=False, what=clock)


# ------------------------------------------------------------------ Spark


def spark_key(kind: str, trigger: str) -> str:
    return f"{kind} {trigger}"


@pytest.fixture(scope="module")
def spark_mode_runs(spark, streams) -> dict:
    """Every trigger for the aggregate and for the union of the other shapes, at once."""
    from headwater.sql.execute.spark import SparkSqlQuery

    def job(query: str, name: str):
        return lambda: SparkSqlQuery(query, streams, name=name, spark=spark).run(None)

    jobs = {}
    for trigger in TRIGGERS:
        jobs[spark_key("aggregate", trigger)] = job(with_emit(AGGREGATE, trigger), "aggregate")
        jobs[spark_key("union", trigger)] = job(with_emit(union_query(), trigger), "union")
    return spark_runs(spark, jobs)


def _letters(frame: pd.DataFrame) -> list[tuple]:
    times = frame["bidtime"]
    if "asktime" in frame.columns:
        times = times.where(frame["table"] == "Bid", frame["asktime"])
    return rows(frame[["query", "table", "reason"]].assign(et=times))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("trigger", TRIGGERS)
@pytest.mark.parametrize("kind", ["aggregate", "union"])
def test_spark_equals_local(query, spark_mode_runs, kind: str, trigger: str) -> None:
    spark_run = result(spark_mode_runs, spark_key(kind, trigger))
    text = AGGREGATE if kind == "aggregate" else union_query()
    local = query(with_emit(text, trigger), kind).run()
    assert spark_run.columns == local.columns
    assert rows(changelog_order(spark_run.changelog)) == rows(changelog_order(local.changelog))
    check_versions(spark_run.changelog)
    assert_same_rows(_letters(spark_run.dead_letters), _letters(local.dead_letters), False)
