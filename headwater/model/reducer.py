"""The per-bundle state transition: windows, triggers and panes of many keys.

A :class:`Reducer` holds the live windows of a set of keys (a shard) as one
columnar table: key, window bounds, combiner accumulators, trigger state
columns and pane bookkeeping. Each step (a bundle of elements, a watermark
advance, a processing-time advance) updates that table with grouped numpy
operations and returns the panes it fired. Every runner drives this one class;
none re-implements trigger semantics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwater.model import state
from headwater.model.combiners import CombineFn, ToList, object_array
from headwater.model.panes import Accumulation, TimestampCombiner, Timing
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import GLOBAL_WINDOW_END, MIN_TIMESTAMP, NO_TIMER
from headwater.model.triggers import Context

Aggregations = Mapping[str, tuple[CombineFn, str | None]]
_TIMINGS = np.array([Timing.EARLY.value, Timing.ON_TIME.value, Timing.LATE.value], dtype=object)
_EARLY, _ON_TIME, _LATE = 0, 1, 2
_VALUE = "value"


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

    def __init__(self, strategy: WindowingStrategy, aggregations: Aggregations | None = None):
        self.strategy = strategy
        self.aggregations: dict[str, tuple[CombineFn, str | None]] = (
            {"values": (ToList(), _VALUE)} if aggregations is None else dict(aggregations)
        )
        self.watermark: int = MIN_TIMESTAMP
        self.now: int = 0
        self.dropped_count: int = 0
        self._keys = pd.Index([], dtype=object)
        self._fields = self._field_defaults()
        self._watermark_trigger = strategy.trigger.sets_end_of_window_timer()
        self._cols = self._empty(0)
        self._queue = pd.DataFrame()  # retractions waiting for their owner window to fire
        self._index: pd.Index | None = None
        self._empty_frame: pd.DataFrame | None = None

    # ------------------------------------------------------------------ table
    def _field_defaults(self) -> dict[str, tuple[np.dtype, object]]:
        f: dict[str, tuple[np.dtype, object]] = {
            "key": (np.int64, -1),
            "start": (np.int64, 0),
            "end": (np.int64, 0),
            "pending": (np.int64, 0),
            "closed": (bool, False),
            "eow_timer": (bool, False),
            "ontime_data": (bool, False),
            "hold": (np.int64, 0),
            "has_hold": (bool, False),
            "pane_index": (np.int64, 0),
            "nonspec_index": (np.int64, 0),
            "has_last": (bool, False),
        }
        for name, tf in self.strategy.trigger.fields().items():
            f["t:" + name] = (tf.dtype, tf.default)
        return f

    def _empty(self, n: int) -> dict[str, np.ndarray]:
        cols = {
            name: np.full(n, default, dtype=dtype)
            for name, (dtype, default) in self._fields.items()
        }
        cols.update(self._fresh_accumulators(n))
        for name in self._output_names():
            cols["last:" + name] = np.full(n, None, dtype=object)
        for name in ("timestamp", "pane_index", "nonspec_index", "timing"):
            cols["last:" + name] = np.zeros(n, dtype=np.int64)
        return cols

    def _fresh_accumulators(self, n: int) -> dict[str, np.ndarray]:
        out = {}
        for name, (fn, _) in self.aggregations.items():
            for field, arr in fn.create(n).items():
                out[f"acc:{name}:{field}"] = arr
        return out

    def _output_names(self) -> list[str]:
        return list(self.aggregations)

    def __len__(self) -> int:
        return len(self._cols["key"])

    def _append(self, new: dict[str, np.ndarray]) -> np.ndarray:
        """Append rows (missing columns get defaults); returns their row numbers."""
        n = len(next(iter(new.values())))
        base = len(self)
        full = self._empty(n)
        full.update(new)
        for name in self._cols:
            self._cols[name] = _concat(self._cols[name], full[name])
        self._index = None
        return np.arange(base, base + n)

    def _keep(self, mask: np.ndarray) -> None:
        for name in self._cols:
            self._cols[name] = self._cols[name][mask]
        self._index = None

    def _set(self, name: str, rows: np.ndarray, values: np.ndarray) -> None:
        arr = self._cols[name]
        values = np.asarray(values)
        if arr.dtype != object and values.dtype != arr.dtype:
            wider = np.result_type(arr.dtype, values.dtype)
            if wider != arr.dtype:
                arr = self._cols[name] = arr.astype(wider)
        arr[rows] = values

    def _lookup(self, key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Row of each (key, window), -1 if absent: a hash index on one int64."""
        if len(self) == 0:
            return np.full(len(key), -1, dtype=np.int64)
        c = self._cols
        if self._index is None:
            self._index = pd.Index(_window_hash(c["key"], c["start"], c["end"]))
        if self._index.is_unique:
            rows = self._index.get_indexer(_window_hash(key, start, end))
            found = rows >= 0
            r = rows[found]
            if (
                (c["key"][r] == key[found])
                & (c["start"][r] == start[found])
                & (c["end"][r] == end[found])
            ).all():
                return rows
        # A hash collision (astronomically rare): fall back to an exact index.
        exact = pd.MultiIndex.from_arrays([c["key"], c["start"], c["end"]])
        return exact.get_indexer(pd.MultiIndex.from_arrays([key, start, end]))

    def _encode_keys(self, keys) -> np.ndarray:
        keys = pd.Index(np.asarray(keys, dtype=object) if not isinstance(keys, pd.Index) else keys)
        codes = self._keys.get_indexer(keys)
        if (codes < 0).any():
            new = keys[codes < 0].unique()
            self._keys = self._keys.append(pd.Index(new, dtype=object))
            codes = self._keys.get_indexer(keys)
        return codes.astype(np.int64)

    def _gc_time(self, end: np.ndarray) -> np.ndarray:
        lateness = self.strategy.allowed_lateness
        return np.where(end >= GLOBAL_WINDOW_END - lateness, GLOBAL_WINDOW_END, end + lateness)

    # ------------------------------------------------------------------ steps
    def add_bundle(self, keys, timestamps, values=None, now: int | None = None) -> Emission:
        """Add one bundle of elements that arrived at processing time ``now``."""
        if now is not None:
            self.now = max(self.now, int(now))
        rows, dropped = self._add(keys, timestamps, values)
        panes = self._evaluate(rows, self._context(rows)) if len(rows) else _no_panes()
        return self._emission([panes], dropped)

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
        """One micro-batch (TRANSCRIPTS.md rule 7): add the rows (lateness is
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
        if watermark is not None and watermark > self.watermark:
            self.watermark = int(watermark)
        c = self._cols
        due = np.flatnonzero(c["eow_timer"] & (c["end"] <= self.watermark) & ~c["closed"])
        evaluate = np.union1d(rows, due)
        parts = [self._evaluate(evaluate, self._context(evaluate))] if len(evaluate) else []
        parts.extend(self._collect())
        if clock and now is not None:
            parts.append(self.advance_clock(int(now)).panes)
        return self._emission(parts, dropped)

    def _collect(self) -> list[pd.DataFrame]:
        """Garbage-collect windows past end + allowed lateness, flushing unemitted data."""
        c = self._cols
        collect = self._gc_time(c["end"]) <= self.watermark
        if not collect.any():
            return []
        parts = []
        flush = np.flatnonzero(collect & (c["pending"] > 0) & ~c["closed"])
        if len(flush):
            no_eow = np.zeros(len(flush), dtype=bool)
            parts.append(self._emit(flush, np.ones(len(flush), dtype=bool), no_eow))
        if len(self._queue):
            gone = pd.MultiIndex.from_arrays(
                [c["key"][collect], c["start"][collect], c["end"][collect]]
            )
            owners = pd.MultiIndex.from_arrays(
                [self._queue["owner_key"], self._queue["owner_start"], self._queue["owner_end"]]
            )
            self._queue = self._queue[~owners.isin(gone)]
        self._keep(~collect)
        return parts

    def _add(self, keys, timestamps, values) -> tuple[np.ndarray, list[pd.DataFrame]]:
        """Assign windows, drop late elements, merge, accumulate and run the
        triggers' on_element. Returns the touched rows and the dropped elements."""
        ts = np.asarray(timestamps, dtype=np.int64)
        inputs = self._input_columns(values, len(ts))
        codes = self._encode_keys(keys)
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
        late = self._gc_time(we) <= self.watermark
        if late.any():
            dropped.append(
                self._dropped(code[late], ets[late], ws[late], we[late], inputs, row[late], "late")
            )
            row, code, ets, ws, we = row[~late], code[~late], ets[~late], ws[~late], we[~late]
        if self.strategy.window_fn.is_merging and len(row):
            ws, we = self._merge_windows(code, ws, we)
        # One group per (key, window) of the bundle.
        groups, first = group_ids(code, ws, we)
        g_key, g_start, g_end = code[first], ws[first], we[first]
        rows = self._lookup(g_key, g_start, g_end)
        missing = rows < 0
        if missing.any():
            rows[missing] = self._append(
                {"key": g_key[missing], "start": g_start[missing], "end": g_end[missing]}
            )
        closed = self._cols["closed"][rows]
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
            self._cols["pending"][rows] += counts
            ctx = self._context(rows, count=counts)
            self.strategy.trigger.on_element("t:", self._cols, rows, ctx)
            # Rule 1: data that arrives before the watermark passes the end is
            # on time; only such a window has an end-of-window firing ahead.
            on_time = rows[self._cols["end"][rows] > self.watermark]
            self._cols["ontime_data"][on_time] = True
            if self._watermark_trigger:
                self._cols["eow_timer"][on_time] = True
        return rows, dropped

    def advance_clock(self, now: int) -> Emission:
        """Advance processing time; fire due timers earliest first, each at its time."""
        parts = []
        trigger = self.strategy.trigger
        while len(self):
            live = np.flatnonzero(~self._cols["closed"])
            timers = trigger.next_timer("t:", self._cols, live)
            due = timers <= now
            if not due.any():
                break
            t = int(timers[due].min())
            rows = live[timers == t]
            self.now = max(self.now, t)
            parts.append(self._evaluate(rows, self._context(rows, horizon=t)))
            # Timers due at t that did not make their trigger fire stay fired.
            trigger.on_timers("t:", self._cols, rows, t)
        self.now = max(self.now, int(now))
        return self._emission(parts, [])

    def next_timer(self) -> int | None:
        """Earliest pending processing-time timer, if any."""
        live = np.flatnonzero(~self._cols["closed"])
        if not len(live):
            return None
        t = self.strategy.trigger.next_timer("t:", self._cols, live)
        t = t[t != NO_TIMER]
        return int(t.min()) if len(t) else None

    def next_event_time(self) -> int | None:
        """Earliest watermark at which something happens (an ON_TIME pane or a collection)."""
        c = self._cols
        if not len(self):
            return None
        times = [self._gc_time(c["end"])]
        eow = c["eow_timer"] & ~c["closed"]
        if eow.any():
            times.append(c["end"][eow])
        return int(np.concatenate(times).min())

    # ------------------------------------------------------------ snapshots
    def snapshot(self) -> bytes:
        """Serialize the whole state (for Spark's state store or a checkpoint) in
        the versioned format of :mod:`headwater.model.state`."""
        live_keys = np.unique(self._cols["key"])
        if len(self._queue):
            live_keys = np.union1d(live_keys, self._queue["owner_key"].to_numpy(np.int64))
        remap = np.full(len(self._keys), -1, dtype=np.int64)
        remap[live_keys] = np.arange(len(live_keys))
        cols = dict(self._cols)
        cols["key"] = remap[cols["key"]]
        queue = self._queue.copy()
        if len(queue):
            for column in ("owner_key", "key"):
                queue[column] = remap[queue[column].to_numpy(np.int64)]
        snapshot = state.ReducerState(
            keys=self._keys[live_keys].to_numpy(),
            cols=cols,
            queue=queue,
            watermark=self.watermark,
            now=self.now,
            dropped_count=self.dropped_count,
        )
        return state.dumps(snapshot, self.aggregations)

    @classmethod
    def restore(
        cls, strategy: WindowingStrategy, aggregations: Aggregations | None, blob: bytes | None
    ) -> Reducer:
        """A reducer from a :meth:`snapshot` blob (``headwater.model.state``: the
        current format, or version 0, the pickle of earlier releases)."""
        r = cls(strategy, aggregations)
        if blob:
            snap = state.loads(blob, r.aggregations)
            n = len(snap.cols["key"])
            names = list(r._empty(0))
            # Columns the blob lacks (an older version) get their defaults.
            defaults = r._empty(n) if any(c not in snap.cols for c in names) else {}
            cols = {c: snap.cols[c] if c in snap.cols else defaults[c] for c in names}
            r._keys = pd.Index(snap.keys, dtype=object)
            r._cols = cols
            r._queue = snap.queue
            r.watermark, r.now, r.dropped_count = snap.watermark, snap.now, snap.dropped_count
        return r

    # ------------------------------------------------------------- internals
    def _input_columns(self, values, n: int) -> dict[str, np.ndarray]:
        if values is None:
            return {_VALUE: np.zeros(n, dtype=np.int64)}
        if isinstance(values, pd.DataFrame):
            return {c: values[c].to_numpy() for c in values.columns}
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
            partial = fn.add(source[elem_rows], groups, n)
            current = {f: self._cols[f"acc:{name}:{f}"][rows] for f in partial}
            merged = fn.merge({f: _concat(current[f], partial[f]) for f in partial}, pos, n)
            for f, arr in merged.items():
                self._set(f"acc:{name}:{f}", rows, arr)

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
        c = self._cols
        old, old_has = c["hold"][rows], c["has_hold"][rows]
        combined = np.where(old_has, (np.maximum if latest else np.minimum)(old, best), best)
        c["hold"][rows[has]] = combined[has]
        c["has_hold"][rows[has]] = True

    def _context(self, rows, count=None, horizon: int = MIN_TIMESTAMP) -> Context:
        return Context(self.watermark, self.now, self._cols["end"][rows], horizon, count)

    def _evaluate(self, rows: np.ndarray, ctx: Context) -> pd.DataFrame:
        trigger = self.strategy.trigger
        fire = trigger.should_fire("t:", self._cols, rows, ctx)
        # An end-of-window timer is spent once the watermark has passed the end:
        # evaluating a row whose timer is set then is its end-of-window firing.
        passed = ctx.end <= self.watermark
        eow = self._cols["eow_timer"][rows] & passed
        self._cols["eow_timer"][rows[passed]] = False
        if not fire.any():
            return _no_panes()
        fired = rows[fire]
        finished = trigger.on_fire("t:", self._cols, fired, ctx.sub(fire))
        return self._emit(fired, finished, eow[fire])

    def _emit(self, rows: np.ndarray, finished: np.ndarray, eow: np.ndarray) -> pd.DataFrame:
        """Panes of ``rows``; ``eow`` marks end-of-window firings (rule 2)."""
        c = self._cols
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
        outputs = {}
        for name, (fn, _) in self.aggregations.items():
            acc = {f[len(f"acc:{name}:") :]: c[f][rows] for f in c if f.startswith(f"acc:{name}:")}
            outputs[name] = fn.extract(acc)
        pane_index = c["pane_index"][rows]
        panes = pd.DataFrame(
            {
                "key": self._keys[c["key"][rows]].to_numpy(),
                "window_start": c["start"][rows],
                "window_end": end,
                **outputs,
                "timestamp": timestamp,
                "pane_index": pane_index,
                "nonspeculative_index": np.where(early, -1, nonspec),
                "timing": _TIMINGS[timing],
                "is_first": pane_index == 0,
                "is_last": is_last,
                "is_retraction": np.zeros(len(rows), dtype=bool),
            }
        )
        parts = []
        if self.strategy.accumulation == Accumulation.RETRACTING:
            parts.extend(self._take_retractions(rows))
            for name in outputs:
                c["last:" + name][rows] = object_array(outputs[name])
            c["last:timestamp"][rows] = timestamp
            c["last:pane_index"][rows] = pane_index
            c["last:nonspec_index"][rows] = panes["nonspeculative_index"].to_numpy()
            c["last:timing"][rows] = timing
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
            for name, arr in self._fresh_accumulators(len(reset)).items():
                self._set(name, reset, arr)
        c["closed"][rows[finished]] = True
        return pd.concat(parts, ignore_index=True) if len(parts) > 1 else panes

    def _take_retractions(self, rows: np.ndarray) -> list[pd.DataFrame]:
        c = self._cols
        own = rows[c["has_last"][rows]]
        out = []
        if len(own):
            out.append(self._retraction_frame(own))
        if len(self._queue):
            firing = pd.MultiIndex.from_arrays([c["key"][rows], c["start"][rows], c["end"][rows]])
            owners = pd.MultiIndex.from_arrays(
                [self._queue["owner_key"], self._queue["owner_start"], self._queue["owner_end"]]
            )
            hit = owners.isin(firing)
            if hit.any():
                taken = self._queue[hit].drop(columns=["owner_key", "owner_start", "owner_end"])
                taken["key"] = self._keys[taken["key"].to_numpy(np.int64)].to_numpy()
                out.append(taken.reset_index(drop=True))
                self._queue = self._queue[~hit]
        return out

    def _retraction_frame(self, rows: np.ndarray, encoded_keys: bool = False) -> pd.DataFrame:
        c = self._cols
        pane_index = c["last:pane_index"][rows]
        return pd.DataFrame(
            {
                "key": c["key"][rows] if encoded_keys else self._keys[c["key"][rows]].to_numpy(),
                "window_start": c["start"][rows],
                "window_end": c["end"][rows],
                **{name: c["last:" + name][rows] for name in self._output_names()},
                "timestamp": c["last:timestamp"][rows],
                "pane_index": pane_index,
                "nonspeculative_index": c["last:nonspec_index"][rows],
                "timing": _TIMINGS[c["last:timing"][rows]],
                "is_first": pane_index == 0,
                "is_last": np.zeros(len(rows), dtype=bool),
                "is_retraction": np.ones(len(rows), dtype=bool),
            }
        )

    # --------------------------------------------------------------- merging
    def _merge_windows(self, code: np.ndarray, ws: np.ndarray, we: np.ndarray):
        """Merge the bundle's windows with the live windows of their keys.

        Returns the (merged) window of every element. State of windows merged
        together moves into the result window: accumulators merge, trigger
        counts add, the earliest timer wins. A result that already existed
        keeps its pane history; a new one starts at pane index 0.
        """
        c = self._cols
        touched = np.isin(c["key"], np.unique(code))
        s_rows = np.flatnonzero(touched)
        elem_group, first = group_ids(code, ws, we)
        u_key, u_start, u_end = code[first], ws[first], we[first]
        existing = self._lookup(u_key, u_start, u_end)
        fresh = existing < 0
        m_key = np.r_[c["key"][s_rows], u_key[fresh]]
        m_start = np.r_[c["start"][s_rows], u_start[fresh]]
        m_end = np.r_[c["end"][s_rows], u_end[fresh]]
        m_row = np.r_[s_rows, np.full(fresh.sum(), -1)]
        r_start, r_end = self.strategy.window_fn.merge(m_key, m_start, m_end)
        # Each unique element window -> its result window.
        member_of = np.empty(len(first), dtype=np.int64)
        member_of[~fresh] = np.searchsorted(s_rows, existing[~fresh])
        member_of[fresh] = len(s_rows) + np.arange(fresh.sum())
        e_start = r_start[member_of][elem_group]
        e_end = r_end[member_of][elem_group]
        # Which state rows must move?
        is_state = m_row >= 0
        moved = is_state & ((r_start != m_start) | (r_end != m_end))
        if moved.any():
            self._apply_merges(m_key, m_start, m_end, m_row, r_start, r_end, is_state)
        return e_start, e_end

    def _apply_merges(self, m_key, m_start, m_end, m_row, r_start, r_end, is_state) -> None:
        s_key, s_row = m_key[is_state], m_row[is_state]
        s_rs, s_re = r_start[is_state], r_end[is_state]
        s_same = (m_start[is_state] == s_rs) & (m_end[is_state] == s_re)
        grp, first = group_ids(s_key, s_rs, s_re)
        n = len(first)
        sizes = np.bincount(grp, minlength=n)
        has_target = np.zeros(n, dtype=bool)
        has_target[grp[s_same]] = True
        act = (sizes > 1) | ~has_target
        if not act.any():
            return
        a = act[grp]
        a_rows, a_grp, a_same = s_row[a], grp[a], s_same[a]
        remap = np.cumsum(act) - 1
        g = remap[a_grp]
        k = int(act.sum())
        u_key, u_start, u_end = s_key[first][act], s_rs[first][act], s_re[first][act]
        target = np.full(k, -1, dtype=np.int64)
        target[g[a_same]] = a_rows[a_same]
        merged = self._merged_columns(a_rows, g, k)
        # Retractions: every merged-away window's last pane waits for the result to fire.
        away = ~a_same
        if self.strategy.accumulation == Accumulation.RETRACTING:
            self._queue_retractions(a_rows[away], u_key[g[away]], u_start[g[away]], u_end[g[away]])
        new_targets = target < 0
        if new_targets.any():
            target[new_targets] = self._append(
                {
                    "key": u_key[new_targets],
                    "start": u_start[new_targets],
                    "end": u_end[new_targets],
                }
            )
        for name, arr in merged.items():
            self._set(name, target, arr)
        keep = np.ones(len(self), dtype=bool)
        keep[a_rows[away]] = False
        self._keep(keep)

    def _merged_columns(self, rows, g, k) -> dict[str, np.ndarray]:
        c = self._cols
        out: dict[str, np.ndarray] = {}

        def fold(name, op, dtype):
            vals = c[name][rows]
            if op == "sum":
                acc = np.zeros(k, dtype=dtype)
                np.add.at(acc, g, vals)
            elif op == "any":
                acc = np.zeros(k, dtype=bool)
                np.logical_or.at(acc, g, vals)
            elif op == "all":
                acc = np.ones(k, dtype=bool)
                np.logical_and.at(acc, g, vals)
            elif op == "min":
                acc = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
                np.minimum.at(acc, g, vals)
            else:
                acc = np.full(k, np.iinfo(np.int64).min, dtype=np.int64)
                np.maximum.at(acc, g, vals)
            out[name] = acc

        fold("pending", "sum", np.int64)
        # A finished window merged with open ones is reopened: its data must not be lost.
        fold("closed", "all", bool)
        fold("eow_timer", "any", bool)
        fold("ontime_data", "any", bool)
        for name, tf in self.strategy.trigger.fields().items():
            fold("t:" + name, tf.merge, tf.dtype)
        has_hold = c["has_hold"][rows]
        if has_hold.any():
            latest = self.strategy.timestamp_combiner == TimestampCombiner.LATEST
            hold = np.full(k, np.iinfo(np.int64).min if latest else np.iinfo(np.int64).max)
            (np.maximum if latest else np.minimum).at(hold, g[has_hold], c["hold"][rows][has_hold])
            has = np.zeros(k, dtype=bool)
            has[g[has_hold]] = True
            out["hold"], out["has_hold"] = np.where(has, hold, 0), has
        for name, (fn, _) in self.aggregations.items():
            prefix = f"acc:{name}:"
            acc = {f[len(prefix) :]: c[f][rows] for f in c if f.startswith(prefix)}
            for f, arr in fn.merge(acc, g, k).items():
                out[prefix + f] = arr
        return out

    def _queue_retractions(self, rows, owner_key, owner_start, owner_end) -> None:
        c = self._cols
        # Queue entries owned by windows that merge away move to the new owner.
        if len(self._queue):
            away = pd.MultiIndex.from_arrays([c["key"][rows], c["start"][rows], c["end"][rows]])
            owners = pd.MultiIndex.from_arrays(
                [self._queue["owner_key"], self._queue["owner_start"], self._queue["owner_end"]]
            )
            pos = away.get_indexer(owners)
            hit = pos >= 0
            if hit.any():
                q = self._queue.copy()
                q.loc[hit, "owner_key"] = owner_key[pos[hit]]
                q.loc[hit, "owner_start"] = owner_start[pos[hit]]
                q.loc[hit, "owner_end"] = owner_end[pos[hit]]
                self._queue = q
        with_last = c["has_last"][rows]
        if not with_last.any():
            return
        frame = self._retraction_frame(rows[with_last], encoded_keys=True)
        frame.insert(0, "owner_key", owner_key[with_last])
        frame.insert(1, "owner_start", owner_start[with_last])
        frame.insert(2, "owner_end", owner_end[with_last])
        self._queue = (
            pd.concat([self._queue, frame], ignore_index=True) if len(self._queue) else frame
        )

    # ---------------------------------------------------------------- output
    def _dropped(self, code, ts, ws, we, inputs, elem_rows, reason) -> pd.DataFrame:
        self.dropped_count += len(ts)
        frame = pd.DataFrame(
            {
                "key": self._keys[code].to_numpy(),
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
            pd.concat(dropped, ignore_index=True)
            if dropped
            else pd.DataFrame(columns=["key", "timestamp", "window_start", "window_end", "reason"]),
        )

    def _empty_panes(self) -> pd.DataFrame:
        if self._empty_frame is None:
            i64, obj = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
            flag = np.zeros(0, dtype=bool)
            self._empty_frame = pd.DataFrame(
                {
                    "key": obj,
                    "window_start": i64,
                    "window_end": i64,
                    **{name: obj for name in self._output_names()},
                    "timestamp": i64,
                    "pane_index": i64,
                    "nonspeculative_index": i64,
                    "timing": obj,
                    "is_first": flag,
                    "is_last": flag,
                    "is_retraction": flag,
                }
            )
        return self._empty_frame.copy()


def _no_panes() -> pd.DataFrame:
    return pd.DataFrame()


def _window_hash(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = key.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        h ^= start.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
        h = (h << np.uint64(31)) | (h >> np.uint64(33))
        h ^= end.astype(np.uint64) * np.uint64(0x165667B19E3779F9)
    return h.view(np.int64)


def group_ids(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense group ids of rows by equal ``columns`` (one lexsort), and the
    first row of each group."""
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort(columns[::-1])
    boundary = np.zeros(n, dtype=bool)
    boundary[0] = True
    for col in columns:
        sc = col[order]
        boundary[1:] |= sc[1:] != sc[:-1]
    ids = np.empty(n, dtype=np.int64)
    ids[order] = np.cumsum(boundary) - 1
    return ids, order[boundary]


def _concat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == object or b.dtype == object:
        out = np.empty(len(a) + len(b), dtype=object)
        out[: len(a)] = a
        out[len(a) :] = b
        return out
    return np.concatenate([a, b])
