"""The hybrid model as SQL source options (docs/sql.md, "Very late data").

* K-slack watermarks (``'watermark' = 'k-slack' | 'mp-k-slack' | 'quality'``):
  a query gives the panes, times and dead letters of the equivalent fluent
  pipeline on a generated stream; the quality-driven one takes its windows and
  aggregate from the query and estimates the rest as the HPM experiment does;
  a script's options equal the Python objects;
* corrections (``'correction.archive'``): the final table is the bounded query
  over all the input (without them, over the rows not dropped), the changelog
  adds up to it, ``ver`` runs 0..n-1 per group, and a run up to a processing
  time is a prefix of the whole run;
* the errors, and the Spark runner: a replay's K-slack watermark gives the
  local runner's changelog; what Spark does not do is refused by name.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.hybrid.generator import generate, profile
from headwater.hybrid.pipeline import (
    BATCH_TIME,
    Query,
    estimate_requirement,
    quality_driven,
    with_batches,
)
from headwater.model.slack import FixedSlack, MaxDelaySlack
from headwater.sql import Corrections, QualityWatermark, SqlError
from headwater.sql.execute.hybrid import quality_driven as resolved
from headwater.sql.execute.hybrid import watermark_option
from headwater.sql.execute.local import run_bounded
from headwater.sql.execute.watermarks import watermark_after_steps
from headwater.sql.parse.ddl import source_def
from headwater.sql.parse.dialect import parse
from headwater.sql.plan.catalog import PTIME, Table, as_replay
from headwater.sql.plan.quality import QualityQuery
from headwater.sql.script import run_script

QUERY = Query()  # SUM(speed) per sensor over 0.5 s windows every 0.1 s; 100 ms batches
HOP = """
SELECT wstart, wend, sensor, SUM(speed) AS total
FROM Hop(TABLE(S), DESCRIPTOR(ts), INTERVAL '500' MILLISECOND, INTERVAL '100' MILLISECOND)
GROUP BY wstart, wend, sensor
EMIT STREAM AFTER WATERMARK"""


def _generated(events: int, seed: int = 1) -> pd.DataFrame:
    """A game1-like stream in arrival order, integer ms times, with its batch time."""
    return with_batches(generate(profile("game1"), events=events, seed=seed), QUERY)


def _timed(stream: pd.DataFrame) -> pd.DataFrame:
    return stream.assign(ts=pd.to_datetime(stream["ts"], unit="ms"))


@pytest.fixture(scope="module")
def stream() -> pd.DataFrame:
    return _generated(20_000)


def _source(stream: pd.DataFrame, watermark) -> object:
    return hw.from_pandas(
        _timed(stream), event_time="ts", arrival_time=BATCH_TIME, watermark=watermark
    )


def _fluent(stream: pd.DataFrame, strategy):
    """The fluent pipeline's panes and dead letters. Its input ends in a step of its
    own at the last arrival time; a SQL replay ends in its last step, at that time."""
    agg = (
        _source(stream, strategy)
        .window(hw.SlidingWindows(0.5, 0.1))
        .group_by("sensor")
        .agg(total=hw.sum("speed"))
    )
    out = agg._run_local()
    steps = np.unique(stream[BATCH_TIME])
    panes = out.panes
    frame = pd.DataFrame(
        {
            "wstart": panes["window_start"].to_numpy(),
            "wend": panes["window_end"].to_numpy(),
            "sensor": panes["sensor"].to_numpy(np.int64),
            "total": panes["total"].to_numpy(np.int64),
            "ptime": steps[np.minimum(panes["step"].to_numpy(np.int64), len(steps) - 1)],
        }
    )
    return _sorted(frame), _letters(out.dropped)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def _letters(dead: pd.DataFrame) -> pd.Series:
    """How many dead letters each (window, sensor) got."""
    key = dead[["window_start", "window_end", "sensor"]].astype({"sensor": np.int64})
    return key.value_counts().sort_index()


def _sql(stream: pd.DataFrame, watermark):
    query = hw.sql(HOP, tables={"S": _source(stream, watermark)})
    log = query.changelog()
    assert not log["undo"].any() and (log["ver"] == 0).all()  # one on-time result each
    frame = pd.DataFrame(
        {
            "wstart": log["wstart"].to_numpy(),
            "wend": log["wend"].to_numpy(),
            "sensor": log["sensor"].to_numpy(np.int64),
            "total": log["total"].to_numpy(np.int64),
            "ptime": log["ptime"].to_numpy("datetime64[ms]").astype(np.int64),
        }
    )
    return query, _sorted(frame), _letters(query.dead_letters())


def _requirement(stream: pd.DataFrame):
    return estimate_requirement(stream, QUERY, 0.05, 0.05)


@pytest.mark.parametrize("kind", ["k-slack", "mp-k-slack", "quality"])
def test_a_k_slack_watermark_gives_the_fluent_pipelines_results(stream, kind):
    req = _requirement(stream)
    strategy, option = {
        "k-slack": (FixedSlack(40), FixedSlack(40)),
        "mp-k-slack": (MaxDelaySlack(), MaxDelaySlack()),
        "quality": (
            quality_driven(req, QUERY, 0.2, 4.0),
            QualityWatermark(0.05, 0.05, window_tuples=req.window_tuples, value_cv=req.value_cv),
        ),
    }[kind]
    query, panes, letters = _sql(stream, option)
    planned = query.plan.streams[0]
    if kind == "quality":  # planned from the text, estimated from the rows when it runs
        assert isinstance(planned.watermark, QualityQuery)
        planned = replace(planned, watermark=resolved(planned))
    assert planned.watermark == strategy  # the query's windows and SUM
    expected_panes, expected_letters = _fluent(stream, strategy)
    assert len(panes) > 300
    pd.testing.assert_frame_equal(panes, expected_panes)
    pd.testing.assert_series_equal(letters, expected_letters)
    if kind != "mp-k-slack":
        assert letters.sum() > 0  # a buffer below the largest delay drops some rows


def test_the_quality_driven_watermark_estimates_as_the_experiment_does(stream):
    query = hw.sql(HOP, tables={"S": _source(stream, QualityWatermark(0.05, 0.05))})
    driven = resolved(query.plan.streams[0])
    assert driven == quality_driven(_requirement(stream), QUERY, 0.2, 4.0)
    # Several aggregates: the strictest one's threshold (MAX needs full coverage).
    both = HOP.replace("SUM(speed) AS total", "SUM(speed) AS total, MAX(speed) AS top")
    query = hw.sql(both, tables={"S": _source(stream, QualityWatermark(0.05, 0.05))})
    assert resolved(query.plan.streams[0]).lambda_thr == 1.0


def _replay_file(stream: pd.DataFrame, path) -> None:
    rows = _timed(stream)[["sensor", "ts", "speed"]]
    rows = rows.assign(ts=rows["ts"].dt.strftime("%Y-%m-%dT%H:%M:%S.%f").str[:-3])
    lines = pd.DataFrame({"ptime": stream[BATCH_TIME], "row": rows.to_dict("records")})
    lines.to_json(path, orient="records", lines=True)


SCRIPT = """
CREATE TABLE S (sensor BIGINT, ts TIMESTAMP, speed BIGINT, WATERMARK FOR ts AS ts)
WITH ('format' = 'replay', 'path' = '{path}', {options});
{query};
"""


def test_a_scripts_options_are_the_python_strategies(tmp_path):
    small = _generated(4_000)
    path = tmp_path / "s.jsonl"
    _replay_file(small, path)
    options = "'watermark' = 'quality', 'quality.eps' = '0.05', 'quality.delta' = '0.05'"
    (result,) = run_script(SCRIPT.format(path=path, options=options, query=HOP))
    _, expected, _ = _sql(small, QualityWatermark(0.05, 0.05))
    got = result.assign(
        sensor=result["sensor"].astype(np.int64),
        total=result["total"].astype(np.int64),
        ptime=result["ptime"].to_numpy("datetime64[ms]").astype(np.int64),
    )
    pd.testing.assert_frame_equal(_sorted(got[list(expected.columns)]), expected)


@pytest.mark.parametrize(
    ("options", "strategy"),
    [
        ("'watermark' = 'k-slack', 'slack' = '2 seconds'", FixedSlack(2000)),
        ("'watermark' = 'K-Slack'", FixedSlack(5000)),  # WATERMARK FOR's delay
        ("'watermark' = 'mp-k-slack'", MaxDelaySlack()),
        (
            "'watermark' = 'quality', 'quality.eps' = '0.1', 'quality.delta' = '0.02', "
            "'quality.kd' = '2', 'quality.window_tuples' = '50', 'quality.value_cv' = '0.5'",
            QualityWatermark(0.1, 0.02, kd=2.0, window_tuples=50, value_cv=0.5),
        ),
        ("'allowed_lateness' = '1 second'", None),
    ],
)
def test_watermark_options(options, strategy):
    (create,) = parse(
        "CREATE TABLE S (ts TIMESTAMP, v BIGINT, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
        f"WITH ('format' = 'replay', 'path' = 'x', {options})"
    )
    assert watermark_option(source_def(create)) == strategy


# ------------------------------------------------------------------ corrections

TUMBLE = """
SELECT wstart, wend, sensor, SUM(speed) AS total, COUNT(*) AS n
FROM Tumble(TABLE(S), DESCRIPTOR(ts), INTERVAL '1' SECOND)
GROUP BY wstart, wend, sensor"""
HOP_TABLE = HOP.replace("EMIT STREAM AFTER WATERMARK", "EMIT AFTER WATERMARK")
# The general path (a join): speeds per zone of the pitch, a bounded table.
ZONES = """
SELECT wstart, wend, zone, SUM(speed) AS total, COUNT(*) AS n
FROM Tumble(TABLE(S), DESCRIPTOR(ts), INTERVAL '1' SECOND) s JOIN Zones z ON s.sensor = z.sensor
GROUP BY wstart, wend, zone"""
ZONE_TABLE = pd.DataFrame({"sensor": np.arange(16), "zone": np.arange(16) % 4})
GROUPS = {TUMBLE: ["wstart", "wend", "sensor"], HOP_TABLE: ["wstart", "wend", "sensor"]}
GROUPS[ZONES] = ["wstart", "wend"]  # the general path's groups are windows


def _table(stream: pd.DataFrame, correction: Corrections | None) -> Table:
    frame = as_replay(_timed(stream)[["sensor", "ts", "speed", BATCH_TIME]], BATCH_TIME)
    return Table("S", frame=frame, event_time="ts", watermark=FixedSlack(20), correction=correction)


def _normal(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in one order, numbers as float (DuckDB's SUM is a HUGEINT)."""
    types = {c: np.float64 for c in frame.columns if c in ("total", "n", "sensor", "zone")}
    types |= {c: "datetime64[ns]" for c in frame.columns if c in ("wstart", "wend", "ptime")}
    return _sorted(frame.astype(types))


def _net(log: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The changelog applied: each row's additions minus its withdrawals."""
    signed = log[columns].assign(__n=np.where(log["undo"], -1, 1))
    net = signed.groupby(columns, dropna=False)["__n"].sum()
    assert (net >= 0).all()  # nothing withdrawn that was not there
    net = net[net > 0].reset_index()
    return net.loc[net.index.repeat(net["__n"]), columns]


def _dropped_by_tumbling(table: Table, size: int) -> np.ndarray:
    """Rows whose 1-s window had closed when they arrived: the watermark (after the
    step before theirs) at or past the window's end."""
    frame = table.frame
    ptimes = np.unique(frame[PTIME])
    marks = watermark_after_steps(table, ptimes)
    step = np.searchsorted(ptimes, frame[PTIME].to_numpy())
    before = np.where(step > 0, marks[np.maximum(step - 1, 0)], np.iinfo(np.int64).min)
    ms = frame["ts"].to_numpy("datetime64[ms]").astype(np.int64)
    return (ms - ms % size + size) <= before


@pytest.mark.parametrize("sql", [TUMBLE, HOP_TABLE, ZONES], ids=["tumble", "hop", "general"])
def test_corrections_make_the_final_table_exact(stream, tmp_path, sql):
    short = stream.iloc[:12_000]
    plain = hw.sql(sql, tables={"S": _table(short, None), "Zones": ZONE_TABLE})
    corrections = Corrections(str(tmp_path / "archive"), gamma=1000)
    fixed = hw.sql(sql, tables={"S": _table(short, corrections), "Zones": ZONE_TABLE})
    exact = _normal(run_bounded(fixed.plan))
    columns = list(exact.columns)

    dropped = plain.dead_letters()
    plain_view = _normal(plain.to_pandas())
    assert len(dropped) > 50 and len(plain_view)
    if sql == TUMBLE:  # without corrections: the query over the rows not dropped
        table = plain.plan.streams[0]
        lost = _dropped_by_tumbling(table, 1000)
        assert lost.sum() == len(dropped)
        survivors = hw.sql(sql, tables={"S": table.frame[~lost].drop(columns=PTIME)})
        assert not plain_view.equals(exact)
        pd.testing.assert_frame_equal(plain_view, _normal(survivors.to_pandas()))

    view = _normal(fixed.to_pandas())
    if sql == HOP_TABLE:  # AFTER WATERMARK: only windows complete by the end of the input
        done = view[["wstart", "wend"]].drop_duplicates()
        lost = dropped[["window_start", "window_end"]].set_axis(["wstart", "wend"], axis=1)
        assert len(lost.merge(done)) == len(dropped)  # every dead letter's window among them
        exact = _sorted(exact.merge(done))
    pd.testing.assert_frame_equal(view, exact)  # exact: the query over all the input
    log = fixed.changelog()
    pd.testing.assert_frame_equal(_normal(_net(log, columns)), exact)
    versions = log.groupby(GROUPS[sql])["ver"].agg(lambda v: sorted(v) == list(range(len(v))))
    assert versions.all()
    letters = fixed.dead_letters()
    assert len(letters) == len(dropped) and letters["corrected"].all()
    assert (tmp_path / "archive" / "S").is_dir()


def test_a_run_up_to_a_time_is_a_prefix_of_the_whole_run(stream, tmp_path):
    short = stream.iloc[:12_000]
    corrections = Corrections(str(tmp_path / "archive"), gamma=1000)
    query = hw.sql(TUMBLE, tables={"S": _table(short, corrections)})
    whole = query.changelog()
    waiting = 0
    for as_of in np.quantile(short[BATCH_TIME], [0.2, 0.4, 0.6, 0.8]).astype(np.int64):
        part = query.changelog(int(as_of))
        until = whole["ptime"] <= pd.Timestamp(as_of, unit="ms")
        pd.testing.assert_frame_equal(part, whole[until].reset_index(drop=True))
        letters = query.dead_letters(int(as_of))["corrected"]
        waiting += (~letters).sum()  # registered, waiting for Gamma or the end
    assert waiting and query.dead_letters()["corrected"].all()


LATE_BIDS = Path(__file__).resolve().parents[2] / "docs" / "sql" / "late_bids.jsonl"


def test_a_script_corrects_the_papers_late_bid(tmp_path):
    """G (8:08, $7) arrives at 8:22, after its window closed: corrected at the end."""
    options = f"'correction.archive' = '{tmp_path / 'archive'}'"
    script = (
        "CREATE TABLE Bid (bidtime TIMESTAMP, price BIGINT, item VARCHAR, "
        "WATERMARK FOR bidtime AS bidtime) WITH ('format' = 'replay', "
        f"'path' = '{LATE_BIDS}', {options});"
        "SELECT wstart, wend, MAX(price) AS top FROM Tumble(TABLE(Bid), DESCRIPTOR(bidtime), "
        "INTERVAL '10' MINUTE) GROUP BY wstart, wend EMIT STREAM;"
    )
    (log,) = run_script(script)
    last = log[log["ptime"] == pd.Timestamp("2020-04-15 08:22")]
    assert last[["top", "undo", "ver"]].values.tolist() == [[5, True, 5], [7, False, 6]]


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("sql", "options", "message"),
    [
        (
            "SELECT * FROM S",
            "'watermark' = 'quality', 'quality.eps' = '0.05', 'quality.delta' = '0.05'",
            "needs Tumble or Hop windows",
        ),
        (
            TUMBLE.replace("SUM(speed) AS total, COUNT(*) AS n", "STDDEV(speed) AS sd"),
            "'watermark' = 'quality', 'quality.eps' = '0.05', 'quality.delta' = '0.05'",
            "bounds SUM, COUNT, AVG, MIN and MAX",
        ),
        (TUMBLE, "'watermark' = 'quality', 'quality.eps' = '0.05'", "needs quality.delta"),
        (TUMBLE, "'watermark' = 'quality', 'quality.esp' = '0.05'", "unknown option"),
        (TUMBLE, "'quality.eps' = '0.05'", "needs a 'watermark' option"),
        (TUMBLE, "'watermark' = 'bounded'", "unknown watermark 'bounded'"),
        (TUMBLE, "'watermark' = 'mp-k-slack', 'slack' = '1 second'", "'slack' is for"),
        (TUMBLE, "'correction.gamma' = '1 second'", "needs 'correction.archive'"),
        (
            TUMBLE,
            "'watermark' = 'quality', 'quality.eps' = '2', 'quality.delta' = '0.05'",
            "0 < eps < 1",
        ),
    ],
)
def test_errors_name_the_option(tmp_path, sql, options, message):
    path = tmp_path / "s.jsonl"
    _replay_file(_generated(200), path)
    with pytest.raises(SqlError, match=message):
        list(run_script(SCRIPT.format(path=path, options=options, query=sql)))


def test_a_session_query_cannot_be_corrected(stream, tmp_path):
    sessions = "SELECT wstart, wend, COUNT(*) AS n FROM Session(TABLE(S), DESCRIPTOR(ts), "
    sessions += "INTERVAL '1' SECOND) GROUP BY wstart, wend"
    query = hw.sql(sessions, tables={"S": _table(stream.iloc[:500], Corrections(str(tmp_path)))})
    with pytest.raises(SqlError, match="a late row can merge sessions"):
        query.to_pandas()


def test_spark_file_streams_refuse_the_options(tmp_path):
    from headwater.sql.execute.spark import spark_source

    (create,) = parse(
        "CREATE TABLE S (ts TIMESTAMP, v BIGINT, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
        f"WITH ('format' = 'parquet', 'path' = '{tmp_path}', 'watermark' = 'mp-k-slack')"
    )
    with pytest.raises(SqlError, match="'watermark' is not supported on a Spark file stream"):
        spark_source(source_def(create), {})


# ------------------------------------------------------------------ Spark


@pytest.mark.spark
@pytest.mark.slow
def test_a_replays_quality_watermark_on_spark_gives_the_local_changelog(spark):
    small = _generated(3_000)
    source = _source(small, QualityWatermark(0.05, 0.05))
    local = hw.sql(HOP, tables={"S": source})
    on_spark = hw.sql(HOP, tables={"S": source}, runner="spark")
    assert len(local.changelog()) > 20 and len(local.dead_letters())
    pd.testing.assert_frame_equal(_normal(on_spark.changelog()), _normal(local.changelog()))
    pd.testing.assert_series_equal(
        _letters(on_spark.dead_letters()), _letters(local.dead_letters())
    )


@pytest.mark.spark
@pytest.mark.slow
def test_a_replay_corrected_on_spark_gives_the_local_changelog(spark, stream, tmp_path):
    """The stream module on the Spark runner, the same corrections on top."""
    short = stream.iloc[:5_000]  # 16 steps, 31 dead letters
    local = hw.sql(TUMBLE, tables={"S": _table(short, Corrections(str(tmp_path / "a"), 1000))})
    corrected = Corrections(str(tmp_path / "b"), gamma=1000)
    on_spark = hw.sql(TUMBLE, tables={"S": _table(short, corrected)}, runner="spark")
    letters = on_spark.dead_letters()
    assert len(letters) and letters["corrected"].all()
    pd.testing.assert_frame_equal(_normal(on_spark.changelog()), _normal(local.changelog()))


@pytest.mark.spark
@pytest.mark.slow
def test_spark_streams_refuse_corrections_and_k_slack(spark, tmp_path):
    (tmp_path / "in").mkdir()
    stream = spark.readStream.schema("sensor BIGINT, ts TIMESTAMP, speed BIGINT").parquet(
        str(tmp_path / "in")
    )
    spark_table = Table("S", spark=stream, event_time="ts", watermark=MaxDelaySlack())
    query = hw.sql(TUMBLE, tables={"S": spark_table}, runner="spark")
    with pytest.raises(SqlError, match="takes a bounded out-of-orderness only"):
        query.start(checkpoint_location=str(tmp_path / "checkpoint"))
    corrected = replace(spark_table, watermark=None, correction=Corrections(str(tmp_path)))
    query = hw.sql(TUMBLE, tables={"S": corrected}, runner="spark")
    with pytest.raises(SqlError, match="'correction.archive'"):
        query.start(checkpoint_location=str(tmp_path / "checkpoint"))
