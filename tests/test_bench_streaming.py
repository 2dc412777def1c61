"""`headwater bench streaming` at a tiny size: the report's shape and that both
engines computed the same windows, never its timings."""

from __future__ import annotations

import json

import pytest

from headwater.runners.spark.session import restore_conf

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Runtime SQL settings the benchmark applies to the (shared) session.
_TOUCHED = (
    "spark.sql.shuffle.partitions",
    "spark.sql.execution.arrow.maxRecordsPerBatch",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
)


def test_bench_streaming_json(spark, tmp_path, capsys):
    from headwater.bench import main as bench_main

    saved = {k: spark.conf.get(k, None) for k in _TOUCHED}
    try:
        # No late events: Spark's native query accepts rows one micro-batch
        # longer than rule 3 does (it filters them against the previous batch's
        # watermark), so only on-time data makes both engines' windows equal.
        assert (
            bench_main(
                [
                    "streaming",
                    "--rows",
                    "20000",
                    "--keys",
                    "50",
                    "--files",
                    "4",
                    "--files-per-trigger",
                    "2",
                    "--late-fraction",
                    "0",
                    "--repeat",
                    "1",
                    "--no-warmup",
                    "--json",
                    "--workdir",
                    str(tmp_path),
                ]
            )
            == 0
        )
    finally:
        restore_conf(spark, saved)
        spark.sparkContext.setLogLevel("WARN")  # the bench quiets the shared session
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 20000
    (result,) = report["results"]
    native, hw = result["native"], result["headwater"]
    # The same work: one pane per (key, window) on both sides.
    assert hw["metrics"]["headwater.panes"] == native["output_rows"] > 0
    assert hw["metrics"]["headwater.dropped"] == 0
    assert hw["output_rows"] == native["output_rows"]
    for engine in (native, hw):
        assert engine["rows_per_s"] > 0 and engine["batches"] >= 2
        assert engine["first_batch_s"] > 0 and engine["steady_s"] > 0
        # The first batch's Spark phases, its planning among them.
        phases = engine["first_batch_ms"]
        assert phases["triggerExecution"] == round(engine["first_batch_s"] * 1000)
        assert "queryPlanning" in phases and "addBatch" in phases
        assert engine["cpu_s"] > 0  # the JVM's and the workers' CPU, not only the driver's
    assert result["ratio"] > 0 and result["steady_ratio"] > 0
    assert report["ratio"] > 0
