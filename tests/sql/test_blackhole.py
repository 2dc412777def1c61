"""The ``'connector' = 'blackhole'`` sink (headwater/sql/execute/blackhole_tables.py):
it takes a query's whole changelog, additions and withdrawals, and counts it, on
the local runner and on every Spark path, without collecting a row on Spark."""

from __future__ import annotations

import glob
import json
import os

import pyarrow.parquet as pq
import pytest

from headwater.bench import nexmark as bench
from headwater.io.sinks.blackhole import BlackholeSink, noop_count
from headwater.sql.errors import SqlError
from headwater.sql.script import run_script

SOURCE = (
    "CREATE TABLE bid (auction BIGINT, price BIGINT, `dateTime` TIMESTAMP(3),"
    " WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND)"
    " WITH ('format' = 'replay', 'path' = '{path}');\n"
)


def _changelog_rows(directory) -> tuple[int, int]:
    """Rows and withdrawals of a ``'format' = 'changelog'`` sink's directory."""
    tables = [pq.read_table(f) for f in glob.glob(f"{directory}/**/*.parquet", recursive=True)]
    rows = sum(t.num_rows for t in tables)
    return rows, sum(t.column("undo").to_pylist().count(True) for t in tables)


def _counts(name: str, args, data, work, spark: bool = False) -> tuple[int, int, int]:
    """The query's changelog rows and withdrawals (a changelog sink), and what a
    blackhole counted of the same query (on Spark: checkpoints ``cp-log``, ``cp-hole``)."""
    text = bench.script(name, args, data, work / "unused.duckdb")
    log = work / f"log-{name}"
    logged = bench.blackholed(text).replace(
        "('connector' = 'blackhole')", f"('format' = 'changelog', 'path' = '{log}')"
    )
    log_options = {"checkpoint": str(work / "cp-log")} if spark else {}
    list(run_script(logged, runner=args.runner, **log_options))
    sinks: dict = {}
    options = {"checkpoint": str(work / "cp-hole")} if spark else {}
    list(run_script(bench.blackholed(text), runner=args.runner, sinks=sinks, **options))
    return (*_changelog_rows(log), sinks[f"nexmark_{name}"].rows)


def test_blackhole_counts_the_whole_changelog_on_the_local_runner(tmp_path):
    args = bench.parse_args(["--events", "600", "--runner", "local"])
    _, data = bench.prepare(args, tmp_path, ["headwater"])
    for name in ("q1", "q4", "q19"):
        rows, undone, counted = _counts(name, args, data, tmp_path)
        assert counted == rows > 0, name
        if name != "q1":
            assert undone > 0, name  # withdrawals are counted too


def test_blackhole_options_and_use_as_a_source(tmp_path):
    source = SOURCE.format(path=tmp_path / "bid.jsonl")
    (tmp_path / "bid.jsonl").write_text("")
    bad = "CREATE TABLE s (auction BIGINT) WITH ('connector' = 'blackhole', 'path' = '/x');\n"
    with pytest.raises(SqlError, match="unknown option 'path'"):
        list(run_script(source + bad + "INSERT INTO s SELECT auction FROM bid;"))
    watermarked = (
        "CREATE TABLE s (t TIMESTAMP(3), WATERMARK FOR t AS t - INTERVAL '1' SECOND)"
        " WITH ('connector' = 'blackhole');\n"
    )
    with pytest.raises(SqlError, match="is a sink"):
        list(run_script(watermarked + "SELECT t FROM s;"))
    hole = "CREATE TABLE s (auction BIGINT) WITH ('connector' = 'blackhole');\n"
    with pytest.raises(SqlError):  # declared as a sink: no query reads it
        list(run_script(source + hole + "SELECT auction FROM s;"))


def test_bench_sink_option_replaces_the_sink_and_counts_its_rows(capsys, tmp_path):
    argv = ["--queries", "q1,q4", "--events", "300", "--json", "--warmup-events", "0"]
    assert bench.main([*argv, "--workdir", str(tmp_path / "t")]) == 0
    table = json.loads(capsys.readouterr().out)["queries"]
    assert bench.main([*argv, "--sink", "blackhole", "--workdir", str(tmp_path / "b")]) == 0
    hole = json.loads(capsys.readouterr().out)["queries"]
    assert hole["q1"]["headwater"]["rows"] == table["q1"]["headwater"]["rows"] > 0
    # q4 withdraws rows: the blackhole counts the changelog, the table its final rows
    assert hole["q4"]["headwater"]["rows"] > table["q4"]["headwater"]["rows"] > 0
    assert not (tmp_path / "b" / "q1-local.duckdb").exists()
    text = bench.script("q0", bench.parse_args(["--sink", "blackhole"]), tmp_path, tmp_path)
    assert "'connector' = 'blackhole'" in text and "'format' = 'table'" not in text


@pytest.mark.spark
def test_noop_count_computes_every_column(spark):
    """``count()`` prunes a column it does not need; the noop write computes it."""
    from pyspark.sql import functions as F

    df = spark.range(5).select("id", F.when(F.col("id") > 2, F.raise_error("computed")).alias("x"))
    assert df.count() == 5  # pruned: x is never evaluated
    with pytest.raises(Exception, match="computed"):
        noop_count(df)
    assert noop_count(df.where("id <= 2")) == 3
    sink = BlackholeSink()
    sink(spark.range(4), 0)
    sink(spark.range(4), 0)  # the same batch again: counted once
    sink(spark.range(2).toPandas(), 1)
    assert sink.rows == 6


#: A windowed aggregate (the fast path, headwater/sql/execute/aggregate_spark.py) as a
#: query of the harness (its sink named as theirs, so that the bench can replace it).
WINDOWED = """
CREATE TABLE nexmark_q0 (window_start TIMESTAMP(3), window_end TIMESTAMP(3), bids BIGINT)
  WITH ('format' = 'table', 'path' = '${SINK}');
INSERT INTO nexmark_q0
SELECT window_start, window_end, COUNT(*) AS bids FROM TABLE(
  TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
GROUP BY window_start, window_end;
"""


def _windowed_queries(tmp_path):
    """A query directory: the harness's ddl.sql and :data:`WINDOWED` as q0."""
    queries = tmp_path / "queries"
    queries.mkdir()
    (queries / "ddl.sql").write_text((bench.QUERY_DIR / "ddl.sql").read_text())
    (queries / "q0.sql").write_text(WINDOWED)
    return str(queries)


def test_a_windowed_aggregate_takes_the_fast_path(tmp_path):
    args = bench.parse_args(["--events", "600", "--query-dir", _windowed_queries(tmp_path)])
    _, data = bench.prepare(args, tmp_path, ["headwater"])
    explained = []
    import headwater.sql.script as script

    real = script.bind

    def bind(*a, **k):
        query = real(*a, **k)
        explained.append(query.explain())
        return query

    script.bind = bind
    try:
        rows, _, counted = _counts("q0", args, data, tmp_path)
    finally:
        script.bind = real
    assert counted == rows > 0
    assert all("runs on: fast path" in e for e in explained), explained


def _versions(checkpoint) -> dict[str, tuple]:
    """The version counts the stateless path kept per batch in its checkpoint:
    (counts, horizon, numbered) by batch id."""
    folder = glob.glob(f"{checkpoint}/*/headwater-stateless")[0]
    kept = {}
    for name in filter(str.isdigit, os.listdir(folder)):
        with open(os.path.join(folder, name), encoding="utf-8") as fh:
            data = json.loads(fh.read())
        kept[name] = (data["counts"], data["horizon"], data.get("numbered", True))
    return kept


@pytest.mark.spark
@pytest.mark.slow
def test_blackhole_on_spark_counts_every_path(spark, tmp_path):
    """On Spark streams (a few micro-batches): the stateless path (its changes not
    collected, without ``ver``, so no counts kept for the next batches), the shard
    operator and a query in stages, each counting what a changelog sink receives."""
    args = bench.parse_args(["--events", "600", "--events-per-file", "150", "--runner", "spark"])
    _, data = bench.prepare(args, tmp_path, ["headwater"])
    for name in ("q1", "q4", "q19"):
        work = tmp_path / name
        work.mkdir()
        rows, _, counted = _counts(name, args, data, work, spark=True)
        assert counted == rows > 0, name
        if name == "q1":
            hole, log = _versions(work / "cp-hole"), _versions(work / "cp-log")
            assert hole.keys() == log.keys() and hole
            assert all(not c and not n for c, _, n in hole.values())
            assert all(n for _, _, n in log.values()) and any(c for c, _, _ in log.values())
    windowed = ["--query-dir", _windowed_queries(tmp_path), "--events-per-file", "150"]
    args = bench.parse_args(["--events", "600", "--runner", "spark", *windowed])
    work = tmp_path / "windowed"
    work.mkdir()
    rows, _, counted = _counts("q0", args, data, work, spark=True)
    assert counted == rows > 0


def test_counts_kept_after_a_batch_end_at_its_largest_event_time_less_the_delay():
    """Spark's next watermark is at least a batch's largest event time less the delay:
    the instants at or below it are late in every later batch, so their counts are
    neither kept nor written (a first batch has no watermark to bound them)."""
    import pyarrow as pa

    from headwater.model.time import MIN_TIMESTAMP
    from headwater.sql.execute.stateless_spark import kept_from, tally
    from headwater.sql.plan.stateless import EVENT_TIME

    table = pa.table({EVENT_TIME: pa.array([1000, 5000, 9000, 9000, None, 9500], pa.int64())})
    floor = kept_from(MIN_TIMESTAMP, 9500, 1000)
    assert floor == 8500
    assert tally(table, floor, 0) == {9000: 2, 9500: 1}
    assert tally(table, floor, 4000) == {5000: 1, 9000: 2, 9500: 1}  # lateness keeps more
    assert kept_from(MIN_TIMESTAMP, 500, 1000) == MIN_TIMESTAMP  # no watermark would follow
    assert kept_from(9000, 9500, 1000) == 9000  # never below the batch's own
