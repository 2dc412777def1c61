"""The stateless path of a query over Spark streams: Spark's own projection.

A query in which no operator combines rows (:mod:`headwater.sql.plan.stateless`)
changes its result by each row alone, so its changelog over a micro-batch is
the query over that micro-batch's rows: no state store, no
``transformWithStateInPandas``, no Python worker. The query runs in
``foreachBatch`` as Spark SQL (the translation of bounded runs,
:func:`~headwater.sql.plan.translate.to_engine_sql`) over the batch's rows in the
stream's columns, with what the shard operator of the general path gives:

* the watermark is Spark's own (``withWatermark`` over the same union of the
  streams), read per batch from the
  offset log (``batchWatermarkMs``; 0 is none), as the shard reads it from
  ``TimerValues``; ``ptime`` is the batch's ``batchTimestampMs`` there, so a
  re-executed batch has the same one;
* a row whose group (its event-time instant ``[t, t + 1)``) ends, with the
  allowed lateness, at or before the watermark is late: a dead letter, as is a
  row of NULL event time (a malformed line of a file: ``malformed``);
* every change is an insert (``undo`` false); ``ver`` numbers the changes of one
  event-time instant from 0 across micro-batches, in the order of the result
  columns (nulls last), as the general path's materializer does. The counts of
  the instants the watermark has not passed are the only thing carried from one
  batch to the next: in the driver, and in the checkpoint directory under the
  batch id (``headwater-stateless/<batch id>``), so that a restart, or a batch
  run again after a failure, numbers the same way. A sink that discards (a
  blackhole) reads no column: it is handed the changelog without ``ver`` and
  ``ptime``, so neither the numbering (a shuffle of every row) nor the counts
  are computed;
* the end of input (:mod:`headwater.runners.spark.ending`): nothing is pending
  (every change is emitted at once), so the end adds no change and no control
  stream is read (a Python source, read in every micro-batch); as on the general
  path, an ``availableNow`` run that ends its input runs the query once more from
  its checkpoint (the files that arrived during the first run), then records the
  end in the checkpoint (``headwater-stateless/ended``), and a later run from it is
  refused (:class:`~headwater.io.end_of_input.InputEndedError`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from headwater.io.end_of_input import InputEndedError, ended_message
from headwater.model.schema import DropReason
from headwater.model.time import MIN_TIMESTAMP
from headwater.runners.spark.ending import BoundedQuery, end_of_input_for
from headwater.runners.spark.session import starting_query
from headwater.runners.spark.types import to_spark
from headwater.sql.execute.local import SqlPlan, columns_of
from headwater.sql.execute.permissive import CARRIED
from headwater.sql.execute.spark_collect import run_persisted
from headwater.sql.maintain.groups import SOURCE
from headwater.sql.plan.functions import register_spark
from headwater.sql.plan.stateless import EVENT_TIME, columns_read, with_event_time
from headwater.sql.plan.translate import to_engine_sql

#: The folder of the checkpoint that keeps the version counts, one file per batch.
FOLDER = "headwater-stateless"
#: The event-time column Spark's watermark reads (a timestamp of the ``ts`` ms).
_WATERMARKED = "__hw_event_time"
#: Batches of counts kept in the checkpoint (the last ones: a failed batch re-runs).
_KEEP = 3


@dataclass(frozen=True)
class Versions:
    """What one batch leaves for the next: per event time (ms) the changes it had,
    for the instants not yet late; ``horizon``: the watermark up to which counts
    were dropped (a later batch's watermark is never lower)."""

    counts: dict[int, int]
    horizon: int = MIN_TIMESTAMP
    #: False: the batches up to this one went to a sink that reads no ``ver``, uncounted
    numbered: bool = True

    def to_json(self) -> str:
        counts = [[int(t), int(n)] for t, n in self.counts.items()]
        data = {"counts": counts, "horizon": self.horizon, "numbered": self.numbered}
        return json.dumps(data)

    @staticmethod
    def of_json(text: str) -> Versions:
        data = json.loads(text)
        counts = {int(t): int(n) for t, n in data["counts"]}
        return Versions(counts, int(data["horizon"]), bool(data.get("numbered", True)))


class Checkpoint:
    """The query's checkpoint directory (any file system pyarrow reaches): the
    offset log Spark writes and the version counts this path writes."""

    def __init__(self, location: str) -> None:
        if "://" not in location:
            location = os.path.abspath(location.removeprefix("file:"))
        self.fs, self.root = pafs.FileSystem.from_uri(location)
        self._last: tuple[int, Versions] | None = None

    def _read(self, path: str) -> str | None:
        try:
            with self.fs.open_input_stream(f"{self.root}/{path}") as fh:
                return fh.read().decode("utf-8")
        except FileNotFoundError:
            return None

    def batch_times(self, batch_id: int) -> tuple[int | None, int]:
        """The batch's watermark (None: Spark has none yet) and processing time (ms),
        from its entry in the offset log (written before the batch runs)."""
        text = self._read(f"offsets/{batch_id}")
        if text is None:
            raise RuntimeError(f"no offset log entry for batch {batch_id} in {self.root}")
        meta = json.loads(text.splitlines()[1])
        watermark = int(meta.get("batchWatermarkMs", 0))
        return (watermark if watermark > 0 else None), int(meta["batchTimestampMs"])

    def versions(self, batch_id: int) -> Versions:
        """The counts the batch before ``batch_id`` left (none before the first)."""
        if self._last is not None and self._last[0] == batch_id - 1:
            return self._last[1]
        text = self._read(f"{FOLDER}/{batch_id - 1}") if batch_id > 0 else None
        if text is None and batch_id > 0:
            raise RuntimeError(
                f"the checkpoint {self.root} has no version counts of batch {batch_id - 1} "
                "(it was not written by the stateless path): start a new checkpoint"
            )
        return Versions.of_json(text) if text is not None else Versions({})

    def has_ended(self) -> bool:
        """Whether an earlier run ended the input (a later one would drop every row)."""
        return self._read(f"{FOLDER}/ended") is not None

    def end(self) -> None:
        """Record that the input ended."""
        self.fs.create_dir(f"{self.root}/{FOLDER}", recursive=True)
        with self.fs.open_output_stream(f"{self.root}/{FOLDER}/ended") as fh:
            fh.write(b"ended\n")

    def keep(self, batch_id: int, versions: Versions) -> None:
        """Write the counts ``batch_id`` leaves (before Spark commits the batch)."""
        self.fs.create_dir(f"{self.root}/{FOLDER}", recursive=True)
        with self.fs.open_output_stream(f"{self.root}/{FOLDER}/{batch_id}") as fh:
            fh.write(versions.to_json().encode("utf-8"))
        old = f"{self.root}/{FOLDER}/{batch_id - _KEEP}"
        if batch_id >= _KEEP and self.fs.get_file_info(old).type != pafs.FileType.NotFound:
            self.fs.delete_file(old)
        self._last = (batch_id, versions)


@dataclass(frozen=True)
class StatelessQuery:
    """What each micro-batch needs: the query's Spark SQL (its last column the
    event time), the stream's view, the output columns and types, and the timing."""

    name: str
    text: str
    view: list[tuple[str, str, bool]]  #: (column, union column, is a timestamp)
    columns: list[str]
    types: list[Any]
    lateness: int
    delay: int
    permissive: bool
    on_driver: bool = False  #: ``ver`` numbered on the collected batch (ranks_on_driver)
    sql_types: tuple[str, ...] = ()  #: ``types`` in Spark SQL's spelling (for CAST)


def plan_stateless(sql: SqlPlan, delay: int, spark=None) -> StatelessQuery:
    """The stateless form of ``sql`` (its query takes the stateless path); with
    ``spark``, its types spelled in Spark SQL by Spark itself (:func:`batch_sql`)."""
    plan = sql.query
    layout, read = sql.layouts[0], columns_read(sql.query)
    view = [
        (c, u, c in layout.timestamps)
        for c, u in zip(layout.columns, layout.union, strict=True)
        if c in read
    ]
    maintainer = sql.maintainer
    types = [to_spark(maintainer.types[c], what=repr(c)) for c in maintainer.columns]
    return StatelessQuery(
        name=plan.streams[0].name,
        text=to_engine_sql(with_event_time(plan), "spark", columns_of(plan)),
        view=view,
        columns=list(maintainer.columns),
        types=types,
        lateness=plan.allowed_lateness,
        delay=delay,
        permissive=any(t.permissive for t in plan.streams),
        on_driver=ranks_on_driver(types),
        sql_types=tuple(sql_type(spark, t) for t in types) if spark is not None else (),
    )


def sql_type(spark, t) -> str:
    """``t`` as Spark SQL spells it (``DataType.sql``: quoted field names, collations)."""
    jvm_types = spark._jvm.org.apache.spark.sql.types
    return str(jvm_types.DataType.fromJson(t.json()).sql())


def _passed(watermark: int, lateness: int) -> str:
    """Spark SQL: whether the instant ``[ts, ts + 1)`` of a row plus the allowed
    lateness has passed ``watermark``, compared as DECIMALs, not integers, so that
    the code Spark generates is the same every batch (:func:`batch_sql`)."""
    return (
        f"CAST(ts AS DECIMAL(20, 0)) + {1 + lateness} <= CAST({int(watermark)} AS DECIMAL(20, 0))"
    )


def _late(F, ts, watermark: int | None, lateness: int):
    """Whether a row's instant ``[ts, ts + 1)`` plus the allowed lateness has passed."""
    if watermark is None:
        return F.lit(False)
    return ts.isNotNull() & F.expr(_passed(watermark, lateness))


def _letters(F, batch, late, permissive: bool, layout_cols: list[str]):
    """The batch's dead letters in the runner's layout (:func:`letters_frame` reads it)."""
    ts = F.col("ts")
    null = ts.isNull()
    cols = [F.col(SOURCE), *(F.col(c) for c in layout_cols)]
    cols += [
        F.when(late, ts).alias("window_start"),
        F.when(late, ts + F.lit(1)).alias("window_end"),
        F.when(null, F.lit(DropReason.NULL_EVENT_TIME.value))
        .otherwise(F.lit(DropReason.LATE.value))
        .alias("reason"),
    ]
    if permissive:
        cols += [F.col(c) for c in CARRIED]
    return batch.where(null | late).select(*cols)


def quoted(name: str) -> str:
    """A Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


#: The temporary view of a micro-batch's rows (in the query's own session).
BATCH_VIEW = "__hw_batch"


def batch_sql(
    query: StatelessQuery, watermark: int | None, changelog: bool = False, event_time: bool = True
) -> str:
    """The query over the rows on time of the micro-batch (the view :data:`BATCH_VIEW`) as
    one statement: the query's columns in their types, then (``changelog``) ``undo``,
    then (``event_time``) each row's event time. One statement is one analysis per
    batch, where building it with DataFrame calls was a dozen (a tenth of a second
    of a small batch's time, docs/nexmark.md "Latency").

    The batch's own values never appear as integers in the statement: Spark writes an
    integral literal into the Java code it generates and compiles (Janino), so a
    watermark or ``ptime`` that changes every batch made every batch compile its
    code again (two compilations, tens of milliseconds, in a batch of a hundred
    rows). The watermark is compared as a DECIMAL (Spark passes a DECIMAL literal
    to the code as a reference, so the code is the same from one batch to the next
    and compiled once, for a dearer comparison per row), the event time's side a
    sum, not a bare cast, which Spark's optimizer would turn back into an integer
    comparison; ``ptime`` is added to the collected changes (:func:`with_ptime`)."""
    view = [
        (f"timestamp_micros({quoted(u)})" if stamp else quoted(u)) + f" AS {quoted(c)}"
        for c, u, stamp in query.view
    ]
    on_time = "ts IS NOT NULL"
    if watermark is not None:  # not late: the negation of _late
        on_time += f" AND NOT ({_passed(watermark, query.lateness)})"
    n = len(query.columns)
    inner = [f"__hw_c{i}" for i in range(n + 1)]  # the query's outputs, by position
    out = [
        f"CAST(__hw_q.{inner[i]} AS {t}) AS {quoted(c)}"
        for i, (c, t) in enumerate(zip(query.columns, query.sql_types, strict=True))
    ]
    if changelog:
        out.append("false AS undo")
    if event_time:
        out.append(f"__hw_q.{inner[n]} AS {EVENT_TIME}")
    return (
        f"WITH {quoted(query.name)} AS (SELECT {', '.join(view)}, ts AS {EVENT_TIME} "
        f"FROM {BATCH_VIEW} WHERE {on_time}) "
        f"SELECT {', '.join(out)} FROM ({query.text}) AS __hw_q({', '.join(inner)})"
    )


def _rows(batch, query: StatelessQuery, watermark: int | None, **columns: bool):
    """The query over the batch's rows on time (:func:`batch_sql`; ``columns``: its
    ``changelog`` and ``event_time``)."""
    batch.createOrReplaceTempView(BATCH_VIEW)
    return batch.sparkSession.sql(batch_sql(query, watermark, **columns))


def _changes(F, batch, query: StatelessQuery, versions: Versions, watermark: int | None):
    """:func:`_rows` with ``ver`` numbered by a Spark window (a shuffle): for the
    queries whose columns Arrow cannot order as Spark does (:func:`ranks_on_driver`)."""
    from pyspark.sql import Window

    spark = batch.sparkSession
    out = _rows(batch, query, watermark)
    order = [F.col(f"`{c}`").asc_nulls_last() for c in query.columns]
    rank = F.row_number().over(Window.partitionBy(EVENT_TIME).orderBy(*order)) - F.lit(1)
    if versions.counts:
        counts = versions.counts  # from Arrow: a local relation, no Python worker decodes it
        prior = pa.table(
            {EVENT_TIME: pa.array(list(counts), pa.int64()), "__hw_n": list(counts.values())}
        )
        prior = spark.createDataFrame(prior)
        out = out.join(F.broadcast(prior), EVENT_TIME, "left")
        rank = rank + F.coalesce(F.col("__hw_n"), F.lit(0))
    return out.select(
        *[F.col(f"`{c}`") for c in query.columns], F.col(EVENT_TIME), rank.cast("long").alias("ver")
    )


def changelog(F, changes, query: StatelessQuery, *extra):
    """The changelog of :func:`_changes`' rows: the query's columns, ``undo``,
    ``ver`` (when they have it: :func:`_rows`' do not), then ``extra``; ``ptime``
    is added once they are collected (:func:`with_ptime`)."""
    return changes.select(
        *[F.col(f"`{c}`") for c in query.columns],
        F.lit(False).alias("undo"),
        *([F.col("ver")] if "ver" in changes.columns else []),
        *extra,
    )


#: ``ptime`` as Spark's ``toArrow`` gives a timestamp (microseconds, UTC).
PTIME = pa.field("ptime", pa.timestamp("us", tz="UTC"), nullable=False)


def with_ptime(table: pa.Table, ptime: int) -> pa.Table:
    """The collected changes (``table``: the query's columns, ``undo``, the rest) with
    the batch's processing time ``ptime`` (ms) after ``undo``: added on the driver,
    not in the statement, where it would be a literal compiled into each batch's
    code (:func:`batch_sql`)."""
    column = pa.array(np.full(table.num_rows, int(ptime) * 1000, np.int64), PTIME.type)
    return table.add_column(table.column_names.index("undo") + 1, PTIME, column)


def with_ptime_field(schema):
    """A Spark schema of the changes (:func:`with_ptime`'s input) with ``ptime``."""
    from pyspark.sql.types import StructField, StructType, TimestampType

    fields = list(schema.fields)
    at = [f.name for f in fields].index("undo") + 1
    return StructType([*fields[:at], StructField("ptime", TimestampType(), False), *fields[at:]])


def as_frame(spark, table: pa.Table, schema):
    """The collected changelog as a Spark DataFrame of ``schema`` (the sink's batch):
    a local relation, so a sink reading it runs no query over the files again."""
    return spark.createDataFrame(table, schema=schema)


def ranks_on_driver(types) -> bool:
    """Whether Arrow orders every result column as Spark's window would (numbers,
    binary-collated strings, bytes, booleans, dates, timestamps): then ``ver`` is
    numbered on the collected batch, without the window's shuffle."""
    from pyspark.sql import types as T

    plain = (T.NumericType, T.BinaryType, T.BooleanType, T.DateType, T.TimestampType)
    plain += (T.TimestampNTZType,)

    def orderable(t) -> bool:
        if isinstance(t, T.StringType):
            return getattr(t, "collation", "UTF8_BINARY") == "UTF8_BINARY"
        return isinstance(t, plain)

    return all(orderable(t) for t in types)


def numbered(table: pa.Table, columns: list[str], versions: Versions) -> pa.Array:
    """``ver`` of each collected change: its rank among the batch's changes of its
    event time in the order of ``columns`` (nulls last), after the changes the
    earlier batches had there (as :func:`_changes`' window numbers them)."""
    keys = [(EVENT_TIME, "ascending"), *[(c, "ascending") for c in columns]]
    order = pc.sort_indices(table, sort_keys=keys).to_numpy()  # NaN, then nulls, last
    times = table[EVENT_TIME].to_numpy()[order]  # never null: the rows on time have one
    position = np.arange(len(times))
    first = np.ones(len(times), dtype=bool)
    first[1:] = times[1:] != times[:-1]
    rank = position - np.maximum.accumulate(np.where(first, position, 0))
    if versions.counts:
        known = np.fromiter(versions.counts.keys(), np.int64, len(versions.counts))
        before = np.fromiter(versions.counts.values(), np.int64, len(versions.counts))
        by_time = np.argsort(known)
        known, before = known[by_time], before[by_time]
        at = np.clip(np.searchsorted(known, times), 0, len(known) - 1)
        rank = rank + np.where(known[at] == times, before[at], 0)
    ver = np.empty(len(times), dtype=np.int64)
    ver[order] = rank
    return pa.array(ver, pa.int64())


def tally(table: pa.Table, floor: int, lateness: int) -> dict[int, int]:
    """The changes per event time (ms) of the collected changelog (its
    ``EVENT_TIME`` column) that a later row may still join (past ``floor``, the
    horizon the counts are kept for): counted on the driver, not by a second
    Spark job, and only those (a throughput run's one batch has no watermark yet:
    every instant would otherwise be counted, kept and written)."""
    times = table[EVENT_TIME].drop_null()
    times = times.filter(pc.greater(pc.add(times, 1 + lateness), floor))
    counts = pc.value_counts(times)
    times = counts.field("values").to_numpy(zero_copy_only=False)
    return dict(zip(times.tolist(), counts.field("counts").to_numpy().tolist(), strict=True))


def kept_from(horizon: int, latest: int | None, delay: int) -> int:
    """The horizon the counts after a batch are kept for: its watermark, or, when
    higher, its largest event time less the watermark's delay. Spark's watermark
    for the next batch is the largest event time it has seen less the delay, so
    an instant at or below this is late in every later batch (its count is never
    read again); a next watermark below it is an error (:meth:`EachBatch._run`).
    Not when that is 0 or less: Spark's watermark there reads as none."""
    if latest is None or latest - delay <= 0:
        return horizon
    return max(horizon, latest - delay)


def next_versions(versions: Versions, counts: dict[int, int], horizon: int, lateness: int):
    """The counts after a batch: the earlier ones and the batch's (``counts``), for
    the instants a row may still join at ``horizon`` (the batch's watermark: the
    next batch's is never lower, so this keeps a few more than it needs at most)."""
    kept = {t: n for t, n in versions.counts.items() if t + 1 + lateness > horizon}
    for t, n in counts.items():
        if t + 1 + lateness > horizon:
            kept[t] = kept.get(t, 0) + n
    return Versions(kept, horizon)


@dataclass
class EachBatch:
    """The ``foreachBatch`` function of the stateless query: one micro-batch's
    changelog to ``sink``, its dead letters to ``dead_letter_sink``, the version
    counts to the checkpoint. A batch is at most two Spark jobs: the changes,
    collected once as Arrow (the counts are taken from them on the driver, and the
    sink is given them as a local DataFrame) or run uncollected into a sink that
    discards them, and the dead letters when there is a dead-letter sink."""

    sql: SqlPlan
    query: StatelessQuery
    checkpoint: Checkpoint
    letters_frame: Callable
    sink: Any = None
    dead_letter_sink: Any = None

    def __call__(self, batch, batch_id: int) -> None:
        if self.dead_letter_sink is None:  # the batch is read once: nothing to keep
            self._run(batch, batch_id)
        else:
            run_persisted(self._run, batch, batch_id)

    def _run(self, batch, batch_id: int) -> None:
        from pyspark.sql import functions as F

        query = self.query
        watermark, ptime = self.checkpoint.batch_times(batch_id)
        versions = self.checkpoint.versions(batch_id)
        if watermark is not None and watermark < versions.horizon:
            raise RuntimeError(
                f"batch {batch_id}: Spark's watermark {watermark} is below {versions.horizon}, "
                "the one the version counts were kept for"
            )
        horizon = max(watermark if watermark is not None else MIN_TIMESTAMP, versions.horizon)
        times = (watermark, ptime, horizon)
        if getattr(self.sink, "discards", False):
            self._discarded(batch, times, batch_id)
            after = Versions({}, horizon, numbered=False)
        else:
            if not versions.numbered:
                raise RuntimeError(
                    f"batch {batch_id}: the earlier batches of the checkpoint "
                    f"{self.checkpoint.root} went to a sink that reads no `ver` (a "
                    "blackhole), so their changes were not counted: start a new "
                    "checkpoint for this sink"
                )
            counts, floor = self._collected(batch, versions, times, batch_id)
            after = next_versions(versions, counts, floor, query.lateness)
        if self.dead_letter_sink is not None:
            spark = batch.sparkSession
            late = _late(F, F.col("ts"), watermark, query.lateness)
            layout = list(self.sql.layouts[0].union)
            dropped = _letters(F, batch, late, query.permissive, layout).toPandas()
            dropped = dropped if len(dropped) else pd.DataFrame()
            self.dead_letter_sink(self.letters_frame(spark, self.sql, dropped), batch_id)
        self.checkpoint.keep(batch_id, after)

    def _collected(
        self, batch, versions: Versions, times: tuple[int | None, int, int], batch_id: int
    ) -> tuple[dict[int, int], int]:
        """The batch's changes collected once as Arrow, to the sink (when there is
        one); the changes per event time that later rows may join, and the horizon
        they are kept for (:func:`kept_from`). ``times``: the batch's watermark,
        ptime and horizon."""

        from pyspark.sql import functions as F

        query, spark = self.query, batch.sparkSession
        watermark, ptime, horizon = times
        if query.on_driver:  # the changelog's columns in the one statement
            out = _rows(batch, query, watermark, changelog=True)
        else:
            changes = _changes(F, batch, query, versions, watermark)
            out = changelog(F, changes, query, F.col(EVENT_TIME))
        table = out.toArrow()  # the batch's one job of changes
        latest = pc.max(table[EVENT_TIME]).as_py()
        floor = kept_from(horizon, latest, query.delay)
        counts = tally(table, floor, query.lateness)
        if self.sink is not None:
            log = with_ptime(table.drop_columns([EVENT_TIME]), ptime)
            if query.on_driver:
                log = log.append_column("ver", numbered(table, query.columns, versions))
            if getattr(self.sink, "takes_arrow", False):
                self.sink(log, batch_id)
            else:  # the schema only then: it is one more round trip to Spark
                schema = with_ptime_field(out.drop(EVENT_TIME).schema)
                if query.on_driver:
                    schema = schema.add("ver", "long", nullable=False)
                self.sink(as_frame(spark, log, schema), batch_id)
        return counts, floor

    def _discarded(self, batch, times: tuple[int | None, int, int], batch_id: int) -> None:
        """The batch's changelog without ``ver`` and ``ptime``, handed uncollected to a
        sink that discards it (a blackhole runs it in one job). It reads no column, and
        ``ver`` is headwater's own (no row of Flink's or Spark's has one): numbering it
        is a window, a shuffle and a sort of every row, that a discarding sink never
        sees; ``ptime``, the batch's constant, would be a literal compiled into each
        batch's code (:func:`batch_sql`)."""
        watermark, _, _ = times
        out = _rows(batch, self.query, watermark, changelog=True, event_time=False)
        self.sink(out, batch_id)


def start(
    sql: SqlPlan,
    union,
    delay: int,
    letters_frame: Callable,
    *,
    checkpoint_location: str,
    sink=None,
    dead_letter_sink=None,
    trigger: Mapping[str, Any] | None = None,
    end_of_input: bool | None = None,
):
    """Start the stateless query over ``union`` (the streams in the union layout,
    :meth:`~headwater.sql.execute.spark.SparkSqlQuery._union`'s), as
    :meth:`~headwater.sql.execute.spark.SparkSqlQuery.start` does the general path:
    ``letters_frame(spark, sql, dropped)`` makes the dead letters' frame."""
    from pyspark.sql import functions as F

    end = end_of_input_for(trigger, end_of_input)
    checkpoint = Checkpoint(checkpoint_location)
    if checkpoint.has_ended():
        raise InputEndedError(ended_message(checkpoint_location))
    query = plan_stateless(sql, delay, union.sparkSession)
    register_spark(union.sparkSession, sql.query.functions)  # pandas_udfs the statement calls
    if dead_letter_sink is None and not query.permissive:
        # only the columns the query reads: a dead letter would need every one, and
        # Spark's CSV and JSON readers find a malformed line only in the columns read
        union = union.select(SOURCE, *(quoted(u) for _, u, _ in query.view), "ts")
    else:  # the group key is the general path's (its shards'): not computed per row here
        union = union.drop("key")
    stream = union.withColumn(_WATERMARKED, F.timestamp_millis(F.col("ts")))
    stream = stream.withWatermark(_WATERMARKED, f"{delay} milliseconds").drop(_WATERMARKED)
    each_batch = EachBatch(sql, query, checkpoint, letters_frame, sink, dead_letter_sink)
    writer = stream.writeStream.foreachBatch(each_batch).option(
        "checkpointLocation", checkpoint_location
    )
    if trigger:
        writer = writer.trigger(**trigger)

    def launch():
        with starting_query(union.sparkSession):
            return writer.start()

    if end is None or not end.ends:
        return launch()
    return BoundedQuery(launch, EndMarker(checkpoint))  # type: ignore[arg-type]


@dataclass(frozen=True)
class EndMarker:
    """The end of input of a stateless query for :class:`~headwater.runners.spark.
    ending.BoundedQuery`: no row waits for it, so there is nothing to signal to the
    run after the input's; once that run is over, the checkpoint records the end."""

    checkpoint: Checkpoint

    def send(self) -> None:
        """Nothing to signal: the next run reads what arrived meanwhile, as is."""

    def discard(self) -> None:
        self.checkpoint.end()
