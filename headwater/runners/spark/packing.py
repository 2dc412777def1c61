"""Packing a micro-batch for the stateful operator, and combiner lifting.

Per input partition, rows are grouped by shard and each shard's rows become
*one* row holding an Arrow IPC stream (:class:`Packer`, a ``mapInArrow``
function). PySpark 4.3 feeds ``transformWithStateInPandas`` through a Python
loop per input row; packing makes that a loop per packet (a few per shard per
batch) and keeps the data columnar from the source to the reducer. Control
("tick") rows of a replay are copied into the packet of every shard, so a
step without data still reaches every shard and fires its timers. With a
state time-to-live, every partition also sends every shard an empty packet, so
that each shard steps in every micro-batch and drops its idle keys' state.

Combiner lifting (when valid, see :func:`lifting`): the packer also
pre-aggregates its rows per (shard, key, window slice) with Arrow's
``group_by`` (sum / min / max / non-null count, plus an element count), so the
shuffle and the reducer see partial aggregates. A streaming
``groupBy().agg()`` would be a *stateful* Spark aggregation, so the stateless
per-batch partial aggregation has to happen in the packer.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from headwater.model import combiners as C
from headwater.model import windows as W
from headwater.model.panes import TimestampCombiner
from headwater.model.strategy import WindowingStrategy
from headwater.model.triggers import AfterCount, Trigger
from headwater.runners.spark.worker import (
    CONTROL_KINDS,
    KEY,
    KIND,
    PROC,
    REJECT_SHARD,
    REJECTED,
    SHARD,
    TS,
    WM,
    Lift,
    N,
    Output,
    Partial,
    WorkerPlan,
    profiled,
)

Aggregations = Mapping[str, tuple[C.CombineFn, str | None]]

# ------------------------------------------------------------------ lifting

#: Window functions whose elements fall in windows by fixed *slices* of time:
#: class -> (slice size, slice offset) in ms (size 0: one slice, everything).
SLICES: dict[type[W.WindowFn], Callable[[W.WindowFn], tuple[int, int]]] = {
    W.FixedWindows: lambda wf: (wf.size, wf.offset),
    W.SlidingWindows: lambda wf: (math.gcd(wf.size, wf.period), wf.offset),
    W.CumulativeWindows: lambda wf: (wf.step, wf.offset),
    W.GlobalWindows: lambda wf: (0, 0),
}


@dataclass(frozen=True)
class LiftRule:
    """How one combiner class lifts: the partials of its input column it needs
    (``how`` names of :class:`Partial`), and the reducer aggregations over those
    partial columns plus the recipe of its output (:class:`Output`)."""

    partials: Callable[[C.CombineFn], tuple[str, ...]]
    fold: Callable[[str, C.CombineFn, str | None], tuple[Aggregations, Output]]


def _fold_count(name: str, fn: C.CombineFn, col: str | None):
    # Partial counts are never null: their Sum is the count (0, not NULL).
    source = f"count_{col}" if fn.skip_nulls and col else N
    return {name: (C.Sum(), source)}, Output(name, "direct", name)


def _fold_mean(name: str, fn: C.CombineFn, col: str | None):
    """Sum and non-null count partials; the mean is their ratio (NULL for no count)."""
    s_name, c_name = f"__hw_sum_{name}", f"__hw_count_{name}"
    aggs = {s_name: (C.Sum(), f"sum_{col}"), c_name: (C.Sum(), f"count_{col}")}
    return aggs, Output(name, "mean", s_name, c_name)


def _fold_sum(name: str, fn: C.CombineFn, col: str | None):
    # A partial sum is NULL for a slice of only nulls (min_count=1 in the packer),
    # and the reducer's Sum skips it: NULL exactly where SQL's SUM is.
    return {name: (C.Sum(), f"sum_{col}")}, Output(name, "direct", name)


def _fold_extreme(name: str, fn: C.CombineFn, col: str | None):
    return {name: (type(fn)(), f"{fn.name}_{col}")}, Output(name, "direct", name)


#: Combiners whose partial aggregates merge into the same result, by class.
LIFT_RULES: dict[type[C.CombineFn], LiftRule] = {
    C.Sum: LiftRule(lambda fn: ("sum",), _fold_sum),
    C.Mean: LiftRule(lambda fn: ("sum", "count"), _fold_mean),
    C.Min: LiftRule(lambda fn: ("min",), _fold_extreme),
    C.Max: LiftRule(lambda fn: ("max",), _fold_extreme),
    C.Count: LiftRule(lambda fn: ("count",) if fn.skip_nulls else (), _fold_count),
}


def _has_element_counts(trigger: Trigger) -> bool:
    if isinstance(trigger, AfterCount):
        return True
    return any(_has_element_counts(child) for child, _ in trigger.child_paths(""))


def lifting(
    strategy: WindowingStrategy, aggregations: Aggregations, schema: T.StructType
) -> Lift | None:
    """The combiner-lifting plan, or None when lifting would change the panes.

    Valid when (1) every aggregation's combiner is in :data:`LIFT_RULES` (of a
    numeric column): partial aggregates merge into the same result; (2) the
    window function is in :data:`SLICES`: all elements of one *slice* (Fixed:
    the window; Sliding: a ``gcd(size, period)`` interval; Cumulative: a step; Global: everything)
    belong to the same windows, so one partial per (key, slice) lands in
    exactly the windows its elements would; sessions merge per element and are
    never lifted; (3) the timestamp combiner is end of window (holds of
    earliest/latest depend on each element and the watermark); (4) the trigger
    has no ``AfterCount``: element counts are the only per-element trigger
    input. Everything else is per bundle: a micro-batch is one bundle, all its
    elements arrive at the same processing time, and lateness (window end +
    allowed lateness <= watermark) is the same for all elements of a window.
    """
    slicer = SLICES.get(type(strategy.window_fn))
    if slicer is None:
        return None
    if strategy.timestamp_combiner != TimestampCombiner.END_OF_WINDOW:
        return None
    if _has_element_counts(strategy.trigger):
        return None
    partials: dict[str, Partial] = {}
    for fn, col in aggregations.values():
        rule = LIFT_RULES.get(type(fn))
        if rule is None:
            return None
        hows = rule.partials(fn)
        if not hows:
            continue  # count(): the element count of every lifted row
        if col is None or not isinstance(schema[col].dataType, T.NumericType):
            return None
        for how in hows:
            partials.setdefault(f"{how}_{col}", Partial(f"{how}_{col}", col, how))
    size, offset = slicer(strategy.window_fn)
    return Lift(size, offset, tuple(partials.values()))


def lifted_aggregations(aggs: Aggregations, lifted: Lift, schema: T.StructType):
    """Reducer aggregations over partial columns, output recipes, dead-letter columns."""
    reducer: dict[str, tuple[C.CombineFn, str | None]] = {}
    outputs: list[Output] = []
    for name, (fn, col) in aggs.items():
        folded, output = LIFT_RULES[type(fn)].fold(name, fn, col)
        reducer.update(folded)
        outputs.append(output)
    drop_types: dict[str, T.DataType] = {}
    for p in lifted.partials:
        in_type = schema[p.source].dataType
        if p.how == "count":
            drop_types[p.column] = T.LongType()
        elif p.how == "sum":
            integral = isinstance(in_type, T.IntegralType)
            drop_types[p.column] = T.LongType() if integral else T.DoubleType()
        else:
            drop_types[p.column] = in_type
    return reducer, outputs, drop_types


# ------------------------------------------------------------------ packing


class Packer:
    """``mapInArrow`` function: one Arrow IPC packet per shard and input partition."""

    def __init__(self, plan: WorkerPlan) -> None:
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
                yield profiled("pack", self._packets, buffered)
                buffered, rows = [], 0
        if buffered:
            yield profiled("pack", self._packets, buffered)
        if self.plan.ttl is not None:
            yield self._wake_every_shard()

    def _wake_every_shard(self) -> pa.RecordBatch:
        """An empty packet for every shard (a state time-to-live): each shard then
        steps in every micro-batch, and drops the state of its idle keys even when
        none of its keys has a row in the batch."""
        shards = list(self.plan.shard_ids)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(shards, pa.int32()),
                pa.array(np.zeros(len(shards), np.int64)),
                pa.array([b""] * len(shards), pa.binary()),
            ],
            names=["shard", "n", "payload"],
        )

    def _packets(self, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
        table = pa.Table.from_batches(batches)
        rejected = None
        if self.plan.rejects is not None:
            table, rejected = _split_rejected(table)
        ticks = None
        if self.plan.has_control:
            is_tick = pc.fill_null(pc.is_in(table[KIND], value_set=CONTROL_KINDS), False)
            if pc.any(is_tick).as_py():
                ticks = table.filter(is_tick).drop_columns([SHARD])
                table = table.filter(pc.invert(is_tick))
        if self.plan.lift is not None:
            table = self._lift(table)
            if ticks is not None:
                ticks = _conform(ticks, table.schema.remove(0))
        shard = table[SHARD].to_numpy()
        order = np.argsort(shard, kind="stable")
        table = table.take(pa.array(order)).drop_columns([SHARD])
        ids, starts, counts = np.unique(shard[order], return_index=True, return_counts=True)
        parts: dict[int, pa.Table] = {
            int(s): table.slice(int(b), int(c)) for s, b, c in zip(ids, starts, counts, strict=True)
        }
        if ticks is not None:
            # Control rows reach every shard (possibly as the packet's only rows).
            for s in self.plan.shard_ids:
                part = parts.get(s)
                parts[s] = ticks if part is None else pa.concat_tables([part, ticks])
        if rejected is not None:
            parts[REJECT_SHARD] = rejected
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
        # A null event time has a null slice: its rows pre-aggregate apart, and the
        # shard turns them into dead letters (reason null_event_time).
        null_ts = pc.is_null(table[TS]).to_numpy(zero_copy_only=False)
        ts = pc.fill_null(table[TS], 0).to_numpy(zero_copy_only=False)
        if lift.slice_size:
            slice_start = ts - np.mod(ts - lift.slice_offset, lift.slice_size)
        else:
            slice_start = np.zeros(len(ts), dtype=np.int64)
        slices = pa.array(slice_start, pa.int64(), mask=null_ts if null_ts.any() else None)
        table = table.append_column("__hw_slice", slices)
        # min_count=1: the sum of a slice whose values are all null is null (SQL's SUM).
        sum_opts = pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)
        specs: list[tuple] = [(TS, "min")]
        for p in lift.partials:
            if p.how == "sum":
                specs.append((p.source, "sum", sum_opts))
            elif p.how == "count":
                specs.append((p.source, "count", pc.CountOptions(mode="only_valid")))
            else:
                specs.append((p.source, p.how))
        specs.append(([], "count_all"))
        extra = [c for c in (KIND, WM, PROC) if c in table.column_names]
        specs += [(c, "max") for c in extra]
        grouped = table.group_by([SHARD, KEY, "__hw_slice"], use_threads=False).aggregate(specs)
        names = [TS] + [p.column for p in lift.partials] + [N] + extra
        sources = [f"{TS}_min"]
        sources += [f"{p.source}_{p.how}" for p in lift.partials]
        sources += ["count_all"] + [f"{c}_max" for c in extra]
        columns = [grouped[SHARD], grouped[KEY]] + [grouped[c] for c in sources]
        return pa.table(columns, names=[SHARD, KEY, *names])


def _split_rejected(table: pa.Table) -> tuple[pa.Table, pa.Table | None]:
    """The rows without :data:`REJECTED` (the column dropped), and the rejected
    records' texts (None if there are none)."""
    is_rejected = pc.is_valid(table[REJECTED])
    rows = table.drop_columns([REJECTED])
    if not pc.any(is_rejected).as_py():
        return rows, None
    rejected = table.filter(is_rejected).select([REJECTED])
    return rows.filter(pc.invert(is_rejected)), rejected


def _conform(ticks: pa.Table, schema: pa.Schema) -> pa.Table:
    """Control rows in the (lifted) packet schema: nulls, zero elements."""
    n = ticks.num_rows
    cols = []
    for field in schema:
        if field.name in ticks.column_names and field.name != TS:
            cols.append(ticks[field.name].cast(field.type))
        elif field.name == N:
            cols.append(pa.array(np.zeros(n, dtype=np.int64)))
        else:
            cols.append(pa.nulls(n, field.type))
    return pa.table(cols, schema=schema)


def unpack(frames) -> pa.Table | None:
    tables = []
    for pdf in frames:
        for payload in pdf["payload"]:
            if len(payload):  # an empty packet only wakes the shard (a time-to-live)
                tables.append(pa.ipc.open_stream(payload).read_all())
    if not tables:
        return None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
