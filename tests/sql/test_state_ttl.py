"""'state.ttl': a key's state dropped once no row of it arrived for the TTL (in
processing time), its result withdrawn then, a later row starting it afresh
(docs/sql.md, "State time-to-live")."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from sql_helpers import result, spark_runs, write_replay

import headwater as hw
from headwater.model.idle import IdleKeys
from headwater.sql.cli import main
from headwater.sql.errors import SqlError
from headwater.sql.script import run_script

T0 = pd.Timestamp("2024-01-01 10:00")
COUNT = "SELECT k, COUNT(*) AS n FROM S GROUP BY k"


def at(minute: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(minutes=minute)


def ms(minute: float) -> int:
    return int(at(minute).value // 1_000_000)


#: Key a: rows at minutes 0 and 1, then none until 15 (idle past a 10-minute TTL,
#: expiring at 11); key b: a row every 5 minutes or less (never idle that long).
ROWS = [(0, "a"), (1, "a"), (2, "b"), (6, "b"), (11, "b"), (15, "a"), (16, "b"), (21, "b")]


def frame(rows=ROWS) -> pd.DataFrame:
    """Rows arriving at their event time (minutes), keys ``k``."""
    return pd.DataFrame(
        {
            "ts": [at(m) for m, _ in rows],
            "k": [k for _, k in rows],
            "arrival": [at(m) for m, _ in rows],
        }
    )


def stream(data: pd.DataFrame):
    return hw.from_pandas(data, event_time="ts", arrival_time="arrival", watermark="perfect")


def changes(query) -> list[tuple]:
    log = query.changelog()
    minutes = (log["ptime"] - T0) / pd.Timedelta(minutes=1)
    return list(zip(log["k"], log["n"], log["undo"], minutes, log["ver"], strict=True))


def view(query, minute: float | None = None) -> dict[str, int]:
    out = query.to_pandas(None if minute is None else ms(minute))
    return dict(zip(out["k"], out["n"], strict=True))


def test_expiry_withdraws_the_idle_key_and_a_later_row_starts_afresh():
    query = hw.sql(COUNT + " EMIT STREAM", {"S": stream(frame())}, state_ttl="10 minutes")
    assert changes(query) == [
        ("a", 1, False, 0, 0),
        ("a", 1, True, 1, 1),
        ("a", 2, False, 1, 2),
        ("b", 1, False, 2, 0),
        ("b", 1, True, 6, 1),
        ("b", 2, False, 6, 2),
        ("a", 2, True, 11, 3),  # a's state expires 10 minutes after its last row
        ("b", 2, True, 11, 3),
        ("b", 3, False, 11, 4),
        ("a", 1, False, 15, 0),  # a fresh count, numbered from 0 again
        ("b", 3, True, 16, 5),
        ("b", 4, False, 16, 6),
        ("b", 4, True, 21, 7),
        ("b", 5, False, 21, 8),
    ]


def test_table_views_with_and_without_ttl():
    table = hw.sql(COUNT, {"S": stream(frame())}, state_ttl="10 minutes")
    assert view(table, 10.5) == {"a": 2, "b": 2}
    assert view(table, 11) == {"b": 3}  # a expired: withdrawn, not kept stale
    assert view(table) == {"a": 1, "b": 5}  # the active key keeps its full count
    unbounded = hw.sql(COUNT, {"S": stream(frame())})
    bounded = hw.sql(COUNT, {"S": frame().drop(columns=["arrival"])})
    assert view(unbounded) == view(bounded) == {"a": 3, "b": 5}
    assert view(unbounded, 11) == {"a": 2, "b": 3}


def reference(data: pd.DataFrame, ttl: int, minute: float) -> dict[str, int]:
    """Per key, the rows since its state last (re)started, for the keys not expired
    at ``minute``: a key's rows split where one follows the last after ``ttl`` or
    more; its state is live while ``minute`` < its last row + ``ttl``."""
    out = {}
    for key, rows in data[data["arrival"] <= at(minute)].groupby("k"):
        t = np.sort(rows["arrival"].to_numpy("datetime64[ms]").astype(np.int64))
        starts = np.flatnonzero(np.r_[True, np.diff(t) >= ttl])
        if ms(minute) < t[-1] + ttl:
            out[key] = len(t) - starts[-1]
    return out


@pytest.mark.parametrize("seed", [3, 11])
def test_random_replays_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    minutes = np.sort(rng.integers(0, 60, 40)).astype(float)
    rows = list(zip(minutes, rng.choice(list("abcd"), len(minutes)), strict=True))
    data = frame(rows)
    ttl = 7 * 60_000
    query = hw.sql(COUNT, {"S": stream(data)}, state_ttl="7 minutes")
    run = query.run(None)
    expired = 0
    for minute in range(0, int(minutes.max()) + 1, 3):
        got = run.table(ms(minute))
        expected = reference(data, ttl, minute)
        assert dict(zip(got["k"], got["n"], strict=True)) == expected, minute
        arrived = data[data["arrival"] <= at(minute)]["k"].value_counts().to_dict()
        expired += expected != arrived
    assert expired  # the replay does let keys expire


def test_ttl_in_the_ddl_and_on_the_command_line(tmp_path, capsys):
    steps = [(f"10:{m:02d}", [(f"10:{m:02d}", k)], None) for m, k in ROWS]
    path = write_replay(tmp_path / "s.jsonl", "2024-01-01", steps, "ts", ["ts", "k"])
    ddl = f"""CREATE TABLE S (ts TIMESTAMP, k VARCHAR, WATERMARK FOR ts AS ts)
      WITH ('format' = 'replay', 'path' = '{path}', 'state.ttl' = '10 minutes');"""
    (out,) = run_script(ddl + COUNT)
    assert dict(zip(out["k"], out["n"], strict=True)) == {"a": 1, "b": 5}
    flags = ["--replay", f"S={path}", "--event-time", "S.ts", "--format", "csv"]
    assert main([COUNT, *flags, "--state-ttl", "10 minutes"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["a,1", "b,5"]
    assert main([COUNT, *flags]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["a,3", "b,5"]
    assert main([COUNT, *flags, "--state-ttl", "forever"]) == 2
    assert "--state-ttl: cannot read 'forever' as a duration" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("'state.ttl' = 'soon'", "option 'state.ttl': cannot read 'soon' as a duration"),
        ("'state.ttl' = '0 seconds'", "option 'state.ttl' must be a positive duration"),
        ("'state.tll' = '1 hour'", "unknown table option 'state.tll'"),
    ],
)
def test_bad_ddl_options_are_refused_naming_them(tmp_path, option, message):
    path = write_replay(tmp_path / "s.jsonl", "2024-01-01", [], "ts", ["ts", "k"])
    ddl = f"""CREATE TABLE S (ts TIMESTAMP, k VARCHAR, WATERMARK FOR ts AS ts)
      WITH ('format' = 'replay', 'path' = '{path}', {option});"""
    with pytest.raises(SqlError, match=message) as info:
        list(run_script(ddl + COUNT))
    assert info.value.line == 2
    if "tll" in option:
        assert "Did you mean 'state.ttl'?" in str(info.value)


@pytest.mark.parametrize(("value", "message"), [("soon", "cannot read"), (0, "positive")])
def test_bad_python_option_is_refused_naming_it(value, message):
    with pytest.raises(SqlError, match=f"state_ttl.*{message}"):
        hw.sql(COUNT, {"S": stream(frame())}, state_ttl=value)


def test_explain_says_what_bounds_the_state():
    bounded = hw.sql(COUNT, {"S": stream(frame())}, state_ttl="1 hour").explain()
    assert "maintenance: key s.k: state bounded by state.ttl = INTERVAL '1' HOUR" in bounded
    grows = hw.sql(COUNT, {"S": stream(frame())}).explain()
    assert "state grows with the distinct values of s.k" in grows
    total = hw.sql("SELECT COUNT(*) AS n FROM S", {"S": stream(frame())}, state_ttl="1 hour")
    assert "no key (one group of every row): state bounded by state.ttl" in total.explain()
    windowed = hw.sql(
        "SELECT wstart, COUNT(*) AS n FROM Tumble(TABLE S, DESCRIPTOR(ts), INTERVAL '5' MINUTE) "
        "GROUP BY wstart",
        {"S": stream(frame())},
        state_ttl="1 hour",
    ).explain()
    assert "state freed by the watermark (state.ttl = INTERVAL '1' HOUR does not apply)" in windowed


def test_a_join_needs_one_ttl_for_both_streams(tmp_path):
    path = write_replay(tmp_path / "s.jsonl", "2024-01-01", [], "ts", ["ts", "k"])
    tables = [
        f"""CREATE TABLE {name} (ts TIMESTAMP, k VARCHAR, WATERMARK FOR ts AS ts)
      WITH ('format' = 'replay', 'path' = '{path}'{ttl});"""
        for name, ttl in (("S", ", 'state.ttl' = '1 hour'"), ("T", ""))
    ]
    join = "\nSELECT S.k, COUNT(*) AS n FROM S JOIN T ON S.k = T.k GROUP BY S.k"
    with pytest.raises(SqlError, match="'S' declares 'state.ttl' but 'T' does not") as info:
        list(run_script("\n".join(tables) + join))
    assert info.value.line == 5
    assert "Declare 'state.ttl' on 'T' too" in str(info.value)


TTL = "10 minutes"
#: The replays of the cases above (and a join of two streams), as ``(query, rows
#: of each stream)``: on Spark they give the local changelog, ptime and ver included.
JOIN = "SELECT S.k, COUNT(*) AS n FROM S JOIN T ON S.k = T.k GROUP BY S.k EMIT STREAM"
#: Key c: a row at the very instant its state expires (10), then one later.
AT_EXPIRY = [(0, "c"), (10, "c"), (25, "c")]
SPARK_CASES = {
    "expiry and re-arrival, a key still active, a row at the instant of expiry": (
        COUNT + " EMIT STREAM",
        {"S": sorted(ROWS + AT_EXPIRY)},
    ),
    "one group": (
        "SELECT COUNT(*) AS n FROM S EMIT STREAM",
        {"S": [(0, "a"), (3, "b"), (20, "a")]},
    ),
    "a join": (
        JOIN,
        {"S": [(0, "a"), (2, "b"), (12, "a")], "T": [(1, "a"), (3, "b"), (13, "a"), (20, "a")]},
    ),
}


def normal(log: pd.DataFrame) -> pd.DataFrame:
    """A changelog in the order of its consumers, with plain column types."""
    log = log.sort_values(["ptime", "ver", "undo"], ascending=[True, True, False], kind="stable")
    return log.reset_index(drop=True).astype({"n": np.int64, "ver": np.int64})


def spark_tables(case: str) -> dict:
    return {name: stream(frame(part)) for name, part in SPARK_CASES[case][1].items()}


@pytest.fixture(scope="module")
def spark_replays(spark) -> dict:
    """case -> (its query on Spark, that query's changelog): the cases' replays run
    at once in the one SparkSession (most of a run is waiting on a micro-batch)."""

    def job(case: str):
        def run():
            query = hw.sql(SPARK_CASES[case][0], spark_tables(case), runner="spark", state_ttl=TTL)
            return query, query.changelog()

        return run

    return spark_runs(spark, {case: job(case) for case in SPARK_CASES}, workers=len(SPARK_CASES))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", list(SPARK_CASES))
def test_spark_replay_gives_the_local_changelog(spark_replays, case):
    on_spark, changelog = result(spark_replays, case)
    local = hw.sql(SPARK_CASES[case][0], spark_tables(case), state_ttl=TTL)
    assert on_spark.explain() == local.explain()
    expected = normal(local.changelog())
    assert expected["undo"].sum() > 1  # withdrawals of expired state are in it
    pd.testing.assert_frame_equal(normal(changelog), expected)


def test_a_row_at_the_instant_of_expiry_continues_the_numbering():
    """Expired and started again in one step: the withdrawal comes before the add in
    ``ptime, ver`` order, as the sinks apply a changelog."""
    query = hw.sql(COUNT + " EMIT STREAM", {"S": stream(frame(AT_EXPIRY))}, state_ttl="10 minutes")
    assert changes(query) == [
        ("c", 1, False, 0, 0),
        ("c", 1, True, 10, 1),  # expired at 10 ...
        ("c", 1, False, 10, 2),  # ... and started again by the row of 10
        ("c", 1, True, 20, 3),
        ("c", 1, False, 25, 0),  # a fresh start later: numbered from 0
    ]


def _write_keys(directory, i: int, keys: list[str]):
    """A Parquet file of rows of ``keys`` (event times: minutes 0, 1, ...)."""
    rows = pd.DataFrame({"ts": [at(m) for m in range(len(keys))], "k": keys})
    path = directory / f"part-{i:03d}.parquet"
    rows.to_parquet(path, coerce_timestamps="us")
    return path


@pytest.mark.spark
@pytest.mark.slow
def test_a_live_spark_stream_withdraws_idle_keys_at_a_micro_batch(spark, tmp_path):
    """Files arriving in a directory, a 2-second TTL: a run reads the first file,
    then (more than the TTL later) a restart from its checkpoint reads two more,
    one a micro-batch. The first of these withdraws every key, those with no row
    in it too (the idle times outlived the restart); a key with a row in it
    starts afresh, numbering on; a key back in the next batch starts at ver 0."""
    from headwater.io.arrival import in_arrival_order
    from headwater.model.watermarks import BoundedOutOfOrderness
    from headwater.sql.execute.spark import SparkSqlQuery
    from headwater.sql.plan.catalog import Table

    files = tmp_path / "in"
    files.mkdir()
    batches: dict[int, pd.DataFrame] = {}

    def run() -> None:
        df = spark.readStream.schema("ts TIMESTAMP, k STRING").option("maxFilesPerTrigger", 1)
        stream = df.parquet(str(files))
        table = Table(
            "S", spark=stream, event_time="ts", watermark=BoundedOutOfOrderness(3_600_000)
        )
        query = SparkSqlQuery(COUNT, {"S": table}, spark=spark, state_ttl="2 seconds")
        query.start(
            checkpoint_location=str(tmp_path / "checkpoint"),
            sink=lambda batch, batch_id: batches.setdefault(batch_id, batch.toPandas()),
            trigger={"availableNow": True},
            end_of_input=False,
        ).awaitTermination()

    def rows(batch: pd.DataFrame) -> set[tuple]:
        return set(zip(batch["k"], batch["n"], batch["undo"], batch["ver"], strict=True))

    _write_keys(files, 0, ["a", "a", "b", "c", "d"])
    run()
    (first,) = [b for b in batches.values() if len(b)]  # then a no-data batch, maybe
    started = {("a", 2, False, 0), ("b", 1, False, 0), ("c", 1, False, 0), ("d", 1, False, 0)}
    assert rows(first) == started
    before = set(batches)
    time.sleep(2.5)  # idle for longer than the TTL, in processing time
    in_arrival_order([_write_keys(files, 1, ["a"]), _write_keys(files, 2, ["b"])])
    run()
    expired, later = [batches[i] for i in sorted(set(batches) - before) if len(batches[i])]
    assert rows(expired) == {
        ("a", 2, True, 1),
        ("b", 1, True, 1),
        ("c", 1, True, 1),
        ("d", 1, True, 1),
        ("a", 1, False, 2),  # started afresh: the row of this batch only
    }
    gap = expired["ptime"].min() - first["ptime"].max()
    assert gap >= pd.Timedelta(seconds=2)  # at a micro-batch at or after t + TTL
    # b's state and numbering start again (a may expire again before this batch)
    assert {r for r in rows(later) if r[0] == "b"} == {("b", 1, False, 0)}


def test_idle_keys_outlive_a_snapshot():
    """The idle times a Spark shard keeps in its state store: a restored snapshot
    expires the same keys at the same times."""
    idle = IdleKeys(10)
    idle.touch(np.array(["a", "b", "a"], dtype=object), 0)
    idle.touch(np.array([7], dtype=object), 5)
    again = IdleKeys.restore(10, idle.snapshot())
    assert list(again.expired(9)) == []
    assert sorted(map(str, again.expired(10))) == ["a", "b"]
    assert list(again.expired(15)) == [7]
    assert not len(IdleKeys.restore(10, None).last)
