"""Running a query on Spark.

A bounded query is one native Spark SQL plan: the windowing TVFs become Spark
expressions (``unix_millis``, ``explode(sequence(...))``, window functions for
sessions), the rest is Spark's own aggregates and joins.

A streaming query runs its :class:`~headwater.sql.execute.local.SqlPlan` on the
Structured Streaming runner: the model's windowed plan over the union of its
streams, with the query's :class:`~headwater.sql.maintain.groups.GroupMaintainer` as
the runner's pane transform, so each shard keeps its groups' rows and their
last materialized results in Spark's state store. A recorded stream (a replay)
is played through the replay source, one step per micro-batch.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from headwater.io.replay import read_replay as read_timeline
from headwater.io.replay import write_timeline
from headwater.model.plan import Schema, build_plan
from headwater.model.schema import RAW_RECORD_FIELDS, DropReason
from headwater.model.slack import SlackStrategy
from headwater.model.time import to_millis
from headwater.model.types import INT64
from headwater.model.watermarks import BoundedOutOfOrderness, Punctuated
from headwater.model.windows import CumulativeWindows, FixedWindows
from headwater.runners.spark.ending import end_of_input_for, started
from headwater.runners.spark.output import changes, dead_letters
from headwater.runners.spark.session import starting_query
from headwater.runners.spark.streaming import CAPABILITIES, compile_streaming
from headwater.runners.spark.timeline import spark_session
from headwater.runners.spark.types import of_spark
from headwater.sql.errors import SqlError, position
from headwater.sql.execute import stateless_spark
from headwater.sql.execute.local import (
    NULL_KEY,
    SqlPlan,
    SqlRun,
    check_spark_results,
    columns_of,
    compile_sql,
    event_times,
    is_keyed,
    keyed_by_columns,
    row_letters,
    run_stages,
    second_stage,
    steps_of,
    union_rows,
    with_start,
)
from headwater.sql.execute.local import (
    dead_letters as sql_dead_letters,
)
from headwater.sql.execute.local import state_ttl as key_ttl
from headwater.sql.execute.permissive import CARRIED, ERROR, event_time_sql
from headwater.sql.execute.query import SqlQuery
from headwater.sql.execute.spark_collect import as_pandas, collect_to_end
from headwater.sql.execute.stages_spark import FirstStage, StageCheckpoint, StagedBatches
from headwater.sql.maintain.changelog import in_order
from headwater.sql.maintain.groups import EVENT_TIME, KEY, SOURCE
from headwater.sql.plan.calls import first_call
from headwater.sql.plan.catalog import RAW_RECORD, SOURCE_FILE, Table
from headwater.sql.plan.functions import Functions, function_error, register_spark
from headwater.sql.plan.planner import QueryPlan
from headwater.sql.plan.quality import QualityQuery
from headwater.sql.plan.spark_meanings import check_spark_meanings
from headwater.sql.plan.stateless import why_not as stateless_why_not
from headwater.sql.plan.translate import to_engine_sql


def _spark_type(series: pd.Series) -> str:
    if pd.api.types.is_bool_dtype(series):
        return "boolean"
    if pd.api.types.is_integer_dtype(series):
        return "bigint"
    if pd.api.types.is_float_dtype(series):
        return "double"
    if series.dtype == object:  # Decimal values: Arrow finds one precision and scale
        try:
            inferred = pa.Array.from_pandas(series.dropna()).type
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed values: carried as text
            return "string"
        if pa.types.is_integer(inferred):  # a nullable integer, kept exact as ints
            return "bigint"
        if pa.types.is_decimal(inferred):
            return f"decimal({inferred.precision},{inferred.scale})"
    return "string"


def write_union_timeline(sql: SqlPlan, path: str, as_of: int | None) -> np.ndarray:
    """The query's streams as one replay timeline: a step per processing time,
    each firing the timers due then; rows in the union layout. Returns the
    steps' processing times."""
    rows = union_rows(sql)
    rows = rows[~np.isnan(rows[EVENT_TIME].to_numpy(np.float64))]
    ptimes, marks = steps_of(sql.query, rows, as_of)
    values = sql.values
    columns = {c: _spark_type(rows[c]) for c in values}
    arrival = rows[PTIME_COLUMN].to_numpy(np.int64)
    steps = []
    for ptime, mark in zip(ptimes, marks, strict=True):
        part = rows[arrival == ptime]
        records = part[values].astype(object).where(part[values].notna(), None)
        step_rows = [
            {"key": key, "ts": int(ts), **record}
            for key, ts, record in zip(
                part[KEY].astype(str), part[EVENT_TIME], records.to_dict("records"), strict=True
            )
        ]
        step = {"proc_ms": int(ptime), "rows": step_rows, "timers": True}
        if mark > np.iinfo(np.int64).min:
            step["watermark_ms"] = int(mark)
        steps.append(step)
    write_timeline(path, steps, columns=columns, key_type="string")
    return ptimes


PTIME_COLUMN = "__ptime"


def _with_null_event_times(run: SqlRun, sql: SqlPlan, as_of: int | None) -> SqlRun:
    """Rows of NULL event time never reach the timeline: dead letters, as locally."""
    rows = union_rows(sql)
    arrived = rows[PTIME_COLUMN].to_numpy(np.int64) <= (as_of if as_of is not None else np.inf)
    null = rows[np.isnan(rows[EVENT_TIME].to_numpy(np.float64)) & arrived]
    if not len(null):
        return run
    letters = sql_dead_letters(null, DropReason.NULL_EVENT_TIME.value, sql)
    dead = pd.concat([letters, run.dead_letters], ignore_index=True)
    return SqlRun(run.columns, run.changelog, dead)


class SparkSqlQuery(SqlQuery):
    """A query on Spark: native batch plans for tables, the streaming runner for streams."""

    def __init__(
        self,
        text: str,
        tables: Mapping[str, Any],
        name: str = "query",
        functions: Functions = None,
        spark=None,
        *,
        state_ttl: Any = None,
        fast_path: bool = True,
    ):
        super().__init__(text, tables, name, functions, state_ttl=state_ttl, fast_path=fast_path)
        check_spark_meanings(self.plan.query)
        self.spark = spark or spark_session()

    def stage_notes(self) -> list[str]:
        """How Spark runs a query in stages: stage 1 in the streaming runner, stage 2
        on the driver over its changelog: the replay's, collected there anyway, or
        each micro-batch's of a started stream (``start``/``write``), in its
        ``foreachBatch`` (Spark cannot chain a second stateful operator fed a
        retracting changelog in one streaming query)."""
        if not self.plan.stages:
            return []
        return [
            "on Spark: stage 1 runs on the streaming runner, sharded by its key; stage 2 runs "
            "on the driver over stage 1's changelog (a replay's, collected; a started stream's, "
            "in each micro-batch's foreachBatch, its state kept in the checkpoint by batch id)"
        ]

    def _frames(self):
        """Each table as a Spark DataFrame, and its event-time column (or None)."""
        times = event_times(self.plan)
        for table in (*self.plan.streams, *self.plan.tables):
            frame = table.spark
            if frame is None:
                frame = self.spark.createDataFrame(table.local_frame())
            column = times.get(table.name.lower())
            yield table, frame, column if column in frame.columns else None

    def bounded(self):
        """The bounded query as a Spark DataFrame (one native plan), over the rows
        of non-NULL event time (the others are dead letters)."""
        from pyspark.sql import functions as F

        for table, frame, column in self._frames():
            if column is not None:
                frame = frame.where(F.col(f"`{column}`").isNotNull())
            frame.createOrReplaceTempView(table.name)
        from pyspark.errors import AnalysisException

        text = to_engine_sql(self.plan.query, "spark", columns_of(self.plan))
        register_spark(self.spark, self.plan.functions)
        try:
            return self.spark.sql(text)
        except AnalysisException as exc:
            raise spark_error(exc, self.plan) from None

    def _bounded_dead_letters(self) -> pd.DataFrame:
        """The rows of NULL event time of the tables, collected (they are few)."""
        from pyspark.sql import functions as F

        parts = [
            (table.name, frame.where(F.col(f"`{column}`").isNull()).toPandas())
            for table, frame, column in self._frames()
            if column is not None
        ]
        return row_letters(self.plan, parts, DropReason.NULL_EVENT_TIME.value)

    def to_spark(self):
        return self.bounded()

    def to_pandas(self, as_of: int | None = None) -> pd.DataFrame:
        try:
            if not self.plan.is_stream:
                return as_pandas(self.bounded())
            return super().to_pandas(as_of)
        except Exception as exc:  # Spark's (a worker's traceback): a user function's?
            error = function_error(str(exc)) or row_error(exc)
            if error is None:
                raise
            raise error from None

    def _stream_run(self, as_of: int | None) -> SqlRun:
        """The replay through the Spark streaming runner (corrections, when a
        stream asks for them, recompute from the archive as on the local runner).
        A query in stages runs stage 1 so, and stage 2 over its changelog, which
        the replay collects to the driver (docs/sql.md, "Stages")."""
        check_spark_results(self.plan)
        if self.plan.stages:
            return run_stages(self.plan, self._replay(self.plan.first_stage, as_of))
        return self._replay(self.plan, as_of)

    def _replay(self, plan: QueryPlan, as_of: int | None) -> SqlRun:
        """``plan`` (this query's, or its stage 1's) through the streaming runner."""
        sql = compile_sql(plan)
        if not isinstance(sql, SqlPlan):  # the fast path of a windowed aggregate
            from headwater.sql.execute.aggregate_spark import run_replay

            return run_replay(self.spark, sql, as_of)
        workdir = tempfile.mkdtemp(prefix="headwater-sql-")
        try:
            path = os.path.join(workdir, "timeline.jsonl")
            ptimes = write_union_timeline(sql, path, as_of)
            stream = read_timeline(self.spark, path)
            collected = _collect(self._compile(sql, stream), sql, workdir, ptimes)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return _with_null_event_times(collected, sql, as_of)

    def _compile(self, sql: SqlPlan, stream, watermark=None, carry=(), end_of_input=None):
        plan = build_plan(
            Schema.of({f.name: of_spark(f.dataType) for f in stream.schema.fields}),
            keys=("key",) if is_keyed(sql.query) else (),
            event_time="ts",
            windowing=sql.strategy,
            aggregations=sql.aggregations,
            bounded=False,
            watermark=watermark or Punctuated("watermark_ms"),
            capabilities=CAPABILITIES,
        )
        return compile_streaming(
            stream,
            plan,
            transform=sql.maintainer,
            timestamps="ms",
            carry=(*sql.unread, *carry),
            end_of_input=end_of_input,
            state_ttl=key_ttl(sql.query),
            keep=sql.keep,
        )

    # -- Spark streaming sources
    def _union(self, sql: SqlPlan, plan: QueryPlan | None = None):
        """The query's Spark streams as one stream in the union layout: the source
        index, every stream's columns (null in the others' rows; timestamps as
        epoch µs), the group key (``plan``'s: this query's, or its stage 1's) and
        the event time (ms)."""
        from pyspark.sql import functions as F

        plan = plan or self.plan
        parts = []
        for i, table in enumerate(self.plan.streams):
            if table.spark is None or not table.is_stream:
                raise SqlError(f"table {table.name!r} is not a Spark stream")
            cols = [F.lit(i).cast("long").alias(SOURCE)]
            for other, their in enumerate(sql.layouts):
                for column, union, arrow in zip(
                    their.columns, their.union, their.types, strict=True
                ):
                    cols.append(_union_column(F, table.spark, column, union, arrow, other == i))
            ts = F.expr(event_time_sql(table, f"unix_millis(`{table.event_time}`)"))
            key = _group_key(F, plan, ts, table)
            cols += [key.alias("key"), ts.alias("ts")]
            if _permissive(self.plan):
                cols += [
                    (F.col(c) if table.permissive else F.lit(None).cast("string")).alias(c)
                    for c in CARRIED
                ]
            parts.append(table.spark.select(*cols))
        union = parts[0]
        for part in parts[1:]:
            union = union.unionByName(part)
        return union

    def start(
        self,
        *,
        checkpoint_location: str,
        sink=None,
        dead_letter_sink=None,
        trigger: Mapping[str, Any] | None = None,
        end_of_input: bool | None = None,
    ):
        """Start the query over its Spark streams: each micro-batch's changelog
        (the query's columns, ``undo``, ``ptime``, ``ver``) goes to ``sink`` and its
        dead letters to ``dead_letter_sink`` (``f(batch_df, batch_id)``, idempotent
        per batch id: e.g. :class:`~headwater.io.sinks.relation.RelationSink`,
        :func:`~headwater.io.sinks.parquet_sink`). An ``availableNow`` run ends its
        input unless ``end_of_input`` is False (docs/semantics.md, "End of input")."""
        from pyspark.sql import functions as F

        _refuse_corrections(self.plan.streams)
        check_spark_results(self.plan)
        for table in self.plan.streams:
            table.check_spark_event_time()
            if isinstance(table.watermark, SlackStrategy | QualityQuery):
                raise SqlError(
                    f"the Spark stream {table.name!r} has a {table.watermark.describe()} "
                    "watermark ('watermark' option): the Spark SQL runner takes a bounded "
                    "out-of-orderness only",
                    hint="Declare WATERMARK FOR ts AS ts - INTERVAL ... without 'watermark', run "
                    "the script on the local runner, or use the Python API (run_streaming("
                    "..., watermark=QualityDriven(...)), docs/hybrid.md)",
                )
        end = end_of_input_for(trigger, end_of_input)
        if self.plan.stages:  # stage 1 streams, stage 2 on the driver
            out, first = self._first_stage(end)
            each_batch = self._stage_batches(first, checkpoint_location, sink, dead_letter_sink)
            return self._launch(out, each_batch, checkpoint_location, trigger, end)
        sql = compile_sql(self.plan)
        if not isinstance(sql, SqlPlan):  # the fast path of a windowed aggregate
            from headwater.sql.execute import aggregate_spark

            return aggregate_spark.start(
                sql,
                checkpoint_location=checkpoint_location,
                sink=sink,
                dead_letter_sink=dead_letter_sink,
                trigger=trigger,
                end_of_input=end_of_input,
            )
        delays = self._delays()
        if stateless_why_not(self.plan) is None:  # Spark's own projection
            return stateless_spark.start(
                sql,
                self._union(sql),
                max(delays),
                _letters_frame,
                checkpoint_location=checkpoint_location,
                sink=sink,
                dead_letter_sink=dead_letter_sink,
                trigger=trigger,
                end_of_input=end_of_input,
            )
        watermark = BoundedOutOfOrderness(max(delays))
        carry = CARRIED if _permissive(self.plan) else ()
        out = self._compile(sql, self._union(sql), watermark, carry, end)
        fields = [f.name for f in sql.maintainer.output_fields()]
        columns = [
            *[F.col(quoted(c)) for c in sql.maintainer.columns],
            F.col("undo"),
            F.timestamp_millis(F.col("ptime")).alias("ptime"),
            F.col("ver"),
        ]

        start = sql.maintainer.begin(int(time.time() * 1000))  # before the first batch

        def each_batch(batch, batch_id: int) -> None:
            batch = batch.persist()
            try:
                if sink is not None:
                    out = changes(batch, fields).select(*columns)
                    if batch_id == 0 and len(start):  # once: a restart resumes a later batch
                        first = _start_rows(batch.sparkSession, start, out.schema)
                        out = first.unionByName(out)
                    sink(out, batch_id)
                if dead_letter_sink is not None:
                    dropped = dead_letters(batch).toPandas()
                    dead_letter_sink(_letters_frame(batch.sparkSession, sql, dropped), batch_id)
            finally:
                batch.unpersist()

        return self._launch(out, each_batch, checkpoint_location, trigger, end)

    def _delays(self) -> list[int]:
        """The watermark delays of the query's streams (one at least)."""
        delays = [t.watermark.delay for t in self.plan.streams if t.watermark is not None]
        if not delays:
            raise SqlError(
                "a Spark stream needs a watermark",
                hint="Declare WATERMARK FOR <event time> AS <event time> - INTERVAL ...",
            )
        return delays

    def _first_stage(self, end):
        """Stage 1 of a query in stages as a streaming output, on the path that
        runs it (the fast path of an aggregate, or the general path), and how its
        micro-batches read (:class:`FirstStage`)."""
        first = compile_sql(self.plan.first_stage)
        if not isinstance(first, SqlPlan):
            from headwater.sql.execute import aggregate_spark

            fields = [f.name for f in first.maintainer.output_fields()]
            out = aggregate_spark.live_output(first, end_of_input=end)
            return out, FirstStage(fields, lambda b: aggregate_spark.dead_letter_frame(first, b))
        watermark = BoundedOutOfOrderness(max(self._delays()))
        carry = CARRIED if _permissive(self.plan) else ()
        union = self._union(first, self.plan.first_stage)
        out = self._compile(first, union, watermark, carry, end)
        fields = [f.name for f in first.maintainer.output_fields()]

        def letters(batch):
            return _letters_frame(batch.sparkSession, first, dead_letters(batch).toPandas())

        return out, FirstStage(fields, letters)

    def _stage_batches(self, first: FirstStage, checkpoint_location: str, sink, dead_letter_sink):
        """The ``foreachBatch`` of a query in stages: stage 2 over each micro-batch's
        stage-1 changelog (:mod:`headwater.sql.execute.stages_spark`)."""
        stage = second_stage(self.plan)
        return StagedBatches(
            first,
            stage,
            StageCheckpoint(checkpoint_location),
            stage.begin(int(time.time() * 1000)),  # the query's start, sent with batch 0
            sink,
            dead_letter_sink,
        )

    def _launch(self, out, each_batch, checkpoint_location: str, trigger, end):
        """Start ``out`` writing each micro-batch by ``each_batch``."""
        writer = out.writeStream.foreachBatch(each_batch).option(
            "checkpointLocation", checkpoint_location
        )
        if trigger:
            writer = writer.trigger(**trigger)

        def launch():
            with starting_query(self.spark):
                return writer.start()

        return started(launch, end, checkpoint_location)

    def write(self, sink, *, dead_letter_sink=None, **options: Any) -> None:
        """As :meth:`SqlQuery.write`; over Spark streams, a streaming query to
        ``sink`` (dead letters to ``dead_letter_sink``, per micro-batch) that runs
        until the files there are processed (``checkpoint``: its checkpoint
        directory, required; ``follow=True``: keep running)."""
        if not any(t.spark is not None and t.is_stream for t in self.plan.streams):
            return super().write(sink, dead_letter_sink=dead_letter_sink, **options)
        checkpoint = options.get("checkpoint")
        if not checkpoint:
            raise SqlError(
                "a streaming INSERT INTO needs a checkpoint directory",
                hint="Pass --checkpoint DIR (or checkpoint=... from Python)",
            )
        trigger = None if options.get("follow") else {"availableNow": True}
        location = os.path.join(checkpoint, self.plan.name)  # one per INSERT INTO
        self.start(
            checkpoint_location=location,
            sink=sink,
            dead_letter_sink=dead_letter_sink,
            trigger=trigger,
        ).awaitTermination()


def quoted(column: str) -> str:
    """A column name as Spark reads it verbatim: a derived name such as
    ``avg(Q.final)`` is a column, not field ``final)`` of ``avg(Q``."""
    return "`" + column.replace("`", "``") + "`"


def _start_rows(spark, start: pd.DataFrame, schema):
    """The changelog of the query's start (:meth:`GroupMaintainer.begin`) as a Spark
    frame of the sink's ``schema`` (ptime: epoch ms, made a timestamp as the rest)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    names = [f.name for f in schema.fields]
    fields = [T.StructField("ptime", T.LongType()) if f.name == "ptime" else f for f in schema]
    rows = start[names].astype(object)
    rows = [tuple(r) for r in rows.where(rows.notna(), None).itertuples(index=False)]
    frame = spark.createDataFrame(rows, T.StructType(fields))
    return frame.withColumn("ptime", F.timestamp_millis(F.col("ptime")))


def row_error(exc: Exception) -> SqlError | None:
    """Spark's error on a value of the query's rows (an ANSI cast, an overflow, a
    division by zero) as a SqlError that says so, without the JVM's stack; None
    for any other exception."""
    from pyspark.errors import PySparkException

    if not isinstance(exc, PySparkException) or not hasattr(exc, "getErrorClass"):
        return None
    kind = exc.getErrorClass() or ""
    if not kind.startswith(_ROW_ERRORS):
        return None
    text = re.sub(r"^\[[A-Z_.]+\] *", "", str(exc).split("\n")[0]).split(" SQLSTATE")[0]
    text = re.sub(r" (Use|If necessary set) .*$", "", text)
    return SqlError(
        f"Spark failed on a value of the query's rows: {text}",
        hint="Check or convert the values first (TRY_CAST, NULLIF(divisor, 0))",
    )


#: Spark's error classes of a failure on a row's value.
_ROW_ERRORS = (
    "CAST_INVALID_INPUT",
    "CAST_OVERFLOW",
    "ARITHMETIC_OVERFLOW",
    "DIVIDE_BY_ZERO",
    "NUMERIC_VALUE_OUT_OF_RANGE",
    "INVALID_ARRAY_INDEX",
)


def spark_error(exc: Exception, plan) -> SqlError:
    """Spark's analysis error of a query DuckDB binds (a function Spark SQL does not
    have) as a SqlError at the user's call, without Spark's plan dump."""
    text = str(exc).split("\n")[0]
    routine = re.search(r"routine `(?P<name>[^`]+)`", text)
    if routine is not None:
        call = first_call(plan.query, routine["name"])
        line, col = position(call) if call is not None else (None, None)
        name = call.name if isinstance(call, exp.Anonymous) else routine["name"]
        return SqlError(
            f"Spark SQL has no function {name!r}",
            line,
            col,
            "Call a function both DuckDB and Spark SQL have, or run the query with runner='local'",
        )
    reason = re.sub(r"^\[[A-Z_.]+\] ", "", text).split(" SQLSTATE")[0]
    return SqlError(f"Spark SQL cannot run this query: {reason}")


def _group_key(F, plan, ts, table):
    """The model's key of a stream row as Spark computes it (as ``group_keys``)."""
    if plan.keys:
        return F.concat_ws("|", *[F.col(k).cast("string") for k in plan.keys])
    if keyed_by_columns(plan):
        parts = [_key_text(F, table.spark, c) for c in plan.key.columns_of(table.name)]
        return F.concat_ws("|", *parts)
    fn = plan.window_fn
    if isinstance(fn, FixedWindows | CumulativeWindows):
        return (ts - F.pmod(ts - F.lit(fn.offset), F.lit(fn.size))).cast("string")
    return F.lit("0")


def _key_text(F, df, column: str):
    """A key column's text as :func:`~headwater.sql.execute.local.key_text` writes it."""
    from pyspark.sql import types as T

    kind = df.schema[column].dataType
    col = F.col(column)
    if isinstance(kind, T.TimestampType | T.TimestampNTZType):
        text = F.unix_millis(col).cast("string")
    elif isinstance(kind, T.FloatType | T.DoubleType | T.DecimalType):
        whole = F.col(column) == F.floor(col)
        text = F.when(whole, F.floor(col).cast("bigint").cast("string")).otherwise(
            col.cast("double").cast("string")
        )
    else:
        text = col.cast("string")
    return F.coalesce(text, F.lit(NULL_KEY))


def _union_column(F, df, column: str, union: str, arrow, own: bool):
    """One union column of a stream's rows: its own value (timestamps as µs), or a
    typed null for another stream's column."""
    from pyspark.sql.pandas.types import from_arrow_type

    spark_type = "long" if pa.types.is_timestamp(arrow) else from_arrow_type(arrow)
    if not own:
        return F.lit(None).cast(spark_type).alias(union)
    value = F.col(column)
    if pa.types.is_timestamp(arrow):
        value = F.unix_micros(value.cast("timestamp"))
    return value.cast(spark_type).alias(union)


def _ddl(columns: Mapping[str, str]) -> str:
    """A CREATE TABLE's columns as a Spark schema (types in Spark's spelling)."""
    from sqlglot import exp

    return ", ".join(
        f"`{name}` {exp.DataType.build(sql_type).sql(dialect='spark')}"
        for name, sql_type in columns.items()
    )


def spark_source(d, options: Mapping[str, Any]) -> Table:
    """A script's source on Spark: a directory is a stream of the files arriving
    in it; a file, a bounded table; a replay, a recorded stream."""
    from headwater.sql.execute.sources import local_source, state_ttl_option

    fmt, path = d.options.get("format", "").lower(), d.options.get("path", "")
    if fmt == "replay" or not os.path.isdir(path):
        return local_source(d)
    hybrid = [k for k in d.options if k in ("watermark", "slack") or k.startswith(_HYBRID)]
    if hybrid:
        raise SqlError(
            f"table {d.name!r}: option {sorted(hybrid)[0]!r} is not supported on a Spark file "
            "stream (its watermark is the bounded out-of-orderness of WATERMARK FOR)",
            d.line,
            None,
            "Run the script on the local runner over a replay, or use the Python API "
            "(run_streaming(..., watermark=QualityDriven(...)) and headwater.hybrid, "
            "docs/hybrid.md)",
        )
    spark = options.get("spark") or spark_session()
    permissive = fmt in ("csv", "json")
    schema = _ddl(d.columns) + (f", `{RAW_RECORD}` STRING" if permissive else "")
    reader = spark.readStream.schema(schema).format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    if permissive:  # a line Spark cannot parse is a row with its text: a dead letter
        reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", RAW_RECORD)
    stream = reader.load(path)
    if permissive:
        stream = stream.selectExpr("*", f"_metadata.file_path AS {SOURCE_FILE}")
    watermark = (
        None if d.watermark_delay_ms is None else BoundedOutOfOrderness(d.watermark_delay_ms)
    )
    return Table(
        d.name,
        spark=stream,
        permissive=permissive,
        event_time=d.event_time,
        watermark=watermark,
        allowed_lateness=to_millis(d.options.get("allowed_lateness")),
        types=dict(d.columns),
        state_ttl=state_ttl_option(d),
    )


#: Option prefixes of the hybrid model (:mod:`headwater.sql.execute.hybrid`,
#: :mod:`headwater.sql.execute.correct`).
_HYBRID = ("quality.", "correction.")


def _refuse_corrections(streams: tuple[Table, ...]) -> None:
    """Corrections from an archive replay a recorded stream; a live Spark stream
    does not make them (yet)."""
    for table in streams:
        if table.correction is not None:
            raise SqlError(
                f"stream {table.name!r} asks for corrections ('correction.archive'), which "
                "a query over Spark streams does not make",
                hint="Run the query over a replay (either runner), or drop "
                "'correction.archive' (on Spark streams, HPM's corrections are the Python "
                "API of headwater.hybrid, docs/hybrid.md)",
            )


def _permissive(plan) -> bool:
    """Whether a stream of ``plan`` is a Spark file stream read in PERMISSIVE mode."""
    return any(t.permissive for t in plan.streams)


def _letters_schema(sql: SqlPlan) -> pa.Schema:
    """The columns of a query's dead letters (those of :func:`sql_dead_letters`,
    every stream's columns whichever stream dropped rows), with their types."""
    fields = [pa.field(name, pa.string()) for name in ("query", "table", "reason")]
    fields += [pa.field(name, pa.timestamp("us")) for name in ("window_start", "window_end")]
    types: dict[str, pa.DataType] = {}
    for layout in sql.layouts:
        for column, arrow_type in zip(layout.columns, layout.types, strict=True):
            timestamp = column in layout.timestamps
            types.setdefault(column, pa.timestamp("us") if timestamp else arrow_type)
    if _permissive(sql.query):
        types.update(
            {f.name: pa.int64() if f.type == INT64 else pa.string() for f in RAW_RECORD_FIELDS}
        )
    return pa.schema([*fields, *(pa.field(c, t) for c, t in types.items())])


def _letters_frame(spark, sql: SqlPlan, dropped: pd.DataFrame):
    """A micro-batch's dead letters (the runner's rows in the union layout) in the
    layout the local runner gives them, as a Spark DataFrame."""
    if len(dropped):  # in source order, as sql_dead_letters gives them
        dropped = dropped.sort_values(SOURCE, kind="stable").reset_index(drop=True)
    reasons = dropped["reason"].to_numpy() if len(dropped) else []
    frame = sql_dead_letters(
        dropped if len(dropped) else pd.DataFrame(columns=[SOURCE]), reasons, sql
    )
    if len(dropped) and RAW_RECORD in dropped.columns:
        frame = _with_raw_records(frame, dropped)
    schema = _letters_schema(sql)
    table = pa.Table.from_pandas(frame.reindex(columns=schema.names), schema, preserve_index=False)
    return spark.createDataFrame(table)


def _with_raw_records(frame: pd.DataFrame, dropped: pd.DataFrame) -> pd.DataFrame:
    """Dead letters whose row is a line Spark could not parse: reason ``malformed``,
    with the line and its file (``frame`` and ``dropped`` row for row)."""
    raw = dropped[RAW_RECORD].to_numpy(object)
    bad = pd.notna(raw)
    frame = frame.copy()
    frame.loc[bad, "reason"] = DropReason.MALFORMED.value
    frame["source_file"] = np.where(bad, dropped[SOURCE_FILE].to_numpy(object), None)
    frame["source_line"] = pd.array([None] * len(frame), dtype="Int64")
    frame["raw_record"] = raw
    frame["error"] = np.where(bad, ERROR, None)
    return frame


def _collect(out, sql: SqlPlan, workdir: str, ptimes: np.ndarray) -> SqlRun:
    """Run the streaming query to the end of its input; its changelog (after that of
    the query's start, as on the local runner: :func:`with_start`) and dead letters."""
    fields = [f.name for f in sql.maintainer.output_fields()]
    run = collect_to_end(out, fields, os.path.join(workdir, "checkpoint"))
    log = in_order(with_start(sql, run.changelog, ptimes))
    dropped = run.dead_letters if len(run.dead_letters) else None
    dead = sql_dead_letters(
        dropped if dropped is not None else pd.DataFrame(columns=[SOURCE]),
        dropped["reason"].to_numpy() if dropped is not None else [],
        sql,
    )
    return SqlRun(sql.maintainer.columns, log[fields].reset_index(drop=True), dead)


__all__ = ["SparkSqlQuery", "spark_source"]
