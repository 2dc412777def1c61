"""The bounded runner: a windowed aggregation compiled to a native Spark batch plan.

No Python UDF runs here. Window assignment and merging are Spark expressions,
the aggregation is Spark's own (hash aggregation with partial aggregation before
the shuffle, the combiner lifting of FlumeJava and Dataflow), and the pane
metadata is a handful of literals.

Semantics of a bounded input
----------------------------
A bounded input is *complete*: nothing will ever arrive after it. headwater
runs it as a single step (TRANSCRIPTS.md rule 7) in which every row is added
while the watermark is still at -inf (so, by rule 3, no row is late and
allowed lateness is irrelevant), the watermark then advances to +inf, and only
then are triggers evaluated. Every window that holds data therefore emits
exactly one pane, whatever the trigger and accumulation mode:

* a trigger that fires at that evaluation (``Default``, ``AfterWatermark``,
  ``AfterCount(n)`` with at least n elements, ...) fires with the watermark
  past the end of the window: by rule 1 the first such pane is ON_TIME;
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

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
from headwater.model.panes import PANE_COLUMNS, TimestampCombiner, Timing
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import GLOBAL_WINDOW_END, MIN_TIMESTAMP
from headwater.model.windows import (
    CalendarWindows,
    FixedWindows,
    GlobalWindows,
    Sessions,
    SlidingWindows,
    ValidityWindows,
    WindowFn,
)

__all__ = [
    "BoundedPlan",
    "NULL_EVENT_TIME",
    "NO_WINDOW",
    "compile_bounded",
    "event_time_millis",
    "millis_to_timestamp",
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

# The instants a Spark TIMESTAMP holds in practice (and Python's datetime can
# collect): 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z, in epoch ms. The same
# range as the streaming runner's.
SPARK_MIN_MS = -62_135_596_800_000
SPARK_MAX_MS = 253_402_300_799_999

Aggregations = Mapping[str, tuple[CombineFn, str | None]]


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


def millis_to_timestamp(col: Column | str) -> Column:
    """Epoch milliseconds as a Spark ``TIMESTAMP``; null outside years 1 to 9999.

    Only the global window's bounds (+-2**62 ms, "the ends of time") and its
    END_OF_WINDOW output timestamp fall outside, so in timestamp form they are
    null, as in the streaming runner's output.
    """
    c = F.col(col) if isinstance(col, str) else col
    return F.when(c.between(SPARK_MIN_MS, SPARK_MAX_MS), F.timestamp_millis(c))


def is_timestamp_column(df: DataFrame, column: str) -> bool:
    """Whether outputs of this event-time column are given as timestamps (else epoch ms)."""
    return isinstance(_field(df, column).dataType, (T.TimestampType, T.TimestampNTZType))


def _field(df: DataFrame, column: str) -> T.StructField:
    for f in df.schema.fields:
        if f.name == column:
            return f
    raise ValueError(f"no column {column!r} in the input (it has {df.columns})")


# ------------------------------------------------------------------ aggregations
def spark_aggregate(
    fn: CombineFn, column: str | None, input_type: T.DataType | None = None
) -> Column:
    """Spark's native aggregate equivalent to the core combiner ``fn`` over ``column``.

    The equivalence is the one a bounded window needs: the combiner's output for
    all the window's elements. ``Sum`` of no non-null value is 0, as the
    combiner's empty accumulator is. Output types follow the streaming runner
    (int64 for integral sums, minima and maxima; quantiles as doubles).
    """
    c = F.col(column) if column is not None else None
    kind = type(fn)
    integral = isinstance(input_type, T.IntegralType)
    if kind is Count:
        return F.count(F.lit(1))
    if c is None:
        raise ValueError(f"{fn!r} needs an input column")
    if kind is Sum:
        return F.coalesce(F.sum(c), F.lit(0))
    if kind is Mean:
        return F.avg(c)
    if kind is Min:
        return F.min(c).cast("long") if integral else F.min(c)
    if kind is Max:
        return F.max(c).cast("long") if integral else F.max(c)
    if kind is ToList:
        return F.collect_list(c)
    if kind is TopK:
        return F.slice(F.sort_array(F.collect_list(c), asc=not fn.largest), 1, fn.k)
    if kind is ApproxDistinct:
        # Spark derives its HLL++ precision as ceil(2 * log2(1.106 / rsd)); this rsd
        # gives exactly the combiner's precision.
        rsd = 1.106 / math.pow(2.0, fn.p / 2.0) * (1 + 1e-9)
        return F.approx_count_distinct(c, rsd=rsd)
    if kind is ApproxQuantiles:
        ranks = [i / (fn.q - 1) for i in range(fn.q)]
        quantiles = F.percentile_approx(c, F.array(*[F.lit(r) for r in ranks]), 10_000)
        return quantiles.cast("array<double>")
    raise NotImplementedError(
        f"{type(fn).__name__} has no native Spark equivalent, so a bounded input cannot be "
        "aggregated with it without a Python UDF; use one of Sum, Count, Mean, Min, Max, "
        "ToList, TopK, ApproxDistinct, ApproxQuantiles"
    )


# ----------------------------------------------------------------------- windows
def _assign_windows(df: DataFrame, window_fn: WindowFn) -> DataFrame:
    """Add ``_START`` (and ``_END`` where it is not ``_START`` plus a fixed size):
    one row per element and window containing it.

    Non-merging window functions only; merging ones (sessions, validity windows)
    assign and merge in one step, see :func:`_sessions` and :func:`_validity`.
    """
    ts = F.col(_TS)
    kind = type(window_fn)
    if kind is GlobalWindows:
        return df.withColumn(_START, F.lit(MIN_TIMESTAMP)).withColumn(
            _END, F.lit(GLOBAL_WINDOW_END)
        )
    if kind is FixedWindows:
        size, offset = window_fn.size, window_fn.offset
        # pmod, not %, so that times before the epoch floor too.
        return df.withColumn(_START, ts - F.pmod(ts - F.lit(offset) if offset else ts, F.lit(size)))
    if kind is SlidingWindows:
        size, period, offset = window_fn.size, window_fn.period, window_fn.offset
        k = -(-size // period)
        last = ts - F.pmod(ts - F.lit(offset), F.lit(period))
        # One row per window that may contain the element: starts last, last - period, ...
        shifts = F.array(*[F.lit(i * period) for i in range(k)])
        out = df.withColumn(_START, F.explode(shifts)).withColumn(_START, last - F.col(_START))
        if k * period != size:  # otherwise every candidate contains the element
            out = out.where(F.col(_START) + F.lit(size) > ts)
        return out
    if kind is CalendarWindows:
        return _calendar(df, window_fn)
    raise NotImplementedError(
        f"{type(window_fn).__name__} cannot be compiled to a Spark batch plan; built-in "
        "window functions are GlobalWindows, FixedWindows, SlidingWindows, Sessions, "
        "CalendarWindows and ValidityWindows"
    )


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


def compile_bounded(
    df: DataFrame,
    *,
    key_cols: Sequence[str],
    event_time_col: str,
    strategy: WindowingStrategy,
    aggregations: Aggregations,
    on_null_event_time: str = "dead_letter",
) -> BoundedPlan:
    """Compile a windowed, keyed aggregation of a bounded ``df`` to a native Spark plan.

    ``aggregations`` maps output names to ``(combine_fn, input_column)``, the
    core's format (:class:`headwater.model.reducer.Reducer`). The result has the
    columns ``*key_cols, window_start, window_end, *aggregations, timestamp,
    pane_index, nonspeculative_index, timing, is_first, is_last, is_retraction``
    with window bounds and timestamp as epoch milliseconds.
    """
    if df.isStreaming:
        raise ValueError("compile_bounded needs a bounded DataFrame; this one is streaming")
    if on_null_event_time not in ("dead_letter", "error"):
        raise ValueError(
            f"on_null_event_time must be 'dead_letter' or 'error', got {on_null_event_time!r}"
        )
    key_cols = list(key_cols)
    for c in key_cols:
        _field(df, c)
    for _, column in aggregations.values():
        if column is not None:
            _field(df, column)
    _check_names(key_cols, aggregations)
    window_fn = strategy.window_fn
    tc = strategy.timestamp_combiner
    if tc == TimestampCombiner.EARLIEST_TRANSFORMED and (
        type(window_fn).output_time is not WindowFn.output_time
    ):
        raise NotImplementedError(
            f"{type(window_fn).__name__} transforms output times (EARLIEST_TRANSFORMED), "
            "which a Spark batch plan cannot evaluate without a Python UDF"
        )

    ts = event_time_millis(df, event_time_col)
    if on_null_event_time == "error":
        ts = F.when(
            ts.isNull(),
            F.raise_error(
                F.lit(
                    f"headwater: null event time in column {event_time_col!r} "
                    "(pass on_null_event_time='dead_letter' to route such rows aside)"
                )
            ),
        ).otherwise(ts)
    with_ts = df.withColumn(_TS, ts)
    # With "error" every row passes or the query fails: no filter that the optimizer
    # could move in front of raise_error.
    valid = with_ts if on_null_event_time == "error" else with_ts.where(F.col(_TS).isNotNull())

    dead = with_ts.where(F.col(_TS).isNull()).drop(_TS).withColumn("reason", F.lit(NULL_EVENT_TIME))
    if type(window_fn) is SlidingWindows and window_fn.period > window_fn.size:
        gap = valid.where(
            F.pmod(F.col(_TS) - F.lit(window_fn.offset), F.lit(window_fn.period))
            >= F.lit(window_fn.size)
        )
        dead = dead.unionByName(gap.drop(_TS).withColumn("reason", F.lit(NO_WINDOW)))

    # Only the columns the aggregation reads cross the shuffle.
    needed = list(
        dict.fromkeys([*key_cols, _TS, *(c for _, c in aggregations.values() if c is not None)])
    )
    valid = valid.select(*needed)

    agg_exprs = [
        spark_aggregate(fn, column, _field(df, column).dataType if column else None).alias(name)
        for name, (fn, column) in aggregations.items()
    ]
    if tc in (TimestampCombiner.EARLIEST, TimestampCombiner.EARLIEST_TRANSFORMED):
        agg_exprs.append(F.min(_TS).alias(_MIN_TS))
    elif tc == TimestampCombiner.LATEST:
        agg_exprs.append(F.max(_TS).alias(_MAX_TS))

    if type(window_fn) is Sessions:
        grouped = _sessions(valid, key_cols, window_fn.gap, agg_exprs)
    elif type(window_fn) is ValidityWindows:
        grouped = _validity(valid, key_cols, agg_exprs)
    else:
        windowed = _assign_windows(valid, window_fn)
        if type(window_fn) in (FixedWindows, SlidingWindows):
            # The end follows from the start: group (and shuffle) by the start alone.
            grouped = (
                windowed.groupBy(*key_cols, _START)
                .agg(*agg_exprs)
                .withColumn(_END, F.col(_START) + F.lit(window_fn.size))
            )
        else:
            grouped = windowed.groupBy(*key_cols, _START, _END).agg(*agg_exprs)

    if tc in (TimestampCombiner.EARLIEST, TimestampCombiner.EARLIEST_TRANSFORMED):
        timestamp = F.col(_MIN_TS)
    elif tc == TimestampCombiner.LATEST:
        timestamp = F.col(_MAX_TS)
    else:
        timestamp = F.col(_END) - F.lit(1)
    panes = grouped.select(
        *[F.col(c) for c in key_cols],
        F.col(_START).alias("window_start"),
        F.col(_END).alias("window_end"),
        *[F.col(name) for name in aggregations],
        *_final_pane_columns(timestamp),
    )
    return BoundedPlan(panes=panes, dead_letters=dead)


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


def _sessions(df: DataFrame, key_cols: Sequence[str], gap: int, agg_exprs: list[Column]):
    """Session windows: per key, sorted by time, a session starts where the gap to the
    previous element is at least ``gap``; the session is ``[min ts, max ts + gap)``.

    This is the core's merge (windows ``[t, t + gap)`` united when they overlap;
    touching ones stay apart) as one sort: a running sum over the "starts a new
    session" flags numbers the sessions, and the aggregation groups by key and
    session number on the partitioning the window function already made (no
    second shuffle).
    """
    ts = F.col(_TS)
    by_time = Window.partitionBy(*key_cols).orderBy(_TS)
    prev = F.lag(ts).over(by_time)
    starts = F.when(prev.isNull() | (ts - prev >= F.lit(gap)), F.lit(1)).otherwise(F.lit(0))
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


def _check_names(key_cols: Sequence[str], aggregations: Aggregations) -> None:
    reserved = {"window_start", "window_end", *PANE_COLUMNS}
    seen: set[str] = set()
    for name in [*key_cols, *aggregations]:
        if name in reserved:
            raise ValueError(
                f"{name!r} is an output column of a windowed aggregation; "
                "rename the key or aggregation"
            )
        if name.startswith("__hw_"):
            raise ValueError(f"column names starting with '__hw_' are reserved: {name!r}")
        if name in seen:
            raise ValueError(f"duplicate output column {name!r}")
        seen.add(name)
