"""The Spark streaming runner: the engine-independent core on Structured Streaming.

``run_streaming`` turns a streaming DataFrame into the panes (and dropped
elements) of a windowed aggregation, executed by :class:`~headwater.model.
reducer.Reducer` inside ``transformWithStateInPandas``.

Plan (per micro-batch)::

    source ─ project (native) ─ pack (mapInArrow) ─ shuffle by shard ─ TWS(shard) ─ decode (native)

* **project**: key, event time in ms, the aggregations' input columns and the
  shard id ``hash(key) mod N`` (``shard.py``), all native Spark expressions.
* **pack**: per input partition, rows are grouped by shard and each shard's
  rows become *one* row holding an Arrow IPC stream. PySpark 4.3 feeds
  ``transformWithStateInPandas`` through a Python loop per input row
  (``itertuples`` then ``pd.DataFrame(rows)`` in ``worker.py``); packing
  makes that a loop per packet (a few per shard per batch) and keeps the data
  columnar from the source to the reducer. Control ("tick") rows of a replay
  are copied into the packet of every shard, so a step without data still
  reaches every shard and fires its timers.
* **combiner lifting** (when valid, see :func:`lifting`): the packer also
  pre-aggregates its rows per (shard, key, window slice) with Arrow's
  ``group_by`` (sum / min / max / non-null count, plus an element count), so
  the shuffle and the reducer see partial aggregates. A streaming
  ``groupBy().agg()`` would be a *stateful* Spark aggregation, so the
  stateless per-batch partial aggregation has to happen in the packer.
* **TWS**: grouped by shard; per shard and micro-batch the handler reads ONE
  ``ValueState`` (the shard's ``Reducer.snapshot()``), applies the bundle and
  the watermark / clock advances, writes the state once and moves its one
  event-time timer if needed: 2 to 4 state calls per shard per batch, never
  one per key or window. (The processor class lives in ``processor.py``,
  which imports no pandas: Spark runs its ``init`` in a fresh driver process
  at every query start.)
* **decode**: keys, window bounds and timestamps back to Spark types.

Watermarks
----------
``watermark="punctuated"``: the watermark comes with the data, in a column
(``watermark_ms``; the replay source writes it on every row of a step). A
step's order is rule 7 of TRANSCRIPTS.md: add the bundle, advance the
watermark, then fire processing-time timers due at the step's time.

``watermark=<delay>`` (bounded out-of-orderness, like ``withWatermark``): the
runner applies Spark's own ``withWatermark(event_time, delay)`` upstream, so
the global watermark is Spark's: the max event time of previous micro-batches
minus the delay, checkpointed with the query. The operator runs in
``timeMode="EventTime"`` and reads it from ``TimerValues.
getCurrentWatermarkInMs()``. Spark filters "late" rows only in stateful
operators whose *input* carries the watermarked column; here the operator's
input is the packer's output (fresh attributes without watermark metadata),
so Spark filters nothing (measured: 0 rows dropped by Spark, behind-watermark
rows reach the handler). headwater alone decides what is late (window end +
allowed lateness <= watermark) and counts and routes every drop. Spark's
"no watermark yet" value 0 is read as "no watermark". Here the watermark is
advanced *before* the bundle is added: Spark computed it before the batch's
rows arrived, so it is the watermark at their arrival (rule 3).

Each shard keeps one event-time timer at its reducer's
``next_event_time()`` (next window end or collection time), so a shard with
no new rows still fires its ON_TIME and final panes once Spark's watermark
passes; Spark runs a no-data micro-batch for that. A shard with pending
processing-time timers also wakes whenever the watermark moves.

Processing time: the ``proc_ms`` column when present (replays: the virtual
clock), else Spark's batch timestamp (``TimerValues.
getCurrentProcessingTimeInMs()``, the same for every shard of a batch and
recorded in the offset log, so a re-executed batch sees the same time).

State and recovery: one ``ValueState`` per shard in the state store (use the
RocksDB provider) and a checkpoint location; the shard count ``N`` must not
change between runs of one query (it names state keys).

Output
------
One streaming DataFrame; column ``kind`` is ``'pane'`` or ``'dropped'``::

    kind, <key columns>, window_start, window_end, <aggregations> | values,
    timestamp, pane_index, nonspeculative_index, timing, is_first, is_last,
    is_retraction, dropped STRUCT<reason, elements, <input columns>>

For a dropped element ``timestamp`` is its event time and the pane columns are
null; ``elements`` is 1, or with combiner lifting the number of elements of
the dropped partial aggregate (whose columns are then ``sum_<col>``,
``min_<col>``, ``max_<col>``, ``count_<col>``). ``panes(df)`` /
``dead_letters(df)`` split a (micro-batch) DataFrame, ``observe_counts``
adds named metrics (panes, dropped elements) to the query progress, and
``start_streaming`` wires both outputs to sinks with ``foreachBatch``.

Profiling: with ``HEADWATER_PROFILE_DIR`` set when the SparkSession starts,
every Python worker writes cProfile files of the packer and the shard steps
there (``pack-<pid>.prof``, ``step-<pid>.prof``, ``unpack-<pid>.prof``).
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import TimerValues

from headwater.model import combiners as C
from headwater.model import windows as W
from headwater.model.panes import TimestampCombiner
from headwater.model.reducer import Emission, Reducer
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import to_millis
from headwater.model.triggers import AfterCount, Trigger
from headwater.runners.spark.processor import ShardProcessor
from headwater.runners.spark.shard import aligned_shard_ids, shard_column

#: Spark's timestamp range in epoch ms (0001-01-01 .. 9999-12-31T23:59:59.999).
SPARK_MIN_MS = -62_135_596_800_000
SPARK_MAX_MS = 253_402_300_799_999

PANE_META = (
    ("timestamp", T.LongType()),
    ("pane_index", T.LongType()),
    ("nonspeculative_index", T.LongType()),
    ("timing", T.StringType()),
    ("is_first", T.BooleanType()),
    ("is_last", T.BooleanType()),
    ("is_retraction", T.BooleanType()),
)

#: Set (before the SparkSession starts) to a directory to cProfile the Python side
#: of the runner: each worker process writes ``<dir>/<role>-<pid>.prof``.
PROFILE_ENV = "HEADWATER_PROFILE_DIR"

# Internal column names of the packed rows.
_SHARD = "__hw_shard"
_KEY = "__hw_key"
_TS = "__hw_ts"
_KIND = "__hw_kind"
_WM = "__hw_wm"
_PROC = "__hw_proc"
_N = "__hw_n"  # elements per (lifted) row
#: Kinds of control rows: ``clock`` marks the control row of a clock step (replay).
_CONTROL_KINDS = pa.array(["tick", "clock"], pa.string())
_DROP = "dropped_"
PACKET_SCHEMA = "shard INT, n BIGINT, payload BINARY"

Sink = Callable[[DataFrame, int], None]


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class _Lift:
    """Combiner lifting: pre-aggregate per (key, window slice) in the packer."""

    slice_size: int  # 0: one slice (global window)
    slice_offset: int
    partials: tuple[tuple[str, str, str], ...]  # (partial column, input column, arrow agg)


@dataclass(frozen=True)
class _Plan:
    """Everything the Python workers need (pickled into the UDFs)."""

    strategy: WindowingStrategy
    aggregations: dict[str, tuple[C.CombineFn, str | None]]  # what the Reducer runs
    outputs: tuple[tuple[str, str, str, str], ...]  # (name, "direct"|"mean", col, count col)
    input_cols: tuple[str, ...]  # reducer input (value) columns of a packet
    lift: _Lift | None
    shard_ids: tuple[int, ...]
    has_kind: bool
    punctuated: bool  # else: Spark's watermark (bounded out-of-orderness)
    has_proc: bool
    out_schema: T.StructType
    int_outputs: tuple[str, ...]  # aggregation outputs to convert to nullable ints
    max_packet_rows: int
    needs_dummy: bool = False  # an aggregation without input column, and no 'value' input


def run_streaming(
    df: DataFrame,
    *,
    key_cols: str | Sequence[str],
    event_time_col: str,
    strategy: WindowingStrategy,
    aggregations: Mapping[str, tuple[C.CombineFn, str | None]] | None = None,
    value_col: str | None = None,
    watermark: str | int | float | Any = "punctuated",
    num_shards: int | None = None,
    processing_time_col: str | None = "auto",
    watermark_col: str = "watermark_ms",
    kind_col: str | None = "auto",
    output_types: Mapping[str, T.DataType | str] | None = None,
    timestamps: str = "timestamp",
    max_packet_rows: int = 1_000_000,
    lift: bool | str = "auto",
) -> DataFrame:
    """Windowed aggregation of a streaming DataFrame, executed by the core.

    ``key_cols``: the user key (one or more columns). ``event_time_col``: a
    timestamp column or int64 epoch milliseconds. ``aggregations``: output
    name -> ``(CombineFn, input column)``; ``None`` groups without combining:
    panes carry ``values`` (a list of ``value_col``). ``watermark``:
    ``"punctuated"`` (from ``watermark_col``, e.g. the replay source) or a
    delay (``"10 seconds"``, seconds as a number, a timedelta) for Spark's
    bounded-out-of-orderness watermark. ``num_shards``: state shards (default
    ``spark.sql.shuffle.partitions``; keep it fixed for the life of a
    checkpoint). ``processing_time_col``: ``"auto"`` uses ``proc_ms`` if the
    input has it, else Spark's batch timestamp; ``None`` forces the batch
    timestamp. ``kind_col``: rows whose kind is ``'tick'`` or ``'clock'`` are
    control rows; a ``'clock'`` row makes its micro-batch fire the
    processing-time timers due by its time even when that time did not move
    (``"auto"``: ``kind`` if present). ``output_types``: Spark types of
    aggregation outputs the runner cannot infer (user combiners).
    ``timestamps``: ``"timestamp"`` (Spark timestamps; values outside Spark's
    range, e.g. the global window's bounds, become null) or ``"ms"`` (int64
    epoch milliseconds). ``lift``: combiner lifting (``"auto"``: when valid,
    see :func:`lifting`): each packet pre-aggregates its rows per key and
    window slice before the shuffle, so the reducer sees partial aggregates;
    panes are the same, but a dead letter is then one partial aggregate of
    ``elements`` dropped elements instead of one element.

    Returns a streaming DataFrame (see the module docstring for its columns).
    """
    spark = df.sparkSession
    keys = [key_cols] if isinstance(key_cols, str) else list(key_cols)
    if not keys:
        raise ValueError("key_cols must name at least one column")
    if timestamps not in ("timestamp", "ms"):
        raise ValueError("timestamps must be 'timestamp' or 'ms'")
    schema = df.schema
    names = set(schema.fieldNames())
    for c in [*keys, event_time_col]:
        if c not in names:
            raise ValueError(f"column {c!r} not in the input ({sorted(names)})")

    if aggregations is None:
        if value_col is None:
            raise ValueError("give aggregations, or value_col to collect values")
        aggs: dict[str, tuple[C.CombineFn, str | None]] = {"values": (C.ToList(), value_col)}
    else:
        aggs = dict(aggregations)
    input_cols: list[str] = []
    for name, (_, col) in aggs.items():
        if col is not None and col not in input_cols:
            if col not in names:
                raise ValueError(f"aggregation {name!r} reads {col!r}, not in the input")
            input_cols.append(col)
    for name in aggs:
        if name in (*keys, "kind", "window_start", "window_end", "dropped", *dict(PANE_META)):
            raise ValueError(f"aggregation name {name!r} clashes with an output column")
    if "elements" in input_cols or "reason" in input_cols:
        raise ValueError("input columns named 'elements' or 'reason' clash with dead letters")

    proc_col: str | None
    if processing_time_col == "auto":
        proc_col = "proc_ms" if "proc_ms" in names else None
    else:
        proc_col = processing_time_col
    kind: str | None = ("kind" if "kind" in names else None) if kind_col == "auto" else kind_col
    punctuated = isinstance(watermark, str) and watermark.strip().lower() == "punctuated"
    if punctuated and watermark_col not in names:
        raise ValueError(f"punctuated watermarks need a {watermark_col!r} column")
    n_shards = int(num_shards or int(spark.conf.get("spark.sql.shuffle.partitions")))

    # -- event time in ms, and Spark's watermark for the bounded strategy
    et_type = schema[event_time_col].dataType
    if isinstance(et_type, (T.TimestampType, T.TimestampNTZType)):
        et_ms = F.unix_millis(F.col(event_time_col).cast("timestamp"))
        wm_source = event_time_col
    elif isinstance(et_type, T.IntegralType):
        et_ms = F.col(event_time_col).cast("long")
        wm_source = "__hw_event_time"
    else:
        raise TypeError(f"event time column {event_time_col!r} must be a timestamp or int64 ms")
    if not punctuated:
        delay_ms = to_millis(watermark)
        if wm_source == "__hw_event_time":
            df = df.withColumn(wm_source, F.timestamp_millis(F.col(event_time_col)))
        elif isinstance(et_type, T.TimestampNTZType):
            raise TypeError("bounded watermarks need a TIMESTAMP (not TIMESTAMP_NTZ) column")
        df = df.withWatermark(wm_source, f"{delay_ms} milliseconds")

    # -- the user key: raw when it is one plain column, else JSON of a struct
    key_fields = [schema[k] for k in keys]
    raw_key = len(keys) == 1 and isinstance(
        key_fields[0].dataType, (T.StringType, T.IntegralType, T.BooleanType)
    )
    key_expr: Column
    if raw_key:
        key_expr = F.col(keys[0])
        key_type: T.DataType = key_fields[0].dataType
    else:
        key_expr = F.to_json(F.struct(*[F.col(k) for k in keys]))
        key_type = T.StringType()

    projected = [
        shard_column(keys, n_shards).alias(_SHARD),
        key_expr.alias(_KEY),
        et_ms.alias(_TS),
    ]
    projected += [F.col(c) for c in input_cols]
    if kind is not None:
        projected.append(F.col(kind).cast("string").alias(_KIND))
    if punctuated:
        projected.append(F.col(watermark_col).cast("long").alias(_WM))
    if proc_col is not None:
        projected.append(F.col(proc_col).cast("long").alias(_PROC))
    flat = df.select(*projected)

    # -- combiner lifting
    lifted = lifting(strategy, aggs, schema) if lift in ("auto", True) else None
    if lift is True and lifted is None:
        raise ValueError(
            "combiner lifting needs Sum/Count/Min/Max/Mean aggregations of numeric columns, "
            "Global/Fixed/Sliding windows, the end-of-window timestamp combiner and a "
            "trigger without element counts"
        )
    outputs: list[tuple[str, str, str, str]] = []
    if lifted is None:
        reducer_aggs = aggs
        reducer_inputs = list(input_cols)
        drop_types = {c: schema[c].dataType for c in input_cols}
        outputs = [(name, "direct", name, "") for name in aggs]
    else:
        reducer_aggs, outputs, drop_types = _lifted_aggregations(aggs, lifted, schema)
        reducer_inputs = [c for c, _, _ in lifted.partials] + [_N]

    # -- output schema of the operator
    out_fields = [
        T.StructField("kind", T.StringType()),
        T.StructField(_KEY, key_type),
        T.StructField("window_start", T.LongType()),
        T.StructField("window_end", T.LongType()),
    ]
    int_outputs = []
    types = dict(output_types or {})
    for name, (fn, col) in aggs.items():
        in_type = schema[col].dataType if col is not None else None
        if name in types:
            t = types[name]
            out_type = T._parse_datatype_string(t) if isinstance(t, str) else t
        else:
            out_type = _output_type(fn, in_type)
        if isinstance(out_type, T.IntegralType) and isinstance(fn, (C.Min, C.Max)):
            int_outputs.append(name)
        out_fields.append(T.StructField(name, out_type))
    out_fields += [T.StructField(n, t) for n, t in PANE_META]
    out_fields.append(T.StructField("reason", T.StringType()))
    out_fields.append(T.StructField(_DROP + "elements", T.LongType()))
    out_fields += [T.StructField(_DROP + c, t) for c, t in drop_types.items()]
    out_schema = T.StructType(out_fields)

    plan = _Plan(
        strategy=strategy,
        aggregations=reducer_aggs,
        outputs=tuple(outputs),
        input_cols=tuple(reducer_inputs),
        lift=lifted,
        shard_ids=aligned_shard_ids(n_shards),
        has_kind=kind is not None,
        punctuated=punctuated,
        has_proc=proc_col is not None,
        out_schema=out_schema,
        int_outputs=tuple(int_outputs),
        max_packet_rows=int(max_packet_rows),
        needs_dummy=any(col is None for _, col in reducer_aggs.values())
        and "value" not in reducer_inputs,
    )
    packets = flat.mapInArrow(_Packer(plan), PACKET_SCHEMA)
    result = packets.groupBy("shard").transformWithStateInPandas(
        statefulProcessor=ShardProcessor(cloudpickle.dumps(plan)),
        outputStructType=out_schema,
        outputMode="Append",
        timeMode="EventTime",
    )
    return _decode(result, keys, key_fields, raw_key, aggs, list(drop_types), timestamps)


_LIFTABLE_FNS = (C.Sum, C.Count, C.Min, C.Max, C.Mean)


def _has_element_counts(trigger: Trigger) -> bool:
    if isinstance(trigger, AfterCount):
        return True
    return any(_has_element_counts(child) for child, _ in trigger.child_paths(""))


def lifting(
    strategy: WindowingStrategy,
    aggregations: Mapping[str, tuple[C.CombineFn, str | None]],
    schema: T.StructType,
) -> _Lift | None:
    """The combiner-lifting plan, or None when lifting would change the panes.

    Valid when (1) every aggregation is a Sum, Count, Min, Max or Mean (of a
    numeric column): partial aggregates merge into the same result; (2) the
    window function is Global, Fixed or Sliding: all elements of one *slice*
    (Fixed: the window; Sliding: a ``gcd(size, period)`` interval; Global:
    everything) belong to the same windows, so one partial per (key, slice)
    lands in exactly the windows its elements would; sessions merge per
    element and are never lifted; (3) the timestamp combiner is end of
    window (holds of earliest/latest depend on each element and the
    watermark); (4) the trigger has no ``AfterCount``: element counts are the
    only per-element trigger input. Everything else is per bundle: a
    micro-batch is one bundle, all its elements arrive at the same processing
    time, and lateness (window end + allowed lateness <= watermark) is the same
    for all elements of a window.
    """
    wf = strategy.window_fn
    if type(wf) is W.FixedWindows:
        size, offset = wf.size, wf.offset
    elif type(wf) is W.SlidingWindows:
        size, offset = math.gcd(wf.size, wf.period), wf.offset
    elif type(wf) is W.GlobalWindows:
        size, offset = 0, 0
    else:
        return None
    if strategy.timestamp_combiner != TimestampCombiner.END_OF_WINDOW:
        return None
    if _has_element_counts(strategy.trigger):
        return None
    partials: list[tuple[str, str, str]] = []

    def need(col: str, how: str) -> None:
        name = f"{how}_{col}"
        if all(p[0] != name for p in partials):
            partials.append((name, col, how))

    for fn, col in aggregations.values():
        if type(fn) not in _LIFTABLE_FNS:
            return None
        if isinstance(fn, C.Count):
            continue
        if col is None or not isinstance(schema[col].dataType, T.NumericType):
            return None
        if isinstance(fn, (C.Sum, C.Mean)):
            need(col, "sum")
        if isinstance(fn, C.Mean):
            need(col, "count")
        if isinstance(fn, (C.Min, C.Max)):
            need(col, "min" if isinstance(fn, C.Min) else "max")
    return _Lift(size, offset, tuple(partials))


def _lifted_aggregations(aggs, lifted: _Lift, schema: T.StructType):
    """Reducer aggregations over partial columns, output recipes, dead-letter columns."""
    reducer: dict[str, tuple[C.CombineFn, str | None]] = {}
    outputs: list[tuple[str, str, str, str]] = []
    for name, (fn, col) in aggs.items():
        if isinstance(fn, C.Count):
            reducer[name] = (C.Sum(), _N)
            outputs.append((name, "direct", name, ""))
        elif isinstance(fn, C.Mean):
            s_name, c_name = f"__hw_sum_{name}", f"__hw_count_{name}"
            reducer[s_name] = (C.Sum(), f"sum_{col}")
            reducer[c_name] = (C.Sum(), f"count_{col}")
            outputs.append((name, "mean", s_name, c_name))
        else:
            how = {C.Sum: "sum", C.Min: "min", C.Max: "max"}[type(fn)]
            reducer[name] = (type(fn)(), f"{how}_{col}")
            outputs.append((name, "direct", name, ""))
    drop_types: dict[str, T.DataType] = {}
    for partial, col, how in lifted.partials:
        in_type = schema[col].dataType
        if how == "count":
            drop_types[partial] = T.LongType()
        elif how == "sum":
            integral = isinstance(in_type, T.IntegralType)
            drop_types[partial] = T.LongType() if integral else T.DoubleType()
        else:
            drop_types[partial] = in_type
    return reducer, outputs, drop_types


def _output_type(fn: C.CombineFn, in_type: T.DataType | None) -> T.DataType:
    numeric_in = in_type if isinstance(in_type, T.NumericType) else T.DoubleType()
    if isinstance(fn, C.Count):
        return T.LongType()
    if isinstance(fn, C.Sum):
        return T.LongType() if isinstance(in_type, T.IntegralType) else T.DoubleType()
    if isinstance(fn, C.Mean):
        return T.DoubleType()
    if isinstance(fn, (C.Min, C.Max)):
        return T.LongType() if isinstance(in_type, T.IntegralType) else numeric_in
    if isinstance(fn, (C.ToList, C.TopK)):
        return T.ArrayType(in_type or T.StringType())
    if isinstance(fn, C.ApproxDistinct):
        return T.LongType()
    if isinstance(fn, C.ApproxQuantiles):
        return T.ArrayType(T.DoubleType())
    raise TypeError(
        f"cannot infer the Spark type of {fn!r}'s output: pass output_types={{name: type}}"
    )


def _ms_to_ts(col: Column) -> Column:
    return F.when(col.between(SPARK_MIN_MS, SPARK_MAX_MS), F.timestamp_millis(col))


def _decode(result, keys, key_fields, raw_key, aggs, input_cols, timestamps) -> DataFrame:
    if raw_key:
        key_cols = [F.col(_KEY).alias(keys[0])]
    else:
        struct_type = T.StructType([T.StructField(f.name, f.dataType) for f in key_fields])
        parsed = F.from_json(F.col(_KEY), struct_type)
        key_cols = [parsed.getField(k).alias(k) for k in keys]

    def ts(name: str) -> Column:
        return _ms_to_ts(F.col(name)).alias(name) if timestamps == "timestamp" else F.col(name)

    dropped = F.when(
        F.col("kind") == "dropped",
        F.struct(
            F.col("reason").alias("reason"),
            F.col(_DROP + "elements").alias("elements"),
            *[F.col(_DROP + c).alias(c) for c in input_cols],
        ),
    ).alias("dropped")
    return result.select(
        F.col("kind"),
        *key_cols,
        ts("window_start"),
        ts("window_end"),
        *[F.col(name) for name in aggs],
        ts("timestamp"),
        *[F.col(n) for n, _ in PANE_META[1:]],
        dropped,
    )


# ------------------------------------------------------------------- packing


_PROFILERS: dict[str, Any] = {}


def _profiled(role: str, fn: Callable, *args):
    """Run ``fn(*args)`` under this process's profiler for ``role`` (if enabled)."""
    directory = os.environ.get(PROFILE_ENV)
    if not directory:
        return fn(*args)
    import cProfile

    prof = _PROFILERS.get(role)
    if prof is None:
        prof = _PROFILERS[role] = cProfile.Profile()
    prof.enable()
    try:
        return fn(*args)
    finally:
        prof.disable()
        os.makedirs(directory, exist_ok=True)
        prof.dump_stats(os.path.join(directory, f"{role}-{os.getpid()}.prof"))


class _Packer:
    """``mapInArrow`` function: one Arrow IPC packet per shard and input partition."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def __call__(self, batches):
        buffered: list[pa.RecordBatch] = []
        rows = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            buffered.append(batch)
            rows += batch.num_rows
            if rows >= self.plan.max_packet_rows:
                yield _profiled("pack", self._packets, buffered)
                buffered, rows = [], 0
        if buffered:
            yield _profiled("pack", self._packets, buffered)

    def _packets(self, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
        table = pa.Table.from_batches(batches)
        ticks = None
        if self.plan.has_kind:
            is_tick = pc.fill_null(pc.is_in(table[_KIND], value_set=_CONTROL_KINDS), False)
            if pc.any(is_tick).as_py():
                ticks = table.filter(is_tick).drop_columns([_SHARD])
                table = table.filter(pc.invert(is_tick))
        if self.plan.lift is not None:
            table = self._lift(table)
            if ticks is not None:
                ticks = _conform(ticks, table.schema.remove(0))
        shard = table[_SHARD].to_numpy()
        order = np.argsort(shard, kind="stable")
        table = table.take(pa.array(order)).drop_columns([_SHARD])
        ids, starts, counts = np.unique(shard[order], return_index=True, return_counts=True)
        parts: dict[int, pa.Table] = {
            int(s): table.slice(int(b), int(c)) for s, b, c in zip(ids, starts, counts, strict=True)
        }
        if ticks is not None:
            # Control rows reach every shard (possibly as the packet's only rows).
            for s in self.plan.shard_ids:
                part = parts.get(s)
                parts[s] = ticks if part is None else pa.concat_tables([part, ticks])
        out_shards, out_n, out_payload = [], [], []
        for s, part in parts.items():
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, part.schema) as writer:
                writer.write_table(part)
            out_shards.append(s)
            out_n.append(part.num_rows)
            out_payload.append(sink.getvalue())
        return pa.RecordBatch.from_arrays(
            [
                pa.array(out_shards, pa.int32()),
                pa.array(out_n, pa.int64()),
                pa.array(out_payload, pa.binary()),
            ],
            names=["shard", "n", "payload"],
        )

    def _lift(self, table: pa.Table) -> pa.Table:
        """Pre-aggregate data rows per (shard, key, window slice)."""
        lift = self.plan.lift
        assert lift is not None
        ts = table[_TS].to_numpy(zero_copy_only=False)
        if lift.slice_size:
            slice_start = ts - np.mod(ts - lift.slice_offset, lift.slice_size)
        else:
            slice_start = np.zeros(len(ts), dtype=np.int64)
        table = table.append_column("__hw_slice", pa.array(slice_start, pa.int64()))
        sum_opts = pc.ScalarAggregateOptions(skip_nulls=True, min_count=0)
        specs: list[tuple] = [(_TS, "min")]
        for _, col, how in lift.partials:
            if how == "sum":
                specs.append((col, "sum", sum_opts))
            elif how == "count":
                specs.append((col, "count", pc.CountOptions(mode="only_valid")))
            else:
                specs.append((col, how))
        specs.append(([], "count_all"))
        extra = [c for c in (_KIND, _WM, _PROC) if c in table.column_names]
        specs += [(c, "max") for c in extra]
        grouped = table.group_by([_SHARD, _KEY, "__hw_slice"], use_threads=False).aggregate(specs)
        names = [_TS] + [p for p, _, _ in lift.partials] + [_N] + extra
        sources = [f"{_TS}_min"]
        sources += [f"{col}_{how}" for _, col, how in lift.partials]
        sources += ["count_all"] + [f"{c}_max" for c in extra]
        columns = [grouped[_SHARD], grouped[_KEY]] + [grouped[c] for c in sources]
        return pa.table(columns, names=[_SHARD, _KEY, *names])


def _conform(ticks: pa.Table, schema: pa.Schema) -> pa.Table:
    """Control rows in the (lifted) packet schema: nulls, zero elements."""
    n = ticks.num_rows
    cols = []
    for field in schema:
        if field.name in ticks.column_names and field.name != _TS:
            cols.append(ticks[field.name].cast(field.type))
        elif field.name == _N:
            cols.append(pa.array(np.zeros(n, dtype=np.int64)))
        else:
            cols.append(pa.nulls(n, field.type))
    return pa.table(cols, schema=schema)


def _unpack(frames) -> pa.Table | None:
    tables = []
    for pdf in frames:
        for payload in pdf["payload"]:
            tables.append(pa.ipc.open_stream(payload).read_all())
    if not tables:
        return None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


# ---------------------------------------------------------- the stateful part


class ShardLogic:
    """One shard's step per micro-batch: load the Reducer, apply the bundle and the
    watermark / clock advances, save it, move the timer, emit (see ``processor.py``)."""

    def __init__(self, plan: _Plan, handle: Any, state: Any) -> None:
        self.plan = plan
        self.handle = handle
        self.state = state

    def input_rows(self, rows, tv: TimerValues):
        table = _profiled("unpack", _unpack, rows)
        yield from _profiled("step", self._step, table, tv, None)

    def expired(self, tv: TimerValues, expired: int):
        yield from _profiled("step", self._step, None, tv, expired)

    # -- one step of one shard
    def _step(self, table: pa.Table | None, tv: TimerValues, expired: int | None):
        plan = self.plan
        data = table
        wm: int | None = None
        proc: int | None = None
        clock = False  # a clock step: fire the timers due by ``proc`` even if time did not move
        if table is not None:
            if plan.has_kind:
                control = pc.fill_null(pc.is_in(table[_KIND], value_set=_CONTROL_KINDS), False)
                data = table.filter(pc.invert(control))
                clock = bool(pc.any(pc.equal(table[_KIND], "clock")).as_py())
            if plan.punctuated:
                m = pc.max(table[_WM]).as_py()
                wm = None if m is None else int(m)
            if plan.has_proc:
                m = pc.max(table[_PROC]).as_py()
                proc = None if m is None else int(m)
        if not plan.punctuated:
            spark_wm = int(tv.getCurrentWatermarkInMs())
            wm = spark_wm if spark_wm > 0 else None
        if proc is None:
            proc = int(tv.getCurrentProcessingTimeInMs())

        stored = self.state.get()
        blob, timer = (bytes(stored[0]), int(stored[1])) if stored is not None else (None, -1)
        reducer = Reducer.restore(plan.strategy, plan.aggregations, blob)
        prev_now = reducer.now
        parts: list[Emission] = []
        if not plan.punctuated and wm is not None:
            # Spark's watermark predates this batch's rows: it is their arrival watermark.
            parts.append(reducer.advance_watermark(wm, proc))
        if data is not None and data.num_rows:
            keys = data[_KEY].to_numpy(zero_copy_only=False)
            ts = data[_TS].to_numpy(zero_copy_only=False)
            values = data.select(list(plan.input_cols)).to_pandas() if plan.input_cols else None
            if plan.needs_dummy:
                # Combiners without an input column (Count) read the reducer's
                # default column; give it one of the bundle's length.
                values = pd.DataFrame(index=range(data.num_rows)) if values is None else values
                values["value"] = np.zeros(data.num_rows, dtype=np.int8)
            parts.append(reducer.add_bundle(keys, ts, values, now=proc))
        if plan.punctuated and wm is not None:
            parts.append(reducer.advance_watermark(wm, proc))
        if proc > prev_now or clock:
            parts.append(reducer.advance_clock(proc))
        self.state.update((reducer.snapshot(), self._move_timer(reducer, wm, timer, expired)))
        return self._output(parts)

    def _move_timer(self, reducer: Reducer, wm: int | None, timer: int, expired: int | None):
        """Keep one event-time timer per shard at the next time the watermark matters."""
        if self.plan.punctuated:
            return -1  # every replay step reaches every shard; Spark's watermark is unused
        floor = (wm if wm is not None else 0) + 1
        want = reducer.next_event_time()
        if reducer.next_timer() is not None:
            # Pending processing-time timers: wake up whenever the watermark moves.
            want = floor if want is None else min(want, floor)
        if want is not None:
            want = max(int(want), floor)
        current = -1 if expired is not None and timer == expired else timer
        if want == current or (want is None and current < 0):
            return current
        if current >= 0:
            self.handle.deleteTimer(current)
        if want is None:
            return -1
        self.handle.registerTimer(want)
        return want

    def _output(self, parts: list[Emission]) -> list[pd.DataFrame]:
        """At most two frames (panes, dropped) in the output schema's column order.

        The reducer's frames are concatenated first, while their columns are
        typed; the all-null columns of the output are added after (concatenating
        object columns of None makes pandas check every element).
        """
        names = [f.name for f in self.plan.out_schema.fields]
        out = []
        panes = [em.panes for em in parts if len(em.panes)]
        if panes:
            frame = panes[0] if len(panes) == 1 else pd.concat(panes, ignore_index=True)
            out.append(self._pane_frame(frame)[names])
        dropped = [em.dropped for em in parts if len(em.dropped)]
        if dropped:
            frame = dropped[0] if len(dropped) == 1 else pd.concat(dropped, ignore_index=True)
            out.append(self._dropped_frame(frame)[names])
        return out

    def _pane_frame(self, panes: pd.DataFrame) -> pd.DataFrame:
        plan = self.plan
        out = pd.DataFrame({"kind": "pane", _KEY: panes["key"].to_numpy()})
        out["window_start"] = panes["window_start"].to_numpy(np.int64)
        out["window_end"] = panes["window_end"].to_numpy(np.int64)
        for name, how, a, b in plan.outputs:
            if how == "mean":
                total = panes[a].to_numpy(np.float64)
                count = panes[b].to_numpy(np.float64)
                with np.errstate(invalid="ignore", divide="ignore"):
                    out[name] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
                continue
            col = panes[a]
            if name in plan.int_outputs:
                col = pd.array(pd.to_numeric(col), dtype="Float64").astype("Int64")
            out[name] = col.to_numpy() if isinstance(col, pd.Series) else col
        for name, _ in PANE_META:
            out[name] = panes[name].to_numpy()
        out["reason"] = None
        for f in plan.out_schema.fieldNames():
            if f.startswith(_DROP):
                out[f] = None
        return out

    def _dropped_frame(self, dropped: pd.DataFrame) -> pd.DataFrame:
        plan = self.plan
        out = pd.DataFrame({"kind": "dropped", _KEY: dropped["key"].to_numpy()})
        out["window_start"] = dropped["window_start"].to_numpy(np.int64)
        out["window_end"] = dropped["window_end"].to_numpy(np.int64)
        for name, _, _, _ in plan.outputs:
            out[name] = None
        out["timestamp"] = dropped["timestamp"].to_numpy(np.int64)
        for name, _ in PANE_META[1:]:
            out[name] = None
        out["reason"] = dropped["reason"].to_numpy()
        if plan.lift is not None:
            out[_DROP + "elements"] = dropped[_N].to_numpy(np.int64)
        else:
            out[_DROP + "elements"] = 1
        for c in plan.input_cols:
            if c != _N:
                out[_DROP + c] = dropped[c].to_numpy()
        return out


# --------------------------------------------------------------- the outputs


def panes(df: DataFrame) -> DataFrame:
    """The pane rows of ``run_streaming``'s output (or of one of its micro-batches)."""
    return df.where(F.col("kind") == "pane").drop("kind", "dropped")


def dead_letters(df: DataFrame) -> DataFrame:
    """The dropped elements: key columns, window, ``event_time``, reason,
    ``elements`` (1; with combiner lifting the number of elements of the
    partial aggregate) and the input columns the aggregations read (lifted:
    the partial aggregates, named ``sum_<col>``, ``max_<col>``...)."""
    meta = {"kind", "dropped", "window_start", "window_end", "timestamp"}
    meta |= {n for n, _ in PANE_META}
    dropped_fields = df.schema["dropped"].dataType.fieldNames()
    data_cols = [c for c in df.columns if c not in meta]
    # key columns come first in run_streaming's output; aggregation outputs follow the window
    key_cols = data_cols[: df.columns.index("window_start") - 1]
    return df.where(F.col("kind") == "dropped").select(
        *key_cols,
        "window_start",
        "window_end",
        F.col("timestamp").alias("event_time"),
        *[F.col("dropped").getField(f).alias(f) for f in dropped_fields],
    )


def observe_counts(df: DataFrame, name: str = "headwater") -> DataFrame:
    """``df`` with named metrics ``panes`` and ``dropped`` (elements dropped as
    late or closed), reported in ``StreamingQueryProgress.observedMetrics``."""
    return df.observe(
        name,
        F.count(F.when(F.col("kind") == "pane", 1)).alias("panes"),
        F.coalesce(F.sum(F.col("dropped.elements")), F.lit(0)).alias("dropped"),
    )


def start_streaming(
    out: DataFrame,
    *,
    checkpoint_location: str,
    panes_sink: Sink | None = None,
    dead_letter_sink: Sink | None = None,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    metrics_name: str | None = "headwater",
):
    """Start the query: panes to ``panes_sink``, dropped elements to
    ``dead_letter_sink`` (each ``f(batch_df, batch_id)``; make them idempotent
    per batch id: a batch re-runs after a failure). ``trigger``: keyword
    arguments of ``DataStreamWriter.trigger``, e.g. ``{"availableNow": True}``."""
    if metrics_name:
        out = observe_counts(out, metrics_name)

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            if panes_sink is not None:
                panes_sink(panes(batch), batch_id)
            if dead_letter_sink is not None:
                dead_letter_sink(dead_letters(batch), batch_id)
            if panes_sink is None and dead_letter_sink is None:
                batch.count()
        finally:
            batch.unpersist()

    writer = out.writeStream.foreachBatch(each_batch).option(
        "checkpointLocation", checkpoint_location
    )
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()


def parquet_sink(path: str) -> Sink:
    """A sink writing each micro-batch to ``path/batch_id=N`` (overwrite: idempotent)."""

    def sink(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(f"{path.rstrip('/')}/batch_id={batch_id}")

    return sink
