"""`headwater bench sql` at a tiny size: the report's shape and that headwater's
SQL and the native Spark query computed the same windows, bounded and
streaming, never its timings."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Runtime SQL settings the benchmark applies to the (shared) session.
_TOUCHED = (
    "spark.sql.shuffle.partitions",
    "spark.sql.execution.arrow.maxRecordsPerBatch",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
)

ARGS = [
    "--rows",
    "6000",
    "--keys",
    "20",
    "--files",
    "3",
    "--files-per-trigger",
    "1",
    "--late-fraction",
    "0",
    "--repeat",
    "1",
    "--no-warmup",
]


@pytest.fixture
def restored(spark):
    saved = {k: spark.conf.get(k, None) for k in _TOUCHED}
    yield spark
    for k, v in saved.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)
    spark.sparkContext.setLogLevel("WARN")  # the bench quiets the shared session


def test_bench_sql_json(restored, tmp_path, capsys):
    from headwater.bench import main as bench_main

    assert bench_main(["sql", *ARGS, "--json", "--workdir", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 6000 and "Tumble" in report["query"]
    (result,) = report["results"]
    bounded, stream = result["bounded"], result["streaming"]
    assert bounded["python_in_plan"] is False
    assert bounded["ratio"] > 0 and bounded["headwater"]["planning_s"] >= 0
    native, hw = stream["native"], stream["headwater"]
    assert hw["fast_path"] is True
    # On-time data: one changelog row per (key, window), as the native append rows.
    assert hw["output_rows"] == native["output_rows"] > 0
    for engine in (native, hw):
        assert engine["batches"] >= 2 and engine["first_batch_s"] > 0
    assert stream["ratio"] > 0 and stream["steady_ratio"] > 0


def test_bench_sql_same_windows(restored, tmp_path):
    """Both engines' rows, bounded and streaming, are the same windows and values."""
    from headwater.bench import sql as bench
    from headwater.bench.streaming import generate
    from headwater.model.watermarks import BoundedOutOfOrderness
    from headwater.sql.execute.spark import SparkSqlQuery
    from headwater.sql.plan.catalog import Table

    spark = restored
    args = bench._args(ARGS)
    src = str(tmp_path / "events")
    generate(
        src,
        rows=args.rows,
        keys=20,
        span=args.span,
        disorder=args.disorder,
        late_fraction=0.0,
        files=args.files,
    )
    columns = ["wstart", "wend", "key", "n", "total", "top"]

    def ordered(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame[columns].copy()
        for c in ("wstart", "wend"):
            frame[c] = pd.to_datetime(frame[c]).dt.tz_localize(None).astype("datetime64[ms]")
        for c in ("n", "total", "top"):
            frame[c] = frame[c].astype("int64")
        return frame.sort_values(["wstart", "key"]).reset_index(drop=True)

    native = ordered(bench._native_frame(spark, spark.read.parquet(src), args).toPandas())
    headwater, _ = bench._headwater_bounded(spark, src, args)
    pd.testing.assert_frame_equal(ordered(headwater.toPandas()), native)

    # Streaming: headwater's changelog (EMIT AFTER WATERMARK: adds only) holds the
    # native append rows: every window the watermark passed before the input ended.
    table = Table(
        "Events",
        spark=spark.readStream.schema("key string, et timestamp, value long")
        .option("maxFilesPerTrigger", 1)
        .parquet(src),
        event_time="et",
        watermark=BoundedOutOfOrderness(int(args.delay * 1000)),
    )
    got: list[pd.DataFrame] = []
    letters: list[list[str]] = []
    query = SparkSqlQuery(f"{bench.query_text(args)} EMIT AFTER WATERMARK", {"Events": table})
    stream = query.start(
        checkpoint_location=str(tmp_path / "checkpoint"),
        sink=lambda batch, _: got.append(batch.toPandas()),
        dead_letter_sink=lambda batch, _: letters.append(batch.columns),
        trigger={"availableNow": True},
    )
    stream.awaitTermination()
    # a dead letter keeps its row's columns (et, value) as well as the group's
    dead = ["query", "table", "reason", "window_start", "window_end", "key", "et", "value"]
    dead.append("elements")
    assert letters and letters[0] == dead
    log = pd.concat(got, ignore_index=True)
    assert list(log.columns) == [*columns, "undo", "ptime", "ver"]
    assert not log["undo"].any() and (log["ver"] == 0).all()
    streamed = ordered(log)
    assert len(streamed) > 0
    complete = native[native["wend"] <= streamed["wend"].max()].reset_index(drop=True)
    pd.testing.assert_frame_equal(streamed, complete)
