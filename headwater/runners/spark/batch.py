"""The bounded runner: a windowed aggregation compiled to a native Spark batch plan.

For the built-in combiners and window functions no Python UDF runs here.
Window assignment and merging are Spark expressions, the aggregation is Spark's
own (hash aggregation with partial aggregation before the shuffle, the combiner
lifting of FlumeJava and Dataflow), and the pane metadata is a handful of
literals. What is native is declared in two registries keyed by class, as
sqlglot's ``Generator.TRANSFORMS``: :data:`AGGREGATES` (combiner -> Spark
aggregate) and :data:`WINDOWS` (window function -> Spark plan). Anything else
(a user ``CombineFn``, a user ``WindowFn``, ``EARLIEST_TRANSFORMED`` with a
custom ``output_time``) raises :class:`Unsupported` there, and the plan falls
back to the model's own vectorized code in a grouped pandas UDF
(``groupBy(keys).applyInPandas``: one :class:`~headwater.model.reducer.Reducer`
step per key with the watermark at +inf, the semantics below), with output
types from :meth:`CombineFn.output_type` (declared or inferred).

Semantics of a bounded input
----------------------------
A bounded input is *complete*: nothing will ever arrive after it. headwater
runs it as a single step (docs/semantics.md, rule 7) in which every row is added
while the watermark is still at -inf (so, by rule 3, no row is late and
allowed lateness is irrelevant), the watermark then advances to +inf, and only
then are triggers evaluated. Every window that holds data therefore emits
exactly one pane, whatever the trigger and accumulation mode:

* a trigger that fires at that evaluation (``Default``, ``AfterWatermark``,
  ``AfterCount(n)`` with at least n elements, ...) fires with the watermark
  past the end of the window, and it emits data that arrived before the watermark
  passed the end (every row of a bounded input did): by rule 1 it is ON_TIME;
* a trigger that does not fire (``Never``, ``AfterCount(n)`` with fewer than n
  elements, ``AfterProcessingTime``: processing time does not advance inside the
  step) leaves data that no pane has emitted; by rule 4 the window, whose end
  plus allowed lateness is behind the +inf watermark, is garbage-collected and
  that data is flushed in a final pane, which is again the first pane after the
  watermark passed the end: ON_TIME;
* the window is garbage-collected in the same step, so that pane is the last
  one (``is_last``), and as it is also the first, no retraction exists and the
  accumulation mode makes no difference.

So a window's pane is: ``pane_index 0``, ``nonspeculative_index 0``, ``timing
ON_TIME``, ``is_first``, ``is_last``, not a retraction, and its timestamp is set
by the timestamp combiner (END_OF_WINDOW: ``end - 1``; EARLIEST and
EARLIEST_TRANSFORMED with the built-in window functions: the minimum event time;
LATEST: the maximum). Speculative (EARLY) panes of a bounded input would depend
on how the engine happened to split it into bundles, which is not a property of
the data; the complete, single pane is the one answer every split agrees on.

Rows that cannot be windowed do not vanish: rows with a null event time (and,
for sliding windows whose period exceeds their size, rows that fall between
windows) are excluded from the aggregation and returned by
:attr:`BoundedPlan.dead_letters` with a ``reason`` column; or, with
``on_null_event_time="error"``, a null event time fails the query with an error
naming the column (Spark's native ``raise_error``).

Times inside the plan are int64 epoch milliseconds, as in the core. The API
layer (:mod:`headwater.api`) turns window bounds and output timestamps back into
Spark timestamps when the event-time column was one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from headwater.model import schema
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
from headwater.model.panes import TimestampCombiner, Timing
from headwater.model.plan import (
    Aggregate,
    Capabilities,
    NullEventTime,
    WindowedAggregationPlan,
    null_event_time_error,
)
from headwater.model.schema import PANE_COLUMNS, Field
from headwater.model.time import GLOBAL_WINDOW_END, MIN_TIMESTAMP
from headwater.model.types import INT64, TIMESTAMP
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
from headwater.runners.spark.session import check_workers
from headwater.runners.spark.types import to_spark, to_spark_pandas

__all__ = [
    "AGGREGATES",
    "WINDOWS",
    "BoundedPlan",
    "NativeWindows",
    "Unsupported",
    "NULL_EVENT_TIME",
    "NO_WINDOW",
    "compile_bounded",
    "event_time_millis",
    "spark_aggregate",
]

#: ``reason`` of a dead letter whose event time is null.
NULL_EVENT_TIME = "null_event_time"
#: ``reason`` of a dead letter that no window contains (sliding windows with gaps).
NO_WINDOW = "no_window"

# Internal column names (double underscore, unlikely to clash with user columns).
_TS = "__hw_ts"
_START = "__hw_start"
_END = "__hw_end"
_SID = "__hw_sid"
_MIN_TS = "__hw_min_ts"
_MAX_TS = "__hw_max_ts"


# --------------------------------------------------------------------------- time
def event_time_millis(df: DataFrame, column: str) -> Column:
    """The event-time column as int64 epoch milliseconds.

    Accepts a ``TIMESTAMP`` column (floored to the millisecond), a
    ``TIMESTAMP_NTZ`` one (read in the session time zone, as Spark casts it), or
    an integral column already holding epoch milliseconds.
    """
    dtype = _field(df, column).dataType
    if isinstance(dtype, T.TimestampType):
        return F.unix_millis(F.col(column))
    if isinstance(dtype, T.TimestampNTZType):
        return F.unix_millis(F.col(column).cast("timestamp"))
    if isinstance(dtype, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        return F.col(column).cast("long")
    raise TypeError(
        f"event-time column {column!r} has type {dtype.simpleString()}: headwater needs a "
        "TIMESTAMP or an integral column of epoch milliseconds (cast it, e.g. "
        f"F.col({column!r}).cast('timestamp') or F.timestamp_millis(...))"
    )


def _field(df: DataFrame, column: str) -> T.StructField:
    for f in df.schema.fields:
        if f.name == column:
            return f
    raise ValueError(f"no column {column!r} in the input (it has {df.columns})")


# ------------------------------------------------------------ what is native
class Unsupported(NotImplementedError):
    """A combiner, window function or timestamp combiner that Spark's native batch
    plan cannot express. :func:`compile_bounded` catches it and runs the whole
    aggregation through the model's own code in a grouped pandas UDF instead."""

    def __init__(self, kind: str, obj: object, native: Sequence[type]) -> None:
        self.obj = obj
        names = ", ".join(t.__name__ for t in native)
        super().__init__(
            f"{kind} {type(obj).__name__} has no native Spark batch translation (native "
            f"{kind}s: {names}); a bounded plan runs it through headwater's own code in "
            "a grouped pandas UDF"
        )


#: A native aggregate: ``(combine_fn, input column or None, its Spark type or None)``
#: -> a Spark aggregate ``Column`` (cast to the combiner's output type afterwards).
AggregateBuilder = Callable[[Any, "Column | None", "T.DataType | None"], Column]


def _needs(c: Column | None, fn: CombineFn) -> Column:
    if c is None:
        raise ValueError(f"{fn!r} needs an input column")
    return c


def _approx_distinct(fn: ApproxDistinct, c, _t) -> Column:
    # Spark derives its HLL++ precision as ceil(2 * log2(1.106 / rsd)); this rsd
    # gives exactly the combiner's precision.
    rsd = 1.106 / math.pow(2.0, fn.p / 2.0) * (1 + 1e-9)
    return F.approx_count_distinct(_needs(c, fn), rsd=rsd)


def _approx_quantiles(fn: ApproxQuantiles, c, _t) -> Column:
    ranks = [i / (fn.q - 1) for i in range(fn.q)]
    return F.percentile_approx(_needs(c, fn), F.array(*[F.lit(r) for r in ranks]), 10_000)


#: Combiner class -> its native Spark aggregate (keyed by exact class, as sqlglot's
#: ``Generator.TRANSFORMS``: a subclass may change the semantics, so it is not
#: native unless registered itself). Register more with ``AGGREGATES[cls] = f``.
AGGREGATES: dict[type[CombineFn], AggregateBuilder] = {
    # SQL semantics as the core's: nulls skipped, NULL for no non-null input.
    Sum: lambda fn, c, _t: F.sum(_needs(c, fn)),
    Count: lambda fn, c, _t: F.count(c) if fn.skip_nulls and c is not None else F.count(F.lit(1)),
    Mean: lambda fn, c, _t: F.avg(_needs(c, fn)),
    Min: lambda fn, c, _t: F.min(_needs(c, fn)),
    Max: lambda fn, c, _t: F.max(_needs(c, fn)),
    ToList: lambda fn, c, _t: F.collect_list(_needs(c, fn)),
    TopK: lambda fn, c, _t: F.slice(
        F.sort_array(F.collect_list(_needs(c, fn)), asc=not fn.largest), 1, fn.k
    ),
    ApproxDistinct: _approx_distinct,
    ApproxQuantiles: _approx_quantiles,
}


def spark_aggregate(aggregate: Aggregate, input_type: T.DataType | None = None) -> Column:
    """Spark's native aggregate equivalent to the plan's ``aggregate``.

    The equivalence is the one a bounded window needs: the combiner's output for
    all the window's elements, with SQL's null semantics on both sides (``Sum``,
    ``Mean``, ``Min``, ``Max`` of no non-null value are NULL; ``Count()`` counts
    rows, ``Count(skip_nulls=True)`` non-null values). The result is cast to the
    plan's output type (mapped by :mod:`headwater.runners.spark.types`): int64
    for integral sums, minima and maxima, doubles for means and quantiles, as
    on the streaming runner.

    Raises :class:`Unsupported` for a combiner without a registered native
    aggregate (:data:`AGGREGATES`).
    """
    fn = aggregate.combine_fn
    builder = AGGREGATES.get(type(fn))
    if builder is None:
        raise Unsupported("combiner", fn, list(AGGREGATES))
    c = F.col(aggregate.column) if aggregate.column is not None else None
    return builder(fn, c, input_type).cast(to_spark(aggregate.output_type))


# ----------------------------------------------------------------------- windows
#: A native window plan: ``(rows with _TS, window_fn, key columns, aggregate
#: columns)`` -> one row per key and window: ``*keys, _START, _END, *aggregates``.
WindowPlan = Callable[[DataFrame, Any, Sequence[str], list[Column]], DataFrame]


@dataclass(frozen=True)
class NativeWindows:
    """How Spark expressions assign (and merge) one window function's windows."""

    #: Groups the rows into windows and aggregates them.
    plan: WindowPlan
    #: The rows no window contains (dead letters ``no_window``), if some can be.
    no_window: Callable[[DataFrame, Any], DataFrame] | None = None


def _global(df, wf, key_cols, agg_exprs):
    # Grouped by the (literal) bounds too: without keys, an empty input then has no
    # group, where a global aggregate would make one row.
    bounds = df.withColumn(_START, F.lit(MIN_TIMESTAMP)).withColumn(_END, F.lit(GLOBAL_WINDOW_END))
    return bounds.groupBy(*key_cols, _START, _END).agg(*agg_exprs)


def _fixed(df, wf: FixedWindows, key_cols, agg_exprs):
    ts = F.col(_TS)
    size, offset = wf.size, wf.offset
    # pmod, not %, so that times before the epoch floor too.
    start = ts - F.pmod(ts - F.lit(offset) if offset else ts, F.lit(size))
    # The end follows from the start: group (and shuffle) by the start alone.
    return (
        df.withColumn(_START, start)
        .groupBy(*key_cols, _START)
        .agg(*agg_exprs)
        .withColumn(_END, F.col(_START) + F.lit(size))
    )


def _sliding(df, wf: SlidingWindows, key_cols, agg_exprs):
    ts = F.col(_TS)
    size, period, offset = wf.size, wf.period, wf.offset
    k = -(-size // period)
    last = ts - F.pmod(ts - F.lit(offset), F.lit(period))
    # One row per window that may contain the element: starts last, last - period, ...
    shifts = F.array(*[F.lit(i * period) for i in range(k)])
    out = df.withColumn(_START, F.explode(shifts)).withColumn(_START, last - F.col(_START))
    if k * period != size:  # otherwise every candidate contains the element
        out = out.where(F.col(_START) + F.lit(size) > ts)
    return (
        out.groupBy(*key_cols, _START).agg(*agg_exprs).withColumn(_END, F.col(_START) + F.lit(size))
    )


def _sliding_gaps(df, wf: SlidingWindows) -> DataFrame:
    """Rows between windows (period > size)."""
    if wf.period <= wf.size:
        return df.limit(0)
    return df.where(F.pmod(F.col(_TS) - F.lit(wf.offset), F.lit(wf.period)) >= F.lit(wf.size))


def _cumulative(df, wf: CumulativeWindows, key_cols, agg_exprs):
    ts = F.col(_TS)
    start = ts - F.pmod(ts - F.lit(wf.offset), F.lit(wf.size))
    first_end = ts - F.pmod(ts - F.lit(wf.offset), F.lit(wf.step)) + F.lit(wf.step)
    # One row per window of the element's period that ends after it.
    ends = F.sequence(first_end, start + F.lit(wf.size), F.lit(wf.step))
    return (
        df.withColumn(_START, start)
        .withColumn(_END, F.explode(ends))
        .groupBy(*key_cols, _START, _END)
        .agg(*agg_exprs)
    )


def _calendar_plan(df, wf: CalendarWindows, key_cols, agg_exprs):
    return _calendar(df, wf).groupBy(*key_cols, _START, _END).agg(*agg_exprs)


def _sessions_plan(df, wf: Sessions, key_cols, agg_exprs):
    return _sessions(df, key_cols, wf, agg_exprs)


def _validity_plan(df, wf: ValidityWindows, key_cols, agg_exprs):
    return _validity(df, key_cols, agg_exprs)


#: Window function class -> its native plan (keyed by exact class; see
#: :data:`AGGREGATES`). Others run through the model in a pandas UDF.
WINDOWS: dict[type[WindowFn], NativeWindows] = {
    GlobalWindows: NativeWindows(_global),
    FixedWindows: NativeWindows(_fixed),
    SlidingWindows: NativeWindows(_sliding, _sliding_gaps),
    CumulativeWindows: NativeWindows(_cumulative),
    CalendarWindows: NativeWindows(_calendar_plan),
    Sessions: NativeWindows(_sessions_plan),
    ValidityWindows: NativeWindows(_validity_plan),
}


def native_windows(window_fn: WindowFn) -> NativeWindows:
    """The registered native plan of ``window_fn``, or raise :class:`Unsupported`."""
    native = WINDOWS.get(type(window_fn))
    if native is None:
        raise Unsupported("window function", window_fn, list(WINDOWS))
    return native


def _calendar(df: DataFrame, wf: CalendarWindows) -> DataFrame:
    """Calendar days/months/years in ``wf.tz``: local midnights converted back to UTC.

    Spark resolves a nonexistent local midnight (a DST gap) forward and an
    ambiguous one to its earlier instant, as the core does.
    """
    local = F.from_utc_timestamp(F.timestamp_millis(F.col(_TS)), wf.tz)
    epoch = F.lit("1970-01-01").cast("date")
    if wf.unit == "day":
        days = F.datediff(F.to_date(local), epoch)
        first = days - F.pmod(days, F.lit(wf.every))
        start_date = F.date_add(epoch, first.cast("int"))
        end_date = F.date_add(epoch, (first + F.lit(wf.every)).cast("int"))
    else:
        step = wf.every * (12 if wf.unit == "year" else 1)
        months = (F.year(local) - F.lit(1970)) * F.lit(12) + F.month(local) - F.lit(1)
        first = months - F.pmod(months, F.lit(step))
        start_date = F.add_months(epoch, first.cast("int"))
        end_date = F.add_months(epoch, (first + F.lit(step)).cast("int"))

    def utc_millis(date: Column) -> Column:
        return F.unix_millis(F.to_utc_timestamp(date.cast("timestamp"), wf.tz))

    return df.withColumn(_START, utc_millis(start_date)).withColumn(_END, utc_millis(end_date))


# ------------------------------------------------------------------------- plan
@dataclass
class BoundedPlan:
    """The compiled plan: the panes, and the rows that could not be windowed."""

    #: keys, window_start, window_end (epoch ms), aggregations, pane metadata.
    panes: DataFrame
    #: the input's rows that were not aggregated, with a ``reason`` column.
    dead_letters: DataFrame


def compile_bounded(df: DataFrame, plan: WindowedAggregationPlan) -> BoundedPlan:
    """Compile the validated ``plan`` over the bounded ``df`` to a Spark batch plan.

    The panes have the columns ``*keys, window_start, window_end,
    *aggregations, timestamp, pane_index, nonspeculative_index, timing,
    is_first, is_last, is_retraction`` with window bounds and timestamp as epoch
    milliseconds; the dead letters those of
    :data:`headwater.model.schema.DEAD_LETTER_METADATA` after the keys, then
    the input columns.
    """
    if df.isStreaming:
        raise ValueError("compile_bounded needs a bounded DataFrame; this one is streaming")
    key_cols = list(plan.keys)
    out_types = {a.name: to_spark(a.output_type) for a in plan.aggregations}
    ts = event_time_millis(df, plan.event_time)
    erroring = plan.on_null_event_time == NullEventTime.ERROR
    if erroring:
        message = str(null_event_time_error(plan.event_time))
        ts = F.when(ts.isNull(), F.raise_error(F.lit(message))).otherwise(ts)
    with_ts = df.withColumn(_TS, ts)
    # With "error" every row passes or the query fails: no filter that the optimizer
    # could move in front of raise_error.
    valid = with_ts if erroring else with_ts.where(F.col(_TS).isNotNull())

    window_fn = plan.windowing.window_fn
    dead = _dead_letters(with_ts.where(F.col(_TS).isNull()), plan, NULL_EVENT_TIME)
    native_wf = WINDOWS.get(type(window_fn))
    if native_wf is not None:
        no_window = native_wf.no_window(valid, window_fn) if native_wf.no_window else None
    else:
        no_window = _model_no_window(valid, window_fn)
    if no_window is not None:
        dead = dead.unionByName(_dead_letters(no_window, plan, NO_WINDOW))

    # Only the columns the aggregation reads cross the shuffle.
    valid = valid.select(*dict.fromkeys([*key_cols, _TS, *plan.input_columns]))
    try:
        grouped, timestamp = _native_plan(df, valid, plan)
    except Unsupported:
        # Spark expressions cannot say it: run the model's own code per key.
        panes = _model_plan(valid, plan, out_types)
        return BoundedPlan(panes=panes, dead_letters=dead)
    panes = grouped.select(
        *[F.col(c) for c in key_cols],
        F.col(_START).alias("window_start"),
        F.col(_END).alias("window_end"),
        *[F.col(a.name) for a in plan.aggregations],
        *_final_pane_columns(timestamp),
    )
    return BoundedPlan(panes=panes, dead_letters=dead)


def _dead_letters(rows: DataFrame, plan: WindowedAggregationPlan, reason: str) -> DataFrame:
    """Rows no window received, in the dead-letter schema (no window: null bounds)."""
    no_bound = F.lit(None).cast("long")
    return rows.select(
        *[F.col(k) for k in plan.keys],
        no_bound.alias("window_start"),
        no_bound.alias("window_end"),
        F.col(plan.event_time).alias("event_time"),
        F.lit(reason).alias("reason"),
        F.lit(1).cast("long").alias("elements"),
        *[F.col(c) for c in plan.input_columns],
    )


def _native_plan(df, valid, plan: WindowedAggregationPlan):
    """The windows aggregated by Spark expressions alone, and the pane timestamp
    column; raises :class:`Unsupported` if some part has no native form."""
    window_fn = plan.windowing.window_fn
    native_wf = native_windows(window_fn)
    tc = plan.windowing.timestamp_combiner
    if tc == TimestampCombiner.EARLIEST_TRANSFORMED and (
        type(window_fn).output_time is not WindowFn.output_time
    ):
        # The transformed output time is the window function's own Python code.
        raise Unsupported("window function", window_fn, [])
    agg_exprs = [
        spark_aggregate(a, _field(df, a.column).dataType if a.column else None).alias(a.name)
        for a in plan.aggregations
    ]
    if tc in (TimestampCombiner.EARLIEST, TimestampCombiner.EARLIEST_TRANSFORMED):
        agg_exprs.append(F.min(_TS).alias(_MIN_TS))
        timestamp = F.col(_MIN_TS)
    elif tc == TimestampCombiner.LATEST:
        agg_exprs.append(F.max(_TS).alias(_MAX_TS))
        timestamp = F.col(_MAX_TS)
    else:
        timestamp = F.col(_END) - F.lit(1)
    return native_wf.plan(valid, window_fn, list(plan.keys), agg_exprs), timestamp


# ------------------------------------------------------- the model in a UDF
_ALL = "__hw_all"  # the one group of an aggregation without key columns


def _model_plan(
    valid: DataFrame, plan: WindowedAggregationPlan, out_types: Mapping[str, T.DataType]
) -> DataFrame:
    """The panes computed by the core itself, one key per group of a grouped pandas
    UDF (``applyInPandas``): exactly the bounded semantics of the module docstring,
    as one :meth:`Reducer.step` with the watermark at +inf (what the local runner
    does). For user combiners and window functions; output types come from
    :meth:`CombineFn.output_type`. The workers run the core: checked first."""
    import numpy as np
    import pandas as pd

    from headwater.model.reducer import Reducer
    from headwater.model.steps import Bundle, MicroBatch, apply_step
    from headwater.model.time import MAX_TIMESTAMP

    check_workers(valid.sparkSession)

    key_cols = list(plan.keys)
    strategy = plan.windowing
    groups = list(key_cols)
    if not groups:
        valid = valid.withColumn(_ALL, F.lit(0))
        groups = [_ALL]
    key_fields = [_field(valid, k) for k in groups]
    schema = T.StructType(
        [
            *[T.StructField(f.name, f.dataType) for f in key_fields],
            T.StructField("window_start", T.LongType()),
            T.StructField("window_end", T.LongType()),
            *[T.StructField(name, t) for name, t in out_types.items()],
            *[T.StructField(f.name, to_spark(f.type)) for f in _PANE_METADATA],
        ]
    )
    value_cols = list(plan.input_columns)
    aggs = plan.core_aggregations

    def run(pdf: pd.DataFrame) -> pd.DataFrame:
        n = len(pdf)
        reducer = Reducer(strategy, aggs)
        values = pdf[value_cols].reset_index(drop=True) if value_cols else None
        ts = pdf[_TS].to_numpy(np.int64)
        batch = MicroBatch(Bundle(np.zeros(n, dtype=np.int64), ts, values), MAX_TIMESTAMP)
        panes = apply_step(reducer, batch).panes
        m = len(panes)
        out = {k: [pdf[k].iloc[0]] * m for k in groups}
        out["window_start"] = panes["window_start"].to_numpy(np.int64)
        out["window_end"] = panes["window_end"].to_numpy(np.int64)
        for name, t in out_types.items():
            out[name] = to_spark_pandas(panes[name], t)
        for name in PANE_COLUMNS:
            out[name] = panes[name].to_numpy()
        return pd.DataFrame(out, index=range(m))

    panes = valid.groupBy(*groups).applyInPandas(run, schema)
    return panes.drop(_ALL) if not key_cols else panes


def _model_no_window(valid: DataFrame, window_fn: WindowFn) -> DataFrame:
    """Rows to which a user window function assigns no window (its own ``assign``,
    per pandas batch; evaluated only when the dead letters are read)."""
    import numpy as np

    def lost(batches):
        for pdf in batches:
            ts = pdf[_TS].to_numpy(np.int64)
            rows = np.asarray(window_fn.assign(ts)[0], dtype=np.int64)
            yield pdf[np.bincount(rows, minlength=len(ts)) == 0]

    return valid.mapInPandas(lost, valid.schema)


#: The pane metadata in epoch milliseconds (the API turns times into timestamps).
_PANE_METADATA = tuple(
    Field(f.name, INT64) if f.type == TIMESTAMP else f for f in schema.PANE_METADATA
)


def _final_pane_columns(timestamp: Column) -> list[Column]:
    """The metadata of a window's single, complete pane (see the module docstring)."""
    cols = {
        "timestamp": timestamp.cast("long"),
        "pane_index": F.lit(0).cast("long"),
        "nonspeculative_index": F.lit(0).cast("long"),
        "timing": F.lit(Timing.ON_TIME.value),
        "is_first": F.lit(True),
        "is_last": F.lit(True),
        "is_retraction": F.lit(False),
    }
    assert tuple(cols) == PANE_COLUMNS
    return [c.alias(name) for name, c in cols.items()]


def _sessions(df: DataFrame, key_cols: Sequence[str], wf: Sessions, agg_exprs: list[Column]):
    """Session windows: per key, sorted by time, a session starts where the gap to the
    previous element is at least ``gap`` (more than ``gap`` when touching windows
    merge); the session is ``[min ts, max ts + gap)``.

    This is the core's merge (windows ``[t, t + gap)`` united when they overlap,
    touching ones as ``wf.merge_touching`` says) as one sort: a running sum over the
    "starts a new session" flags numbers the sessions, and the aggregation groups by
    key and session number on the partitioning the window function already made (no
    second shuffle).
    """
    ts, gap = F.col(_TS), wf.gap
    by_time = Window.partitionBy(*key_cols).orderBy(_TS)
    prev = F.lag(ts).over(by_time)
    apart = (ts - prev > F.lit(gap)) if wf.merge_touching else (ts - prev >= F.lit(gap))
    starts = F.when(prev.isNull() | apart, F.lit(1)).otherwise(F.lit(0))
    numbered = df.withColumn(
        _SID,
        F.sum(starts).over(by_time.rowsBetween(Window.unboundedPreceding, Window.currentRow)),
    )
    extra = [F.min(_TS).alias(_START), (F.max(_TS) + F.lit(gap)).alias(_END)]
    return numbered.groupBy(*key_cols, _SID).agg(*extra, *agg_exprs)


def _validity(df: DataFrame, key_cols: Sequence[str], agg_exprs: list[Column]):
    """Validity windows: each distinct time of a key opens ``[t, next time of the key)``;
    the key's last one lasts to the end of the global window."""
    grouped = df.groupBy(*key_cols, F.col(_TS).alias(_START)).agg(*agg_exprs)
    nxt = F.lead(_START).over(Window.partitionBy(*key_cols).orderBy(_START))
    return grouped.withColumn(_END, F.coalesce(nxt, F.lit(GLOBAL_WINDOW_END)))


#: What the bounded runner executes: a bounded input's watermark is perfect (the
#: input is complete), so no strategy is needed; outputs need Spark types.
CAPABILITIES = Capabilities("Spark batch", watermarks=(), output_types_known=True)
