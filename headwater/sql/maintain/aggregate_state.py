"""The changelog state of the windowed-aggregate fast path: what each group
materialized last and its next ``ver``.

A group of a plain windowed aggregate (GROUP BY columns, window) has at most
one result row, so the multiset difference of
:class:`~headwater.sql.maintain.changelog.Materializer` reduces to a few merges per step
over the groups that fired.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwater.sql.maintain.changelog import CHANGE_COLUMNS, GROUP_COLUMNS, in_order

#: The position of a fired group in a step's panes: results are matched by it.
AT = "__hw_at"


def _matched(frame: pd.DataFrame, fired: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Which rows of ``frame`` (one per group) are of a ``fired`` group, and those
    rows with the group's ``AT``. Only the rows whose ``__gk`` a fired group has
    are merged (one hashed column over the whole state, not a three-column join):
    an unwindowed key's state holds every key value ever seen."""
    group = list(GROUP_COLUMNS)
    candidates = np.flatnonzero(frame["__gk"].isin(fired["__gk"]).to_numpy())
    marked = frame.iloc[candidates].merge(fired[[*group, AT]], how="left", on=group)
    found = marked[AT].notna().to_numpy()
    hit = np.zeros(len(frame), dtype=bool)
    hit[candidates[found]] = True
    return hit, marked[found]


class GroupRows:
    """What each group materialized last and its next ``ver``: the changelog of a
    windowed aggregate, whose groups have at most ONE result row each.

    The same changelog as :class:`~headwater.sql.maintain.changelog.Materializer` (a
    fired group whose row changed withdraws the old row, then adds the new; an
    unchanged one adds nothing; ``ver`` continues per group), computed with a
    few merges per step instead of a multiset difference over every group.
    """

    def __init__(self, columns: list[str]) -> None:
        self.columns = list(columns)
        #: the materialized row of every group that has one (GROUP_COLUMNS + columns)
        self.rows: pd.DataFrame | None = None
        #: the next ``ver`` of every group that has changed (GROUP_COLUMNS + ver)
        self.versions: pd.DataFrame | None = None

    def _empty(self) -> pd.DataFrame:
        return pd.DataFrame(columns=[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS])

    def apply(self, fired: pd.DataFrame, results: pd.DataFrame, ptime: int) -> pd.DataFrame:
        """The changelog rows of one firing: ``fired`` groups (GROUP_COLUMNS, unique)
        and their result rows (GROUP_COLUMNS + the query's columns; none for a
        group HAVING filtered out). With a column ``__hw_at`` in both (the
        position of the group in ``fired``), results are matched by it."""
        if not len(fired):
            return self._empty()
        group = list(GROUP_COLUMNS)
        n = len(fired)
        fired = fired.reset_index(drop=True)
        if AT not in fired.columns or AT not in results.columns:
            fired = fired[group].assign(**{AT: np.arange(n)})
            results = results[[*group, *self.columns]].merge(fired, on=group)
        new = results[[*group, *self.columns, AT]]
        at_new = new[AT].to_numpy(np.int64)
        has = np.zeros(n, dtype=bool)
        has[at_new] = True
        had = np.zeros(n, dtype=bool)
        old, kept, at_old = new.iloc[:0], None, np.zeros(0, dtype=np.int64)
        if self.rows is not None and len(self.rows):
            hit, old = _matched(self.rows, fired)
            if len(old):
                at_old = old[AT].to_numpy(np.int64)
                had[at_old] = True
            kept = self.rows[~hit]
        same = had & has
        if same.any():
            both = np.flatnonzero(same)
            o = old.set_index(AT).reindex(both)
            w = new.set_index(AT).reindex(both)
            equal = np.ones(len(both), dtype=bool)
            for c in self.columns:
                a, b = o[c], w[c]
                equal &= ((a == b).fillna(False) | (a.isna() & b.isna())).to_numpy(bool)
            same[both[~equal]] = False
        undo, add = had & ~same, has & ~same
        ver = np.zeros(n, dtype=np.int64)
        others = None
        if self.versions is not None and len(self.versions):
            hit, marked = _matched(self.versions, fired)
            ver[marked[AT].to_numpy(np.int64)] = marked["ver"].to_numpy(np.int64)
            others = self.versions[~hit]
        rows = new.drop(columns=[AT])
        self.rows = (
            pd.concat([kept, rows], ignore_index=True)
            if kept is not None and len(kept)
            else rows.reset_index(drop=True)
        )
        following = ver + undo + add
        counted = following > 0
        if counted.any() or others is not None:
            bumped = fired.loc[counted, group].assign(ver=following[counted])
            parts = [others, bumped] if others is not None and len(others) else [bumped]
            self.versions = pd.concat(parts, ignore_index=True)
        if not (undo.any() or add.any()):
            return self._empty()
        withdrawn = old[undo[at_old]]
        withdrawn = withdrawn.assign(undo=True, ver=ver[withdrawn[AT].to_numpy(np.int64)])
        added = new[add[at_new]]
        at = added[AT].to_numpy(np.int64)
        added = added.assign(undo=False, ver=ver[at] + undo[at])
        change = pd.concat([withdrawn, added], ignore_index=True) if len(withdrawn) else added
        change = change[[*GROUP_COLUMNS, *self.columns, "undo", "ver"]]
        change.insert(len(change.columns) - 1, "ptime", np.int64(ptime))
        return in_order(change)

    def expire(self, horizon: int) -> None:
        """Forget the groups whose windows end at or before ``horizon``."""
        for name in ("rows", "versions"):
            frame = getattr(self, name)
            if frame is not None and len(frame):
                ends = frame["__ge"].to_numpy(np.int64)
                if (ends <= horizon).any():
                    setattr(self, name, frame[ends > horizon].reset_index(drop=True))
