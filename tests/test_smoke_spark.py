"""Smoke test: the shared SparkSession runs a shuffle, and streaming state lives in RocksDB."""

import pytest

pytestmark = pytest.mark.spark

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def test_spark_groupby(spark):
    df = spark.createDataFrame([(i % 3, i) for i in range(30)], "k int, v int")
    rows = dict(df.groupBy("k").sum("v").collect())
    assert rows == {k: sum(range(k, 30, 3)) for k in range(3)}
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"


def test_streaming_state_store_is_rocksdb(spark, tmp_path, tmp_checkpoint):
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass") == ROCKSDB_PROVIDER

    src = tmp_path / "in"
    spark.createDataFrame([(i % 2, i) for i in range(10)], "k int, v int").write.json(str(src))
    counts = spark.readStream.schema("k int, v int").json(str(src)).groupBy("k").count()
    query = (
        counts.writeStream.format("memory")
        .queryName("hw_smoke_counts")
        .outputMode("complete")
        .option("checkpointLocation", tmp_checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
        assert query.exception() is None
        progress = query.lastProgress
    finally:
        query.stop()

    assert dict(spark.table("hw_smoke_counts").collect()) == {0: 5, 1: 5}
    # Only the RocksDB provider reports rocksdb* custom metrics for a stateful operator.
    metrics = progress["stateOperators"][0]["customMetrics"]
    assert any(name.startswith("rocksdb") for name in metrics), sorted(metrics)
