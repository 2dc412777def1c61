"""A key that is a bucket of the event time (issue 16): ``GROUP BY CAST(bidtime AS
DATE)``, ``DATE_FORMAT(dateTime, 'yyyy-MM-dd')`` (NEXMark Query 15/16) or
``DATE_TRUNC('hour', ts)`` groups rows by the day (hour) of their event time, a
tumbling window of that size: a group whose bucket ends at or before the
watermark is complete, so the watermark frees its state and EMIT AFTER
WATERMARK can run. A bucket whose bounds are not fixed (a month, a week, a
format that does not fix the day) stays a plain key, exact, state kept.

Exactness: random out-of-order replays over several days, with rows late for
their day, at every step and between: the table view equals DuckDB running the
same text over the rows arrived less those the run dropped as late (its dead
letters, whole rows); one Spark replay run's changelog equals the local one's.
"""

from __future__ import annotations

import json
import random

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, changelog_order, result, rows, spark_runs

from headwater.sql import read_replay, sql
from headwater.sql.errors import SqlError
from headwater.sql.parse.dialect import parse_query
from headwater.sql.plan.catalog import PTIME, Catalog
from headwater.sql.plan.keys import KeyKind
from headwater.sql.plan.planner import analyze

HOUR = 3_600_000
DAY = 24 * HOUR
START = pd.Timestamp("2024-03-01").value // 1_000_000
TYPES = {
    "id": "BIGINT",
    "price": "BIGINT",
    "bidder": "BIGINT",
    "auction": "BIGINT",
    "channel": "VARCHAR",
}
SEEDS = (1, 2)


# ------------------------------------------------------------------ replays


def _iso(ms: int) -> str:
    return pd.Timestamp(ms, unit="ms").isoformat()


def write_bids(path, seed: int) -> dict:
    """A replay of bids over three days, out of order: most arrive within hours,
    some a day late (after the watermark passed their day), one without event
    time. The watermark trails the processing time by six hours (punctuated)."""
    rng = random.Random(seed)
    bids = []
    for i in range(70):
        near_midnight = rng.random() < 0.3
        day = rng.randrange(3)
        offset = DAY - rng.randrange(1, 20) * 60_000 if near_midnight else rng.randrange(DAY)
        et = START + day * DAY + (offset // 1000) * 1000
        delay = rng.choice([0, 1, 2, 5, 9]) * HOUR + rng.randrange(HOUR)
        if rng.random() < 0.12:
            delay += DAY + 8 * HOUR  # late for its day
        row = {
            "id": i,
            "bidtime": _iso(et),
            "price": rng.choice([500, 9_999, 10_000, 250_000, 1_000_000, 3_000_000]),
            "bidder": rng.randrange(1, 6),
            "auction": rng.randrange(1, 5),
            "channel": rng.choice(["apple", "baidu", "google"]),
        }
        bids.append((et + delay, row))
    bids.append((START + 30 * HOUR, {**bids[0][1], "id": 99, "bidtime": None}))
    step = 4 * HOUR  # rows arrive in steps of four hours of processing time
    lines = []
    for ptime in sorted({(p // step + 1) * step for p, _ in bids}):
        arrived = [r for p, r in bids if (p // step + 1) * step == ptime]
        lines += [{"ptime": _iso(ptime), "row": r} for r in arrived]
        lines.append({"ptime": _iso(ptime), "watermark": _iso(ptime - 6 * HOUR)})
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in lines)
    return {"Bid": read_replay(path, "Bid", "bidtime", TYPES)}


@pytest.fixture(scope="module")
def replays(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("day-key")
    return {seed: write_bids(folder / f"bids-{seed}.jsonl", seed) for seed in SEEDS}


# ------------------------------------------------------------------ queries

Q15 = """SELECT DATE_FORMAT(bidtime, 'yyyy-MM-dd') AS `day`,
  count(*) AS total_bids,
  count(*) filter (where price < 10000) AS rank1_bids,
  count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids,
  count(distinct bidder) AS total_bidders,
  count(distinct bidder) filter (where price >= 1000000) AS rank3_bidders,
  count(distinct auction) filter (where price < 10000) AS rank1_auctions
FROM Bid GROUP BY DATE_FORMAT(bidtime, 'yyyy-MM-dd')"""
Q16 = """SELECT channel, DATE_FORMAT(bidtime, 'yyyy-MM-dd') AS `day`,
  max(DATE_FORMAT(bidtime, 'HH:mm')) AS `minute`,
  count(*) AS total_bids,
  count(distinct bidder) filter (where price >= 10000 and price < 1000000) AS rank2_bidders,
  count(distinct auction) AS total_auctions
FROM Bid GROUP BY channel, DATE_FORMAT(bidtime, 'yyyy-MM-dd')"""
QUERIES = {
    "q15": Q15,
    "q16": Q16,
    "cast having": "SELECT auction, CAST(bidtime AS DATE) AS d, COUNT(*) AS n, SUM(price) AS s "
    "FROM Bid GROUP BY auction, CAST(bidtime AS DATE) HAVING COUNT(*) > 1",
    "hour subquery": "SELECT h, MAX(price) AS top FROM (SELECT DATE_TRUNC('hour', bidtime) AS h, "
    "price FROM Bid WHERE price > 600) s GROUP BY h",
    "top per day": "SELECT d, bidder, n FROM (SELECT d, bidder, n, ROW_NUMBER() OVER "
    "(PARTITION BY d ORDER BY n DESC, bidder) AS rk FROM (SELECT CAST(bidtime AS DATE) AS d, "
    "bidder, COUNT(*) AS n FROM Bid GROUP BY 1, 2) a) b WHERE rk <= 2",
    "distinct hour": "SELECT DISTINCT DATE_FORMAT(bidtime, 'yyyy-MM-dd HH') AS h, channel FROM Bid",
    "day of hour": "SELECT CAST(DATE_TRUNC('hour', bidtime) AS DATE) AS d, "
    "COUNT(DISTINCT bidder) AS bidders FROM Bid GROUP BY 1",
    "floor to hour": "SELECT FLOOR(bidtime TO HOUR) AS h, COUNT(*) AS n, MAX(price) AS top "
    "FROM Bid GROUP BY FLOOR(bidtime TO HOUR)",
    "floor to day": "SELECT channel, FLOOR(bidtime TO DAY) AS d, COUNT(DISTINCT bidder) AS b "
    "FROM Bid GROUP BY 1, 2",
    # buckets of several sizes that nest: maintained per the coarser (the day)
    "first of each hour per day": "SELECT CAST(bidtime AS DATE) AS d, COUNT(*) AS n, "
    "SUM(price) AS s FROM (SELECT bidtime, price, ROW_NUMBER() OVER (PARTITION BY "
    "DATE_TRUNC('hour', bidtime) ORDER BY price, id) AS r FROM Bid) x WHERE r = 1 GROUP BY 1",
    "hourly top bidder per day": "SELECT DISTINCT FLOOR(bidtime TO DAY) AS d, bidder FROM "
    "(SELECT bidder, bidtime, RANK() OVER (PARTITION BY FLOOR(bidtime TO HOUR) "
    "ORDER BY price DESC) AS r FROM Bid) t WHERE r = 1",
    "minutes in hours": "SELECT DATE_FORMAT(bidtime, 'yyyy-MM-dd HH') AS h, channel, "
    "COUNT(*) AS n, MAX(m) AS busiest FROM (SELECT bidtime, channel, COUNT(*) OVER (PARTITION "
    "BY channel, DATE_FORMAT(bidtime, 'yyyy-MM-dd HH:mm')) AS m FROM Bid) x GROUP BY 1, 2",
    "cte": "WITH daily AS (SELECT TRY_CAST(bidtime AS DATE) AS d, price FROM Bid) "
    "SELECT d, AVG(price) AS mean FROM daily GROUP BY d",
}


def duckdb_text(text: str) -> str:
    """The query as DuckDB's own SQL (Flink's DATE_FORMAT as strftime)."""
    return parse_query(text).sql(dialect="duckdb")


def bounded(text: str, frame: pd.DataFrame, as_of: int, dropped: set) -> pd.DataFrame:
    """DuckDB running ``text`` over the rows arrived by ``as_of``, less ``dropped`` (ids)."""
    arrived = frame[(frame[PTIME] <= as_of) & ~frame["id"].isin(dropped)].drop(columns=[PTIME])
    con = duckdb.connect()
    con.register("Bid", arrived)
    return con.sql(duckdb_text(text)).df()


def as_of_times(frame: pd.DataFrame) -> list[int]:
    """Every step, a time between two steps, and one before the first."""
    steps = sorted(set(frame[PTIME].to_list()))
    return [steps[0] - 1, *steps, *(s + HOUR for s in steps[::3])]


# ------------------------------------------------------------------ the key


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("SELECT CAST(bidtime AS DATE) AS d, COUNT(*) AS n FROM Bid GROUP BY d", DAY),
        ("SELECT COUNT(*) AS n FROM Bid GROUP BY CAST(bidtime AS DATE)", DAY),
        ("SELECT DATE_TRUNC('day', bidtime) AS d, COUNT(*) AS n FROM Bid GROUP BY 1", DAY),
        ("SELECT date_trunc('MINUTE', bidtime) AS d, COUNT(*) AS n FROM Bid GROUP BY 1", 60_000),
        ("SELECT COUNT(*) AS n FROM Bid GROUP BY DATE_FORMAT(bidtime, 'yyyy-MM-dd HH')", HOUR),
        (
            "SELECT COUNT(*) AS n FROM Bid GROUP BY DATE_FORMAT(bidtime, 'yyyy-MM-dd HH:mm:ss')",
            1_000,
        ),
        (
            "SELECT d, n FROM (SELECT CAST(bidtime AS DATE) AS d, COUNT(*) AS n FROM Bid "
            "GROUP BY d) x",
            DAY,
        ),
        ("SELECT FLOOR(bidtime TO DAY) AS d, COUNT(*) AS n FROM Bid GROUP BY 1", DAY),
        ("SELECT COUNT(*) AS n FROM Bid GROUP BY floor(bidtime to minute)", 60_000),
        ("SELECT COUNT(*) AS n FROM Bid GROUP BY FLOOR(bidtime TO SECOND)", 1_000),
    ],
)
def test_a_bucket_of_the_event_time_is_a_window_key(replays, text: str, size: int) -> None:
    query = sql(text, tables=replays[1])
    key = query.plan.key
    assert (key.kind, key.bucket) == (KeyKind.BUCKET, size)
    assert query.plan.window_fn.size == size
    assert "state freed by the watermark" in query.explain()


@pytest.mark.parametrize(
    "text",
    [
        "SELECT COUNT(*) AS n FROM Bid GROUP BY DATE_TRUNC('month', bidtime)",
        "SELECT COUNT(*) AS n FROM Bid GROUP BY DATE_TRUNC('week', bidtime)",
        "SELECT COUNT(*) AS n FROM Bid GROUP BY DATE_FORMAT(bidtime, 'yyyy-MM')",
        "SELECT COUNT(*) AS n FROM Bid GROUP BY DATE_FORMAT(bidtime, 'HH:mm')",
        "SELECT COUNT(*) AS n FROM Bid GROUP BY CAST(CAST(bidtime AS TIMESTAMPTZ) AS DATE)",
        # a ceiling is no bucket: a row at midnight shares its value with the day before's
        "SELECT COUNT(*) AS n FROM Bid GROUP BY CEIL(bidtime TO DAY)",
        "SELECT COUNT(*) AS n FROM Bid GROUP BY FLOOR(bidtime TO MONTH)",
        # an hour shifted by half an hour does not nest in a day (nor is it a bucket)
        "SELECT CAST(bidtime AS DATE) AS d, COUNT(*) AS n FROM (SELECT bidtime, ROW_NUMBER() "
        "OVER (PARTITION BY DATE_TRUNC('hour', bidtime + INTERVAL '30' MINUTE) ORDER BY price) "
        "AS r FROM Bid) x WHERE r = 1 GROUP BY 1",
    ],
)
def test_a_bucket_of_no_fixed_bounds_stays_a_plain_key(replays, text: str) -> None:
    query = sql(text, tables=replays[1])
    assert query.plan.key.kind is KeyKind.NONE
    assert "state grows" in query.explain()
    with pytest.raises(SqlError, match="EMIT AFTER WATERMARK needs groups"):
        sql(text + " EMIT AFTER WATERMARK", tables=replays[1])


def test_nested_buckets_are_kept_per_the_coarsest(replays) -> None:
    """An hour inside a day: the key is the day (its rows hold all its hours);
    a plain column common to every operator is part of the key too."""
    key = sql(QUERIES["first of each hour per day"], tables=replays[1]).plan.key
    assert (key.kind, key.bucket, key.bucket_text) == (KeyKind.BUCKET, DAY, "CAST(bidtime AS DATE)")
    key = sql(QUERIES["minutes in hours"], tables=replays[1]).plan.key
    assert (key.kind, key.bucket) == (KeyKind.BUCKET, HOUR)
    assert [p.describe() for p in key.parts] == ["bid.channel"]


def test_a_bucket_with_an_operator_of_no_bucket_stays_a_plain_key(replays) -> None:
    """One operator per minute of the event time, another per channel only (no
    bucket): the minutes' groups span every time, so the key is the channel, kept."""
    text = (
        "SELECT channel, COUNT(*) AS n FROM (SELECT channel, ROW_NUMBER() OVER (PARTITION BY "
        "channel, DATE_FORMAT(bidtime, 'yyyy-MM-dd HH:mm') ORDER BY price) AS r FROM Bid) x "
        "WHERE r = 1 GROUP BY channel"
    )
    query = sql(text, tables=replays[1])
    assert query.plan.key.kind is KeyKind.COLUMNS
    assert "state grows with the distinct values of bid.channel" in query.explain()


def test_a_bucket_of_an_integer_event_time_is_no_bucket(tmp_path) -> None:
    """An event time of integer ms has no day for DuckDB: no bucket key (the
    planner's analysis; running it, DuckDB refuses DATE_TRUNC of an integer)."""
    path = tmp_path / "ints.jsonl"
    path.write_text(json.dumps({"ptime": _iso(START), "row": {"t": 5, "x": 1}}) + "\n")
    table = read_replay(path, "T", "t", {"t": "BIGINT", "x": "BIGINT"})
    text = "SELECT COUNT(*) AS n FROM T GROUP BY DATE_TRUNC('day', t)"
    plan = analyze(parse_query(text), Catalog({"T": table}))
    assert plan.key.kind is KeyKind.NONE


def test_floor_to_a_unit_is_explained_as_written(replays) -> None:
    text = "SELECT FLOOR(bidtime TO HOUR) AS h, COUNT(*) AS n FROM Bid GROUP BY 1"
    explained = sql(text, tables=replays[1]).explain()
    assert "key the event time's hour (FLOOR(bidtime TO HOUR), a tumbling window" in explained


def test_floor_and_ceil_to_a_unit_are_flinks() -> None:
    """FLOOR(ts TO unit) truncates; CEIL(ts TO unit) is the next boundary, ts itself
    on one (Calcite's); a week (Flink's from Sunday) is refused at the unit."""
    text = (
        "SELECT FLOOR(t TO HOUR) AS f, CEIL(t TO HOUR) AS c, CEIL(t TO DAY) AS d, "
        "FLOOR(t TO QUARTER) AS q FROM (VALUES (TIMESTAMP '2024-03-01 10:20:03'), "
        "(TIMESTAMP '2024-03-01 11:00:00')) AS v(t)"
    )
    got = duckdb.sql(duckdb_text(text)).fetchall()
    stamp = pd.Timestamp
    assert got == [
        (
            stamp("2024-03-01 10:00"),
            stamp("2024-03-01 11:00"),
            stamp("2024-03-02"),
            stamp("2024-01-01"),
        ),
        (
            stamp("2024-03-01 11:00"),
            stamp("2024-03-01 11:00"),
            stamp("2024-03-02"),
            stamp("2024-01-01"),
        ),
    ]
    with pytest.raises(SqlError, match=r"line 1, column 52: FLOOR\(\.\.\. TO WEEK\)"):
        parse_query("SELECT COUNT(*) FROM Bid GROUP BY FLOOR(bidtime TO WEEK)")


# ------------------------------------------------------------------ exactness


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", QUERIES)
def test_the_stream_equals_duckdb_over_the_rows_arrived(replays, seed: int, name: str) -> None:
    text = QUERIES[name]
    tables = replays[seed]
    query = sql(text, tables=tables)
    assert query.plan.key.kind is KeyKind.BUCKET, query.explain()
    run = query.run(None)
    frame = tables["Bid"].frame
    dead = run.dead_letters
    dropped = set(dead["id"].astype(int))
    for as_of in as_of_times(frame):
        expected = bounded(text, frame, as_of, dropped)
        view = run.table(as_of)
        assert list(view.columns) == list(expected.columns)
        assert_same_rows(rows(view), rows(expected), False, f"seed {seed}, as of {_iso(as_of)}")


def test_the_replays_have_late_rows_and_several_days(replays) -> None:
    """The replays exercise what the key is about: rows late for their day (dropped
    whole, with every column) and days the watermark completes."""
    for tables in replays.values():
        run = sql(QUERIES["cast having"], tables=tables).run(None)
        late = run.dead_letters[run.dead_letters["reason"] != "null event time"]
        assert len(late) and late["price"].notna().all()
        assert len(run.dead_letters[run.dead_letters["bidtime"].isna()]) == 1
        assert tables["Bid"].frame["bidtime"].dt.date.nunique() == 3


def test_emit_after_watermark_shows_each_day_once_complete(replays) -> None:
    """EMIT AFTER WATERMARK: a day appears once the watermark passes its end, with
    its final rows (the bounded query's for that day), and never changes."""
    text = "SELECT CAST(bidtime AS DATE) AS d, COUNT(*) AS n, SUM(price) AS s FROM Bid GROUP BY d"
    for tables in replays.values():
        run = sql(text + " EMIT AFTER WATERMARK", tables=tables).run(None)
        changes = run.changes()
        assert not changes["undo"].any()  # each day once, final
        frame = tables["Bid"].frame
        marks = tables["Bid"].watermarks
        dropped = set(run.dead_letters["id"].astype(int))
        final = bounded(text, frame, frame[PTIME].max(), dropped)
        for as_of in as_of_times(frame)[:-1]:
            passed = marks[marks["ptime"] <= as_of]["watermark"]
            mark = passed.max() if len(passed) else -np.inf
            ends = pd.to_datetime(final["d"]).astype("datetime64[ms]").astype(np.int64) + DAY
            complete = final[ends.to_numpy() <= mark]
            assert_same_rows(rows(run.table(as_of)), rows(complete), False, _iso(as_of))


# ------------------------------------------------------------------ Spark


@pytest.fixture(scope="module")
def spark_day_runs(spark, replays) -> dict:
    from headwater.sql.execute.spark import SparkSqlQuery

    def job(name: str):
        return lambda: SparkSqlQuery(QUERIES[name], replays[1], spark=spark).run(None)

    return spark_runs(spark, {name: job(name) for name in ("q16",)})


@pytest.mark.spark
@pytest.mark.slow
def test_spark_equals_local(spark_day_runs, replays) -> None:
    spark_run = result(spark_day_runs, "q16")
    local = sql(QUERIES["q16"], tables=replays[1]).run(None)
    assert spark_run.columns == local.columns
    assert rows(changelog_order(spark_run.changelog)) == rows(changelog_order(local.changelog))
    spark_letters = rows(spark_run.dead_letters, ["id", "reason"])
    assert_same_rows(spark_letters, rows(local.dead_letters, ["id", "reason"]), False)
