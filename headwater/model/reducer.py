"""The per-bundle state transition: windows, triggers and panes of many keys.

A :class:`Reducer` holds the live windows of a set of keys (a shard) in a
:class:`~headwater.model.window_table.WindowTable`: key, window bounds,
combiner accumulators, trigger state columns and pane bookkeeping. Each step
(a bundle of elements, a watermark advance, a processing-time advance) updates
that table with grouped numpy operations and returns the panes it fired. Every
runner drives this one class; none re-implements trigger semantics. Session
merging and its queued retractions live in :mod:`headwater.model.merging`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from headwater.model import state
from headwater.model.arrays import distinct_sorted, rows_union, union_sorted
from headwater.model.arrow_values import exact_numpy
from headwater.model.combiners import CombineFn, ToList, object_array
from headwater.model.keep import TopRows
from headwater.model.merging import RetractionQueue, WindowMerger
from headwater.model.panes import Accumulation, TimestampCombiner, Timing
from headwater.model.schema import PANE_COLUMNS, WINDOW_COLUMNS
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MIN_TIMESTAMP, NO_TIMER, past_end
from headwater.model.triggers import Context
from headwater.model.window_table import (
    LAST_PANE_FIELDS,
    TRIGGER_PREFIX,
    Aggregations,
    WindowTable,
    concat,
    group_ids,
    last_column,
)

__all__ = ["Aggregations", "Emission", "Reducer"]

_TIMINGS = np.array([Timing.EARLY.value, Timing.ON_TIME.value, Timing.LATE.value], dtype=object)
_EARLY, _ON_TIME, _LATE = 0, 1, 2
_VALUE = "value"
_LAST_TIMESTAMP, _LAST_PANE_INDEX, _LAST_NONSPEC, _LAST_TIMING = map(last_column, LAST_PANE_FIELDS)


@dataclass
class Emission:
    """What one step produced: fired panes (with retractions) and dropped elements."""

    panes: pd.DataFrame
    dropped: pd.DataFrame

    @staticmethod
    def concat(parts: list[Emission]) -> Emission:
        """All parts in order (empty parts only shape the columns)."""

        def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
            full = [f for f in frames if len(f)]
            return pd.concat(full, ignore_index=True) if full else frames[0]

        return Emission(cat([p.panes for p in parts]), cat([p.dropped for p in parts]))


class Reducer:
    """Windowed grouping and combining for many keys, one step at a time.

    ``aggregations`` maps output names to ``(combine_fn, input_column)``; with
    ``None`` every pane carries its elements as a list in ``values``.
    """

    def __init__(
        self,
        strategy: WindowingStrategy,
        aggregations: Aggregations | None = None,
        keep: TopRows | None = None,
    ):
        self.strategy = strategy
        self.aggregations: dict[str, tuple[CombineFn, str | None]] = (
            {"values": (ToList(), _VALUE)} if aggregations is None else dict(aggregations)
        )
        #: which of a window's rows it keeps (None: all): ``model.keep``
        self.keep = _checked_keep(keep, strategy, self.aggregations)
        self.watermark: int = MIN_TIMESTAMP
        self.now: int = 0
        self.dropped_count: int = 0
        self._table = WindowTable(
            strategy.trigger.fields(),
            self.aggregations,
            retracting=strategy.accumulation == Accumulation.RETRACTING,
        )
        self._watermark_trigger = strategy.trigger.sets_end_of_window_timer()
        self._queue = RetractionQueue()
        # The merger gets the last-pane frames of the table, not a bound method:
        # it must not hold the reducer in a reference cycle.
        self._merger = WindowMerger(
            strategy,
            self.aggregations,
            self._table,
            self._queue,
            partial(_retraction_frame, self._table, list(self.aggregations), encoded_keys=True),
        )
        self._empty_frame: pd.DataFrame | None = None

    def __len__(self) -> int:
        return len(self._table)

    def settled(self) -> int:
        """Windows that end at or before this time are settled: collected, and inside
        no live window, so no pane will name them again, not even the retraction
        that a merge into a live session emits when that session fires. A pane
        transform may forget them (``PaneTransform.expire``)."""
        if self.watermark <= MIN_TIMESTAMP:
            return MIN_TIMESTAMP
        kept = self.strategy.allowed_lateness + self.strategy.retention
        horizon = max(MIN_TIMESTAMP, self.watermark - kept)
        starts = self._table.cols["start"]
        return min(horizon, int(starts.min())) if len(starts) else horizon

    def _gc_time(self, end: np.ndarray) -> np.ndarray:
        """When a window's state is collected: end + allowed lateness + retention."""
        return past_end(end, self.strategy.allowed_lateness + self.strategy.retention)

    # ------------------------------------------------------------------ steps
    def add_bundle(self, keys, timestamps, values=None, now: int | None = None) -> Emission:
        """Add one bundle of elements that arrived at processing time ``now`` (a step
        with rows only: no timer fires)."""
        return self.step(keys, timestamps, values, now=now, clock=False)

    def advance_watermark(self, watermark: int, now: int | None = None) -> Emission:
        """Advance the input watermark; fire ON_TIME panes, collect old windows."""
        return self.step(watermark=watermark, now=None if now is None else int(now), clock=False)

    def step(
        self,
        keys=None,
        timestamps=None,
        values=None,
        *,
        watermark: int | None = None,
        now: int | None = None,
        clock: bool = True,
    ) -> Emission:
        """One micro-batch (docs/semantics.md rule 7): add the rows (lateness is
        judged against the current watermark), advance the watermark, evaluate
        triggers at the new watermark, collect expired windows, then fire the
        processing-time timers due by ``now`` (unless ``clock`` is false).

        A bounded input is one such step with ``watermark=MAX_TIMESTAMP``.
        """
        if now is not None:
            self.now = max(self.now, int(now))
        dropped: list[pd.DataFrame] = []
        rows = np.zeros(0, dtype=np.int64)
        if timestamps is not None and len(timestamps):
            rows, dropped = self._add(keys, timestamps, values)
        advanced = watermark is not None and watermark > self.watermark
        evaluate = rows
        if advanced:
            # Only a watermark that moves makes windows due or expired: an end-of-window
            # timer is set only while the watermark is before the end (rule 2), and a
            # window whose end + lateness is behind the watermark is never created.
            self.watermark = int(watermark)
            c = self._table.cols
            due = np.flatnonzero(c["eow_timer"] & (c["end"] <= self.watermark) & ~c["closed"])
            evaluate = rows_union(rows, due, len(self._table))
        parts = [self._evaluate(evaluate, self._context(evaluate))] if len(evaluate) else []
        if advanced:
            parts.extend(self._collect())
        if clock and now is not None:
            parts.extend(self._fire_timers(int(now)))
        return self._emission(parts, dropped)

    def _collect(self) -> list[pd.DataFrame]:
        """Garbage-collect windows past end + allowed lateness, flushing unemitted data."""
        c = self._table.cols
        collect = self._gc_time(c["end"]) <= self.watermark
        if not collect.any():
            return []
        parts = []
        flush = np.flatnonzero(collect & (c["pending"] > 0) & ~c["closed"])
        if len(flush):
            no_eow = np.zeros(len(flush), dtype=bool)
            parts.append(self._emit(flush, np.ones(len(flush), dtype=bool), no_eow))
        if len(self._queue):
            self._queue.discard(c["key"][collect], c["start"][collect], c["end"][collect])
        self._table.keep(~collect)
        return parts

    def _add(self, keys, timestamps, values) -> tuple[np.ndarray, list[pd.DataFrame]]:
        """Assign windows, drop late elements, merge, accumulate and run the
        triggers' on_element. Returns the touched rows and the dropped elements."""
        table = self._table
        ts = np.asarray(timestamps, dtype=np.int64)
        inputs = self._input_columns(values, len(ts))
        codes = table.encode_keys(keys)
        row, ws, we = self.strategy.window_fn.assign(ts)
        dropped = []
        unassigned = np.bincount(row, minlength=len(ts)) == 0
        if unassigned.any():
            lost = np.flatnonzero(unassigned)
            none = np.zeros(len(lost), dtype=np.int64)
            dropped.append(
                self._dropped(codes[lost], ts[lost], none, none, inputs, lost, "no_window")
            )
        code, ets = codes[row], ts[row]
        late = past_end(we, self.strategy.allowed_lateness) <= self.watermark
        if late.any():
            dropped.append(
                self._dropped(code[late], ets[late], ws[late], we[late], inputs, row[late], "late")
            )
            row, code, ets, ws, we = row[~late], code[~late], ets[~late], ws[~late], we[~late]
        if self.strategy.window_fn.is_merging and len(row):
            ws, we = self._merger.merge(code, ws, we)
        # One group per (key, window) of the bundle.
        groups, first = group_ids(code, ws, we)
        g_key, g_start, g_end = code[first], ws[first], we[first]
        rows = table.lookup(g_key, g_start, g_end)
        missing = rows < 0
        if missing.any():
            rows[missing] = table.append(
                {"key": g_key[missing], "start": g_start[missing], "end": g_end[missing]}
            )
        c = table.cols
        closed = c["closed"][rows]
        if closed.any():
            gone = closed[groups]
            dropped.append(
                self._dropped(
                    code[gone], ets[gone], ws[gone], we[gone], inputs, row[gone], "closed"
                )
            )
            keep_group = ~closed
            remap = np.cumsum(keep_group) - 1
            row, ets, groups = row[~gone], ets[~gone], remap[groups[~gone]]
            rows, g_start, g_end = rows[keep_group], g_start[keep_group], g_end[keep_group]
        n = len(rows)
        if n:
            self._accumulate(rows, groups, n, row, inputs)
            self._add_holds(rows, groups, n, ets, g_start[groups], g_end[groups])
            counts = np.bincount(groups, minlength=n).astype(np.int64)
            c["pending"][rows] += counts
            ctx = self._context(rows, count=counts)
            self.strategy.trigger.on_element(TRIGGER_PREFIX, c, rows, ctx)
            # Rule 1: data that arrives before the watermark passes the end is
            # on time; only such a window has an end-of-window firing ahead.
            on_time = rows[c["end"][rows] > self.watermark]
            c["ontime_data"][on_time] = True
            if self._watermark_trigger:
                c["eow_timer"][on_time] = True
        return rows, dropped

    def advance_clock(self, now: int) -> Emission:
        """Advance processing time; fire due timers earliest first, each at its time."""
        return self._emission(self._fire_timers(now), [])

    def _fire_timers(self, now: int) -> list[pd.DataFrame]:
        parts = []
        trigger = self.strategy.trigger
        c = self._table.cols
        while len(self):
            live = np.flatnonzero(~c["closed"])
            timers = trigger.next_timer(TRIGGER_PREFIX, c, live)
            due = timers <= now
            if not due.any():
                break
            t = int(timers[due].min())
            rows = live[timers == t]
            self.now = max(self.now, t)
            parts.append(self._evaluate(rows, self._context(rows, horizon=t)))
            # Timers due at t that did not make their trigger fire stay fired.
            trigger.on_timers(TRIGGER_PREFIX, c, rows, t)
        self.now = max(self.now, int(now))
        return parts

    def next_timer(self) -> int | None:
        """Earliest pending processing-time timer, if any."""
        c = self._table.cols
        live = np.flatnonzero(~c["closed"])
        if not len(live):
            return None
        t = self.strategy.trigger.next_timer(TRIGGER_PREFIX, c, live)
        t = t[t != NO_TIMER]
        return int(t.min()) if len(t) else None

    def next_event_time(self) -> int | None:
        """Earliest watermark at which something happens (an ON_TIME pane or a collection)."""
        c = self._table.cols
        if not len(self):
            return None
        times = [self._gc_time(c["end"])]
        eow = c["eow_timer"] & ~c["closed"]
        if eow.any():
            times.append(c["end"][eow])
        return int(np.concatenate(times).min())

    def forget(self, keys: np.ndarray) -> None:
        """Drop every window of ``keys`` and the keys themselves (a state time-to-live:
        a later element of such a key starts afresh). One mask over the table, then
        the key dictionary is compacted to the live keys, so that the state held is
        that of the keys kept, not of every key ever seen."""
        table = self._table
        codes = table.keys.codes(keys)
        codes = codes[codes >= 0]
        if not len(codes):
            return
        table.keep(~np.isin(table.cols["key"], codes))
        live = distinct_sorted(table.cols["key"])
        queue = self._queue.frame
        if len(queue):
            live = union_sorted(live, queue["owner_key"].to_numpy(np.int64))
        remap = np.full(len(table.keys), -1, dtype=np.int64)
        remap[live] = np.arange(len(live))
        table.cols["key"] = remap[table.cols["key"]]
        if len(queue):
            for column in ("owner_key", "key"):
                queue[column] = remap[queue[column].to_numpy(np.int64)]
        table.keys = table.keys.subset(live)

    # ------------------------------------------------------------ snapshots
    def snapshot(self) -> bytes:
        """Serialize the whole state (for Spark's state store or a checkpoint) in
        the versioned format of :mod:`headwater.model.state`."""
        table, queue = self._table, self._queue.frame
        live_keys = distinct_sorted(table.cols["key"])
        if len(queue):
            live_keys = union_sorted(live_keys, queue["owner_key"].to_numpy(np.int64))
        remap = np.full(len(table.keys), -1, dtype=np.int64)
        remap[live_keys] = np.arange(len(live_keys))
        cols = dict(table.cols)
        cols["key"] = remap[cols["key"]]
        queue = queue.copy()
        if len(queue):
            for column in ("owner_key", "key"):
                queue[column] = remap[queue[column].to_numpy(np.int64)]
        snapshot = state.ReducerState(
            keys=table.decode_keys(live_keys),
            cols=cols,
            queue=queue,
            watermark=self.watermark,
            now=self.now,
            dropped_count=self.dropped_count,
        )
        return state.dumps(snapshot, self.aggregations)

    @classmethod
    def restore(
        cls,
        strategy: WindowingStrategy,
        aggregations: Aggregations | None,
        blob: bytes | None,
        keep: TopRows | None = None,
    ) -> Reducer:
        """A reducer from a :meth:`snapshot` blob (``headwater.model.state``: the
        current format, or version 0, the pickle of earlier releases)."""
        r = cls(strategy, aggregations, keep)
        if blob:
            snap = state.loads(blob, r.aggregations)
            r._table.load(snap.keys, snap.cols)
            r._queue.frame = snap.queue
            r.watermark, r.now, r.dropped_count = snap.watermark, snap.now, snap.dropped_count
        return r

    # ------------------------------------------------------------- internals
    def _input_columns(self, values, n: int) -> dict[str, np.ndarray]:
        if values is None:
            return {_VALUE: np.zeros(n, dtype=np.int64)}
        if isinstance(values, pd.DataFrame):
            return {c: exact_numpy(values[c]) for c in values.columns}
        if isinstance(values, Mapping):
            return {c: np.asarray(v) for c, v in values.items()}
        return {_VALUE: np.asarray(values)}

    def _accumulate(self, rows, groups, n, elem_rows, inputs) -> None:
        pos = np.r_[np.arange(n), np.arange(n)]
        for name, (fn, column) in self.aggregations.items():
            source = inputs.get(column if column is not None else _VALUE)
            if source is None:
                if column is not None:
                    raise KeyError(
                        f"aggregation {name!r} reads column {column!r}, "
                        f"which the input does not have (it has {sorted(inputs)})"
                    )
                source = np.zeros(len(next(iter(inputs.values()))), dtype=np.int64)
            partial_acc = fn.add(source[elem_rows], groups, n)
            current = self._table.accumulators(name, rows)
            merged = fn.merge({f: concat(current[f], partial_acc[f]) for f in partial_acc}, pos, n)
            self._table.set_accumulators(name, rows, merged)
        if self.keep is not None:
            self._prune(rows)

    def _prune(self, rows: np.ndarray) -> None:
        """Drop the rows of the windows at ``rows`` that :attr:`keep` does not keep:
        only windows of more than ``n`` rows have their columns read."""
        table = self._table
        first = table.accumulators(self.keep.order[0][0], rows)["values"]
        rows = rows[self.keep.over(first)]
        if not len(rows):
            return
        lists = {name: table.accumulators(name, rows)["values"] for name in self.aggregations}
        at, kept = self.keep.pruned(lists)
        for name, values in kept.items():
            table.set_accumulators(name, rows[at], {"values": values})

    def _add_holds(self, rows, groups, n, ts, starts, ends) -> None:
        tc = self.strategy.timestamp_combiner
        if tc == TimestampCombiner.END_OF_WINDOW:
            return
        out_time = ts
        if tc == TimestampCombiner.EARLIEST_TRANSFORMED:
            out_time = self.strategy.window_fn.output_time(starts, ends, ts)
        eligible = out_time >= self.watermark
        if not eligible.any():
            return
        g, t = groups[eligible], out_time[eligible]
        latest = tc == TimestampCombiner.LATEST
        best = np.full(n, np.iinfo(np.int64).min if latest else np.iinfo(np.int64).max)
        (np.maximum if latest else np.minimum).at(best, g, t)
        has = np.zeros(n, dtype=bool)
        has[g] = True
        c = self._table.cols
        old, old_has = c["hold"][rows], c["has_hold"][rows]
        combined = np.where(old_has, (np.maximum if latest else np.minimum)(old, best), best)
        c["hold"][rows[has]] = combined[has]
        c["has_hold"][rows[has]] = True

    def _context(self, rows, count=None, horizon: int = MIN_TIMESTAMP) -> Context:
        return Context(self.watermark, self.now, self._table.cols["end"][rows], horizon, count)

    def _evaluate(self, rows: np.ndarray, ctx: Context) -> pd.DataFrame:
        trigger = self.strategy.trigger
        c = self._table.cols
        fire = trigger.should_fire(TRIGGER_PREFIX, c, rows, ctx)
        # An end-of-window timer is spent once the watermark has passed the end:
        # evaluating a row whose timer is set then is its end-of-window firing.
        passed = ctx.end <= self.watermark
        eow = c["eow_timer"][rows] & passed
        c["eow_timer"][rows[passed]] = False
        if not fire.any():
            return _no_panes()
        fired = rows[fire]
        finished = trigger.on_fire(TRIGGER_PREFIX, c, fired, ctx.sub(fire))
        return self._emit(fired, finished, eow[fire])

    def _emit(self, rows: np.ndarray, finished: np.ndarray, eow: np.ndarray) -> pd.DataFrame:
        """Panes of ``rows``; ``eow`` marks end-of-window firings (rule 2)."""
        table = self._table
        c = table.cols
        wm = self.watermark
        end = c["end"][rows]
        early = wm < end
        nonspec = c["nonspec_index"][rows]
        # Rule 1: the first non-EARLY pane is ON_TIME if it is the end-of-window
        # firing or emits on-time data no pane emitted yet; otherwise LATE.
        on_time = (nonspec == 0) & (eow | c["ontime_data"][rows])
        timing = np.where(early, _EARLY, np.where(on_time, _ON_TIME, _LATE))
        is_last = finished | (self._gc_time(end) <= wm)
        timestamp = np.where(c["has_hold"][rows], c["hold"][rows], end - 1)
        outputs = {
            name: fn.extract(table.accumulators(name, rows))
            for name, (fn, _) in self.aggregations.items()
        }
        pane_index = c["pane_index"][rows]
        nonspec_index = np.where(early, -1, nonspec)
        panes = _pane_frame(
            table.decode_keys(c["key"][rows]),
            c["start"][rows],
            end,
            outputs,
            {
                "timestamp": timestamp,
                "pane_index": pane_index,
                "nonspeculative_index": nonspec_index,
                "timing": _TIMINGS[timing],
                "is_first": pane_index == 0,
                "is_last": is_last,
                "is_retraction": np.zeros(len(rows), dtype=bool),
            },
        )
        parts = []
        if self.strategy.accumulation == Accumulation.RETRACTING:
            parts.extend(self._take_retractions(rows))
            for name in outputs:
                c[last_column(name)][rows] = object_array(outputs[name])
            c[_LAST_TIMESTAMP][rows] = timestamp
            c[_LAST_PANE_INDEX][rows] = pane_index
            c[_LAST_NONSPEC][rows] = nonspec_index
            c[_LAST_TIMING][rows] = timing
            c["has_last"][rows] = True
        parts.append(panes)
        # Pane bookkeeping.
        c["pane_index"][rows] += 1
        c["nonspec_index"][rows] += ~early
        c["pending"][rows] = 0
        c["ontime_data"][rows] = False
        keep_hold = early & self._watermark_trigger
        c["has_hold"][rows[~keep_hold]] = False
        reset = rows[finished] if self.strategy.accumulation != Accumulation.DISCARDING else rows
        if len(reset):
            table.reset_accumulators(reset)
        c["closed"][rows[finished]] = True
        return pd.concat(parts, ignore_index=True) if len(parts) > 1 else panes

    def _take_retractions(self, rows: np.ndarray) -> list[pd.DataFrame]:
        """Rule 6: the retractions a firing of ``rows`` emits first: their own
        last panes, then the queued last panes of windows merged into them."""
        table = self._table
        c = table.cols
        own = rows[c["has_last"][rows]]
        out = []
        if len(own):
            out.append(_retraction_frame(table, list(self.aggregations), own))
        if len(self._queue):
            taken = self._queue.take(c["key"][rows], c["start"][rows], c["end"][rows])
            if taken is not None:
                taken["key"] = table.decode_keys(taken["key"].to_numpy(np.int64))
                out.append(taken)
        return out

    # ---------------------------------------------------------------- output
    def _dropped(self, code, ts, ws, we, inputs, elem_rows, reason) -> pd.DataFrame:
        self.dropped_count += len(ts)
        frame = pd.DataFrame(
            {
                "key": self._table.decode_keys(code),
                "timestamp": ts,
                "window_start": ws,
                "window_end": we,
                "reason": reason,
            }
        )
        for name, arr in inputs.items():
            frame[name] = arr[elem_rows]
        return frame

    def _emission(self, panes: list[pd.DataFrame], dropped: list[pd.DataFrame]) -> Emission:
        panes = [p for p in panes if len(p)]
        dropped = [d for d in dropped if len(d)]
        return Emission(
            pd.concat(panes, ignore_index=True) if panes else self._empty_panes(),
            pd.concat(dropped, ignore_index=True) if dropped else _NO_DROPS.copy(),
        )

    def _empty_panes(self) -> pd.DataFrame:
        if self._empty_frame is None:
            i64, obj = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
            flag = np.zeros(0, dtype=bool)
            self._empty_frame = _pane_frame(
                obj,
                i64,
                i64,
                {name: obj for name in self.aggregations},
                {
                    "timestamp": i64,
                    "pane_index": i64,
                    "nonspeculative_index": i64,
                    "timing": obj,
                    "is_first": flag,
                    "is_last": flag,
                    "is_retraction": flag,
                },
            )
        return self._empty_frame.copy()


#: The dropped elements of a step that dropped none (copied: callers add columns).
_NO_DROPS = pd.DataFrame(columns=["key", "timestamp", "window_start", "window_end", "reason"])


def _pane_frame(
    keys: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    outputs: Mapping[str, np.ndarray],
    metadata: Mapping[str, np.ndarray],
) -> pd.DataFrame:
    """Panes as the reducer emits them: ``key``, the window, the outputs, then
    the metadata, whose names and order :data:`~headwater.model.schema.PANE_COLUMNS`
    defines."""
    assert tuple(metadata) == PANE_COLUMNS, tuple(metadata)
    window_start, window_end = WINDOW_COLUMNS
    return pd.DataFrame({"key": keys, window_start: start, window_end: end, **outputs, **metadata})


def _retraction_frame(
    table: WindowTable, outputs: list[str], rows: np.ndarray, encoded_keys: bool = False
) -> pd.DataFrame:
    """Retractions of the last panes of ``rows`` (rows that have one), with
    key codes if ``encoded_keys`` (for the retraction queue)."""
    c = table.cols
    key = c["key"][rows]
    pane_index = c[_LAST_PANE_INDEX][rows]
    return _pane_frame(
        key if encoded_keys else table.decode_keys(key),
        c["start"][rows],
        c["end"][rows],
        {name: c[last_column(name)][rows] for name in outputs},
        {
            "timestamp": c[_LAST_TIMESTAMP][rows],
            "pane_index": pane_index,
            "nonspeculative_index": c[_LAST_NONSPEC][rows],
            "timing": _TIMINGS[c[_LAST_TIMING][rows]],
            "is_first": pane_index == 0,
            "is_last": np.zeros(len(rows), dtype=bool),
            "is_retraction": np.ones(len(rows), dtype=bool),
        },
    )


def _no_panes() -> pd.DataFrame:
    return pd.DataFrame()


def _checked_keep(
    keep: TopRows | None, strategy: WindowingStrategy, aggregations: Aggregations
) -> TopRows | None:
    """``keep``, if a reducer can apply it: every aggregation a list of rows' values
    (a combined value cannot be pruned), its order's columns among them, windows
    that do not merge (a merged window's rows are not re-pruned as one)."""
    if keep is None:
        return None
    if not all(isinstance(fn, ToList) for fn, _ in aggregations.values()):
        raise ValueError("keeping the first rows needs every aggregation to be a ToList")
    if keep.n < 1 or not keep.order:
        raise ValueError(f"keep needs n >= 1 and an order, got {keep!r}")
    missing = [c for c, _ in keep.order if c not in aggregations]
    if missing:
        raise ValueError(f"keep orders by aggregations that do not exist: {missing}")
    if strategy.window_fn.is_merging:
        raise ValueError("keeping the first rows needs windows that do not merge")
    return keep
