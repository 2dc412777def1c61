"""The user-facing API: a DataFrame in, a DataFrame of panes out.

    import headwater as hw
    from headwater.api import FixedWindows, AfterWatermark, AfterProcessingTime, AfterCount

    scores = hw.from_spark(df, event_time="ts")       # bounded or streaming df
    result = (scores
        .window(FixedWindows("2 minutes"),
                trigger=AfterWatermark(early=AfterProcessingTime("1 minute"),
                                       late=AfterCount(1)),
                allowed_lateness="10 minutes",
                accumulation="retracting")
        .group_by("team")
        .agg(total=hw.sum("score"), n=hw.count()))
    result.to_spark()
    # team, window_start, window_end, total, n, timestamp, pane_index,
    # nonspeculative_index, timing, is_first, is_last, is_retraction

The four questions map onto the calls: *what* is ``agg`` (each helper such as
:func:`sum` names a core combiner from :mod:`headwater.model.combiners`, which
the streaming runner executes, and which the bounded runner compiles to Spark's
own aggregate); *where* is the window function; *when* is the trigger (and the
watermark); *how* is the accumulation mode.

A bounded DataFrame compiles to a native Spark batch plan
(:mod:`headwater.runners.spark.batch`): every window emits one complete ON_TIME
pane. A streaming DataFrame runs on Structured Streaming through the core
(:mod:`headwater.runners.spark.streaming`).

Times: ``window_start``, ``window_end`` and ``timestamp`` have the type of the
event-time column: ``TIMESTAMP`` in, ``TIMESTAMP`` out; epoch-millisecond
``BIGINT`` in, epoch milliseconds out. (The global window's bounds, the ends of
time, lie outside the years 1 to 9999 and are null in timestamp form.)

Rows with a null event time are never dropped silently: by default they are
left out of every window and returned by :meth:`WindowedAggregation.dead_letters`
(with ``reason = 'null_event_time'``, and counted by
:meth:`WindowedAggregation.dead_letter_count`); with
``from_spark(..., on_null_event_time="error")`` the query fails instead, with an
error naming the column.

This module imports PySpark only when a DataFrame is handled, so ``import
headwater`` stays cheap.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from headwater.model import types
from headwater.model.combiners import (
    ApproxDistinct,
    ApproxQuantiles,
    CombineFn,
    Count,
    Max,
    Mean,
    Min,
    Sum,
    ToList,
    TopK,
)
from headwater.model.panes import Accumulation, TimestampCombiner
from headwater.model.plan import (
    Capabilities,
    PlanError,
    Schema,
    WindowedAggregationPlan,
    build_plan,
    check_windowing,
)
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import to_millis
from headwater.model.triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Default,
    Never,
    OrFinally,
    Repeatedly,
    Trigger,
)
from headwater.model.watermarks import (
    BoundedOutOfOrderness,
    Perfect,
    Punctuated,
    WatermarkStrategy,
    watermark_strategy,
)
from headwater.model.windows import (
    CalendarWindows,
    CumulativeWindows,
    FixedWindows,
    GlobalWindows,
    Sessions,
    SlidingWindows,
    ValidityWindows,
    WindowFn,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    # entry point and the chain of builders
    "from_spark",
    "from_pandas",
    "from_kafka",
    "EventStream",
    "WindowedStream",
    "GroupedWindowedStream",
    "WindowedAggregation",
    # aggregations
    "Aggregation",
    "sum",
    "count",
    "mean",
    "avg",
    "min",
    "max",
    "collect_list",
    "top_k",
    "approx_count_distinct",
    "approx_quantiles",
    # the model, re-exported for one import
    "WindowingStrategy",
    "Accumulation",
    "TimestampCombiner",
    "WindowFn",
    "GlobalWindows",
    "FixedWindows",
    "SlidingWindows",
    "CumulativeWindows",
    "Sessions",
    "CalendarWindows",
    "ValidityWindows",
    "Trigger",
    "Default",
    "AfterWatermark",
    "AfterCount",
    "AfterProcessingTime",
    "Repeatedly",
    "AfterEach",
    "AfterAny",
    "AfterAll",
    "OrFinally",
    "Never",
    # the plan and where the watermark comes from
    "PlanError",
    "WindowedAggregationPlan",
    "WatermarkStrategy",
    "BoundedOutOfOrderness",
    "Punctuated",
    "Perfect",
]

_INPUT_PREFIX = "__hw_in_"


# ------------------------------------------------------------------ aggregations
@dataclass(frozen=True)
class Aggregation:
    """One named output of :meth:`GroupedWindowedStream.agg`: a core combiner and the
    input it reads (a column name, a PySpark ``Column`` expression, or ``None``
    for combiners that read no value, such as :func:`count`)."""

    combine_fn: CombineFn
    column: Any = None

    def __repr__(self) -> str:
        col = self.column if self.column is None or isinstance(self.column, str) else "<expr>"
        return f"Aggregation({self.combine_fn!r}, {col!r})"


def _column(column: Any, helper: str) -> Any:
    if column is None:
        raise TypeError(f"hw.{helper}() needs a column name or a Column expression")
    return column


def sum(column: str | Column) -> Aggregation:  # noqa: A001 - mirrors pyspark.sql.functions
    """Sum of the values (nulls ignored; a window with no non-null value sums to NULL,
    as in SQL: NaN in a pandas result)."""
    return Aggregation(Sum(), _column(column, "sum"))


def count(column: str | Column | None = None) -> Aggregation:
    """Number of elements in the pane: ``count()`` counts every row (SQL ``COUNT(*)``),
    ``count(column)`` the non-null values of ``column`` (SQL ``COUNT(col)``)."""
    if column is None:
        return Aggregation(Count(), None)
    return Aggregation(Count(skip_nulls=True), column)


def mean(column: str | Column) -> Aggregation:
    """Arithmetic mean of the values."""
    return Aggregation(Mean(), _column(column, "mean"))


avg = mean


def min(column: str | Column) -> Aggregation:  # noqa: A001
    """Smallest value."""
    return Aggregation(Min(), _column(column, "min"))


def max(column: str | Column) -> Aggregation:  # noqa: A001
    """Largest value."""
    return Aggregation(Max(), _column(column, "max"))


def collect_list(column: str | Column) -> Aggregation:
    """All values of the pane as a list (order unspecified on Spark)."""
    return Aggregation(ToList(), _column(column, "collect_list"))


def top_k(column: str | Column, k: int, *, largest: bool = True) -> Aggregation:
    """The ``k`` largest (``largest=False``: smallest) values, sorted best first."""
    return Aggregation(TopK(k, largest=largest), _column(column, "top_k"))


def approx_count_distinct(column: str | Column, rsd: float = 0.05) -> Aggregation:
    """HyperLogLog distinct count with relative standard deviation about ``rsd``
    (PySpark's parameter; it sets the sketch precision as Spark does)."""
    if not 0 < rsd < 0.4:
        raise ValueError(f"rsd must be in (0, 0.4), got {rsd!r}")
    precision = builtins.min(builtins.max(math.ceil(2 * math.log2(1.106 / rsd)), 4), 16)
    return Aggregation(ApproxDistinct(precision), _column(column, "approx_count_distinct"))


def approx_quantiles(column: str | Column, num_quantiles: int = 5) -> Aggregation:
    """``num_quantiles`` evenly spaced approximate quantiles, minimum and maximum included."""
    return Aggregation(ApproxQuantiles(num_quantiles), _column(column, "approx_quantiles"))


def _as_aggregation(name: str, spec: Any) -> Aggregation:
    if isinstance(spec, Aggregation):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], CombineFn):
        return Aggregation(spec[0], spec[1])
    if isinstance(spec, CombineFn):
        return Aggregation(spec, None)
    raise TypeError(
        f"aggregation {name!r}: expected hw.sum(...)/hw.count()/... or a "
        f"(CombineFn, column) pair, got {spec!r}"
    )


# ----------------------------------------------------------------------- builders
_WATERMARK_FIX = "Pass e.g. watermark='10 seconds' (rows up to 10 s out of order)"


def _check_duration(argument: str, value: Any) -> None:
    """PlanError naming ``argument`` when ``value`` is not a duration."""
    try:
        to_millis(value)
    except (TypeError, ValueError):
        raise PlanError(
            f"{argument} is not a duration",
            argument=argument,
            found=repr(value),
            fix=f"Pass e.g. {argument}='5 minutes', seconds as a number, or a timedelta",
        ) from None


def from_spark(
    df: DataFrame,
    event_time: str,
    *,
    watermark: Any = None,
    on_null_event_time: str = "dead_letter",
) -> EventStream:
    """An event stream over a Spark DataFrame, bounded or streaming.

    ``event_time`` names a ``TIMESTAMP`` column or an integral column of epoch
    milliseconds. ``watermark`` (a :class:`~headwater.model.watermarks.
    WatermarkStrategy`, or a duration such as ``"10 minutes"`` for bounded
    out-of-orderness as Spark's ``withWatermark``, or ``"punctuated"`` when the
    stream carries its watermark in a ``watermark_ms`` column, the default for
    a streaming input that has one); a bounded input is complete, so its
    watermark is perfect and this is ignored. ``on_null_event_time`` is
    ``"dead_letter"`` (rows with a null event time are left out and returned by
    ``dead_letters()``) or ``"error"`` (the query fails).
    """
    return EventStream(df, event_time, watermark, on_null_event_time)


def from_pandas(
    df: pd.DataFrame,
    event_time: str,
    *,
    arrival_time: str | None = None,
    watermark: Any = None,
    on_null_event_time: str = "dead_letter",
) -> EventStream:
    """An event stream over a pandas DataFrame, run by the local runner.

    The same ``.window(...).group_by(...).agg(...)`` pipeline as on Spark;
    ``to_pandas()`` runs it in this process. Without ``arrival_time`` the frame
    is a complete input (one ON_TIME pane per window, as on Spark batch). With
    an ``arrival_time`` column (processing time) the rows are replayed as
    micro-batches of equal arrival time, with the ``watermark`` strategy (a
    duration for bounded out-of-orderness, ``"perfect"``, or ``"punctuated"``
    with a ``watermark_ms`` column), so early, on-time and late panes appear as
    they would on a stream.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"from_pandas takes a pandas DataFrame, got {type(df).__name__}")
    duplicated = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
    if duplicated:
        # ``df[name]`` would be a frame, not a column: pandas fails deep inside a run
        raise PlanError(
            "the input has two columns of one name",
            argument="df",
            found=f"duplicated columns {duplicated}",
            fix="Rename or drop one of them before building the pipeline",
        )
    if arrival_time is not None:
        _check_arrival_time(df, arrival_time)
    return EventStream(df, event_time, watermark, on_null_event_time, arrival_time)


def _check_arrival_time(df: pd.DataFrame, arrival_time: str) -> None:
    """PlanError unless ``arrival_time`` is a column of timestamps or epoch
    milliseconds without nulls: every row arrives at a processing time (the SQL
    front end refuses the same column)."""
    if arrival_time not in df.columns:
        raise PlanError(
            f"arrival-time column {arrival_time!r} is not a column of the input",
            argument=arrival_time,
            found=f"columns {list(df.columns)}",
        )
    column = df[arrival_time]
    numeric = pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
    if not (pd.api.types.is_datetime64_any_dtype(column) or numeric):
        raise PlanError(
            f"arrival-time column {arrival_time!r} has type {column.dtype}",
            argument=arrival_time,
            found=f"e.g. {column.iloc[0]!r}" if len(column) else None,
            fix="Give timestamps or epoch milliseconds, e.g. "
            f"df[{arrival_time!r}] = pd.to_datetime(df[{arrival_time!r}])",
        )
    nulls = int(column.isna().sum())
    if nulls:
        raise PlanError(
            f"arrival-time column {arrival_time!r} has {nulls} null(s): every row arrives",
            argument=arrival_time,
            fix="Fill or drop the rows without an arrival time",
        )


def from_kafka(
    topic: str,
    bootstrap_servers: str,
    *,
    schema: str | dict[str, str] | None = None,
    event_time: str,
    watermark: Any = None,
    runner: str = "spark",
    spark: Any = None,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    options: Mapping[str, str] | None = None,
    format: str = "json",
    avro_schema: str | None = None,
) -> EventStream:
    """An event stream over a Kafka topic of JSON records (:mod:`headwater.io.kafka`).

    ``schema``: the record's fields, ``"user string, score bigint, ts timestamp"``.
    ``format="avro"``: each value is one Avro record (binary, no schema-registry
    framing) of ``avro_schema`` (its JSON); ``schema`` then defaults to all its fields.
    ``runner="spark"``: a streaming DataFrame from Spark's Kafka source (its jars:
    :func:`headwater.io.kafka.spark_jars`; ``starting_offsets``,
    ``max_offsets_per_trigger`` and ``options`` are the source's options; offsets
    live in the query's checkpoint). ``runner="local"``: the topic as it is now,
    read with ``confluent-kafka`` and replayed by the local runner in micro-batches
    of equal record timestamp. Records that do not decode (not a JSON object, a
    field of the wrong type, a null event time) go to the dead letters with
    their topic, partition, offset and raw value, on both runners.
    """
    from headwater.io.kafka import KafkaSource, parse_schema, read_pandas, read_spark
    from headwater.io.kafka_avro import all_columns

    if schema is None and avro_schema is None:
        raise ValueError("from_kafka needs schema= (or format='avro' with avro_schema=)")
    columns = parse_schema(schema) if schema is not None else all_columns(avro_schema)
    source = KafkaSource(
        topic,
        bootstrap_servers,
        columns,
        event_time,
        starting_offsets,
        max_offsets_per_trigger,
        dict(options or {}),
        format,
        avro_schema,
    )
    if runner == "local":
        records, rejects = read_pandas(source)
        return EventStream(
            records, event_time, watermark, arrival_time="kafka_timestamp", rejects=rejects
        )
    if runner != "spark":
        raise ValueError(f"runner must be 'spark' or 'local', got {runner!r}")
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise ValueError("from_kafka(runner='spark') needs a SparkSession: pass spark=")
    rows, rejects = read_spark(spark, source)
    return EventStream(rows, event_time, watermark, rejects=rejects)


class EventStream:
    """Elements with event times: a DataFrame, its event-time column and watermark.

    ``rejects``: records the source could not decode (a Kafka topic's), dead
    letters of every pipeline over this stream: a pandas frame of them (local), or
    a :class:`~headwater.io.kafka.SparkRejects` naming the column of ``df`` that
    holds them (Spark: one read of the source for records and rejects)."""

    def __init__(
        self,
        df: Any,
        event_time: str,
        watermark: Any = None,
        on_null_event_time: str = "dead_letter",
        arrival_time: str | None = None,
        rejects: Any = None,
    ) -> None:
        if not isinstance(event_time, str):
            raise TypeError("event_time must be a column name")
        self.df = df
        self.event_time = event_time
        try:
            self.watermark = watermark_strategy(watermark)
        except ValueError as exc:
            raise PlanError(
                str(exc), argument="watermark", found=repr(watermark), fix=_WATERMARK_FIX
            ) from None
        self.on_null_event_time = on_null_event_time
        self.arrival_time = arrival_time
        self.rejects = rejects
        # Fail now, not when the query runs: the event time must exist and be usable.
        build_plan(
            self.schema(),
            keys=(),
            event_time=event_time,
            windowing=WindowingStrategy(),
            aggregations={"n": (Count(), None)},
            bounded=True,
            on_null_event_time=on_null_event_time,
        )

    @property
    def is_local(self) -> bool:
        """Whether this stream is a pandas DataFrame for the local runner."""
        return isinstance(self.df, pd.DataFrame)

    @property
    def is_streaming(self) -> bool:
        if self.is_local:
            return self.arrival_time is not None
        return bool(self.df.isStreaming)

    def schema(self, df: Any = None) -> Schema:
        """The logical schema of the input (or of ``df``, a projection of it)."""
        df = self.df if df is None else df
        if isinstance(df, pd.DataFrame):
            return Schema.of({str(c): types.of_pandas(df[c]) for c in df.columns})
        from headwater.runners.spark.types import of_spark

        return Schema.of({f.name: of_spark(f.dataType) for f in df.schema.fields})

    def capabilities(self) -> Capabilities:
        """The runner this input runs on."""
        if self.is_local:
            from headwater.runners.local import CAPABILITIES

            return CAPABILITIES
        if self.is_streaming:
            return _streaming_runner().CAPABILITIES
        from headwater.runners.spark.batch import CAPABILITIES

        return CAPABILITIES

    def resolved_watermark(self) -> WatermarkStrategy | None:
        """The watermark strategy, with the default of a stream that carries one."""
        if self.watermark is None and self.is_streaming and "watermark_ms" in self.df.columns:
            return Punctuated()
        return self.watermark

    def window(
        self,
        window_fn: WindowFn | WindowingStrategy | None = None,
        *,
        trigger: Trigger | None = None,
        allowed_lateness: Any = 0,
        accumulation: Accumulation | str = Accumulation.ACCUMULATING,
        timestamp_combiner: TimestampCombiner | str = TimestampCombiner.END_OF_WINDOW,
    ) -> WindowedStream:
        """Where and when: assign windows and set the trigger, lateness and accumulation.

        Also accepts a ready :class:`WindowingStrategy` as its only argument.
        """
        if isinstance(window_fn, WindowingStrategy):
            strategy = window_fn
        else:
            if window_fn is not None and not isinstance(window_fn, WindowFn):
                raise PlanError(
                    "not a window function", argument="window_fn", found=repr(window_fn)
                )
            if trigger is not None and not isinstance(trigger, Trigger):
                raise PlanError("not a trigger", argument="trigger", found=repr(trigger))
            _check_duration("allowed_lateness", allowed_lateness)
            strategy = WindowingStrategy.of(
                window_fn=window_fn,
                trigger=trigger,
                accumulation=accumulation,
                allowed_lateness=allowed_lateness,
                timestamp_combiner=timestamp_combiner,
            )
        check_windowing(strategy)
        return WindowedStream(self, strategy)

    def __repr__(self) -> str:
        kind = "streaming" if self.is_streaming else "bounded"
        return f"EventStream({kind}, event_time={self.event_time!r})"


class WindowedStream:
    """An event stream with a windowing strategy; group it, then aggregate."""

    def __init__(self, source: EventStream, strategy: WindowingStrategy) -> None:
        self.source = source
        self.strategy = strategy

    def group_by(self, *cols: str) -> GroupedWindowedStream:
        """Key columns (names). Without any, each window aggregates all elements."""
        if len(cols) == 1 and isinstance(cols[0], (list, tuple)):
            cols = tuple(cols[0])
        schema = self.source.schema()
        for c in cols:
            if not isinstance(c, str):
                raise PlanError("group_by takes column names", argument="group_by", found=repr(c))
            schema.type_of(c, role="key column")
        return GroupedWindowedStream(self, tuple(cols))

    def agg(self, **aggregations: Aggregation) -> WindowedAggregation:
        """Aggregate every window over all elements (no key)."""
        return GroupedWindowedStream(self, ()).agg(**aggregations)


class GroupedWindowedStream:
    """A windowed stream grouped by key columns."""

    def __init__(self, windowed: WindowedStream, key_cols: tuple[str, ...]) -> None:
        self.windowed = windowed
        self.key_cols = key_cols

    def agg(self, **aggregations: Aggregation) -> WindowedAggregation:
        """What: named aggregations, e.g. ``total=hw.sum("score"), n=hw.count()``."""
        specs = {name: _as_aggregation(name, spec) for name, spec in aggregations.items()}
        return WindowedAggregation(
            self.windowed.source, self.windowed.strategy, self.key_cols, specs
        )


class WindowedAggregation:
    """The result: panes of windowed, keyed aggregations, as a validated plan.

    Building it validates the whole pipeline against the input's schema
    (:class:`~headwater.model.plan.PlanError` names the column and the fix);
    :meth:`to_pandas`, :meth:`to_spark` and :meth:`start` run the plan.
    """

    def __init__(
        self,
        source: EventStream,
        strategy: WindowingStrategy,
        key_cols: tuple[str, ...],
        aggregations: Mapping[str, Aggregation],
    ) -> None:
        self.source = source
        self.strategy = strategy
        self.key_cols = key_cols
        self.aggregations = dict(aggregations)
        self.input, core = self._inputs()
        self.plan: WindowedAggregationPlan = build_plan(
            source.schema(self.input),
            keys=key_cols,
            event_time=source.event_time,
            windowing=strategy,
            aggregations=core,
            bounded=not source.is_streaming,
            watermark=source.resolved_watermark(),
            on_null_event_time=source.on_null_event_time,
            capabilities=source.capabilities(),
        )
        self._bounded = None
        self._local = None

    @property
    def is_streaming(self) -> bool:
        return self.source.is_streaming

    # -- the input as the runners take it -------------------------------------
    def _inputs(self) -> tuple[Any, dict[str, tuple[CombineFn, str | None]]]:
        """The input with expression inputs projected to columns, and the
        aggregations in the core's ``{name: (combine_fn, column)}`` format."""
        df = self.source.df
        core: dict[str, tuple[CombineFn, str | None]] = {}
        for name, a in self.aggregations.items():
            if a.column is None or isinstance(a.column, str):
                core[name] = (a.combine_fn, a.column)
            elif self.source.is_local:
                raise PlanError(
                    f"aggregation {name!r}: a pandas input takes column names",
                    argument=name,
                    found=repr(a.column),
                    fix="Add the computed column to the DataFrame first and name it",
                )
            else:
                column = _INPUT_PREFIX + name
                df = df.withColumn(column, a.column)
                core[name] = (a.combine_fn, column)
        return df, core

    def _bounded_plan(self):
        if self._bounded is None:
            from headwater.runners.spark.batch import compile_bounded

            self._bounded = compile_bounded(self.input, self.plan)
        return self._bounded

    # -- outputs ---------------------------------------------------------------
    def to_spark(self, *, num_shards: int | None = None) -> DataFrame:
        """The panes as a DataFrame (streaming in, streaming out).

        Columns: the key columns, ``window_start``, ``window_end``, one column
        per aggregation, then ``timestamp, pane_index, nonspeculative_index,
        timing, is_first, is_last, is_retraction``. ``num_shards`` is passed to
        the streaming runner (state is kept per shard of keys).

        A streaming result carries panes only; elements dropped as late are
        counted in the query's observed metrics (``headwater``: ``panes``,
        ``dropped``), and :meth:`start` writes them to a dead-letter sink.
        """
        if self.source.is_local:
            raise TypeError("this pipeline reads a pandas DataFrame: use to_pandas()")
        if self.is_streaming:
            streaming = _streaming_runner()
            out = streaming.observe_counts(self._streaming_output(num_shards))
            return streaming.panes(out)
        return self._restore_time_types(self._bounded_plan().panes)

    def to_pandas(self) -> pd.DataFrame:
        """The panes as a pandas DataFrame.

        A pandas input runs on the local runner (deterministic, in this
        process); a bounded Spark input is computed on Spark and collected.
        """
        if not self.source.is_local:
            return self.to_spark().toPandas()
        return self._run_local().panes.drop(columns="step")

    def _run_local(self):
        from headwater.runners.local import run_frame

        if self._local is None:
            self._local = run_frame(self.input, self.plan, arrival_time=self.source.arrival_time)
        return self._local

    def start(
        self,
        *,
        checkpoint_location: str,
        panes_sink=None,
        dead_letter_sink=None,
        trigger: Mapping[str, Any] | None = None,
        query_name: str | None = None,
        num_shards: int | None = None,
        end_of_input: bool | str | None = None,
    ):
        """Start a streaming aggregation: panes to ``panes_sink`` and dropped elements
        to ``dead_letter_sink`` (each ``f(batch_df, batch_id)``), with the
        checkpoint at ``checkpoint_location``. Returns the ``StreamingQuery``.

        With ``trigger={"availableNow": True}`` the input is bounded: its end moves
        the watermark to the end of time, so every pending pane fires and the
        result is the bounded run's (docs/semantics.md, "End of input"); the query
        returned ends it in ``awaitTermination()``. ``end_of_input=False`` keeps
        the pending windows in the checkpoint instead (an incremental job that
        reads more of its source at its next run; its last run ends it);
        ``end_of_input="never"`` too, for a source that never ends (an open topic):
        no run of that checkpoint reads the end-of-input control stream, so none
        can end it (the runs are cheaper: no control stream to start and poll). The end
        is final: a run on a checkpoint whose input ended raises
        :class:`~headwater.io.end_of_input.InputEndedError`. Each dead letter
        carries the whole input record, in the local runner's columns."""
        if not self.is_streaming or self.source.is_local:
            raise ValueError("start() runs a streaming input; for a bounded one use to_spark()")
        from headwater.runners.spark.ending import end_of_input_for

        end = end_of_input_for(trigger, end_of_input)
        # A dead letter carries its whole record, as on the local runner (so a
        # dropped row can be reprocessed): rows then reach the shards unlifted.
        carry = () if dead_letter_sink is None else self._record_columns()
        if dead_letter_sink is not None:
            dead_letter_sink = _as_local_letters(dead_letter_sink, self.key_cols, carry)
        return _streaming_runner().start_streaming(
            self._streaming_output(num_shards, end, carry),
            checkpoint_location=checkpoint_location,
            panes_sink=panes_sink,
            dead_letter_sink=dead_letter_sink,
            trigger=trigger,
            query_name=query_name,
            num_shards=num_shards,
            end_of_input=end,
        )

    def _record_columns(self) -> tuple[str, ...]:
        """The input's columns a dead letter carries besides the keys: all of them
        but the streaming runner's control columns (a replay's ``kind``,
        ``proc_ms``, a punctuated watermark's column), which are not the record's."""
        control = {"kind", "proc_ms"}
        if self.source.rejects is not None and not self.source.is_local:
            control.add(self.source.rejects.column)
        if isinstance(self.plan.watermark, Punctuated):
            control.add(self.plan.watermark.column)
        skip = control | set(self.key_cols)
        return tuple(c for c in self.input.columns if c not in skip)

    def _streaming_output(
        self, num_shards: int | None, end_of_input=None, carry: Sequence[str] = ()
    ) -> DataFrame:
        """The streaming runner's output: panes and dropped elements, told apart by
        ``kind`` (with the source's rejected records among the dropped ones)."""
        rejects = self.source.rejects
        out = _streaming_runner().compile_streaming(
            self.input,
            self.plan,
            num_shards=num_shards,
            end_of_input=end_of_input,
            carry=carry,
            rejected_col=None if rejects is None else rejects.column,
        )
        if rejects is not None:
            from headwater.io.kafka import expand_rejects

            out = expand_rejects(out, rejects)
        return out

    def _restore_time_types(self, panes: DataFrame) -> DataFrame:
        """Window bounds and output timestamps in the event-time column's type."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        from headwater.runners.spark.types import millis_to_timestamp

        if self.plan.event_time_type != types.TIMESTAMP:
            return panes  # epoch ms in, epoch ms out
        spark_types = {f.name: f.dataType for f in panes.schema.fields}
        converted = {
            name: millis_to_timestamp(F.col(name))
            for name in ("window_start", "window_end", "timestamp")
            if isinstance(spark_types.get(name), (T.LongType, T.IntegerType))
        }
        return panes.withColumns(converted) if converted else panes

    def dead_letters(self) -> DataFrame:
        """Input rows that no window received, with a ``reason`` column.

        Bounded input: rows with a null event time (``null_event_time``) and rows
        between the windows of a sliding window function whose period exceeds its
        size (``no_window``); a local replay also late ones (``late``, ``closed``).
        """
        if self.source.is_local:
            dropped = self._run_local().dropped.drop(columns="step")
            if self.source.rejects is not None:
                dropped = pd.concat([dropped, self.source.rejects], ignore_index=True)
            return dropped
        if self.is_streaming:
            raise NotImplementedError(
                "a streaming query's dropped elements go to start(dead_letter_sink=...), "
                "and are counted in its progress (observed metrics 'headwater')"
            )
        return self._bounded_plan().dead_letters

    def dead_letter_count(self) -> int:
        """Number of dead letters (runs a Spark job over a Spark input)."""
        letters = self.dead_letters()
        return len(letters) if self.source.is_local else letters.count()

    def explain(self, mode: str | None = None) -> None:
        """Print the Spark plan of :meth:`to_spark`."""
        self.to_spark().explain(mode)

    def __repr__(self) -> str:
        aggs = ", ".join(f"{k}={v!r}" for k, v in self.aggregations.items())
        return (
            f"WindowedAggregation({self.source!r}, {self.strategy!r}, "
            f"group_by={list(self.key_cols)!r}, {aggs})"
        )


def _as_local_letters(sink, keys: Sequence[str], record: Sequence[str]):
    """``sink`` given the streaming runner's dead letters in the local runner's
    columns and order: keys, ``event_time``, window, ``reason``, the record's
    columns, ``elements``, then any other (a source's rejects)."""
    head = [*keys, "event_time", "window_start", "window_end", "reason", *record, "elements"]

    def ordered(batch, batch_id):
        rest = [c for c in batch.columns if c not in head]
        return sink(batch.select(*[c for c in head if c in batch.columns], *rest), batch_id)

    return ordered


def _streaming_runner():
    """The Structured Streaming runner module (imported on first use: it loads pyarrow
    and the stateful-processor machinery)."""
    try:
        from headwater.runners.spark import streaming
    except ModuleNotFoundError as exc:  # pragma: no cover - an incomplete installation
        if exc.name and "headwater.runners.spark.streaming".startswith(exc.name):
            raise NotImplementedError(
                "the Structured Streaming runner (headwater.runners.spark.streaming) is "
                "not available in this installation"
            ) from exc
        raise
    return streaming
