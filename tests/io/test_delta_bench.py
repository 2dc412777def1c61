"""`headwater bench delta` on a tiny changelog: both MERGE paths (deltalake and
Delta's Spark connector) run and leave equal tables, and a replayed batch adds
no version (structure and agreement only; timings are never asserted)."""

from __future__ import annotations

import json

import pytest

from headwater.bench import delta as bench_delta
from headwater.io.sinks.delta import cached_delta_jars

pytestmark = pytest.mark.spark


def test_bench_delta_merges_agree(spark, capsys):
    if cached_delta_jars() is None:
        pytest.fail("Delta's Spark connector is not resolved: run bash scripts/kafka.sh delta-jars")
    argv = ["--batches", "2", "--keys", "20", "--no-warmup", "--json"]
    assert bench_delta.main(argv, spark=spark) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tables_agree"], report["rows"]
    # Batch 1 retracts window 0 of every tenth key: 20 + 20 - 2 windows remain.
    assert report["rows"] == {"deltalake": 38, "spark": 38}
    # A table created at version 0, one commit per batch, the replay skipped.
    assert report["versions"] == {"deltalake": 2, "spark": 2}
    assert report["ratio"] > 0


def test_spark_merge_sql_of_a_multiset_adds_counts():
    import pyarrow as pa

    from headwater.io.sinks.delta import COUNT, DELETE, StagedBatch

    rows = pa.table({"__row": [1], "x": [5], COUNT: [2], DELETE: [False]})
    sql = bench_delta.merge_sql(StagedBatch(rows, ("__row",), COUNT), "/t", "s_view")
    assert "ON t.`__row` <=> s.`__row`" in sql
    assert "WHEN MATCHED AND t.`__n` + s.`__n` <= 0 THEN DELETE" in sql
    assert "INSERT (`__row`, `x`, `__n`) VALUES (s.`__row`, s.`x`, s.`__n`)" in sql


def test_spark_merge_sql_bounds_the_target_as_deltasink_does():
    import pyarrow as pa

    from headwater.io.sinks.delta import DELETE, StagedBatch

    ts = pa.timestamp("us", tz="UTC")
    rows = pa.table(
        {
            "key": ["a", "b"],
            "window_start": pa.array([0, 10_000_000], ts),
            "pane_index": [0, 0],
            DELETE: [False, False],
        }
    )
    sql = bench_delta.merge_sql(StagedBatch(rows, ("key", "window_start"), "pane_index"), "/t", "s")
    low, high = "'1970-01-01T00:00:00+00:00'", "'1970-01-01T00:00:10+00:00'"
    assert f"ON (t.`window_start` >= {low}) AND (t.`window_start` <= {high}) AND " in sql
    assert "t.`key` <=> s.`key`" in sql and "`key` >=" not in sql
