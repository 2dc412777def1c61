"""The stream module on Spark: a file source, the streaming query, and its output.

The stream is fed to Spark Structured Streaming as Parquet files (:func:`write_source`),
one per ``file_ms`` of arrival time, in arrival order; the last one ends with a
control row of kind ``end`` (the end of the input: every shard's watermark goes
to the end of time, as the local runner's last step does). Each row carries its
micro-batch time (:data:`~headwater.hybrid.pipeline.BATCH_TIME`) and its
position in arrival order (``seq``): the streaming runner applies one model
step per batch time, in arrival order, whatever the Spark micro-batches are
(``compile_streaming``'s per-shard watermark), so a Spark run gives the local
runner's panes, dead letters and K-slack trace.

:class:`StreamOutput` is the query's ``foreachBatch`` sink: it keeps each
micro-batch's panes, dead letters (each with the processing ``time`` of its
step) and watermark trace under ``<directory>/<part>/batch_id=N/`` (idempotent
per batch id), and :func:`read_stream_run` reads them back as a
:class:`~headwater.hybrid.hpm.StreamRun`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from headwater.hybrid.correction import Affected
from headwater.hybrid.hpm import StreamRun
from headwater.hybrid.online import OnlineCorrections
from headwater.hybrid.pipeline import BATCH_TIME, Query, ShardRun
from headwater.io.arrival import in_arrival_order
from headwater.io.sinks import parquet_sink
from headwater.model.plan import Schema
from headwater.model.schema import PANE_COLUMNS
from headwater.model.slack import SlackStrategy, SlackTrace
from headwater.model.time import MAX_TIMESTAMP
from headwater.runners.spark import batch as B
from headwater.runners.spark import streaming as S
from headwater.runners.spark.session import (
    LOCAL_CHECKPOINT_CONF,
    ROCKSDB_PROVIDER,
    starting_query,
)
from headwater.runners.spark.types import of_spark


def source_schema(value_type: str = "long") -> T.StructType:
    """The source's columns: the stream's (the value ``long`` or ``double``), its batch
    time and arrival position, and the kind."""
    value = T.DoubleType() if value_type == "double" else T.LongType()
    return T.StructType(
        [
            T.StructField("kind", T.StringType()),
            T.StructField("sensor", T.IntegerType()),
            T.StructField("ts", T.LongType()),
            T.StructField("speed", value),
            T.StructField("arrival", T.LongType()),
            T.StructField(BATCH_TIME, T.LongType()),
            T.StructField("seq", T.LongType()),
        ]
    )


#: The parts of a stream run's output, each a directory of ``batch_id=N`` folders.
PARTS = ("panes", "dead_letters", "trace")


@dataclass(frozen=True)
class Source:
    """A stream written as a file source: its directory and files (in arrival order)."""

    path: Path
    files: list[Path]
    rows: int
    value_type: str = "long"  # of the summed column: "long" or "double"

    @property
    def schema(self) -> T.StructType:
        return source_schema(self.value_type)


def write_source(
    stream: pd.DataFrame,
    directory: str | os.PathLike,
    query: Query,
    *,
    file_ms: int = 5000,
    on_file: Callable[[pd.DataFrame, int], None] | None = None,
) -> Source:
    """Write ``stream`` (in arrival order, with its batch times) as Parquet files of
    ``file_ms`` of batch time each, the last one with an ``end`` row. ``on_file(rows,
    number)`` sees each file's tuples before the file exists (the ingest's archive)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    value_type = "double" if pd.api.types.is_float_dtype(stream[query.value]) else "long"
    frame = _source_rows(stream, query, value_type)
    part = (frame[BATCH_TIME].to_numpy() - 1) // file_ms
    cuts = np.flatnonzero(np.diff(part)) + 1
    bounds = np.r_[0, cuts, len(frame)]
    files = []
    for number, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        if on_file is not None:
            on_file(stream.iloc[a:b], number)
        schema = _arrow_schema(value_type)
        table = pa.Table.from_pandas(frame.iloc[a:b], schema=schema, preserve_index=False)
        if b == len(frame):
            table = pa.concat_tables([table, _end_row(table, schema)])
        target = path / f"part-{number:06d}.parquet"
        pq.write_table(table, f"{target}.tmp")
        os.replace(f"{target}.tmp", target)
        files.append(target)
    in_arrival_order(files)
    return Source(path, files, len(frame), value_type)


def _source_rows(stream: pd.DataFrame, query: Query, value_type: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "kind": "data",
            "sensor": stream[query.key].to_numpy().astype(np.int32),
            "ts": stream[query.event_time].to_numpy(np.int64),
            "speed": stream[query.value].to_numpy(_NUMPY[value_type]),
            "arrival": stream["arrival"].to_numpy(np.int64),
            BATCH_TIME: stream[BATCH_TIME].to_numpy(np.int64),
            "seq": np.arange(len(stream), dtype=np.int64),
        }
    )


def _end_row(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """The control row that ends the input, at the last batch time."""
    last = pc.max(rows[BATCH_TIME]).as_py()
    row = {"kind": "end", "arrival": last, BATCH_TIME: last, "seq": pc.max(rows["seq"]).as_py() + 1}
    return pa.Table.from_pylist([row], schema=schema)


_NUMPY = {"long": np.int64, "double": np.float64}


def _arrow_schema(value_type: str) -> pa.Schema:
    value = pa.float64() if value_type == "double" else pa.int64()
    types = {"kind": pa.string(), "sensor": pa.int32(), "speed": value}
    fields = source_schema(value_type).fields
    return pa.schema([(f.name, types.get(f.name, pa.int64())) for f in fields])


def stream_query(
    spark: SparkSession,
    source: Source,
    query: Query,
    strategy: SlackStrategy,
    shards: int,
    *,
    files_per_trigger: int = 1,
) -> DataFrame:
    """The stream module over ``source`` on the Spark streaming runner: the query's
    plan with the K-slack ``strategy``, ``shards`` state shards."""
    df = (
        spark.readStream.schema(source.schema)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(str(source.path))
    )
    schema = Schema.of({f.name: of_spark(f.dataType) for f in df.schema.fields})
    plan = query.build(schema, strategy, S.CAPABILITIES)
    return S.compile_streaming(
        df,
        plan,
        num_shards=shards,
        processing_time_col=BATCH_TIME,
        kind_col="kind",
        arrival_order_col="seq",
        timestamps="ms",
        lift=False,
    )


def start(
    out: DataFrame, sink: Callable[[DataFrame, int], None], checkpoint: str | os.PathLike, shards
):
    """Start the query with ``sink`` (``foreachBatch``) and ``shards`` shuffle partitions
    (one shard each; the session's own setting is restored at once), running until the
    source's files are all processed."""
    spark = out.sparkSession
    writer = (
        out.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    with starting_query(spark, shards):
        return writer.start()


@dataclass(frozen=True)
class BatchOutput:
    """One micro-batch of a stream run (pandas): panes and dead letters with the
    processing ``time`` of their step, and the watermark trace."""

    panes: pd.DataFrame
    dead_letters: pd.DataFrame
    trace: pd.DataFrame

    @property
    def end(self) -> int | None:
        """The processing time the input ended at, if it ended in this micro-batch (the
        shards' watermarks went to the end of time)."""
        ended = self.trace["time"][self.trace["watermark"] >= MAX_TIMESTAMP]
        return int(ended.max()) if len(ended) else None


def split(batch: DataFrame, query: Query) -> BatchOutput:
    """A micro-batch of the runner's output, collected once (as Arrow: integer columns
    stay integers) and split."""
    flat = [c for c in batch.columns if c not in ("dropped", "shard_watermark")]
    nested = [
        F.col(f"{struct}.{field}").alias(name)
        for struct, field, name in (
            ("dropped", "reason", "reason"),
            ("dropped", "elements", "elements"),
            ("dropped", query.value, query.value),
            ("shard_watermark", "shard", "shard"),
            ("shard_watermark", "watermark", "watermark"),
            ("shard_watermark", "slack", "slack"),
        )
    ]
    rows = batch.select(*flat, *nested).toArrow()
    rows = rows.rename_columns(["time" if c == "processing_time" else c for c in rows.column_names])
    keys = [query.key, "window_start", "window_end"]
    panes = _of_kind(rows, "pane", [*keys, query.output, *PANE_COLUMNS, "time"])
    dead_cols = [*keys, "timestamp", "reason", "elements", query.value, "time"]
    dead = _of_kind(rows, "dropped", dead_cols).rename(columns={"timestamp": "event_time"})
    trace = _of_kind(rows, "watermark", ["shard", "time", "watermark", "slack"])
    return BatchOutput(panes, dead, trace)


def _of_kind(rows: pa.Table, kind: str, columns: list[str]) -> pd.DataFrame:
    return rows.filter(pc.equal(rows["kind"], kind)).select(columns).to_pandas()


class StreamOutput:
    """``foreachBatch`` sink keeping a stream run's output under ``directory``."""

    def __init__(self, directory: str | os.PathLike, query: Query) -> None:
        self.dir, self.query = Path(directory), query
        self.parts = {name: parquet_sink(self.dir / name) for name in PARTS}

    def __call__(self, batch: DataFrame, batch_id: int) -> BatchOutput:
        out = split(batch, self.query)
        for name, frame in zip(PARTS, (out.panes, out.dead_letters, out.trace), strict=True):
            self.parts[name](frame, batch_id)
        return out

    def read(self, name: str) -> pd.DataFrame:
        frame = self.parts[name].read()
        return frame.drop(columns="batch_id") if "batch_id" in frame else frame


def read_stream_run(directory: str | os.PathLike, query: Query) -> StreamRun:
    """A Spark stream run, as the local runner's :class:`StreamRun` (one :class:`ShardRun`
    per shard with its K-slack trace; panes sorted by time)."""
    output = StreamOutput(directory, query)
    keys = [query.key, "window_start", "window_end"]
    panes = output.read("panes").sort_values(["time", *keys], kind="stable")
    dead = output.read("dead_letters").sort_values(["time", "event_time"], kind="stable")
    trace = output.read("trace")
    trace = trace[trace["watermark"] < MAX_TIMESTAMP].sort_values(["shard", "time"])
    shards = []
    for _, part in trace.groupby("shard", sort=True):
        slack = SlackTrace(part["watermark"].to_numpy(np.int64), part["slack"].to_numpy(np.int64))
        shards.append(ShardRun(panes.iloc[:0], dead.iloc[:0], part["time"].to_numpy(), slack))
    columns = [*keys, query.output, *PANE_COLUMNS, "time"]
    return StreamRun(panes[columns].reset_index(drop=True), dead.reset_index(drop=True), shards)


def spark_session(master: str = "local[*]", workdir: str | os.PathLike | None = None):
    """A SparkSession for the hybrid runs (RocksDB state store, Arrow, UTC), its scratch
    space under ``workdir``. A ``local-cluster[...]`` master launches executor JVMs,
    which need a ``SPARK_HOME``: a private one with links into the pip-installed
    PySpark (the workers write their ``work/`` directories there)."""
    work = Path(workdir or tempfile.mkdtemp(prefix="headwater-spark-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["SPARK_LOCAL_DIRS"] = str(work / "local")
    if master.startswith("local-cluster"):
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        os.environ["SPARK_HOME"] = _private_spark_home(work)
    builder = SparkSession.builder
    for key, value in _session_conf(master, work).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _session_conf(master: str, work: Path) -> dict[str, str]:
    return {
        "spark.master": master,
        "spark.app.name": "headwater-hpm",
        "spark.driver.memory": "2g",
        "spark.executor.memory": "1536m",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.maintenanceInterval": "60s",
        "spark.local.dir": str(work / "local"),
        "spark.sql.warehouse.dir": str(work / "warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={work / 'derby'}",
        **LOCAL_CHECKPOINT_CONF,
    }


def _private_spark_home(work: Path) -> str:
    import pyspark

    package = Path(pyspark.__file__).resolve().parent
    home = work / "spark-home"
    home.mkdir(parents=True, exist_ok=True)
    for name in ("bin", "jars", "sbin", "python"):
        target, link = package / name, home / name
        if target.exists() and not os.path.lexists(link):
            os.symlink(target, link)
    return str(home)


def exact_panes(df: DataFrame, query: Query) -> pd.DataFrame:
    """The query's bounded plan over ``df`` on Spark (``compile_bounded``), collected."""
    schema = Schema.of({f.name: of_spark(f.dataType) for f in df.schema.fields})
    plan = query.build(schema, None, B.CAPABILITIES)
    return B.compile_bounded(df, plan).panes.toArrow().to_pandas()


def source_tuples(spark: SparkSession, source: Source) -> DataFrame:
    """The data rows of a file source, as a bounded DataFrame."""
    return spark.read.schema(source.schema).parquet(str(source.path)).where(F.col("kind") == "data")


class SparkRecompute:
    """HPM's corrections on Spark: the bounded plan over the archive's Parquet files
    (the :data:`~headwater.hybrid.correction.Recompute` of the Spark runner)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def __call__(self, affected: Affected, query: Query) -> pd.DataFrame:
        if not affected.files:
            return pd.DataFrame(columns=[*affected.windows.columns, query.output, "timestamp"])
        et, key = F.col(query.event_time), F.col(query.key)
        keys = [int(k) for k in affected.windows[query.key].unique()]
        keep = (et >= affected.lo) & (et < affected.hi) & key.isin(keys)
        if affected.until is not None:
            keep &= F.col(BATCH_TIME) <= affected.until
        return exact_panes(self.spark.read.parquet(*affected.files).where(keep), query)


class HpmSink:
    """HPM's ``foreachBatch`` sink on Spark: each micro-batch of the stream module's
    output is kept (:class:`StreamOutput`) and fed to the batch module as it comes
    (:class:`~headwater.hybrid.online.OnlineCorrections`)."""

    def __init__(self, output: StreamOutput, online: OnlineCorrections) -> None:
        self.output, self.online = output, online

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        out = self.output(batch, batch_id)
        self.online.feed(batch_id, out.panes, out.dead_letters, out.end)
