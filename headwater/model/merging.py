"""Merging windows (sessions) and the retractions merging leaves behind.

docs/semantics.md rule 5: when a bundle's windows merge with the live windows
of their keys, the state of the merged windows moves into the result window.
Rule 6: in retracting mode, the last pane of every window merged away must be
withdrawn when the result window next fires; until then it waits in a
:class:`RetractionQueue`, owned by that result window.

The reducer drives both: it calls :meth:`WindowMerger.merge` while adding a
bundle, takes the queue's retractions when a window fires and discards them
when their owner is collected.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from headwater.model.arrays import distinct_sorted
from headwater.model.panes import Accumulation, TimestampCombiner
from headwater.model.strategy import WindowingStrategy
from headwater.model.triggers import MergeOp
from headwater.model.window_table import (
    Aggregations,
    WindowTable,
    acc_column,
    group_ids,
    trigger_column,
)

_OWNER = ["owner_key", "owner_start", "owner_end"]


class RetractionQueue:
    """Retraction panes waiting for the window they merged into (their owner) to fire.

    ``frame`` holds ``owner_key``, ``owner_start``, ``owner_end``, then the
    pane columns; keys are codes of the window table. It is empty (no
    columns) when nothing waits; the state format stores it as it is.
    """

    def __init__(self, frame: pd.DataFrame | None = None):
        self.frame = pd.DataFrame() if frame is None else frame

    def __len__(self) -> int:
        return len(self.frame)

    def _owners(self) -> pd.MultiIndex:
        return pd.MultiIndex.from_arrays([self.frame[c] for c in _OWNER])

    def push(self, panes: pd.DataFrame, owner_key, owner_start, owner_end) -> None:
        """Queue ``panes`` (key codes; the frame is taken over), row *i* owned by
        window ``owner_*[i]``."""
        owners = (owner_key, owner_start, owner_end)
        for i, (column, values) in enumerate(zip(_OWNER, owners, strict=True)):
            panes.insert(i, column, values)
        self.frame = pd.concat([self.frame, panes], ignore_index=True) if len(self) else panes

    def reassign(self, key, start, end, owner_key, owner_start, owner_end) -> None:
        """Entries owned by window ``(key, start, end)[i]`` move to ``owner_*[i]``."""
        if not len(self):
            return
        pos = pd.MultiIndex.from_arrays([key, start, end]).get_indexer(self._owners())
        hit = pos >= 0
        if hit.any():
            q = self.frame.copy()
            for column, values in zip(_OWNER, (owner_key, owner_start, owner_end), strict=True):
                q.loc[hit, column] = values[pos[hit]]
            self.frame = q

    def take(self, key, start, end) -> pd.DataFrame | None:
        """Remove and return (without owner columns) the entries owned by these windows."""
        if not len(self):
            return None
        hit = self._owners().isin(pd.MultiIndex.from_arrays([key, start, end]))
        if not hit.any():
            return None
        taken = self.frame[hit].drop(columns=_OWNER).reset_index(drop=True)
        self.frame = self.frame[~hit]
        return taken

    def discard(self, key, start, end) -> None:
        """Forget the entries owned by these windows (they are collected)."""
        if len(self):
            self.frame = self.frame[
                ~self._owners().isin(pd.MultiIndex.from_arrays([key, start, end]))
            ]


class WindowMerger:
    """Merges windows of a merging window function in the window table (rule 5).

    ``last_panes(rows)`` gives the retractions of those rows' last panes (key
    codes; rows that have one); in retracting mode they are queued when their
    window merges away.
    """

    def __init__(
        self,
        strategy: WindowingStrategy,
        aggregations: Aggregations,
        table: WindowTable,
        queue: RetractionQueue,
        last_panes: Callable[[np.ndarray], pd.DataFrame],
    ):
        self.strategy = strategy
        self.aggregations = aggregations
        self.table = table
        self.queue = queue
        self.last_panes = last_panes

    def merge(
        self, code: np.ndarray, ws: np.ndarray, we: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Merge the bundle's windows with the live windows of their keys.

        Returns the (merged) window of every element. State of windows merged
        together moves into the result window: accumulators merge, trigger
        counts add, the earliest timer wins. A result that already existed
        keeps its pane history; a new one starts at pane index 0.
        """
        c = self.table.cols
        touched = np.isin(c["key"], distinct_sorted(code))
        s_rows = np.flatnonzero(touched)
        elem_group, first = group_ids(code, ws, we)
        u_key, u_start, u_end = code[first], ws[first], we[first]
        existing = self.table.lookup(u_key, u_start, u_end)
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
            self._apply(m_key, m_start, m_end, m_row, r_start, r_end, is_state)
        return e_start, e_end

    def _apply(self, m_key, m_start, m_end, m_row, r_start, r_end, is_state) -> None:
        """Move the state of the merged table rows into their result windows."""
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
            target[new_targets] = self.table.append(
                {
                    "key": u_key[new_targets],
                    "start": u_start[new_targets],
                    "end": u_end[new_targets],
                }
            )
        for name, arr in merged.items():
            self.table.set(name, target, arr)
        keep = np.ones(len(self.table), dtype=bool)
        keep[a_rows[away]] = False
        self.table.keep(keep)

    def _merged_columns(self, rows, g, k) -> dict[str, np.ndarray]:
        """The state of ``k`` result windows: ``rows`` folded by group ``g``."""
        c = self.table.cols
        out: dict[str, np.ndarray] = {}

        def fold(name: str, op: MergeOp, dtype) -> None:
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
        for path, tf in self.strategy.trigger.fields().items():
            fold(trigger_column(path), tf.merge, tf.dtype)
        has_hold = c["has_hold"][rows]
        if has_hold.any():
            latest = self.strategy.timestamp_combiner == TimestampCombiner.LATEST
            hold = np.full(k, np.iinfo(np.int64).min if latest else np.iinfo(np.int64).max)
            (np.maximum if latest else np.minimum).at(hold, g[has_hold], c["hold"][rows][has_hold])
            has = np.zeros(k, dtype=bool)
            has[g[has_hold]] = True
            out["hold"], out["has_hold"] = np.where(has, hold, 0), has
        for name, (fn, _) in self.aggregations.items():
            merged = fn.merge(self.table.accumulators(name, rows), g, k)
            for f, arr in merged.items():
                out[acc_column(name, f)] = arr
        return out

    def _queue_retractions(self, rows, owner_key, owner_start, owner_end) -> None:
        """Queue the last panes of ``rows`` (merging away) for their new owners."""
        c = self.table.cols
        # Queue entries owned by windows that merge away move to the new owner.
        self.queue.reassign(
            c["key"][rows], c["start"][rows], c["end"][rows], owner_key, owner_start, owner_end
        )
        with_last = c["has_last"][rows]
        if with_last.any():
            self.queue.push(
                self.last_panes(rows[with_last]),
                owner_key[with_last],
                owner_start[with_last],
                owner_end[with_last],
            )
