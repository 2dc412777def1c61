"""An interval join of two streams, ``o.t BETWEEN s.t - INTERVAL '4' SECOND AND
s.t + INTERVAL '2' SECOND``, maintained per bucket of ``s.t`` (buckets of 6 s,
each group holding ``o``'s rows from 4 s before its bucket to 2 s after): every
pair is in one group, its ``s`` row's bucket, and a group is complete once the
watermark passes its upper bound, so the watermark frees the state.

At every step of seeded out-of-order replays (rows on the interval's edges and
on the buckets' edges, equal keys, NULL keys, rows late for some or all of
their groups) the table view equals DuckDB's bounded query over the rows
arrived, less the pairs a dropped row took with it: a row is dropped per group
(the dead letters name the group's window), and a pair is in the group of its
``s`` row's bucket. The state held is only the groups the watermark has not
passed; a GROUP BY over a plain column above the join keeps the join key (state
grows) and still equals the bounded query; the check fails when the groups read
their whole window of ``s`` rows (each pair then shows in two or three groups).
With ``EMIT AFTER WATERMARK`` a bucket's pairs show once its group is complete
(the watermark past the bucket's end and 2 s more), final, and not before.
"""

from __future__ import annotations

from datetime import timedelta

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, result, rows, spark_runs, write_replay

from headwater.model.windows import SlidingWindows
from headwater.sql import read_replay, sql
from headwater.sql.execute import local
from headwater.sql.plan.catalog import PTIME
from headwater.sql.plan.keys.kinds import IntervalBound
from headwater.sql.plan.translate import Core

DAY = "2024-01-01"
O_COLUMNS = ("t", "id", "tag")
S_COLUMNS = ("t", "oid", "sid")
#: The bound: o.t in [s.t - BEFORE, s.t + AFTER]; groups are buckets of s.t of
#: BEFORE + AFTER, each window reaching BEFORE before its bucket, AFTER after.
BEFORE, AFTER = 4_000, 2_000
BUCKET = BEFORE + AFTER
JOIN = (
    "o JOIN s ON o.id = s.oid "
    "AND o.t BETWEEN s.t - INTERVAL '4' SECOND AND s.t + INTERVAL '2' SECOND"
)
PAIRS = f"SELECT o.tag, s.sid, o.id, o.t AS ot, s.t AS st FROM {JOIN}"
#: A GROUP BY of the bucketed side's event time: each group in one bucket.
PER_SHIPMENT_TIME = f"SELECT st, COUNT(*) AS n, MAX(ot) AS last FROM ({PAIRS}) p GROUP BY st"
#: A GROUP BY of a plain column: partitions span buckets, the join key stays.
PER_ID = f"SELECT id, COUNT(*) AS n, MIN(ot) AS first FROM ({PAIRS}) p GROUP BY id"
SEEDS = [0, 1, 2]


def clock(ms: int) -> str:
    return (pd.Timestamp(DAY) + pd.Timedelta(milliseconds=int(ms))).strftime("%H:%M:%S.%f")[:-3]


def replay_steps(seed: int) -> tuple[list[tuple], list[tuple]]:
    """(ptime, rows, watermark) steps of ``o`` and of ``s``, one second of
    processing time apart, the watermark 3 s of event time further each step:
    ``s`` rows out of order at or after the watermark, on buckets' edges now
    and then; for most, ``o`` rows of the same id on the interval's edges (4 s
    before, 2 s after) and just outside it, arriving this step or the next
    (some then behind the watermark: late for their earlier groups only); ``o``
    rows at random times; ids of few values and NULL; and every fourth step one
    row of each stream 20 s behind the watermark (late for all its groups)."""
    rng = np.random.default_rng(seed)
    o_steps: list[list[tuple]] = [[] for _ in range(14)]
    s_steps: list[list[tuple]] = [[] for _ in range(14)]
    marks, watermark, n = [], 0, 0

    def key() -> int | None:
        return None if rng.random() < 0.1 else int(rng.integers(1, 4))

    for step in range(12):
        for _ in range(rng.integers(1, 4)):
            n += 1
            t = watermark + int(rng.integers(0, 16)) * 500
            if rng.random() < 0.3:
                t = (t // BUCKET + 1) * BUCKET  # on a bucket's edge
            oid = key()
            s_steps[step].append((clock(t), oid, f"s{n}"))
            if rng.random() < 0.8:
                later = step + int(rng.integers(0, 2))
                for delta in (-BEFORE, AFTER, -BEFORE - 500, AFTER + 500, 0):
                    if rng.random() < 0.6:
                        n += 1
                        o_steps[later].append((clock(t + delta), oid, f"o{n}"))
        for _ in range(rng.integers(1, 3)):
            n += 1
            t = watermark + int(rng.integers(-4, 12)) * 500
            o_steps[step].append((clock(t), key(), f"o{n}"))
        if step % 4 == 3:
            n += 1
            s_steps[step].append((clock(watermark - 20_000), 1, f"s{n}"))
            o_steps[step].append((clock(watermark - 20_000), 1, f"o{n}"))
        watermark = max(watermark, step * 3_000)
        marks.append(watermark)
    marks += [marks[-1], marks[-1] + 60_000]
    o = [(f"10:00:{i:02d}", o_steps[i], clock(m)) for i, m in enumerate(marks)]
    s = [(f"10:00:{i:02d}", s_steps[i], clock(m)) for i, m in enumerate(marks)]
    return o, s


def _streams(tmp_path, seed: int) -> dict:
    o_steps, s_steps = replay_steps(seed)
    o_path, s_path = tmp_path / f"o{seed}.jsonl", tmp_path / f"s{seed}.jsonl"
    write_replay(o_path, DAY, o_steps, "t", O_COLUMNS)
    write_replay(s_path, DAY, s_steps, "t", S_COLUMNS)
    return {
        "o": read_replay(str(o_path), "o", "t", allowed_lateness=0),
        "s": read_replay(str(s_path), "s", "t", allowed_lateness=0),
    }


@pytest.fixture(params=SEEDS, ids=lambda s: f"seed{s}")
def streams(request, tmp_path):
    return _streams(tmp_path, request.param)


#: The bucketed side's event time in the pairs, and how far its groups' windows
#: start before its bucket: s.t (o's rows 4 s before it), or o.t (s's rows 2 s).
S_CORE, O_CORE = ("st", BEFORE), ("ot", AFTER)


def bounded(streams, dead, as_of: int, outer: str, core=S_CORE, pairs=PAIRS) -> pd.DataFrame:
    """DuckDB's pairs of the rows arrived by ``as_of`` less those whose ``o`` or
    ``s`` row was dropped from the pair's group (the window of the bucket of its
    ``core`` side's time, as the dead letters name it); ``outer``: the query over
    them (``kept``)."""
    con = duckdb.connect()
    for name, table in streams.items():
        frame = table.frame
        con.register(name, frame[frame[PTIME] <= as_of].drop(columns=[PTIME]))
    letters = dead[dead["reason"] == "late"]
    starts = letters["window_start"].astype("datetime64[ms]").astype(np.int64)
    con.register(
        "dead",
        pd.DataFrame(
            {
                "name": np.where(letters["table"] == "o", letters["tag"], letters["sid"]),
                "ws": starts.to_numpy(),
            }
        ),
    )
    return con.sql(
        f"""
        WITH pairs AS ({pairs}),
        kept AS (
          SELECT * FROM pairs
          WHERE NOT EXISTS (
            SELECT 1 FROM dead
            WHERE dead.name IN (pairs.tag, pairs.sid)
              AND dead.ws = epoch_ms(pairs.{core[0]}) // {BUCKET} * {BUCKET} - {core[1]}))
        {outer}
        """
    ).df()


def check_every_step(streams, text=PAIRS, outer="SELECT * FROM kept", core=S_CORE, pairs=PAIRS):
    """The table view at each step equals the bounded query (``outer`` over the
    kept ``pairs``); the run."""
    run = sql(text, streams).run()
    times = pd.concat([t.frame[PTIME] for t in streams.values()]).unique()
    for as_of in sorted(times):
        expected = bounded(streams, run.dead_letters, int(as_of), outer, core, pairs)
        view = run.table(int(as_of))
        assert_same_rows(rows(view), rows(expected), ordered=False, what=f"at {as_of}")
    return run


def test_replay_has_the_shape_under_test(streams) -> None:
    """Each replay pairs rows on both edges of the interval and across a bucket's
    edge, has NULL keys, rows dropped from all their groups and rows dropped from
    some groups while they pair in another."""
    run = sql(PAIRS, streams).run()
    final = run.table(None)
    gap = (final["ot"] - final["st"]).dt.total_seconds() * 1000
    assert (gap == -BEFORE).any() and (gap == AFTER).any()
    st = final["st"].astype("datetime64[ms]").astype(np.int64)
    assert (st % BUCKET == 0).any()
    assert streams["o"].frame["id"].isna().any() and streams["s"].frame["oid"].isna().any()
    letters = run.dead_letters
    assert set(letters["reason"]) == {"late"}
    named = set(letters["tag"].dropna()) | set(letters["sid"].dropna())
    shown = set(final["tag"]) | set(final["sid"])
    assert named - shown and named & shown


def test_the_interval_join_equals_the_bounded_query_at_every_step(streams) -> None:
    explain = sql(PAIRS, streams).explain()
    assert (
        "key the interval join's bound: buckets of INTERVAL '6' SECOND of s.t, each holding "
        "o's rows INTERVAL '4' SECOND before to INTERVAL '2' SECOND after and o.id = s.oid: "
        "state freed by the watermark (a row kept until the watermark passes its upper bound)"
    ) in explain
    check_every_step(streams)


def test_strict_bounds_leave_the_edges_out(streams) -> None:
    """``>`` and ``<``: the pairs on the interval's edges are not pairs; the groups
    are those of the closed interval (a strict bound reaches no further)."""
    strict = PAIRS.replace(
        "o.t BETWEEN s.t - INTERVAL '4' SECOND AND s.t + INTERVAL '2' SECOND",
        "o.t > s.t - INTERVAL '4' SECOND AND s.t + INTERVAL '2' SECOND > o.t",
    )
    assert strict != PAIRS
    assert "buckets of INTERVAL '6' SECOND of s.t" in sql(strict, streams).explain()
    run = check_every_step(streams, strict, pairs=strict)
    gap = (run.table(None)["ot"] - run.table(None)["st"]).dt.total_seconds() * 1000
    assert ((gap > -BEFORE) & (gap < AFTER)).all()


def test_a_group_by_of_the_bucketed_time_keeps_the_bound(streams) -> None:
    """Grouped by s.t, each group's pairs are in one bucket: the key stays the bound."""
    assert "key the interval join's bound" in sql(PER_SHIPMENT_TIME, streams).explain()
    outer = "SELECT st, COUNT(*) AS n, MAX(ot) AS last FROM kept GROUP BY st"
    check_every_step(streams, PER_SHIPMENT_TIME, outer)


def test_a_group_by_of_the_other_time_buckets_that_side(streams) -> None:
    """Grouped by o.t, the pairs are bucketed by o.t (s's rows 2 s before to 4 s
    after): a row is dropped from the groups of o.t's buckets."""
    text = f"SELECT ot, COUNT(*) AS n, MIN(sid) AS sid FROM ({PAIRS}) p GROUP BY ot"
    explain = sql(text, streams).explain()
    assert (
        "buckets of INTERVAL '6' SECOND of o.t, each holding s's rows INTERVAL '2' SECOND "
        "before to INTERVAL '4' SECOND after"
    ) in explain
    outer = "SELECT ot, COUNT(*) AS n, MIN(sid) AS sid FROM kept GROUP BY ot"
    check_every_step(streams, text, outer, O_CORE)


def test_a_group_by_of_a_plain_column_keeps_the_join_key(streams) -> None:
    """Grouped by the id, a group's pairs span buckets: the key is the id, state
    grows, nothing is dropped, and the view is the bounded query's."""
    explain = sql(PER_ID, streams).explain()
    assert "maintenance: key o.id = s.oid: state grows" in explain
    run = check_every_step(
        streams, PER_ID, "SELECT id, COUNT(*) AS n, MIN(ot) AS first FROM kept GROUP BY id"
    )
    assert not len(run.dead_letters)


def _watermark_at(streams, as_of: int) -> float:
    """The query's watermark after the step at ``as_of``: the least of its streams'."""
    marks = []
    for table in streams.values():
        passed = table.watermarks[table.watermarks["ptime"] <= as_of]["watermark"]
        marks.append(passed.max() if len(passed) else -np.inf)
    return min(marks)


@pytest.mark.parametrize(("text", "core"), [(PAIRS, S_CORE), (PER_SHIPMENT_TIME, S_CORE)])
def test_emit_after_watermark_shows_each_group_once_complete(streams, text, core) -> None:
    """EMIT AFTER WATERMARK: a bucket's pairs appear once the watermark passes its
    group's upper bound (the bucket's end and AFTER more of ``o``'s rows), all at
    once and final: the bounded query's pairs of that bucket, never withdrawn."""
    run = sql(text + " EMIT AFTER WATERMARK", streams).run()
    assert len(run.changes()) and not run.changes()["undo"].any()
    times = sorted(int(t) for t in pd.concat([t.frame[PTIME] for t in streams.values()]).unique())
    pairs = bounded(streams, run.dead_letters, times[-1], "SELECT * FROM kept")
    pair_ends = (pairs[core[0]].astype("datetime64[ms]").astype(np.int64) // BUCKET + 1) * BUCKET
    outer = "SELECT * FROM kept" if text == PAIRS else text.replace(f"({PAIRS}) p", "kept")
    shown_before_end = 0
    for as_of in times[:-1]:
        mark = _watermark_at(streams, as_of)
        complete = pairs[(pair_ends + AFTER <= mark).to_numpy()]
        con = duckdb.connect()
        con.register("kept", complete)
        expected = con.sql(outer).df()
        assert_same_rows(rows(run.table(as_of)), rows(expected), ordered=False, what=f"at {as_of}")
        shown_before_end += len(expected)
    assert shown_before_end  # some groups completed before the input ended
    final = bounded(streams, run.dead_letters, times[-1], outer)
    assert_same_rows(rows(run.table(None)), rows(final), ordered=False, what="at the end")


def test_state_is_the_groups_the_watermark_has_not_passed(streams, monkeypatch) -> None:
    """After each step the reducer holds only the groups whose window ends after
    the watermark, and in them exactly the rows arrived of those windows: each
    row in the windows of its time [jS - 4 s, (j+1)S + 2 s) that end after the
    watermark, none once it passed them all."""
    held: list[tuple[int, int, np.ndarray, int]] = []

    class Recording(local.Reducer):
        def step(self, *args, **kwargs):
            out = super().step(*args, **kwargs)
            table = self._table.cols
            counts = sum(len(v) for v in table["acc:__src:values"])
            held.append((self.now, self.watermark, table["end"].copy(), counts))
            return out

    monkeypatch.setattr(local, "Reducer", Recording)
    sql(PAIRS, streams).run()
    frame = pd.concat([t.frame for t in streams.values()], ignore_index=True)
    ptimes = frame[PTIME].to_numpy(np.int64)
    ms = (BUCKET + BEFORE + AFTER, BUCKET, -BEFORE)
    windows = SlidingWindows(*(timedelta(milliseconds=m) for m in ms))
    at, _, ends = windows.assign(frame["t"].astype("datetime64[ms]").astype(np.int64).to_numpy())
    assert len(held) > 10
    for now, watermark, group_ends, count in held:
        assert (group_ends > watermark).all()
        assert count == int(((ptimes[at] <= now) & (ends > watermark)).sum())
    assert held[-1][3] == 0


def _whole_window(self: IntervalBound) -> Core:
    """The groups' s rows without the filter to their bucket."""
    return Core(self.table, self.alias, self.column, 0, 0)


def test_the_check_catches_groups_reading_their_whole_window(streams, monkeypatch) -> None:
    """Switched off, a pair shows once per group holding both rows: the
    differential fails on extra (duplicate) pairs."""
    monkeypatch.setattr(IntervalBound, "core", _whole_window)
    with pytest.raises(AssertionError, match=r"extra: +Counter\(\{\(") as failed:
        check_every_step(streams)
    assert "missing: Counter()" in str(failed.value)


@pytest.mark.parametrize(
    "text",
    [
        # Flink's canonical interval join, written the other way round
        "SELECT o.tag, s.sid FROM o, s WHERE o.id = s.oid "
        "AND s.t BETWEEN o.t - INTERVAL '4' SECOND AND o.t",
        "SELECT o.tag FROM o JOIN s ON o.t >= s.t - INTERVAL '1' SECOND AND o.t < s.t",
    ],
)
def test_other_spellings_of_the_bound(text, tmp_path) -> None:
    query = sql(text, _streams(tmp_path, 0))
    assert "key the interval join's bound" in query.explain()


@pytest.mark.parametrize(
    "text",
    [
        # an outer join's unmatched o rows would show in each group holding them
        "SELECT o.tag, s.sid FROM o LEFT JOIN s ON o.id = s.oid "
        "AND o.t BETWEEN s.t - INTERVAL '4' SECOND AND s.t + INTERVAL '2' SECOND",
        # bounded from one side only
        "SELECT o.tag, s.sid FROM o JOIN s ON o.id = s.oid AND o.t >= s.t",
        # a self-join: one stream's rows in both roles
        "SELECT a.tag, b.tag AS other FROM o a JOIN o b ON a.id = b.id "
        "AND a.t BETWEEN b.t - INTERVAL '4' SECOND AND b.t",
        # a third reference of a stream
        f"SELECT tag FROM ({PAIRS}) p WHERE tag IN (SELECT tag FROM o)",
    ],
)
def test_other_joins_keep_their_key(text, tmp_path) -> None:
    explain = sql(text, _streams(tmp_path, 0)).explain()
    assert "interval join's bound" not in explain
    assert "state grows" in explain


@pytest.mark.spark
@pytest.mark.slow
def test_spark_equals_local(spark, tmp_path) -> None:
    from headwater.sql.execute.spark import SparkSqlQuery

    streams = _streams(tmp_path, 1)
    runs = spark_runs(
        spark, {"pairs": lambda: SparkSqlQuery(PAIRS, streams, spark=spark).run(None)}
    )
    spark_run = result(runs, "pairs")
    local_run = sql(PAIRS, streams).run(None)
    assert "key the interval join's bound" in SparkSqlQuery(PAIRS, streams, spark=spark).explain()
    assert_same_rows(rows(spark_run.table(None)), rows(local_run.table(None)), False)
    letters = ["table", "tag", "sid", "window_start"]
    assert_same_rows(
        rows(spark_run.dead_letters, letters), rows(local_run.dead_letters, letters), False
    )
