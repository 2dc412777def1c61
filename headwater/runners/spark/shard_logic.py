"""One shard's step per micro-batch, inside ``transformWithStateInPandas``.

Grouped by shard, per micro-batch the handler reads ONE ``ValueState`` (the
shard's reducer, in the versioned state format of
:mod:`headwater.model.state`), turns its packets into one model step
(:class:`~headwater.model.steps.MicroBatch`) applied by
:func:`~headwater.model.steps.apply_step`, writes the state once and moves its
one event-time timer if needed: 2 to 4 state calls per shard per batch, never
one per key or window. The processor class lives in ``processor.py``, which
imports no pandas (Spark runs its ``init`` in a fresh driver process at every
query start) and loads this module on first use.

Each shard keeps one event-time timer at its reducer's ``next_event_time()``
(next window end or collection time), so a shard with no new rows still fires
its ON_TIME and final panes once Spark's watermark passes; Spark runs a
no-data micro-batch for that. A shard with pending processing-time timers also
wakes whenever the watermark moves.

With a state time-to-live (``WorkerPlan.ttl``), a third ``ValueState`` holds
the shard's idle keys (:class:`~headwater.model.idle.IdleKeys`: when each key's
last row arrived); each step reads it, drops the state of the keys idle for
the TTL before its rows and has the pane transform withdraw their results.
The packer sends every shard a packet in every micro-batch, so a shard without
rows still steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import TimerValues

from headwater.model.idle import IdleKeys
from headwater.model.reducer import Emission, Reducer
from headwater.model.schema import PANE_COLUMNS, DropReason
from headwater.model.slack import slack_tracker
from headwater.model.steps import Bundle, MicroBatch, apply_step, end_of_input
from headwater.model.time import MAX_TIMESTAMP
from headwater.runners.spark.packing import unpack
from headwater.runners.spark.types import to_spark_pandas
from headwater.runners.spark.worker import (
    CONTROL_KINDS,
    DROP,
    KEY,
    KIND,
    ORDER,
    OUT,
    PROC,
    REJECT_SHARD,
    REJECTED,
    SHARD_NO,
    SHARD_SLACK,
    SHARD_WM,
    STEP_TIME,
    TS,
    WM,
    N,
    WorkerPlan,
    profiled,
)


class ShardLogic:
    """One shard's step per micro-batch: load the Reducer, apply the bundle and the
    watermark / clock advances, save it, move the timer, emit (see ``processor.py``)."""

    def __init__(
        self,
        plan: WorkerPlan,
        handle: Any,
        state: Any,
        transform_state=None,
        watermark_state=None,
        idle_state=None,
    ) -> None:
        self.plan = plan
        self.handle = handle
        self.state = state
        self.transform_state = transform_state
        self.watermark_state = watermark_state
        self.idle_state = idle_state

    def input_rows(self, rows, tv: TimerValues, shard: Any = None):
        table = profiled("unpack", unpack, rows)
        if shard == REJECT_SHARD:
            yield from self._rejected(table, tv)
            return
        if self.plan.derived is not None:
            yield from profiled("step", self._derived_steps, table, tv, shard)
            return
        yield from profiled("step", self._step, table, tv, None)

    def expired(self, tv: TimerValues, expired: int):
        yield from profiled("step", self._step, None, tv, expired)

    def _rejected(self, table: pa.Table | None, tv: TimerValues):
        """A source's rejected records as dead letters (kind ``dropped``, their text in
        ``plan.rejects``, everything else null): no model step, no state."""
        if table is None or not table.num_rows:
            return
        names = self.plan.out_schema.fieldNames()
        out = pd.DataFrame({name: None for name in names}, index=range(table.num_rows))
        out["kind"] = "dropped"
        out[DROP + "elements"] = 1
        out[self.plan.rejects] = table[REJECTED].to_numpy(zero_copy_only=False)
        if STEP_TIME in names:
            out[STEP_TIME] = int(tv.getCurrentProcessingTimeInMs())
        yield out[names]

    # -- one step of one shard
    def _step(self, table: pa.Table | None, tv: TimerValues, expired: int | None):
        batch, nulls = self._micro_batch(table, tv)
        stored = self.state.get()
        blob, timer = (bytes(stored[0]), int(stored[1])) if stored is not None else (None, -1)
        reducer = Reducer.restore(self.plan.strategy, self.plan.aggregations, blob, self.plan.keep)
        gone = self._expire_idle(reducer, batch)
        emission = apply_step(reducer, batch)
        wm = batch.watermark if batch.watermark is not None else batch.arrival_watermark
        self.state.update((reducer.snapshot(), self._move_timer(reducer, wm, timer, expired)))
        changes = None
        if self.plan.transform is not None:
            again = batch.rows.keys if batch.rows is not None else np.zeros(0, object)
            forgotten = Forgotten(gone, again)
            changes = self._transform(emission.panes, int(batch.now), reducer.settled(), forgotten)
            emission = Emission(emission.panes.iloc[:0], emission.dropped)
        return self._output([emission, Emission(emission.panes.iloc[:0], nulls)], changes)

    # -- a watermark the shard derives from its own rows (K-slack)
    def _derived_steps(self, table: pa.Table | None, tv: TimerValues, shard: Any):
        """One model step per processing time of this shard's rows, earliest first, each
        followed by the watermark the shard's tracker derives from the rows so far
        (``plan.derived``); an ``end`` row then ends the input. The reducer and the
        tracker are read and written once per micro-batch."""
        plan = self.plan
        data, _, end = self._control(table)
        data, nulls = self._without_null_times(data)
        stored, kept = self.state.get(), self.watermark_state.get()
        blob = bytes(stored[0]) if stored is not None else None
        reducer = Reducer.restore(plan.strategy, plan.aggregations, blob, plan.keep)
        tracker = slack_tracker(plan.derived, bytes(kept[0]) if kept is not None else None)
        now = int(tv.getCurrentProcessingTimeInMs())
        emissions, trace = [], []
        for time, rows in self._arrivals(data, now):
            step = tracker.advance(rows.timestamps)
            emission = apply_step(reducer, MicroBatch(rows, watermark=step.watermark, now=time))
            emissions.append((time, emission, reducer.settled()))
            trace.append((time, step.watermark, step.slack))
        last = self._last(table, now) if plan.has_proc else now
        if end:  # the input ends: the watermark goes to the end of time
            emission = apply_step(reducer, end_of_input(now=last))
            emissions.append((last, emission, reducer.settled()))
            trace.append((last, MAX_TIMESTAMP, tracker.slack()))
        self.state.update((reducer.snapshot(), -1))
        self.watermark_state.update((tracker.snapshot(),))
        parts, changes = [], []
        for time, emission, settled in emissions:
            if plan.transform is not None:
                change = self._transform(emission.panes, time, settled)
                changes.append(None if change is None else change.assign(**{STEP_TIME: time}))
                emission = Emission(emission.panes.iloc[:0], emission.dropped)
            parts.append(_at(emission, time))
        parts.append(_at(Emission(pd.DataFrame(), nulls), last))
        kept_changes = [c for c in changes if c is not None and len(c)]
        out = self._output(parts, pd.concat(kept_changes) if kept_changes else None)
        if trace:
            out.append(self._trace_frame(plan.shard_ids.index(int(shard)), trace))
        return out

    def _arrivals(self, data: pa.Table | None, now: int) -> list[tuple[int, Bundle]]:
        """The rows by processing time (``PROC``; without it all at ``now``), each group
        in arrival order (``ORDER``, when given): ``(time, bundle)``, earliest first."""
        if data is None or not data.num_rows:
            return []
        plan = self.plan
        if plan.has_proc:
            data = data.set_column(
                data.schema.get_field_index(PROC), PROC, pc.fill_null(data[PROC], now)
            )
        order = [(PROC, "ascending")] if plan.has_proc else []
        order += [(ORDER, "ascending")] if plan.has_order else []
        data = data.sort_by(order) if order else data  # a stable sort
        times = (
            data[PROC].to_numpy(zero_copy_only=False).astype(np.int64)
            if plan.has_proc
            else np.full(data.num_rows, now, dtype=np.int64)
        )
        bundle = self._bundle(data)
        bounds = np.r_[0, np.flatnonzero(np.diff(times)) + 1, len(times)]
        values = bundle.values
        return [
            (
                int(times[a]),
                Bundle(
                    bundle.keys[a:b],
                    bundle.timestamps[a:b],
                    None if values is None else values.iloc[a:b],
                ),
            )
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]

    def _last(self, table: pa.Table | None, now: int) -> int:
        """The latest processing time of this micro-batch's rows (control rows too)."""
        m = pc.max(table[PROC]).as_py() if table is not None else None
        return now if m is None else int(m)

    def _trace_frame(self, shard: int, trace: list[tuple[int, int, int]]) -> pd.DataFrame:
        """Rows of kind 'watermark': the shard's watermark and K after each step."""
        times, watermarks, slack = np.asarray(trace, dtype=np.int64).T
        out = pd.DataFrame({"kind": np.full(len(trace), "watermark", dtype=object)})
        for name in self.plan.out_schema.fieldNames()[1:]:
            out[name] = None
        out[STEP_TIME] = times
        out[SHARD_NO] = np.full(len(trace), shard, dtype=np.int32)
        out[SHARD_WM] = watermarks
        out[SHARD_SLACK] = slack
        return out

    def _expire_idle(self, reducer: Reducer, batch: MicroBatch) -> np.ndarray:
        """With a state time-to-live: the shard's keys idle for it at the step's
        time, their state dropped from the reducer before the step's rows (as the
        local runner does), and the idle times moved by the step's rows."""
        if self.idle_state is None or self.plan.ttl is None:
            return np.zeros(0, object)
        stored = self.idle_state.get()
        idle = IdleKeys.restore(self.plan.ttl, bytes(stored[0]) if stored is not None else None)
        now = int(batch.now)
        gone = idle.expired(now)
        if len(gone):
            reducer.forget(gone)
        if batch.rows is not None:
            idle.touch(batch.rows.keys, now)
        if len(gone) or batch.rows is not None:
            self.idle_state.update((idle.snapshot(),))
        return gone

    def _transform(
        self, panes: pd.DataFrame, now: int, settled: int, forgotten: Forgotten | None = None
    ) -> pd.DataFrame | None:
        """The plan's pane transform over this step's panes; its state is read and
        written only when panes fired or keys expired (then a transform with
        ``expire`` also forgets the windows ending by ``settled``:
        ``Reducer.settled``). Expired keys' results are withdrawn first."""
        forgotten = forgotten or Forgotten(np.zeros(0, object), np.zeros(0, object))
        gone = forgotten.keys
        if not len(panes) and not len(gone):
            return None
        transform = self.plan.transform
        stored = self.transform_state.get()
        state = transform.restore(bytes(stored[0]) if stored is not None else None)
        withdrawn = transform.forget(state, gone, now) if len(gone) else None
        out = transform.apply(panes, now, state)
        if len(gone):  # expired and not started again in this step: numbered afresh
            again = pd.Index(pd.unique(np.asarray(forgotten.again, dtype=object)))
            transform.forget_versions(state, gone[~pd.Index(gone).isin(again)])
        expire = getattr(transform, "expire", None)
        if expire is not None:
            expire(state, int(settled))
        self.transform_state.update((transform.snapshot(state),))
        parts = [f for f in (withdrawn, out) if f is not None and len(f)]
        if len(parts) > 1:
            return pd.concat(parts, ignore_index=True)
        return parts[0] if parts else out

    def _micro_batch(self, table: pa.Table | None, tv: TimerValues):
        """This shard's part of the micro-batch as one model step, and the rows
        with a null event time (dead letters)."""
        plan = self.plan
        data, fire_timers, end = self._control(table)
        wm: int | None = None
        proc: int | None = None
        if table is not None:
            if plan.punctuated:
                m = pc.max(table[WM]).as_py()
                wm = None if m is None else int(m)
            if plan.has_proc:
                m = pc.max(table[PROC]).as_py()
                proc = None if m is None else int(m)
        if proc is None:
            proc = int(tv.getCurrentProcessingTimeInMs())
        arrival_wm = None
        if not plan.punctuated:
            # Spark's watermark predates this batch's rows: it is their arrival watermark
            # (Spark's "no watermark yet" is 0).
            spark_wm = int(tv.getCurrentWatermarkInMs())
            arrival_wm = spark_wm if spark_wm > 0 else None
        data, nulls = self._without_null_times(data)
        rows = self._bundle(data) if data is not None and data.num_rows else None
        batch = MicroBatch(
            rows,
            watermark=MAX_TIMESTAMP if end else wm,
            now=proc,
            fire_timers=fire_timers,
            arrival_watermark=arrival_wm,
        )
        return batch, nulls

    def _control(self, table: pa.Table | None) -> tuple[pa.Table | None, bool, bool]:
        """The data rows; whether the step fires processing-time timers (a replay
        marks those steps with a ``clock`` row); whether it ends the input (an ``end``
        row, from a replay or :mod:`headwater.io.end_of_input`)."""
        plan = self.plan
        if table is None or not plan.has_control:
            return table, not plan.has_kind, False
        control = pc.fill_null(pc.is_in(table[KIND], value_set=CONTROL_KINDS), False)
        # Without a replay's kinds (only an end-of-input stream), every step fires timers.
        fire_timers = not plan.has_kind or bool(pc.any(pc.equal(table[KIND], "clock")).as_py())
        end = bool(pc.any(pc.equal(table[KIND], "end")).as_py())
        if not pc.any(control).as_py():  # data rows only: no copy of the table
            return table, fire_timers, end
        return table.filter(pc.invert(control)), fire_timers, end

    def _without_null_times(self, data: pa.Table | None) -> tuple[pa.Table | None, pd.DataFrame]:
        """The rows with an event time, and the dead letters of those without."""
        if data is None or not data.num_rows:
            return data, pd.DataFrame()
        null_ts = pc.is_null(data[TS])
        if not pc.any(null_ts).as_py():
            return data, pd.DataFrame()
        return data.filter(pc.invert(null_ts)), self._null_letters(data.filter(null_ts))

    def _bundle(self, data: pa.Table) -> Bundle:
        plan = self.plan
        keys = data[KEY].to_numpy(zero_copy_only=False)
        ts = data[TS].to_numpy(zero_copy_only=False)
        # Integers with nulls (lifted partial sums) stay exact: objects, not floats.
        values = (
            data.select(list(plan.input_cols)).to_pandas(integer_object_nulls=True)
            if plan.input_cols
            else None
        )
        if plan.needs_dummy:
            # Combiners without an input column (Count) read the reducer's
            # default column; give it one of the bundle's length.
            values = pd.DataFrame(index=range(data.num_rows)) if values is None else values
            values["value"] = np.zeros(data.num_rows, dtype=np.int8)
        return Bundle(keys, ts, values)

    def _null_letters(self, rows: pa.Table) -> pd.DataFrame:
        """Dead letters of rows whose event time is null (reason ``null_event_time``)."""
        frame = rows.select([c for c in self.plan.input_cols if c in rows.column_names])
        out = frame.to_pandas()
        out.insert(0, "key", rows[KEY].to_numpy(zero_copy_only=False))
        out.insert(1, "timestamp", pd.array([None] * rows.num_rows, dtype="Int64"))
        out.insert(2, "window_start", pd.array([None] * rows.num_rows, dtype="Int64"))
        out.insert(3, "window_end", pd.array([None] * rows.num_rows, dtype="Int64"))
        out.insert(4, "reason", DropReason.NULL_EVENT_TIME.value)
        return out

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

    def _output(
        self, parts: list[Emission], changes: pd.DataFrame | None = None
    ) -> list[pd.DataFrame]:
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
            out.append(self._step_columns(self._pane_frame(frame), frame)[names])
        dropped = [em.dropped for em in parts if len(em.dropped)]
        if dropped:
            frame = dropped[0] if len(dropped) == 1 else pd.concat(dropped, ignore_index=True)
            out.append(self._step_columns(self._dropped_frame(frame), frame)[names])
        if changes is not None and len(changes):
            out.append(self._step_columns(self._change_frame(changes), changes)[names])
        return out

    def _step_columns(self, out: pd.DataFrame, source: pd.DataFrame) -> pd.DataFrame:
        """With a shard-derived watermark: each row's step time (the other columns of
        the watermark rows are null here)."""
        if self.plan.derived is None:
            return out
        out[STEP_TIME] = source[STEP_TIME].to_numpy(np.int64)
        for name in (SHARD_NO, SHARD_WM, SHARD_SLACK):
            out[name] = None
        return out

    def _change_frame(self, changes: pd.DataFrame) -> pd.DataFrame:
        """A pane transform's rows: kind 'change', its columns (prefixed), the rest null."""
        schema = self.plan.out_schema
        out = pd.DataFrame({"kind": np.full(len(changes), "change", dtype=object)})
        for name in schema.fieldNames():
            if name.startswith(OUT):
                column = changes[name[len(OUT) :]].reset_index(drop=True)
                out[name] = to_spark_pandas(column, schema[name].dataType)
            elif name != "kind":
                out[name] = None
        return out

    def _pane_frame(self, panes: pd.DataFrame) -> pd.DataFrame:
        plan = self.plan
        out = pd.DataFrame({"kind": "pane", KEY: panes["key"].to_numpy()})
        out["window_start"] = panes["window_start"].to_numpy(np.int64)
        out["window_end"] = panes["window_end"].to_numpy(np.int64)
        schema = plan.out_schema
        for output in plan.outputs:
            name = output.name
            if output.how == "mean":  # lifted: sum and non-null count partials
                total = pd.to_numeric(panes[output.column]).to_numpy(np.float64)
                count = pd.to_numeric(panes[output.count_column]).to_numpy(np.float64)
                with np.errstate(invalid="ignore", divide="ignore"):
                    col = np.where(count > 0, total / np.maximum(count, 1), np.nan)
            else:
                col = panes[output.column]
            # NULLs of the core (NaN, None) become Spark nulls of the output's type.
            out[name] = to_spark_pandas(col, schema[name].dataType)
        for name in PANE_COLUMNS:
            out[name] = panes[name].to_numpy()
        out["reason"] = None
        for f in plan.out_schema.fieldNames():
            if f.startswith(DROP):
                out[f] = None
        return out

    def _dropped_frame(self, dropped: pd.DataFrame) -> pd.DataFrame:
        plan = self.plan
        out = pd.DataFrame({"kind": "dropped", KEY: dropped["key"].to_numpy()})
        out["window_start"] = _longs(dropped["window_start"])
        out["window_end"] = _longs(dropped["window_end"])
        for output in plan.outputs:
            out[output.name] = None
        out["timestamp"] = _longs(dropped["timestamp"])
        for name in PANE_COLUMNS[1:]:
            out[name] = None
        out["reason"] = dropped["reason"].to_numpy()
        if plan.lift is not None:
            out[DROP + "elements"] = dropped[N].to_numpy(np.int64)
        else:
            out[DROP + "elements"] = 1
        for c in plan.input_cols:
            if c != N:
                out[DROP + c] = dropped[c].to_numpy()
        if plan.rejects is not None:
            out[plan.rejects] = None
        for f in plan.out_schema.fieldNames():
            if f.startswith(OUT):
                out[f] = None
        return out


@dataclass(frozen=True)
class Forgotten:
    """The keys whose state expired at a step (a state time-to-live), and the keys
    of the step's rows (those of ``keys`` among them started again at once)."""

    keys: np.ndarray
    again: np.ndarray


def _longs(column: pd.Series):
    """An int64 column, nullable where it has nulls (a null event time's dead letter)."""
    if column.isna().any():
        return pd.array(column, dtype="Int64")
    return column.to_numpy(np.int64)


def _at(emission: Emission, time: int) -> Emission:
    """The emission with the processing time of its step on every row (in place)."""
    for frame in (emission.panes, emission.dropped):
        if len(frame):
            frame[STEP_TIME] = time
    return emission
