"""The fast path of a windowed aggregate on Spark Structured Streaming.

The stream (a Spark streaming DataFrame, or a recorded replay played through
the replay source) is pre-projected with Spark SQL expressions
(:class:`~headwater.sql.execute.aggregate_local.Projection`: the GROUP BY key, the WHERE
flag, the aggregates' arguments), then runs the model's windowed plan with real
combiners on the streaming runner (combiner lifting where valid), with the
query's :class:`~headwater.sql.maintain.aggregate.AggregateMaintainer` as the pane
transform of every shard: each shard turns the panes of a micro-batch into
changelog rows with one DuckDB query and keeps its groups' last results (only
those of windows the model still holds) in Spark's state store.

Every row carries its own columns to the dead letters (a replay's row its
position in the table, a live stream's row its columns), so a dropped row can
be reprocessed; rows that travel whole are not lifted. Only with ``lift=True``
(combiner lifting, where the runner finds it valid) does a dead letter become
one partial aggregate of ``elements`` dropped rows, with the GROUP BY columns
and the partial's earliest event time only; the SQL dead letters repeat it
that many times.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from headwater.io.replay import read_replay as read_timeline
from headwater.io.replay import write_timeline
from headwater.model.plan import Schema, build_plan
from headwater.model.watermarks import BoundedOutOfOrderness, Punctuated, WatermarkStrategy
from headwater.runners.spark.ending import end_of_input_for, started
from headwater.runners.spark.output import changes, dead_letters
from headwater.runners.spark.session import starting_query
from headwater.runners.spark.streaming import CAPABILITIES, compile_streaming
from headwater.runners.spark.types import of_spark
from headwater.sql.errors import SqlError
from headwater.sql.execute.aggregate_local import ET, KEY, ROW, AggregatePlan, carried
from headwater.sql.execute.aggregate_local import dead_letters as sql_dead_letters
from headwater.sql.execute.local import SqlRun, steps_of
from headwater.sql.execute.permissive import CARRIED, event_time_sql, letter_columns
from headwater.sql.execute.spark_collect import collect_to_end
from headwater.sql.plan.catalog import PTIME, event_millis
from headwater.sql.plan.stamps import stamp_micros

#: Columns of the replay source that the pre-projection passes through.
_REPLAY_COLUMNS = ("kind", "proc_ms", "watermark_ms")

Sink = Callable[[Any, int], None]


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t) or pa.types.is_integer(t):
        return "bigint"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    return "string"


def carried_sources(sql: AggregatePlan) -> dict[str, str]:
    """Each column a live stream's dead letters carry
    (:func:`~headwater.sql.execute.aggregate_local.carried`) -> the column of the
    runner's dead letters that holds it: the projection's own column where it ships
    the stream's column unchanged (an aggregate's argument), so that a row's values
    cross the shuffle once; its own ``__r<i>`` for the others, a timestamp always
    (in µs: the event time's letter column is the model's ms). The one GROUP BY
    column that the shard key carries as it is comes from the key (``KEY``)."""
    # An argument that is the column itself, written bare or quoted.
    shipped = {expr.strip("`"): name for name, expr in sql.projection.args["spark"].items()}
    keyed = key_column(sql)
    if keyed is not None:
        shipped[keyed] = KEY
    return {
        name: name if pa.types.is_timestamp(f.type) else shipped.get(f.name, name)
        for name, f in zip(carried(sql), sql.schema, strict=True)
    }


def key_column(sql: AggregatePlan) -> str | None:
    """The stream's column that the shard key is, unchanged: a lone GROUP BY column
    of text, integers or booleans, which the runner keys by its own value
    (``_user_key`` in :mod:`headwater.runners.spark.streaming`); None otherwise."""
    group = sql.shape.group
    if len(group) != 1:
        return None
    field = next((f for f in sql.schema if f.name.lower() == group[0].lower()), None)
    if field is None or not (
        pa.types.is_string(field.type)
        or pa.types.is_integer(field.type)
        or pa.types.is_boolean(field.type)
    ):
        return None
    itself = exp.column(field.name, quoted=True).sql(dialect="spark")
    return field.name if sql.projection.key["spark"] == itself else None


def project(sql: AggregatePlan, df, *, passthrough: tuple[str, ...] = (), carry: bool = False):
    """The pre-projection of the stream ``df`` (the stream's own columns): key,
    WHERE flag, aggregate arguments and the event time ``__et``; with ``carry``,
    the row's columns for its dead letters that the projection does not already
    ship (:func:`carried_sources`)."""
    items = [*sql.projection.select("spark")]
    table = sql.shape.stream
    items.append(f"{event_time_sql(table, f'`{table.event_time}`')} AS {ET}")
    items += [f"`{c}`" for c in passthrough]
    if carry and table.permissive:
        items += [f"`{c}`" for c in CARRIED]
    if carry:
        sources = carried_sources(sql)
        for name, f in zip(carried(sql), sql.schema, strict=True):
            if sources[name] != name:
                continue
            value = f"`{f.name}`"
            if pa.types.is_timestamp(f.type):
                value = f"unix_micros(CAST({value} AS TIMESTAMP))"
            items.append(f"{value} AS {name}")
    return df.selectExpr(*items)


def compile_stream(
    sql: AggregatePlan,
    df,
    watermark: WatermarkStrategy,
    *,
    lift: bool | str = "auto",
    num_shards: int | None = None,
    carry: tuple[str, ...] = (),
    end_of_input=None,
):
    """The runner's streaming plan over the pre-projected ``df`` (see :func:`project`);
    ``carry``: its columns each dead letter keeps (none with ``lift=True``);
    ``end_of_input``: see :func:`~headwater.runners.spark.streaming.compile_streaming`."""
    plan = build_plan(
        Schema.of({f.name: of_spark(f.dataType) for f in df.schema.fields}),
        keys=sql.keys,
        event_time=ET,
        windowing=sql.strategy,
        aggregations=sql.aggregations,
        bounded=False,
        watermark=watermark,
        capabilities=CAPABILITIES,
    )
    return compile_streaming(
        df,
        plan,
        transform=sql.maintainer,
        timestamps="ms",
        lift=lift,
        num_shards=num_shards,
        carry=() if lift is True else carry,
        end_of_input=end_of_input,
    )


# ------------------------------------------------------------------ replays


def write_stream_timeline(sql: AggregatePlan, path: str, as_of: int | None) -> dict[str, str]:
    """The stream's replay as a timeline of its own rows (columns ``__c<i>``,
    timestamps as epoch µs): a step per processing time, each firing the
    timers due then. Returns the timeline's value columns and their types."""
    table = sql.shape.stream
    frame = table.frame
    columns = {f"__c{i}": _spark_type(f.type) for i, f in enumerate(sql.schema)}
    values = {}
    for name, f in zip(columns, sql.schema, strict=True):
        if pa.types.is_timestamp(f.type):
            values[name] = pd.Series(stamp_micros(frame[f.name]), dtype=object)
        else:
            values[name] = frame[f.name].astype(object).where(frame[f.name].notna(), None)
    rows = pd.DataFrame(values)
    rows[ROW] = np.arange(len(frame))
    columns[ROW] = "bigint"
    ptime = frame[PTIME].to_numpy(np.int64)
    et = event_millis(frame[table.event_time])
    ptimes, marks = steps_of(sql.query, pd.DataFrame({PTIME: ptime}), as_of)
    steps = []
    for step, mark in zip(ptimes, marks, strict=True):
        here = np.flatnonzero(ptime == step)
        records = rows.iloc[here].to_dict("records")
        step_rows = [
            {"key": "", "ts": None if np.isnan(et[i]) else int(et[i]), **record}
            for i, record in zip(here, records, strict=True)
        ]
        entry: dict[str, Any] = {"proc_ms": int(step), "rows": step_rows, "timers": True}
        if mark > np.iinfo(np.int64).min:
            entry["watermark_ms"] = int(mark)
        steps.append(entry)
    write_timeline(path, steps, columns=columns, key_type="string")
    return columns


def replay_frame(spark, sql: AggregatePlan, path: str):
    """The replay at ``path`` as a stream of the table's own columns (plus the
    replay's ``kind``, ``proc_ms`` and ``watermark_ms``)."""
    stream = read_timeline(spark, path)
    items = [*_REPLAY_COLUMNS, ROW]
    for i, f in enumerate(sql.schema):
        if pa.types.is_timestamp(f.type):
            items.append(f"timestamp_micros(`__c{i}`) AS `{f.name}`")
        else:
            items.append(f"`__c{i}` AS `{f.name}`")
    return stream.selectExpr(*items)


def run_replay(spark, sql: AggregatePlan, as_of: int | None = None, **options: Any) -> SqlRun:
    """The query over its recorded stream on the streaming runner, to the end."""
    workdir = tempfile.mkdtemp(prefix="headwater-sql-")
    try:
        path = os.path.join(workdir, "timeline.jsonl")
        write_stream_timeline(sql, path, as_of)
        passthrough = (*_REPLAY_COLUMNS, ROW)
        df = project(sql, replay_frame(spark, sql, path), passthrough=passthrough)
        out = compile_stream(sql, df, Punctuated("watermark_ms"), carry=(ROW,), **options)
        return collect(out, sql, os.path.join(workdir, "checkpoint"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def collect(out, sql: AggregatePlan, checkpoint: str) -> SqlRun:
    """Run the streaming plan to the end of its input; its changelog and dead letters."""
    fields = [f.name for f in sql.maintainer.output_fields()]
    run = collect_to_end(out, fields, checkpoint)
    log = run.changelog.sort_values(["ptime", "__gs", "__ge", "__gk", "ver"], kind="stable")
    return SqlRun(
        sql.maintainer.columns,
        log[fields].reset_index(drop=True),
        sql_dead_letters(sql, _model_drops(run.dead_letters)),
    )


def _model_drops(frame: pd.DataFrame) -> pd.DataFrame:
    """The runner's dead letters as the model's dropped frame."""
    if not len(frame):
        return pd.DataFrame(columns=["key", "timestamp", "window_start", "window_end", "reason"])
    out = pd.DataFrame(
        {
            "key": frame[KEY].to_numpy() if KEY in frame.columns else np.zeros(len(frame)),
            "timestamp": frame["event_time"].to_numpy(),
            "window_start": frame["window_start"].to_numpy(),
            "window_end": frame["window_end"].to_numpy(),
            "reason": frame["reason"].to_numpy(),
        }
    )
    if "elements" in frame.columns:
        out["elements"] = frame["elements"].to_numpy()
    if ROW in frame.columns:
        out[ROW] = frame[ROW].to_numpy(np.int64)
    return out


# ------------------------------------------------------------------ Spark streams


def changelog_frame(sql: AggregatePlan, out):
    """The changelog rows of the runner's output ``out`` (or of one micro-batch):
    the query's columns, ``undo``, ``ptime`` (a timestamp) and ``ver``."""
    from pyspark.sql import functions as F

    fields = [f.name for f in sql.maintainer.output_fields()]
    return changes(out, fields).select(
        *[F.col(f"`{c}`") for c in sql.maintainer.columns],
        F.col("undo"),
        F.timestamp_millis(F.col("ptime")).alias("ptime"),
        F.col("ver"),
    )


def dead_letter_frame(sql: AggregatePlan, out):
    """The dead letters of ``out`` (or of one micro-batch), as the SQL front end
    shows them: query, table, reason, window, the row's columns (with
    ``lift=True``: the GROUP BY columns and the event time of a partial
    aggregate), and ``elements`` (more than 1 for a lifted partial aggregate)."""
    from pyspark.sql import functions as F

    rows = dead_letters(out)
    table = sql.shape.stream
    reason, raw = letter_columns(rows)
    items = [
        F.lit(sql.query.name).alias("query"),
        F.lit(table.name).alias("table"),
        reason,
        F.timestamp_millis(F.col("window_start")).alias("window_start"),
        F.timestamp_millis(F.col("window_end")).alias("window_end"),
    ]
    columns = carried_sources(sql)
    if set(columns.values()) <= set(rows.columns):
        for name, f in zip(columns, sql.schema, strict=True):
            value = F.col(columns[name])
            items.append(
                (F.timestamp_micros(value) if pa.types.is_timestamp(f.type) else value).alias(
                    f.name
                )
            )
    else:
        items += _partial_columns(sql)
    items.append(F.col("elements"))
    return rows.select(*items, *raw)


def _partial_columns(sql: AggregatePlan) -> list:
    """The GROUP BY columns and event time of a lifted partial aggregate."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import from_arrow_type

    items = []
    table = sql.shape.stream
    group = sql.shape.group
    types = sql.maintainer.group_types
    carried = [T.LongType() if pa.types.is_timestamp(t) else from_arrow_type(t) for t in types]
    if len(group) == 1:
        values = [F.col(KEY).cast(carried[0])]
    elif group:
        schema = T.StructType([T.StructField(f"k{i}", t) for i, t in enumerate(carried)])
        parsed = F.from_json(F.col(KEY), schema)
        values = [parsed.getField(f"k{i}") for i in range(len(group))]
    else:
        values = []
    for name, value, t in zip(group, values, types, strict=True):
        items.append((F.timestamp_micros(value) if pa.types.is_timestamp(t) else value).alias(name))
    et = table.event_time
    if et not in group:
        is_time = pa.types.is_timestamp(sql.schema.field(et).type)
        stamp = F.timestamp_millis(F.col("event_time")) if is_time else F.col("event_time")
        items.append(stamp.alias(et))
    return items


def _carried_columns(sql: AggregatePlan) -> tuple[str, ...]:
    """The packet columns the dead letters carry (the key is every letter's own)."""
    return tuple(dict.fromkeys(s for s in carried_sources(sql).values() if s != KEY))


def live_output(
    sql: AggregatePlan,
    *,
    lift: bool | str = "auto",
    num_shards: int | None = None,
    end_of_input=None,
):
    """The runner's streaming output over the query's Spark stream (changes, panes
    and dead letters of each micro-batch): what :func:`start` writes, and stage 1
    of a query in stages (:mod:`headwater.sql.execute.stages_spark`) feeds stage 2."""
    table = sql.shape.stream
    if table.spark is None or not table.is_stream:
        raise SqlError(f"table {table.name!r} is not a Spark stream")
    table.check_spark_event_time()
    if not isinstance(table.watermark, BoundedOutOfOrderness):
        raise SqlError(
            f"the Spark stream {table.name!r} needs a watermark",
            hint="Declare WATERMARK FOR <event time> AS <event time> - INTERVAL ..., or pass "
            "Table(..., watermark=BoundedOutOfOrderness(ms))",
        )
    return compile_stream(
        sql,
        project(sql, table.spark, carry=True),
        table.watermark,
        # a dead letter keeps its whole row, even where every column already travels
        # (nothing left to carry): rows are lifted only when the caller says so
        lift=False if lift == "auto" else lift,
        num_shards=num_shards,
        carry=(*_carried_columns(sql), *(CARRIED if table.permissive else ())),
        end_of_input=end_of_input,
    )


def start(
    sql: AggregatePlan,
    *,
    checkpoint_location: str,
    sink: Sink | None = None,
    dead_letter_sink: Sink | None = None,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    lift: bool | str = "auto",
    num_shards: int | None = None,
    end_of_input: bool | None = None,
):
    """Start the query over its Spark stream. Each micro-batch's changelog
    (:func:`changelog_frame`) goes to ``sink`` and its dead letters
    (:func:`dead_letter_frame`) to ``dead_letter_sink``, each ``f(batch_df,
    batch_id)`` (idempotent per batch id: a batch re-runs after a failure);
    with neither, the changelog goes to Spark's ``noop`` sink (benchmarks).
    An ``availableNow`` run ends its input unless ``end_of_input`` is False
    (docs/semantics.md, "End of input")."""
    end = end_of_input_for(trigger, end_of_input)
    out = live_output(sql, lift=lift, num_shards=num_shards, end_of_input=end)
    if sink is None and dead_letter_sink is None:
        writer = changelog_frame(sql, out).writeStream.format("noop")
    else:

        def each_batch(batch, batch_id: int) -> None:
            batch = batch.persist()
            try:
                if sink is not None:
                    sink(changelog_frame(sql, batch), batch_id)
                if dead_letter_sink is not None:
                    dead_letter_sink(dead_letter_frame(sql, batch), batch_id)
            finally:
                batch.unpersist()

        writer = out.writeStream.foreachBatch(each_batch)
    writer = writer.option("checkpointLocation", checkpoint_location)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)

    def launch():
        with starting_query(out.sparkSession, num_shards):
            return writer.start()

    return started(launch, end, checkpoint_location)


__all__ = [
    "changelog_frame",
    "collect",
    "compile_stream",
    "dead_letter_frame",
    "live_output",
    "project",
    "run_replay",
    "start",
]
