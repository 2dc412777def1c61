"""The changelog of a query: what changed in its result, group by group.

A streaming query's result is maintained per event-time group (a window, or a
window and key). When a group's trigger fires, its result rows are recomputed
and compared with what was materialized for it last: rows that went away are
withdrawn (``undo``), new rows are added. ``ver`` numbers the changelog rows of
one group from 0; ``ptime`` is the processing time of the change. A group whose
recomputed result equals the last one adds nothing: a row appears only when the
relation actually changes.

A table view is the changelog applied up to a processing time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Columns of a changelog after the query's own columns.
CHANGE_COLUMNS = ("undo", "ptime", "ver")
#: Columns that name an event-time group (the model's key and window).
GROUP_COLUMNS = ("__gk", "__gs", "__ge")
_SEQ = "__hw_seq"


def _numbered(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Each row with its occurrence number among equal rows (a multiset as a set)."""
    out = frame.copy()
    out[_SEQ] = out.groupby(columns, dropna=False, sort=False).cumcount()
    return out


class Materializer:
    """The last materialized rows of every group, and the changelog of each firing."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = list(columns)
        self._keys = [*GROUP_COLUMNS, *self.columns]
        #: the last materialized rows of every group (typed by the first results)
        self.last: pd.DataFrame | None = None
        self.versions = pd.DataFrame(
            {
                "__gk": pd.Series(dtype=object),
                "__gs": pd.Series(dtype=np.int64),
                "__ge": pd.Series(dtype=np.int64),
                "ver": pd.Series(dtype=np.int64),
            }
        )

    def apply(self, fired: pd.DataFrame, results: pd.DataFrame, ptime: int) -> pd.DataFrame:
        """The changelog rows of one firing.

        ``fired``: the groups that fired (``GROUP_COLUMNS``); ``results``: their
        recomputed rows (``GROUP_COLUMNS`` + the query's columns). Vectorized:
        one multiset difference over all fired groups.
        """
        if not len(fired):
            return self._empty()
        group = list(GROUP_COLUMNS)
        fired = fired[group].drop_duplicates()
        new = results[self._keys]
        last = new.iloc[:0] if self.last is None else self.last
        is_fired = member_of(last[group], fired)
        old = last[is_fired]
        both = _numbered(old, self._keys).merge(
            _numbered(new, self._keys), how="outer", on=[*self._keys, _SEQ], indicator=True
        )
        undo = both[both["_merge"] == "left_only"]
        added = both[both["_merge"] == "right_only"]
        change = pd.concat(
            [undo.assign(undo=True), added.assign(undo=False)], ignore_index=True
        ).drop(columns=["_merge", _SEQ])
        kept = last[~is_fired]
        self.last = pd.concat([kept, new], ignore_index=True) if len(kept) else new.copy()
        if not len(change):
            return self._empty()
        change["ptime"] = ptime
        return self._versioned(change)

    def appended(self, added: pd.DataFrame) -> pd.DataFrame:
        """The changelog of firings that only add rows, many steps at once: ``added``
        holds the group columns, the query's columns and each row's ``ptime``. A
        query whose operators take each row on its own never changes a row it
        gave, so each step's changes are its new rows; ordered and numbered as
        :meth:`apply` orders them step by step (equal rows by the merge's sort)."""
        if not len(added):
            return self._empty()
        new = _numbered(added, self._keys)
        on = [*self._keys, _SEQ]
        both = new[on].iloc[:0].merge(new, how="outer", on=on)
        return self._versioned(both.drop(columns=[_SEQ]).assign(undo=False))

    def expire(self, horizon: int) -> None:
        """Forget the groups whose windows end at or before ``horizon``: the model
        has collected them, so they never fire again."""
        if self.last is not None and len(self.last):
            self.last = self.last[self.last["__ge"].to_numpy(np.int64) > horizon]
        if len(self.versions):
            self.versions = self.versions[self.versions["__ge"].to_numpy(np.int64) > horizon]

    def forget(self, keys: np.ndarray, ptime: int) -> pd.DataFrame:
        """Withdraw the rows of the groups of ``keys`` at ``ptime`` and forget them
        (a state time-to-live). Their versions stay until :meth:`forget_versions`:
        a row of such a key in the same step continues its numbering, so that a
        consumer ordering by ``ptime, ver`` withdraws before it adds."""
        if self.last is None or not len(keys):
            return self._empty()
        gone = self.last["__gk"].isin(keys).to_numpy(bool)
        change = self.last[gone].assign(undo=True, ptime=ptime)
        self.last = self.last[~gone]
        return self._versioned(change) if len(change) else self._empty()

    def forget_versions(self, keys: np.ndarray) -> None:
        """Forget the version counters of the groups of ``keys``: a later row of such
        a key starts a fresh group, numbered from 0 again."""
        if len(keys):
            self.versions = self.versions[~self.versions["__gk"].isin(keys).to_numpy(bool)]

    def _versioned(self, change: pd.DataFrame) -> pd.DataFrame:
        """Number the rows per group, continuing from the group's previous changes."""
        group = list(GROUP_COLUMNS)
        change = in_order(change)
        known = member_of(self.versions[group], change[group])
        base = change[group].merge(self.versions[known], how="left", on=group)["ver"]
        offset = base.to_numpy(np.float64, na_value=0).astype(np.int64)
        change["ver"] = offset + change.groupby(group, sort=False, dropna=False).cumcount()
        counts = change.groupby(group, sort=False, dropna=False)["ver"].max().reset_index()
        counts["ver"] += 1
        rest = self.versions[~known]  # counts' groups are change's
        self.versions = pd.concat([rest, counts], ignore_index=True) if len(rest) else counts
        return change[[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS]]

    def _empty(self) -> pd.DataFrame:
        return pd.DataFrame(columns=[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS])


def in_order(changes: pd.DataFrame) -> pd.DataFrame:
    """The changelog's order: by processing time; within one, withdrawals first
    (a consumer deletes before it inserts), then by window, key and version."""
    keys = [c for c in ("ptime", "undo", "__gs", "__ge", "__gk", "ver") if c in changes]
    ascending = [c != "undo" for c in keys]
    return changes.sort_values(keys, ascending=ascending, kind="stable").reset_index(drop=True)


def member_of(frame: pd.DataFrame, keys: pd.DataFrame) -> np.ndarray:
    """Whether each row of ``frame`` appears among the rows of ``keys`` (same columns)."""
    if not len(frame) or not len(keys):
        return np.zeros(len(frame), dtype=bool)
    # one hashed column first: the merge then costs the few candidates, not the frame
    first = keys.columns[0]
    maybe = frame[first].isin(pd.unique(keys[first].to_numpy())).to_numpy(bool)
    hit = np.zeros(len(frame), dtype=bool)
    if maybe.any():
        marked = keys.drop_duplicates().assign(__hw_hit=True)
        found = frame[maybe].merge(marked, how="left", on=list(keys.columns))["__hw_hit"]
        hit[maybe] = found.notna().to_numpy(bool)
    return hit


def table_view(
    changelog: pd.DataFrame, columns: list[str], as_of: int | None = None
) -> pd.DataFrame:
    """The relation as of processing time ``as_of`` (all of it when ``None``): every
    row added and not withdrawn since, in the order of the groups' windows."""
    log = changelog if as_of is None else changelog[changelog["ptime"] <= as_of]
    keys = [*GROUP_COLUMNS, *columns]
    if not len(log):
        return pd.DataFrame(columns=columns)
    log = log.reset_index(drop=True)
    sign = np.where(log["undo"].to_numpy(bool), -1, 1)
    net = log[keys].assign(__hw_n=sign, __hw_pos=np.arange(len(log)))
    agg = net.groupby(keys, dropna=False, sort=False).agg(
        __hw_n=("__hw_n", "sum"), __hw_pos=("__hw_pos", "max")
    )
    agg = agg[agg["__hw_n"] > 0].reset_index()
    agg = agg.loc[agg.index.repeat(agg["__hw_n"].to_numpy(np.int64))]
    agg = agg.sort_values(["__gs", "__ge", "__hw_pos"], kind="stable")
    return agg[columns].reset_index(drop=True)
